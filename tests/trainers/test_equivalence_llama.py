"""Llama, MoE and LoRA/QLoRA trials train to the single-process losses under every strategy that runs them.

Same setup as test_equivalence.py (CPU, fp32, global batch 4, seq 16, 1 warm-up + 4 timed steps, lr 1e-3,
rtol 1e-4 on the per-step global mean cross-entropy), on tiny Llama-family models: 2 layers, d_model 32,
4 query heads sharing 2 key/value heads (GQA), QK-norm, RoPE (no position table), SwiGLU, RMSNorm, untied head;
the MoE model adds 4 experts of width 32, top-2, and a shared expert of width 16. LoRA: rank 4, alpha 8, on
all seven roles; QLoRA the same on NF4 base weights (bitsandbytes' CPU path; skipped without bitsandbytes).
FSDP2 pure data parallelism is selected with GPUADVISOR_ZERO_IMPL=fsdp (its own launch).
"""
from __future__ import annotations

import importlib.util

import pytest

from gpuadvisor.schemas import RunMetrics
from gpuadvisor.schemas.workload import FineTune, ModelSpec
from gpuadvisor.trainers.aggregate import global_losses

from ._launch import job, launch

pytestmark = pytest.mark.slow
RTOL = 1e-4
HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None

_BASE = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=64, tied_embeddings=False)
LLAMA = ModelSpec(name="tiny-llama", mlp="swiglu", n_kv_heads=2, qk_norm=True, **_BASE)
MOE = LLAMA.model_copy(update={"name": "tiny-moe", "n_experts": 4, "experts_per_token": 2, "expert_d_ff": 32,
                               "shared_expert_d_ff": 16})
LORA = FineTune(method="lora", lora_rank=4)
QLORA = FineTune(method="qlora", lora_rank=4)


def adapted(j, ft: FineTune):
    """`j` with LoRA/QLoRA fine-tuning."""
    return j.model_copy(update={"workload": j.workload.model_copy(update={"finetune": ft})})


SINGLE = {"llama": job(LLAMA), "moe": job(MOE), "llama_lora": adapted(job(LLAMA), LORA),
          "moe_lora": adapted(job(MOE), LORA)}
if HAS_BNB:
    SINGLE["llama_qlora"] = adapted(job(LLAMA), QLORA)

TWO_RANK = {}
for _name, _spec in (("llama", LLAMA), ("moe", MOE)):
    TWO_RANK.update({
        f"{_name}_dp": job(_spec, dp=2),
        f"{_name}_tp": job(_spec, tp=2),
        f"{_name}_tp_sp_recompute": job(_spec, tp=2, sequence_parallel=True, recompute=True),
        f"{_name}_pp_1f1b": job(_spec, pp=2, num_micro_batches=4, pp_schedule="1f1b"),
        f"{_name}_zero1": job(_spec, dp=2, zero_stage=1),
        f"{_name}_zero2": job(_spec, dp=2, zero_stage=2, num_micro_batches=2),
        f"{_name}_zero3": job(_spec, dp=2, zero_stage=3, num_micro_batches=2),
    })
TWO_RANK.update({
    "llama_lora_dp": adapted(job(LLAMA, dp=2, num_micro_batches=2), LORA),
    "llama_lora_zero2": adapted(job(LLAMA, dp=2, zero_stage=2), LORA),
    "llama_lora_zero3": adapted(job(LLAMA, dp=2, zero_stage=3, num_micro_batches=2), LORA),
    "moe_lora_dp": adapted(job(MOE, dp=2), LORA),
    "moe_lora_zero3": adapted(job(MOE, dp=2, zero_stage=3), LORA),
})
if HAS_BNB:
    TWO_RANK["llama_qlora_dp"] = adapted(job(LLAMA, dp=2), QLORA)
# pure data-parallel ZeRO-3 on FSDP2 by the job's own choice (what `suggest` writes for ZeRO-3 across nodes), in
# the launch without GPUADVISOR_ZERO_IMPL
TWO_RANK["llama_fsdp_zero3_by_job"] = job(LLAMA, dp=2, zero_stage=3, num_micro_batches=2).model_copy(
    update={"zero_impl": "fsdp"})
FSDP = {  # pure data-parallel FSDP2 (GPUADVISOR_ZERO_IMPL=fsdp)
    "llama_fsdp_zero3": job(LLAMA, dp=2, zero_stage=3, num_micro_batches=2),
    "llama_lora_fsdp_zero2": adapted(job(LLAMA, dp=2, zero_stage=2), LORA),
    "llama_lora_fsdp_zero3": adapted(job(LLAMA, dp=2, zero_stage=3), LORA),
}
FOUR_RANK = {
    "llama_zero2_tp2xdp2_sp": job(LLAMA, tp=2, dp=2, zero_stage=2, sequence_parallel=True),
    "moe_zero3_pp2xdp2": job(MOE, pp=2, dp=2, zero_stage=3, num_micro_batches=2),
    # TP inside pipeline stages: GQA + RoPE + QK-norm with recompute (hidden slices between stages), MoE experts
    # TP-cut with sequence parallel (sequence shards between stages)
    "llama_tp2xpp2_recompute": job(LLAMA, tp=2, pp=2, num_micro_batches=2, recompute=True),
    "moe_tp2xpp2_sp": job(MOE, tp=2, pp=2, num_micro_batches=2, sequence_parallel=True),
}
ALL = [*TWO_RANK, *FSDP, *FOUR_RANK]


