"""`predict --from FILE`: every emitted config reads back to the plan it came from; bad keys are one line."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch.readback import read_config
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload

PRESET = "a6000-4x-pcie"
ROUND_TRIP = ["dp=4,mb=2,m=2", "dp=4,zero=1,mb=1,m=4", "dp=4,zero=3,offload=true,mb=2,m=2",
              "dp=2,pp=2,mb=1,m=4", "dp=2,tp=2,mb=2,m=2,recompute=true",
              "dp=2,pp=2,mb=1,m=4,recompute=true,recompute_interval=2", "dp=4,zero=3,mb=2,m=2,recompute=true,recompute_interval=3",
              "dp=2,tp=2,mb=2,m=2,recompute=selective", "dp=4,zero=3,offload=optimizer,mb=2,m=2",
              "dp=4,zero=2,offload=true,mb=2,m=2"]
FIELDS = ("dp", "tp", "pp", "zero_stage", "zero_offload", "zero_offload_param", "micro_batch_size",
          "num_micro_batches")


def _emit(tmp_path, spec):
    cl = load_preset(PRESET)
    plan = parse_plan(spec, nodes=1, devices_per_node=4)
    wl = make_workload("gpt2", global_batch=plan.global_batch(), seq_len=512)
    emit(build_launch(plan, cl, wl), make_job(plan, wl), tmp_path)
    return plan


@pytest.mark.parametrize("spec", ROUND_TRIP)
@pytest.mark.parametrize("name", ["ds_config.json", "torchtitan.toml", "accelerate.yaml", "megatron_args.txt"])
def test_round_trip(tmp_path, spec, name):
    plan = _emit(tmp_path, spec)
    if not (tmp_path / name).exists():
        pytest.skip(f"no {name} for this plan")
    rb = read_config(tmp_path / name, world=4, global_batch=plan.global_batch())
    got = parse_plan(rb.spec() if "dp" in rb.plan else f"dp=4,{rb.spec()}", nodes=1, devices_per_node=4)
    want = {f: getattr(plan, f) for f in FIELDS}
    have = {f: getattr(got, f) for f in FIELDS}
    if name == "accelerate.yaml" and plan.zero_stage == 0:  # the script, not the YAML, holds mb and accumulation
        for d in (want, have):
            d["micro_batch_size"] *= d.pop("num_micro_batches")
    if name == "torchtitan.toml" and plan.zero_stage in (1, 2):
        want["zero_stage"] = 2  # torchtitan FSDP without reshard-after-forward: ZeRO-2-like
    if name == "megatron_args.txt" and plan.zero_stage == 2:
        want["zero_stage"] = 1  # Megatron's distributed optimizer shards the optimizer states only (ZeRO-1)
    if name == "torchtitan.toml":
        want["zero_offload_param"] = True  # enable_cpu_offload: FSDP2's CPUOffloadPolicy moves the parameters too
    assert have == want
    # ds_config.json has no recompute, nor does accelerate.yaml on its DeepSpeed path (the script's
    # gradient_checkpointing holds it)
    deepspeed_yaml = name == "accelerate.yaml" and plan.zero_stage and plan.tp == 1
    assert got.recompute == plan.recompute or name == "ds_config.json" or deepspeed_yaml
    # every k-th layer reads back from Megatron's block method and torchtitan's layer-level selective option;
    # Accelerate (transformers' gradient checkpointing) is every layer or none
    if name in ("torchtitan.toml", "megatron_args.txt"):
        assert got.recompute_interval == plan.recompute_interval
    # the attention core's selective recompute: Megatron's --recompute-granularity selective (no other file has it)
    if name == "megatron_args.txt":
        assert got.recompute_attention == plan.recompute_attention


@pytest.mark.parametrize("fname,text,key", [
    ("a.json", '{"train_batch_size": 8, "zero_optimisation": {}}', "'zero_optimisation'"),
    ("b.json", '{"zero_optimization": {"stage": 2, "reduce_bucket": 5}}', "'reduce_bucket'"),
    ("c.json", '{"train_micro_batch_size_per_gpu": "auto"}', "replace \"auto\""),
    ("d.toml", "[parallelism]\ntensor_parallel_degre = 2\n", "'tensor_parallel_degre'"),
    ("e.toml", "[paralelism]\n", "'[paralelism]'"),
    ("f.yaml", "distributed_type: MULTI_GPU\nnum_proceses: 4\n", "'num_proceses'"),
    ("g.txt", "--tensor-model-parallel-size 2 --pipeline-model-paralel-size 2", "'--pipeline-model-paralel-size'"),
    ("h.json", "{not json", "not valid JSON"),
    ("i.toml", '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "-3"\n', "selective_ac_option must be"),
])
def test_bad_keys_one_line(tmp_path, capsys, fname, text, key):
    (tmp_path / fname).write_text(text)
    rc = main(["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(tmp_path / fname)])
    err = capsys.readouterr().err
    assert rc == 2 and key in err and err.count("\n") == 1, err


def test_check_my_config_compares_with_best(tmp_path, capsys):
    _emit(tmp_path, "dp=4,zero=3,offload=true,mb=2,m=2")
    assert main(["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(tmp_path / "ds_config.json")]) == 0
    out = capsys.readouterr().out
    assert "DeepSpeed JSON -> plan dp=4,zero=3" in out and "advisor's best:" in out and "change first:" in out
    assert main(["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(tmp_path / "torchtitan.toml"),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["estimate"]["plan"]["zero_stage"] == 3 and data["best"]["tokens_per_s"] >= \
        data["estimate"]["tokens_per_s"]


def test_accelerate_yaml_without_batch_assumes_the_model_default(tmp_path, capsys):
    """An Accelerate YAML holds no batch: the check assumes the model's default batch (GPT-3's 0.5M tokens for
    gpt2 = 512 sequences), says so with the flag, and splits it into a micro-batch that fits, since the YAML
    holds no accumulation either (512 / dp 4 = 128 sequences per rank do not fit a 48 GiB A6000 at once)."""
    (tmp_path / "acc.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\n")
    args = ["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(tmp_path / "acc.yaml")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "global batch 512 is the default for 'gpt2 (124.4M)' (GPT-3's 0.5M tokens" in out
    assert "pass --global-batch N" in out
    # mb 64 would not fit: the bundled trainer held 31.5 GiB at mb 32 on an H200 (benchmarks/results/
    # gpu_trainer_check_2026-11-27_h200.txt), so about 61 GiB at 64
    assert "-> plan dp=4,mb=32,m=4" in out and "512 / dp 4 = 128 per rank as mb 32 x accumulation 4" in out
    assert main([*args, "--global-batch", "8"]) == 0  # a given batch: no default note, the YAML's m = 1
    out = capsys.readouterr().out
    assert "-> plan dp=4,mb=2,m=1" in out and "is the default for" not in out
    # a YAML that holds the accumulation keeps it (DeepSpeed plugin: gradient_accumulation_steps)
    (tmp_path / "ds.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config:\n"
                                      "  zero_stage: 2\n  gradient_accumulation_steps: 4\n")
    assert read_config(tmp_path / "ds.yaml", world=4, global_batch=512).split_assumed is False
    assert read_config(tmp_path / "acc.yaml", world=4, global_batch=512).split_assumed is True


def test_predict_needs_plan_or_from(capsys):
    assert main(["predict", "--model", "gpt2", "--preset", PRESET]) == 2
    assert "--from FILE" in capsys.readouterr().err


HYBRID_TRIP = ["dp=2,tp=2,pp=2,zero=1,mb=1,m=4", "dp=4,tp=2,zero=3,mb=1,m=2", "dp=2,tp=2,pp=2,zero=3,mb=1,m=4",
               "dp=4,pp=2,zero=1,mb=1,m=4", "dp=4,tp=2,zero=2,mb=2,m=1"]


@pytest.mark.parametrize("spec", HYBRID_TRIP)
@pytest.mark.parametrize("name", ["torchtitan.toml", "accelerate.yaml", "megatron_args.txt"])
def test_hybrid_zero_round_trip(tmp_path, spec, name):
    """ZeRO with TP/PP reads back as the same hybrid plan (not the old DDP x TP approximation)."""
    from gpuadvisor.hardware.catalog import network_from_key
    from gpuadvisor.schemas import Cluster

    from .launch_fixtures import node

    plan = parse_plan(spec, nodes=2, devices_per_node=4)
    cl = Cluster(name="two", source="test", nodes=[node("n0", 4), node("n1", 4)], network=network_from_key("ib-hdr"))
    wl = make_workload("llama-7b", global_batch=plan.global_batch(), seq_len=512)
    emit(build_launch(plan, cl, wl), make_job(plan, wl), tmp_path)
    assert not (tmp_path / "ds_config.json").exists()
    if not (tmp_path / name).exists():  # Accelerate: no PP; Megatron: no FSDP2 with PP
        assert plan.pp > 1 and name in ("accelerate.yaml", "megatron_args.txt")
        assert f"(no {name}: " in (tmp_path / "README.txt").read_text()
        return
    rb = read_config(tmp_path / name, world=8, global_batch=plan.global_batch())
    got = parse_plan(rb.spec(), nodes=2, devices_per_node=4)
    want = {f: getattr(plan, f) for f in FIELDS}
    have = {f: getattr(got, f) for f in FIELDS}
    if name == "accelerate.yaml":  # the script, not the YAML, holds mb and accumulation
        for d in (want, have):
            d["micro_batch_size"] *= d.pop("num_micro_batches")
    if name == "megatron_args.txt" and plan.zero_stage == 2:
        want["zero_stage"] = 1  # written as the distributed optimizer, which is ZeRO-1
    assert have == want
    assert not any("not a plan dimension" in n for n in rb.notes), rb.notes


@pytest.mark.parametrize("text,msg", [
    ("--use-torch-fsdp2 --pipeline-model-parallel-size 2", "--pipeline-model-parallel-size > 1"),
    ("--use-torch-fsdp2 --use-distributed-optimizer", "--use-distributed-optimizer"),
])
def test_megatron_fsdp2_clashes_refused(tmp_path, text, msg):
    (tmp_path / "args.txt").write_text(text)
    with pytest.raises(UserError, match="Megatron refuses --use-torch-fsdp2 with " + msg):
        read_config(tmp_path / "args.txt", world=8, global_batch=8)


def test_hand_written_hybrids_read_back(tmp_path):
    """Configs gpuadvisor does not write: Accelerate's Megatron plugin with the distributed optimizer, HSDP + TP."""
    (tmp_path / "m.yaml").write_text(
        "distributed_type: MEGATRON_LM\nnum_processes: 8\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n"
        "  megatron_lm_pp_degree: 2\n  megatron_lm_num_micro_batches: 4\n"
        "  megatron_lm_use_distributed_optimizer: true\n  megatron_lm_context_parallel_size: 1\n")
    rb = read_config(tmp_path / "m.yaml", world=8, global_batch=8)
    got = parse_plan(rb.spec(), nodes=2, devices_per_node=4)
    assert (got.dp, got.tp, got.pp, got.zero_stage, got.num_micro_batches) == (2, 2, 2, 1, 4)
    (tmp_path / "h.toml").write_text(
        "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2\n"
        "tensor_parallel_degree = 2\n[training]\nlocal_batch_size = 1\nglobal_batch_size = 4\n"
        "enable_cpu_offload = true\n")
    rb = read_config(tmp_path / "h.toml", world=8, global_batch=4)
    got = parse_plan(rb.spec(), nodes=2, devices_per_node=4)
    assert (got.dp, got.tp, got.zero_stage, got.zero_hpz_partition_size, got.zero_offload) == (4, 2, 3, 1, False)
    assert any("HSDP" in n for n in rb.notes) and any("enable_cpu_offload" in n for n in rb.notes)


