"""`predict --from` on a Megatron-DeepSpeed argument file (microsoft/Megatron-DeepSpeed examples_deepspeed): the
old --checkpoint-activations switch, the DeepSpeed engine's ZeRO stage (its JSON, else --zero-stage), its pipeline
engine's ZeRO-1-only rule and Megatron's own layers."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.launch.readback import read_config, read_megatron

# the GPT-3 1.3B example's options (examples_deepspeed/rebase/ds_pretrain_gpt_1.3B.sh), trimmed
ARGS = ("deepspeed pretrain_gpt.py --tensor-model-parallel-size 2 --init-method-std 0.013 --micro-batch-size 2 "
        "--global-batch-size 512 --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
        "--max-position-embeddings 2048 --lr 2.0e-4 --fp16 --checkpoint-activations --deepspeed "
        "--deepspeed_config ds_config.json --zero-stage {stage} --pipeline-model-parallel-size {pp} "
        "--deepspeed-activation-checkpointing")


def _ds_config(stage: int, **zero) -> dict:
    return {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 10,
            "zero_optimization": {"stage": stage, **zero}, "gradient_clipping": 1.0, "prescale_gradients": False,
            "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 11}, "wall_clock_breakdown": False}


def _read(tmp_path, stage=1, pp=2, json_stage=None, extra="", **zero):
    (tmp_path / "args.txt").write_text(ARGS.format(stage=stage, pp=pp) + extra)
    if json_stage is not None:
        (tmp_path / "ds_config.json").write_text(json.dumps(_ds_config(json_stage, **zero)))
    return read_config(tmp_path / "args.txt", world=8, global_batch=512)


def test_the_example_reads_as_3d_zero1_with_full_recompute(tmp_path):
    rb = _read(tmp_path, stage=1, pp=2, json_stage=1)
    assert rb.fmt == "Megatron-DeepSpeed arguments"
    # the JSON leaves overlap_comm out: DeepSpeed's stage-1 default reduces after the backward
    assert rb.plan == {"dp": 2, "tp": 2, "pp": 2, "mb": 2, "m": 128, "recompute": True, "zero": 1,
                       "zero_impl": "deepspeed", "zero_overlap_comm": False}
    assert any("no zero_optimization.overlap_comm" in n for n in rb.notes)
    assert rb.precision == "fp16" and rb.seq_len == 2048
    # Megatron's own layers, not Transformer Engine's: no cuDNN attention, and the unfused core is said
    assert rb.attention_kernel == "eager" and any("unfused attention core" in n for n in rb.notes)
    assert "--checkpoint-activations" not in rb.ignored and "--zero-stage" not in rb.ignored


def test_the_json_decides_the_stage_and_brings_its_zero_settings(tmp_path):
    rb = _read(tmp_path, stage=1, pp=1, json_stage=2, extra=" --no-pipeline-parallel",
               reduce_bucket_size=5e7, overlap_comm=True)
    assert rb.plan["zero"] == 2 and rb.plan["zero_impl"] == "deepspeed"      # DeepSpeed shards, beside TP too
    assert rb.plan["zero_reduce_bucket_size"] == 50_000_000 and rb.plan["zero_overlap_comm"] is True
    assert any("DeepSpeed follows the JSON" in n for n in rb.notes)


def test_without_the_json_the_zero_stage_flag_decides_and_says_so(tmp_path):
    rb = _read(tmp_path, stage=3, pp=1)
    assert rb.plan["zero"] == 3 and rb.plan["zero_impl"] == "deepspeed"
    assert any("not found" in n and "--zero-stage" in n for n in rb.notes)
    # Megatron-DeepSpeed's argparse default is stage 1
    rb = read_megatron(["--micro-batch-size", "1", "--deepspeed"], world=8)
    assert rb.plan["zero"] == 1 and any("its default" in n for n in rb.notes)
    assert "zero" not in read_megatron(["--deepspeed", "--zero-stage", "0"], world=8).plan


@pytest.mark.parametrize("stage, pp, extra, msg", [
    (2, 2, "", "DeepSpeed's pipeline engine runs ZeRO-1 only"),
    (1, 2, " --no-pipeline-parallel", "--no-pipeline-parallel needs --pipeline-model-parallel-size 1"),
    (7, 1, "", "--zero-stage must be 0..3"),
    (1, 1, " --ds-sequence-parallel-size 2", "Ulysses"),
])
def test_what_megatron_deepspeed_refuses_is_a_one_line_error(tmp_path, stage, pp, extra, msg):
    with pytest.raises(UserError, match=msg) as exc:
        _read(tmp_path, stage=stage, pp=pp, extra=extra)
    assert "\n" not in str(exc.value)


def test_flash_switch_and_plain_megatron_keep_their_kernels():
    rb = read_megatron(["--deepspeed", "--use-flash-attn-v2", "--tensor-model-parallel-size", "2"], world=8)
    assert rb.attention_kernel == "flash" and not any("unfused" in n for n in rb.notes)
    # Megatron-LM without --deepspeed: Transformer Engine's layers; the old switch still recomputes every layer
    rb = read_megatron(["--checkpoint-activations", "--zero-stage", "2"], world=8)
    assert rb.attention_kernel == "cudnn" and rb.plan["recompute"] is True and "zero" not in rb.plan
    assert any("act only with --deepspeed" in n for n in rb.notes)


@pytest.mark.parametrize("flash", [False, True])
def test_selective_recompute_checkpoints_the_unfused_core_only(tmp_path, flash):
    """--recompute-granularity selective: Megatron-DeepSpeed checkpoints the attention core on its unfused path
    (ParallelAttention.forward's checkpoint_core_attention); its flash path runs the kernel as is."""
    text = ARGS.format(stage=1, pp=1).replace("--checkpoint-activations", "--recompute-granularity selective")
    (tmp_path / "args.txt").write_text(text + (" --use-flash-attn-v2" if flash else ""))
    rb = read_config(tmp_path / "args.txt", world=8, global_batch=512)
    assert "recompute" not in rb.plan
    assert rb.plan.get("recompute_attention", False) is (not flash)
    assert rb.attention_kernel == ("flash" if flash else "eager")
    assert any("does not checkpoint the core" in n for n in rb.notes) is flash


def test_recompute_modules_other_than_the_core_are_said():
    rb = read_megatron(["--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp",
                        "--bf16"], world=8)
    assert rb.plan["recompute_attention"] is True
    assert any("--recompute-modules mlp" in n for n in rb.notes)
    rb = read_megatron(["--recompute-granularity", "selective", "--recompute-modules", "mlp"], world=8)
    assert "recompute_attention" not in rb.plan
    # an empty list (nargs '*') replaces Megatron's default core_attn: nothing replays, and the note says so
    rb = read_megatron(["--recompute-granularity", "selective", "--recompute-modules", "--bf16"], world=8)
    assert "recompute_attention" not in rb.plan and "recompute" not in rb.plan
    assert any("no module names" in n for n in rb.notes)
    rb = read_megatron(["--recompute-granularity", "selective", "--bf16"], world=8)
    assert rb.plan["recompute_attention"] is True and not any("no module names" in n for n in rb.notes)


def test_a_misspelt_recompute_modules_flag_is_named():
    with pytest.raises(UserError, match="did you mean '--recompute-modules'"):
        read_megatron(["--recompute-granularity", "selective", "--recompute-modulez", "core_attn"], world=8)


@pytest.mark.parametrize("flag,value", [("--recompute-granularity", "bogus"), ("--recompute-method", "every")])
def test_recompute_words_outside_megatrons_choices_are_one_line_errors(flag, value):
    with pytest.raises(UserError, match=f"{flag} must be one of .*Megatron's choices.*got '{value}'"):
        read_megatron([flag, value, "--bf16"], world=8)


def test_the_pipeline_engine_reduces_after_the_flush_even_with_overlap_comm(tmp_path):
    """DeepSpeed's pipeline engine syncs gradients in its ReduceGrads step after the flush; overlap_comm in the
    JSON does not change that. Without pipelining the JSON's overlap_comm holds."""
    rb = _read(tmp_path, stage=1, pp=2, json_stage=1, overlap_comm=True)
    assert rb.plan["zero_overlap_comm"] is False and any("ReduceGrads" in n for n in rb.notes)
    rb = _read(tmp_path, stage=1, pp=1, json_stage=1, extra=" --no-pipeline-parallel", overlap_comm=True)
    assert rb.plan["zero_overlap_comm"] is True and not any("ReduceGrads" in n for n in rb.notes)
    # no JSON: DeepSpeed's default overlaps at stage 3 only
    assert read_megatron(["--deepspeed", "--zero-stage", "1"], world=8).plan["zero_overlap_comm"] is False
    assert "zero_overlap_comm" not in read_megatron(["--deepspeed", "--zero-stage", "3"], world=8).plan


@pytest.mark.parametrize("types, bf16_grads", [(None, True), ({"grad_accum_dtype": "fp32"}, False),
                                               ({"grad_accum_dtype": "bf16"}, True)])
def test_bf16_under_deepspeed_zero_reduces_what_its_data_types_say(tmp_path, types, bf16_grads):
    """DeepSpeed accumulates gradients in the model's dtype when ZeRO is on unless data_types.grad_accum_dtype says
    fp32 (engine.get_data_types; then stage 1 runs BF16_Optimizer's whole-model fp32 buffer): a bf16
    Megatron-DeepSpeed file reads grad_reduce_in_bf16 unless its JSON asks for fp32, and the read-back predicts
    the bf16 gradients' smaller memory. Megatron's own flag does not act under --deepspeed."""
    from gpuadvisor.costmodel.combine import estimate
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.workload.specs import make_workload

    cfg = _ds_config(1)
    cfg.pop("fp16")
    cfg["bf16"] = {"enabled": True}
    if types is not None:
        cfg["data_types"] = types
    (tmp_path / "ds_config.json").write_text(json.dumps(cfg))
    (tmp_path / "args.txt").write_text(ARGS.format(stage=1, pp=2).replace("--fp16", "--bf16")
                                       + " --grad-reduce-in-bf16")
    rb = read_config(tmp_path / "args.txt", world=8, global_batch=512)
    assert rb.precision == "bf16" and rb.plan["zero"] == 1
    assert rb.grad_reduce_in_bf16 is bf16_grads
    assert any("DeepSpeed's data_types.grad_accum_dtype decides" in n for n in rb.notes)
    assert any(("fp32 gradient buffer" in n) != bf16_grads for n in rb.notes if "grad_accum_dtype" in n)
    # what it moves: the same Megatron plan holds 2 bytes of gradients per parameter instead of 4
    wl = make_workload("gpt3-1.3b", seq_len=2048, global_batch=512, precision="bf16", kernels="fused")
    plan = parse_plan("dp=2,tp=2,pp=2,zero=1,mb=2,m=128,nodes=1,gpn=8")
    def grads(flag):
        w = wl.model_copy(update={"training": wl.training.model_copy(update={"grad_reduce_in_bf16": flag})})
        return estimate(plan, load_preset("dgx-a100-8x"), w).memory.gradients
    assert grads(True) == pytest.approx(grads(False) / 2, rel=0.01)


def test_an_unknown_gradient_dtype_is_one_line(tmp_path, capsys):
    """data_types.grad_accum_dtype outside DeepSpeed's names: one line naming the key and the fix, exit 2."""
    from gpuadvisor.cli import main

    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                                                  "zero_optimization": {"stage": 1},
                                                  "data_types": {"grad_accum_dtype": "fp64"}}))
    assert main(["predict", "--model", "gpt2", "--preset", "dgx-a100-8x", "--from", str(tmp_path / "ds.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "grad_accum_dtype 'fp64'" in err[0] and "use fp32, bf16 or fp16" in err[0]


def test_deepspeed_zero1_beside_tp_all_reduces_its_gradient_buckets():
    """Megatron-DeepSpeed's ZeRO-1 is DeepSpeed's (zero_impl deepspeed, what the read-back gives every stage): its
    stage 1 all-reduces the gradient buckets (stage_1_and_2.py average_tensor; BF16_Optimizer's
    buffered_allreduce_fallback with fp32 accumulation) where Megatron's distributed optimizer reduce-scatters
    them. Over the dp group that is one more pass of the gradients' bytes, in their dtype."""
    from gpuadvisor.costmodel.combine import estimate
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.workload.specs import make_workload

    wl = make_workload("gpt3-1.3b", seq_len=2048, global_batch=512, precision="bf16", kernels="fused")
    cluster = load_preset("dgx-a100-8x")

    def run(impl, bf16_grads, memory=False):
        w = wl.model_copy(update={"training": wl.training.model_copy(update={"grad_reduce_in_bf16": bf16_grads})})
        plan = parse_plan("dp=4,tp=2,pp=1,zero=1,mb=2,m=64,nodes=1,gpn=8" + impl)
        e = estimate(plan, cluster, w)
        return e.memory if memory else (e.link_bytes_per_step["nvlink"], e.step_time_s)

    (meg16, t_meg16), (meg32, t_meg32) = run("", True), run("", False)
    (ds16, t_ds16), (ds32, t_ds32) = run(",zero_impl=deepspeed", True), run(",zero_impl=deepspeed", False)
    pass16 = meg32 - meg16  # frac x the bf16 gradients: what a reduce-scatter of fp32 adds over one of bf16
    assert pass16 > 0
    assert ds16 - meg16 == pytest.approx(pass16, rel=1e-6)       # all-reduce = reduce-scatter + one more pass
    assert ds32 - ds16 == pytest.approx(2 * pass16, rel=1e-6)    # both passes in fp32 (BF16_Optimizer)
    assert t_ds16 > t_meg16 and t_ds32 > t_meg32 and t_ds32 > t_ds16
    # memory: Megatron syncs in place on its buffers; DeepSpeed's stage 1 holds its two reduce buckets and its
    # all-gather bucket (5e8 elements each by default, below the 0.66B parameters per TP rank) of bf16
    meg, ds = run("", True, memory=True), run(",zero_impl=deepspeed", True, memory=True)
    assert meg.comm_buffers == 0 and ds.comm_buffers == 3 * 500_000_000 * 2
    assert ds.gradients == meg.gradients


def test_change_first_names_the_zero_runtime_only_where_it_differs():
    """A read-back plan carries its framework's runtime (zero_impl); ranked plans leave it to the shape's default.
    The "change first" diff counts it only where the two run differently, in the frameworks' names."""
    from gpuadvisor.cli.check_config import plan_diff
    from gpuadvisor.schemas import parse_plan

    same = plan_diff(parse_plan("dp=8,zero=2,mb=1,m=1,zero_impl=deepspeed"), parse_plan("dp=8,zero=2,mb=1,m=1"))
    assert same == {}  # pure data-parallel ZeRO-2 runs on DeepSpeed by default
    d = plan_diff(parse_plan("dp=2,tp=2,pp=2,zero=1,mb=1,m=4,zero_impl=deepspeed"),
                  parse_plan("dp=2,tp=2,pp=2,zero=1,mb=1,m=4"))
    assert d == {"ZeRO runtime": ("DeepSpeed", "Megatron's distributed optimizer")}
    d = plan_diff(parse_plan("dp=8,zero=3,mb=1,m=1,zero_impl=fsdp"), parse_plan("dp=8,zero=3,mb=2,m=1"))
    assert d == {"micro_batch_size": (1, 2), "ZeRO runtime": ("FSDP", "DeepSpeed")}
    assert "zero_impl" not in plan_diff(parse_plan("dp=8,mb=1,m=1"), parse_plan("dp=8,zero=1,mb=1,m=1"))
    # who runs the ZeRO, by shape (Plan.zero_framework), as the engine prices it
    assert [parse_plan(p).zero_framework for p in ("dp=8,mb=1,m=1", "dp=8,zero=1,mb=1,m=1", "dp=4,tp=2,zero=1,mb=1,m=1",
                                                    "dp=4,tp=2,zero=1,mb=1,m=1,zero_impl=deepspeed",
                                                    "dp=4,tp=2,zero=3,mb=1,m=1")] == \
        [None, "deepspeed", "distributed-optimizer", "deepspeed", "fsdp"]


def test_checkpoint_in_cpu_keeps_the_checkpoints_in_host_ram_where_the_plan_takes_it(tmp_path):
    """--checkpoint-in-cpu with --deepspeed-activation-checkpointing (Megatron-DeepSpeed's configure call passes
    checkpoint_in_cpu from the arguments) reads as offload_activations on pure data-parallel ZeRO; beside TP, without
    DeepSpeed's checkpointing or without recompute it is a note, and the plan keeps the checkpoints on the device.
    The JSON's own cpu_checkpointing is overridden by the arguments: a note, nothing else."""
    (tmp_path / "args.txt").write_text(ARGS.format(stage=3, pp=1).replace("--tensor-model-parallel-size 2",
                                                                         "--tensor-model-parallel-size 1")
                                       + " --no-pipeline-parallel --checkpoint-in-cpu")
    cfg = _ds_config(3)
    cfg["activation_checkpointing"] = {"cpu_checkpointing": True}
    (tmp_path / "ds_config.json").write_text(json.dumps(cfg))
    rb = read_config(tmp_path / "args.txt", world=8, global_batch=512)
    assert rb.plan["offload_activations"] is True and rb.plan["recompute"] is True and rb.plan["zero"] == 3
    assert any(n.startswith("--checkpoint-in-cpu: the recomputing layers' inputs in host RAM") for n in rb.notes)
    assert any("override the JSON" in n for n in rb.notes)
    assert "--checkpoint-in-cpu" not in rb.ignored
    beside_tp = _read(tmp_path, stage=1, pp=1, json_stage=1, extra=" --no-pipeline-parallel --checkpoint-in-cpu")
    assert "offload_activations" not in beside_tp.plan
    assert any("beside TP/PP or without ZeRO is not modelled" in n for n in beside_tp.notes)
    (tmp_path / "args.txt").write_text(ARGS.format(stage=3, pp=1).replace(" --deepspeed-activation-checkpointing", "")
                                       + " --no-pipeline-parallel --checkpoint-in-cpu")
    plain = read_config(tmp_path / "args.txt", world=8, global_batch=512)
    assert "offload_activations" not in plain.plan
    assert any("acts only with --deepspeed-activation-checkpointing" in n for n in plain.notes)
    no_ds = read_megatron(["--micro-batch-size", "1", "--checkpoint-activations", "--checkpoint-in-cpu"], world=8)
    assert "offload_activations" not in no_ds.plan and any("act only with --deepspeed" in n for n in no_ds.notes)