def baseline(name: str) -> str:
    """The single-process run of the same model and fine-tuning method."""
    model = name.split("_")[0]
    for method in ("qlora", "lora"):
        if f"_{method}" in name:
            return f"{model}_{method}"
    return model


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gpuadvisor.trainers.strategies.zero import ensure_deepspeed_ops

    ensure_deepspeed_ops()  # build DeepSpeed's JIT op once, before ranks race to build it
    out: dict[str, RunMetrics] = {}
    for nproc, jobs, extra in ((1, SINGLE, {}), (2, TWO_RANK, {}), (2, FSDP, {"GPUADVISOR_ZERO_IMPL": "fsdp"}),
                               (4, FOUR_RANK, {})):
        tmp = tmp_path_factory.mktemp(f"ranks{nproc}")
        proc = launch(tmp, jobs, nproc, **extra)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])
        for name in jobs:
            out[name] = RunMetrics.model_validate_json((tmp / name / "metrics.json").read_text())
    return out


def max_rel_diff(got: list[float], base: list[float]) -> float:
    return max(abs(g - b) / abs(b) for g, b in zip(got, base))


@pytest.mark.parametrize("name", ALL)
def test_same_losses_as_single_process(runs, name):
    base, got = global_losses(runs[baseline(name)]), global_losses(runs[name])
    step = sorted(runs[name].ranks[0].step_times_s)[len(runs[name].ranks[0].step_times_s) // 2]
    print(f"{name}: max relative loss difference {max_rel_diff(got, base):.2e} vs {baseline(name)}; "
          f"median step {step * 1e3:.1f} ms")
    assert len(got) == len(base) == 5
    assert got == pytest.approx(base, rel=RTOL), f"{name}: {got} vs {baseline(name)} {base}"


def test_baselines_differ(runs):
    """The comparisons are not vacuous: Llama, MoE, LoRA and QLoRA baselines part ways after the first step(s)."""
    names = list(SINGLE)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            la, lb = global_losses(runs[a]), global_losses(runs[b])
            assert max_rel_diff(la, lb) > 5 * RTOL, (a, b)  # observed >= 9.9e-4 (llama vs llama_lora)


def test_same_total_tokens_as_single_process(runs):
    """Appendix F token rules: every job counts the single run's 4 steps x 4 sequences x 16 tokens."""
    assert all(runs[n].summary.total_tokens == 4 * 4 * 16 for n in ALL)


def test_tensor_parallel_gradients_equal_the_unsharded_models(tmp_path):
    """QK-norm weights, the MoE router and every expert get the full model's gradient under TP and TP+SP; so do
    the vocabulary shards of a tied GPT whose vocabulary (65) does not divide by tp (`trainers/vocab.py`)."""
    from pathlib import Path

    from ._launch import TINY, run_probe

    odd = TINY.model_copy(update={"name": "tiny-gpt-tied-65", "vocab_size": 65, "tied_embeddings": True})
    jobs = {"moe_tp": job(MOE, tp=2), "moe_tp_sp": job(MOE, tp=2, sequence_parallel=True),
            "gpt_tied_v65_tp": job(odd, tp=2), "gpt_tied_v65_tp_sp": job(odd, tp=2, sequence_parallel=True)}
    result = run_probe(tmp_path, "_tp_grad_probe.py", jobs, 2, timeout=300)
    assert len(result) == len(jobs)
    for path, diffs in result.items():
        if "moe" in Path(path).stem:
            assert any("q_norm" in n for n in diffs) and any("router" in n for n in diffs)
        else:  # the tied head is the embedding: one parameter, gathered from both ranks' rows
            assert "embed.tok.weight" in diffs and "head.weight" not in diffs, sorted(diffs)
            # a key bias adds the same q·b to every score of a row, which softmax ignores: its gradient is
            # rounding noise (relative differences of order 1), so it is left out
            diffs = {n: d for n, d in diffs.items() if not n.endswith("attn.k.bias")}
        worst = max(diffs, key=diffs.get)
        print(f"{Path(path).stem}: worst relative gradient difference {diffs[worst]:.1e} ({worst})")
        assert diffs[worst] < 1e-5, (path, worst, diffs[worst])


def test_the_runtime_that_ran_is_recorded(runs):
    """metrics.json names the strategy: the job's zero_impl 'fsdp' and GPUADVISOR_ZERO_IMPL=fsdp run FSDP2, a ZeRO-3
    job without either runs DeepSpeed."""
    assert runs["llama_fsdp_zero3_by_job"].strategy == "fsdp"
    assert runs["llama_fsdp_zero3"].strategy == "fsdp"
    assert runs["llama_zero3"].strategy == "zero"


def test_vocabulary_parallel_ends_run_megatrons_collectives(tmp_path):
    """Per micro-batch the split embedding all-reduces its partial lookups, and the head all-reduces its input's
    gradient, or under sequence parallelism all-gathers the norm's shards and reduce-scatters the gradient (the
    bytes the cost model prices; the head used to all-reduce there and slice)."""
    from ._launch import run_probe

    got = run_probe(tmp_path, "_vocab_comm_probe.py", {}, 2, timeout=120)
    assert got == {"head": {"all_reduce": 1},
                   "head_sp": {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 1},
                   "embedding": {"all_reduce": 1}}, got