def test_torchtitan_fsdp_under_pipeline_reads_back_by_its_resharding(tmp_path):
    """torch's pipelining keeps FSDP stages unsharded through the step: "default" is ZeRO-3 with PP (synced once
    per step), "never" the same traffic read as ZeRO-1, "always" ZeRO-3 with a note that it re-gathers per
    micro-batch."""
    base = ("[parallelism]\ndata_parallel_replicate_degree = 1\ndata_parallel_shard_degree = 2\n"
            "tensor_parallel_degree = 2\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 1\n"
            "fsdp_reshard_after_forward = \"{}\"\n[training]\nlocal_batch_size = 4\nglobal_batch_size = 8\n")
    got = {}
    for policy in ("default", "never", "always"):
        (tmp_path / f"{policy}.toml").write_text(base.format(policy))
        rb = read_config(tmp_path / f"{policy}.toml", world=8, global_batch=8)
        got[policy] = (parse_plan(rb.spec(), nodes=2, devices_per_node=4).zero_stage,
                       any("re-gathers each stage's weights for every micro-batch" in n for n in rb.notes))
    assert got == {"default": (3, False), "never": (1, False), "always": (3, True)}
    (tmp_path / "bogus.toml").write_text(base.format("sometimes"))
    with pytest.raises(UserError, match="fsdp_reshard_after_forward must be one of default, always, never"):
        read_config(tmp_path / "bogus.toml", world=8, global_batch=8)


