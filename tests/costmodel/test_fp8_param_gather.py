"""Megatron's FP8 primary weights (--fp8-param-gather, TrainingSettings.fp8_param_gather).

Megatron-Core keeps "the compute param in fp8 (do not use any other intermediate dtype) and perform[s] the param
all-gather in fp8": Transformer Engine's Linears hold their row-wise FP8 data and its transpose (1 + 1 bytes per
parameter) and no bf16 copy; the fp32 master stays in the distributed optimizer's shard. NVIDIA's NeMo and
Megatron-Bridge FP8 recipes set it (bf16_with_fp8_mixed, bf16_with_fp8_current_scaling_mixed).
"""
from __future__ import annotations

import pytest

from gpuadvisor.costmodel.combine import estimate
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.megatron import megatron_args
from gpuadvisor.launch.readback import read_megatron
from gpuadvisor.publicruns.load import load_runs
from gpuadvisor.publicruns.mapping import LIMITS, Unsupported, to_inputs
from gpuadvisor.schemas import parse_plan
from gpuadvisor.schemas.workload import TrainingSettings
from gpuadvisor.workload.specs import make_workload

H, LAYERS = 2048, 24  # GPT-3 1.3B: 24 layers of width 2048, a 4h GELU MLP


def _wl(fp8_params=False, bf16_reduce=True, precision="fp8", kernel="cudnn"):
    wl = make_workload("gpt3-1.3b", global_batch=64, seq_len=2048, precision=precision, kernels="fused",
                       attention_kernel=kernel)
    return wl.model_copy(update={"training": wl.training.model_copy(
        update={"fp8_param_gather": fp8_params, "grad_reduce_in_bf16": bf16_reduce})})


def _both(spec, cluster="hgx-h100-8x", nodes=1):
    cl = load_preset(cluster)
    plan = parse_plan(spec, nodes=nodes, devices_per_node=8)
    return estimate(plan, cl, _wl()), estimate(plan, cl, _wl(fp8_params=True))


def test_the_linears_drop_their_bf16_copy_under_the_distributed_optimizer():
    """TP 2 x DP 4 with the distributed optimizer: each Linear parameter holds 2 bytes less (its bf16 copy beside TE's
    row-wise and transposed FP8 copies), i.e. 12 h^2 per layer over the TP ranks; nothing else moves."""
    plain, f8 = _both("dp=4,tp=2,zero=1,mb=1,m=16")
    linears = LAYERS * 12 * H * H / 2  # QKV 3h^2 + projection h^2 + MLP 8h^2, split over tp = 2
    assert plain.memory.weights - f8.memory.weights == pytest.approx(2 * linears, rel=0.01)
    assert f8.memory.gradients == plain.memory.gradients and f8.memory.optimizer == plain.memory.optimizer
    assert f8.memory.activations == plain.memory.activations


@pytest.mark.parametrize("spec", ["dp=4,tp=2,mb=1,m=16", "dp=8,zero=3,mb=1,m=8"])
def test_without_megatrons_distributed_optimizer_nothing_changes(spec):
    """Megatron asserts a sharded optimizer for --fp8-param-gather: its DDP keeps bf16 weights, and ZeRO-3 runs on
    FSDP2, which the switch is not priced on."""
    plain, f8 = _both(spec)
    assert f8.memory == plain.memory and f8.step_time_s == plain.step_time_s


def test_the_parameter_all_gather_moves_one_byte_per_linear_parameter():
    """TP 8 in each node, the distributed optimizer over 4 nodes: the network carries the bf16 reduce-scatter (2 bytes)
    and the all-gather, 2 bytes per parameter in bf16 and 1 for the FP8 Linears: about 4 / 3 less the 2-byte
    embedding's share."""
    plain, f8 = _both("dp=4,tp=8,zero=1,mb=1,m=16", "hgx-h100-8x-8nodes-ib-ndr", nodes=4)
    ratio = plain.link_bytes_per_step["network"] / f8.link_bytes_per_step["network"]
    assert 1.25 < ratio < 4 / 3
    assert f8.step_time_s <= plain.step_time_s