def test_torchtitan_per_op_selective_checkpointing_reads_back_as_recompute_ops(tmp_path):
    """selective_ac_option "op" (torchtitan's default) is Plan.recompute_ops, "2" layer-level every other block;
    the torchtitan file written for an op plan says "op" again (the round trip)."""
    from gpuadvisor.launch.torchtitan import titan_config
    from gpuadvisor.workload.specs import make_workload

    base = ("[parallelism]\ndata_parallel_shard_degree = 4\n[training]\nlocal_batch_size = 2\n"
            "global_batch_size = 8\n[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"{}\"\n")
    plans = {}
    for option in ("op", "2"):
        (tmp_path / f"{option}.toml").write_text(base.format(option))
        rb = read_config(tmp_path / f"{option}.toml", world=4, global_batch=8)
        plans[option] = parse_plan(rb.spec(), nodes=1, devices_per_node=4)
    assert plans["op"].recompute_ops and not plans["op"].recompute
    assert plans["2"].recompute and plans["2"].recompute_interval == 2 and not plans["2"].recompute_ops
    assert plans["op"].zero_impl == "fsdp"  # torchtitan's FSDP2: priced without DeepSpeed's per-rank bookkeeping
    wl = make_workload("llama-7b", seq_len=2048, global_batch=8)
    assert titan_config(plans["op"], wl, steps=10)["activation_checkpoint"] == {"mode": "selective",
                                                                                "selective_ac_option": "op"}


@pytest.mark.parametrize("stage,overlap", [(1, False), (2, False), (3, True)])
def test_deepspeed_json_without_overlap_comm_reads_as_deepspeeds_default(tmp_path, stage, overlap):
    """DeepSpeed overlaps the gradient reduction with backward by default at stage 3 only (zero/config.py
    overlap_comm_valid); a stage 1/2 JSON that leaves it out reduces after the backward, which costs time."""
    from gpuadvisor.costmodel.combine import estimate

    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
           "zero_optimization": {"stage": stage}}
    (tmp_path / "ds.json").write_text(json.dumps(cfg))
    rb = read_config(tmp_path / "ds.json", world=4, global_batch=8)
    assert rb.plan.get("zero_overlap_comm", True) is overlap
    assert any("no zero_optimization.overlap_comm" in n for n in rb.notes) is (not overlap)
    if stage == 2:  # the same plan with the reduction overlapped is faster on the A6000s' PCIe
        cfg["zero_optimization"]["overlap_comm"] = True
        (tmp_path / "ds.json").write_text(json.dumps(cfg))
        assert read_config(tmp_path / "ds.json", world=4, global_batch=8).plan["zero_overlap_comm"] is True
        cl, wl = load_preset(PRESET), make_workload("300M", global_batch=8)
        plan = parse_plan("dp=4,zero=2,mb=2,m=1", nodes=1, devices_per_node=4)
        slow = estimate(plan.model_copy(update={"zero_overlap_comm": False}), cl, wl)
        fast = estimate(plan, cl, wl)
        assert slow.step_time_s > fast.step_time_s