def test_megatron_arguments_carry_it_on_the_distributed_optimizer_only():
    wl = _wl(fp8_params=True)
    zero1 = megatron_args(parse_plan("dp=4,tp=2,zero=1,mb=1,m=16", nodes=1, devices_per_node=8), wl, steps=10)
    assert "--fp8-param-gather" in zero1 and "--use-distributed-optimizer" in zero1
    rb = read_megatron(zero1, world=8)
    assert rb.fp8_param_gather is True and rb.precision == "fp8" and "--fp8-param-gather" not in rb.ignored
    ddp = megatron_args(parse_plan("dp=4,tp=2,mb=1,m=16", nodes=1, devices_per_node=8), wl, steps=10)
    assert "--fp8-param-gather" not in ddp
    plain = megatron_args(parse_plan("dp=4,tp=2,zero=1,mb=1,m=16", nodes=1, devices_per_node=8), _wl(), steps=10)
    assert "--fp8-param-gather" not in plain and read_megatron(plain, world=8).fp8_param_gather is False


@pytest.mark.parametrize("argv,needle", [
    (["--bf16", "--use-distributed-optimizer", "--fp8-param-gather"], "no --fp8-format"),
    (["--bf16", "--fp8-format", "hybrid", "--fp8-param-gather"], "needs --use-distributed-optimizer"),
])
def test_readback_refuses_what_megatron_refuses(argv, needle):
    with pytest.raises(UserError, match=needle):
        read_megatron(argv, world=8)


def test_readback_notes_what_it_does_not_price():
    rb = read_megatron(["--bf16", "--fp8-format", "hybrid", "--use-torch-fsdp2", "--fp8-param-gather"], world=8)
    assert rb.fp8_param_gather is False and any("--fp8-param-gather" in n for n in rb.notes)


@pytest.mark.parametrize("precision,kernel,needle", [("bf16", "cudnn", "precision bf16"),
                                                      ("fp8", "flash", "attention_kernel cudnn")])
def test_settings_refuse_it_without_te_fp8(precision, kernel, needle):
    with pytest.raises(ValueError, match=needle):
        TrainingSettings(seq_len=2048, global_batch=8, precision=precision, attention_kernel=kernel,
                         fp8_param_gather=True)


def test_public_rows_keep_fp8_weights_as_their_recipes_do():
    """Megatron-Bridge's per-tensor FP8 recipes (FP8, FP8-CS) and the Megatron-LM Llama 3 FP8 examples (configs
    following NeMo's performance scripts) keep FP8 weights; MXFP8, blockwise and bf16 rows do not. The examples'
    Llama 3 8B at CP 2 on 8 H100 ran: with bf16 weights and fp32 gradients it was called out of memory (91 GiB)."""
    seen = {}
    for run in load_runs():
        if run.source_id not in ("megatron_bridge_perf_summary", "megatron_llama3_fp8_example"):
            continue
        try:
            inp = to_inputs(run, tuple(LIMITS))
        except Unsupported:
            continue
        label = run.precision.strip().upper()
        expect = label in ("FP8", "FP8-CS") or label.startswith("FP8 (HYBRID FORMAT)")
        assert inp.workload.training.fp8_param_gather is expect, (run.ref, run.precision)
        seen[expect] = seen.get(expect, 0) + 1
        if run.source_id == "megatron_llama3_fp8_example":
            assert inp.workload.training.grad_reduce_in_bf16, run.ref
            assert estimate(inp.plan, inp.cluster, inp.workload).feasible, run.ref
    assert seen.get(True, 0) >= 5 and seen.get(False, 0) >= 5


#: The Llama 3 8B FP8 example's arguments at CP 2 (NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh)
LLAMA3_8B_FP8 = """--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --context-parallel-size 2
--micro-batch-size 1 --global-batch-size 128 --seq-length 8192
--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention
--num-query-groups 8 --swiglu --untie-embeddings-and-output-weights --vocab-size 128256 --normalization RMSNorm
--position-embedding-type rope --disable-bias-linear
--bf16 --grad-reduce-in-bf16 --fp8-format hybrid --fp8-param-gather
--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
"""