def test_megatron_gradient_sync_overlaps_only_when_asked(tmp_path):
    """Megatron's --overlap-grad-reduce and --overlap-param-gather are off by default: without them the gradient
    sync runs after the backward, which the prediction prices; emitted arguments read back to the same switch."""
    from gpuadvisor.costmodel.combine import estimate
    from gpuadvisor.launch.megatron import megatron_args
    from gpuadvisor.launch.readback import read_megatron

    base = ["--micro-batch-size", "2", "--global-batch-size", "16", "--bf16"]
    rb = read_megatron(base, world=8)
    assert rb.plan["zero_overlap_comm"] is False and any("no --overlap-grad-reduce" in n for n in rb.notes)
    rb = read_megatron(base + ["--overlap-grad-reduce"], world=8)
    assert "zero_overlap_comm" not in rb.plan and "--overlap-grad-reduce" not in rb.ignored
    rb = read_megatron(base + ["--tensor-model-parallel-size", "2", "--use-distributed-optimizer",
                               "--overlap-grad-reduce"], world=8)
    assert rb.plan["zero"] == 1 and any("without --overlap-param-gather" in n for n in rb.notes)
    assert "zero_overlap_comm" not in read_megatron(["--micro-batch-size", "2"], world=1).plan  # no DP, no sync
    # the plan's switch round-trips through the emitted arguments
    wl = make_workload("gpt2", global_batch=16, seq_len=512)
    for spec in ("dp=4,mb=2,m=2", "dp=2,tp=2,zero=1,mb=2,m=4"):
        for on in (True, False):
            plan = parse_plan(spec, nodes=1, devices_per_node=4).model_copy(update={"zero_overlap_comm": on})
            back = read_megatron(megatron_args(plan, wl, steps=10), world=4)
            assert back.plan.get("zero_overlap_comm", True) is on, (spec, on)
    # and costs time: 1.3B on the A6000s' PCIe, DDP and the distributed optimizer beside TP
    cl, wl = load_preset(PRESET), make_workload("1.3B", global_batch=32, seq_len=1024)
    for spec in ("dp=4,mb=2,m=4", "dp=2,tp=2,zero=1,mb=2,m=8"):
        plan = parse_plan(spec, nodes=1, devices_per_node=4)
        assert (estimate(plan.model_copy(update={"zero_overlap_comm": False}), cl, wl).step_time_s
                > estimate(plan, cl, wl).step_time_s), spec
    # DeepSpeed at stage 0 all-reduces after the backward whatever overlap_comm says
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                                  "zero_optimization": {"stage": 0, "overlap_comm": True}}))
    rb = read_config(tmp_path / "ds.json", world=4, global_batch=8)
    assert rb.plan["zero_overlap_comm"] is False and any("ZeRO stage 0" in n for n in rb.notes)


def _plan_of(rb, world=4):
    return parse_plan(rb.spec() if "dp" in rb.plan else f"dp={world},{rb.spec()}", nodes=1, devices_per_node=world)


def test_offload_reads_back_as_what_it_moves(tmp_path):
    """offload_optimizer alone at stage 3 keeps the parameters on the GPUs; offload_param too moves them; Megatron's
    --optimizer-cpu-offload beside FSDP2 offloads the optimizer only; Accelerate's plugin says it with devices."""
    opt = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}}}
    (tmp_path / "a.json").write_text(json.dumps(opt))
    got = _plan_of(read_config(tmp_path / "a.json", world=4, global_batch=8))
    assert got.strategy == "zero3-offload-optim" and not got.offloads_params
    opt["zero_optimization"]["offload_param"] = {"device": "cpu"}
    (tmp_path / "b.json").write_text(json.dumps(opt))
    assert _plan_of(read_config(tmp_path / "b.json", world=4, global_batch=8)).offloads_params
    (tmp_path / "c.json").write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                                 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    assert _plan_of(read_config(tmp_path / "c.json", world=4, global_batch=8)).strategy == "zero2-offload"
    (tmp_path / "m.txt").write_text("--use-torch-fsdp2 --optimizer-cpu-offload --use-precision-aware-optimizer "
                                    "--micro-batch-size 2 --global-batch-size 8 --bf16")
    got = _plan_of(read_config(tmp_path / "m.txt", world=4, global_batch=8))
    assert got.zero_stage == 3 and got.zero_offload and not got.offloads_params
    (tmp_path / "acc.yaml").write_text(
        "distributed_type: DEEPSPEED\nnum_processes: 4\ndeepspeed_config:\n  zero_stage: 3\n"
        "  offload_optimizer_device: cpu\n  offload_param_device: none\n  gradient_accumulation_steps: 1\n")
    got = _plan_of(read_config(tmp_path / "acc.yaml", world=4, global_batch=8))
    assert got.strategy == "zero3-offload-optim"


def test_optimizer_only_offload_hand_over(tmp_path):
    """The DeepSpeed JSON writes offload_optimizer without offload_param; torchtitan.toml's enable_cpu_offload (FSDP2's
    CPUOffloadPolicy, the parameters too) says it is slower; a LoRA plan of it goes to DeepSpeed, not FSDP."""
    _emit(tmp_path, "dp=4,zero=3,offload=optimizer,mb=2,m=2")
    zero = json.loads((tmp_path / "ds_config.json").read_text())["zero_optimization"]
    assert "offload_optimizer" in zero and "offload_param" not in zero
    toml = (tmp_path / "torchtitan.toml").read_text()
    assert "enable_cpu_offload = true" in toml and "moves the parameters and gradients to host RAM too" in toml
    from gpuadvisor.launch.peft import backend

    assert backend(parse_plan("dp=4,zero=3,offload=optimizer")) == "deepspeed"
    assert backend(parse_plan("dp=4,zero=3,offload=true")) == "fsdp"


def test_deepspeeds_reuse_distance_and_live_cap_are_read_priced_and_written_back(tmp_path):
    """stage3_max_reuse_distance and stage3_max_live_parameters (1e9 each by default) are plan fields: read from a
    DeepSpeed JSON, priced (a shorter distance keeps less of the forward's gathers into the backward: less memory,
    more traffic) and written back only where they differ from DeepSpeed's defaults. Nonsense is one line."""
    from gpuadvisor import api
    from gpuadvisor.errors import UserError
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.launch.deepspeed import deepspeed_config
    from gpuadvisor.workload.specs import make_workload

    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {
        "stage": 3, "stage3_max_reuse_distance": 1e8, "stage3_max_live_parameters": 5e8}}
    (tmp_path / "a.json").write_text(json.dumps(cfg))
    rb = read_config(tmp_path / "a.json", world=4, global_batch=8)
    assert rb.plan["zero_max_reuse_distance"] == 100_000_000 and rb.plan["zero_max_live_parameters"] == 500_000_000
    assert "stage3_max_reuse_distance" not in rb.ignored and not [n for n in rb.notes if "priced at" in n]
    plan = parse_plan(rb.spec() + ",nodes=1,gpn=4")
    assert "reuse_distance=100000000" in plan.to_string() and "max_live=500000000" in plan.to_string()
    wl = make_workload("llama-7b", seq_len=2048, global_batch=8)
    zero = deepspeed_config(plan, wl)["zero_optimization"]
    assert (zero["stage3_max_reuse_distance"], zero["stage3_max_live_parameters"]) == (100_000_000, 500_000_000)
    default = parse_plan("dp=4,zero=3,mb=2,m=1,nodes=1,gpn=4")
    assert "stage3_max_reuse_distance" not in deepspeed_config(default, wl)["zero_optimization"]
    cluster = load_preset("dgx-a100-8x")
    short, long = (api.predict(wl, p, cluster=cluster) for p in (plan, default.model_copy(
        update={"zero_max_live_parameters": 500_000_000})))
    assert short.memory.total < long.memory.total
    assert sum(short.link_bytes_per_step.values()) > sum(long.link_bytes_per_step.values())
    for bad in ("lots", -1, True):
        cfg["zero_optimization"]["stage3_max_reuse_distance"] = bad
        (tmp_path / "b.json").write_text(json.dumps(cfg))
        with pytest.raises(UserError, match="stage3_max_reuse_distance must be a whole number") as exc:
            read_config(tmp_path / "b.json", world=4, global_batch=8)
        assert "\n" not in str(exc.value)


@pytest.mark.parametrize("stage,given,want", [(3, None, 50_000_000), (3, 2e8, 200_000_000), (2, None, None),
                                              (1, 3e8, 300_000_000)])