def test_cli_prices_the_recipe_file_as_it_runs(tmp_path, capsys):
    """`predict --from` the example's arguments: it fits on 8 H100 (it ran) with its FP8 weights and bf16 gradients,
    and is out of memory without the two switches; a --precision that drops FP8 is one line, exit 2."""
    import json

    from gpuadvisor.cli import main

    def peak(text):
        (tmp_path / "args.txt").write_text(text)
        rc = main(["predict", "--preset", "hgx-h100-8x", "--from", str(tmp_path / "args.txt"), "--json"])
        est = json.loads(capsys.readouterr().out)["estimate"]
        assert rc == (0 if est["feasible"] else 3)  # 3: the plan does not fit
        return est["feasible"], sum(est["memory"].values()) / 2 ** 30

    fits, gib = peak(LLAMA3_8B_FP8)
    assert fits and gib < 70
    fits, gib = peak(LLAMA3_8B_FP8.replace(" --fp8-param-gather", "").replace("--grad-reduce-in-bf16 ", ""))
    assert not fits and gib > 85
    (tmp_path / "args.txt").write_text(LLAMA3_8B_FP8)
    assert main(["predict", "--preset", "hgx-h100-8x", "--from", str(tmp_path / "args.txt"),
                 "--precision", "bf16"]) == 2
    err = capsys.readouterr().err
    assert "--fp8-param-gather" in err and "precision bf16" in err and err.count("\n") == 1


def test_cli_flags_reach_the_prediction(capsys):
    """`predict --plan ... --grad-reduce-in-bf16 --fp8-param-gather`: the recipe's memory, as the Python API and a
    Megatron argument file give it; the flag without FP8 is one line, exit 2."""
    import json

    from gpuadvisor import api
    from gpuadvisor.cli import main

    base = ["predict", "--model", "gpt3-1.3b", "--preset", "hgx-h100-8x", "--plan", "dp=4,tp=2,zero=1,mb=1,m=16",
            "--seq-len", "2048", "--precision", "fp8", "--attention-kernel", "cudnn", "--kernels", "fused", "--json"]
    mems = []
    for extra in ([], ["--grad-reduce-in-bf16", "--fp8-param-gather"]):
        assert main(base + extra) == 0
        mems.append(json.loads(capsys.readouterr().out)["memory"])
    linears = LAYERS * 12 * H * H / 2
    # the Linears' bf16 weight copy (2 bytes each), and 2 bytes of gradient per parameter on the device (the
    # Linears plus the embedding's TP shard, ~8 % more)
    assert mems[0]["weights"] - mems[1]["weights"] == pytest.approx(2 * linears, rel=0.01)
    assert mems[0]["gradients"] - mems[1]["gradients"] == pytest.approx(2 * linears, rel=0.1)
    api_est = api.predict("gpt3-1.3b", "dp=4,tp=2,zero=1,mb=1,m=16", preset="hgx-h100-8x", seq_len=2048,
                          precision="fp8", attention_kernel="cudnn", kernels="fused", grad_reduce_in_bf16=True,
                          fp8_param_gather=True)
    assert api_est.memory.weights == pytest.approx(mems[1]["weights"])
    assert main(["predict", "--model", "gpt3-1.3b", "--preset", "hgx-h100-8x", "--plan", "dp=8,zero=1,mb=1,m=8",
                 "--fp8-param-gather"]) == 2
    err = capsys.readouterr().err
    assert "--fp8-param-gather" in err and "--precision fp8" in err and err.count("\n") == 1


def test_suggest_takes_the_switches(capsys):
    """`suggest --grad-reduce-in-bf16 --fp8-param-gather` ranks with NVIDIA's recipe settings (the workload carries
    them into the hand-over); without FP8 on TE layers the second is one line, exit 2."""
    from gpuadvisor import api
    from gpuadvisor.cli import main

    s = api.suggest("gpt3-1.3b", preset="hgx-h100-8x", seq_len=2048, precision="fp8", attention_kernel="cudnn",
                    kernels="fused", grad_reduce_in_bf16=True, fp8_param_gather=True, top=3)
    assert s.workload.training.grad_reduce_in_bf16 and s.workload.training.fp8_param_gather and s.ranking.top
    assert main(["suggest", "--model", "gpt3-1.3b", "--preset", "hgx-h100-8x", "--precision", "fp8",
                 "--fp8-param-gather"]) == 2
    err = capsys.readouterr().err
    assert "--attention-kernel cudnn" in err and err.count("\n") == 1