def test_a_stage3_json_without_a_prefetch_bucket_runs_deepspeeds_default(tmp_path, stage, given, want):
    """stage3_prefetch_bucket_size defaults to 5e7 elements in DeepSpeed (runtime/zero/config.py), not to the plan's
    500M that the hand-over writes: a stage-3 JSON without it is priced with DeepSpeed's default, which decides
    how far its prefetch runs ahead (costmodel.engine._ds_module_chain). Stages 1/2 read allgather_bucket_size."""
    zero = {"stage": stage}
    if given is not None:
        zero["stage3_prefetch_bucket_size" if stage == 3 else "allgather_bucket_size"] = given
    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": zero}
    (tmp_path / "ds.json").write_text(json.dumps(cfg))
    assert read_config(tmp_path / "ds.json", world=4, global_batch=8).plan.get("zero_allgather_bucket_size") == want


@pytest.mark.parametrize("v", [2, 4, 8])
def test_megatron_virtual_stages_read_back_from_the_layers_per_virtual_stage(v):
    """The hand-over writes --num-layers-per-virtual-pipeline-stage (layers / (pp * v)); with --num-layers beside it
    the read-back recovers v as Megatron's validate_args does, instead of assuming 2 chunks per rank."""
    from gpuadvisor.launch.megatron import megatron_args
    from gpuadvisor.launch.readback import read_megatron
    from gpuadvisor.workload.specs import make_workload

    wl = make_workload("llama-7b", global_batch=16, seq_len=2048)  # 32 layers
    plan = parse_plan(f"dp=2,pp=2,mb=1,m=8,schedule=interleaved,pp_virtual_stages={v}", nodes=1, devices_per_node=4)
    args = megatron_args(plan, wl, steps=10)
    assert args[args.index("--num-layers-per-virtual-pipeline-stage") + 1] == str(32 // (2 * v))
    rb = read_megatron(args, world=4)
    assert rb.plan["pp_virtual_stages"] == v and rb.plan["schedule"] == "interleaved"
    assert not any("2 chunks" in n for n in rb.notes)


def test_megatron_virtual_stage_size_that_does_not_divide_a_stage_is_one_line():
    from gpuadvisor.errors import UserError
    from gpuadvisor.launch.readback import read_megatron

    with pytest.raises(UserError, match="does not divide") as err:
        read_megatron(["--num-layers", "32", "--pipeline-model-parallel-size", "2",
                       "--num-layers-per-virtual-pipeline-stage", "5"], world=2)
    assert "\n" not in str(err.value)
    # without --num-layers the count is not known: 2 chunks per rank, said in a note
    rb = read_megatron(["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "4"], world=2)
    assert rb.plan["pp_virtual_stages"] == 2 and any("2 chunks" in n for n in rb.notes)


def test_megatron_block_recompute_without_the_layer_count_is_a_note_not_an_error():
    from gpuadvisor.launch.readback import read_megatron

    rb = read_megatron(["--recompute-granularity", "full", "--recompute-method", "block",
                        "--recompute-num-layers", "2"], world=2)
    assert rb.plan["recompute"] is True and "recompute_interval" not in rb.plan
    assert any("without --num-layers" in n for n in rb.notes)
    with_layers = read_megatron(["--num-layers", "32", "--recompute-granularity", "full", "--recompute-method", "block",
                                 "--recompute-num-layers", "8"], world=2)
    assert with_layers.plan["recompute_interval"] == 4


def test_unpinned_offload_is_said_not_priced(tmp_path):
    """pin_memory false (DeepSpeed's default is true) sends ZeRO-Offload's copies through pageable memory: the read-back
    says so in a note and what to change; the pinned default says nothing."""
    cfg = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False}, "offload_param": {"device": "cpu"}}}
    (tmp_path / "a.json").write_text(json.dumps(cfg))
    notes = read_config(tmp_path / "a.json", world=4, global_batch=8).notes
    said = [n for n in notes if "pageable" in n]
    assert len(said) == 1 and said[0].startswith("offload_optimizer.pin_memory false") and "pin_memory: true" in said[0]
    cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] = True
    (tmp_path / "b.json").write_text(json.dumps(cfg))
    assert not [n for n in read_config(tmp_path / "b.json", world=4, global_batch=8).notes if "pageable" in n]
    cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] = "nan"
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"offload_optimizer\.pin_memory must be true or false, got 'nan'$"):
        read_config(tmp_path / "c.json", world=4, global_batch=8)
