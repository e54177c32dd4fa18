"""Expert parallelism (Plan.ep) trains exactly as the single-process MoE, loss by loss and gradient by gradient.

CPU, fp32, gloo, tiny Llama-family MoE models (2 layers, d_model 32, 4 heads / 2 kv heads, SwiGLU, RMSNorm,
RoPE, untied): "mixtral" has 4 experts of width 32, top-2, no shared expert; "shared" adds a shared expert of
width 16; "sparse" has 8 experts, top-2, and only 2 tokens per rank (seq 2, global batch 2), so most
(source rank, expert) pairs get no token and whole all-to-all splits are empty. Jobs run 1 warm-up + 4 timed
steps at lr 1e-3 (AdamW) and must give the single-process per-step losses within 1e-6 (absolute).

Adam's update barely depends on the gradient's scale, so equal losses cannot show a wrong expert-gradient
factor: with expert gradients divided by edp instead of dp (twice too large at ep = dp = 2) the DDP and ZeRO-1
jobs still stayed within 7.2e-7 of their baselines (tried by hand). `_ep_probe.py` therefore compares every
gradient after each strategy step (its reduction included) and the parameters after 2 steps with the
single-process model's, on 2 ranks (ep = dp: edp groups of 1) and 4 ranks (dp 4, ep 2: the edp all-reduce; and
ep 4 with ZeRO-3). Scaling the expert gradients by 1/edp makes that probe report a relative error of 1.0, and
skipping the edp all-reduce 1.1 (checked by hand when it was written).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuadvisor.schemas import Plan, TrainerJob, TrainingSettings, Workload
from gpuadvisor.schemas.workload import ModelSpec
from gpuadvisor.trainers.aggregate import global_losses
from gpuadvisor.trainers.report import summary_lines

from ._launch import job, run_groups, run_probe

pytestmark = pytest.mark.slow
LOSS_ATOL = 1e-6
GRAD_ATOL, GRAD_RTOL, PARAM_ATOL = 1e-6, 1e-5, 5e-6

_BASE = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=64, tied_embeddings=False, mlp="swiglu",
             n_kv_heads=2)
MIXTRAL = ModelSpec(name="tiny-mixtral", n_experts=4, experts_per_token=2, expert_d_ff=32, **_BASE)
SHARED = MIXTRAL.model_copy(update={"name": "tiny-moe-shared", "shared_expert_d_ff": 16})
SPARSE = MIXTRAL.model_copy(update={"name": "tiny-moe-sparse", "n_experts": 8})


def sparse_job(**plan) -> TrainerJob:
    """Global batch 2 of 2 tokens (one sequence per rank at dp 2): most experts get no token from a rank."""
    dp = plan.get("dp", 1)
    p = Plan(micro_batch_size=2 // dp, devices_per_node=dp, **plan)
    training = TrainingSettings(seq_len=2, global_batch=p.global_batch(), precision="bf16")
    return TrainerJob(plan=p, workload=Workload(model=SPARSE, training=training), steps=4, warmup=1, lr=1e-3,
                      device="cpu", init_timeout_s=120)


SINGLE = {"mixtral": job(MIXTRAL), "shared": job(SHARED), "sparse": sparse_job()}
TWO_RANK = {
    "mixtral_ep2": job(MIXTRAL, dp=2, ep=2),
    "mixtral_ep2_accum_recompute": job(MIXTRAL, dp=2, ep=2, num_micro_batches=2, recompute=True),
    "shared_ep2": job(SHARED, dp=2, ep=2),
    "shared_ep2_zero1": job(SHARED, dp=2, ep=2, zero_stage=1),
    "mixtral_ep2_zero2": job(MIXTRAL, dp=2, ep=2, zero_stage=2, num_micro_batches=2),
    "shared_ep2_zero3": job(SHARED, dp=2, ep=2, zero_stage=3),
    "sparse_ep2": sparse_job(dp=2, ep=2),
}
PROBE_TWO = {  # 2 ranks: ep = dp = 2, each edp group is one rank
    "mixtral_ep2": TWO_RANK["mixtral_ep2"],
    "shared_ep2_accum_recompute": job(SHARED, dp=2, ep=2, num_micro_batches=2, recompute=True),
    "shared_ep2_zero1": TWO_RANK["shared_ep2_zero1"],
    "mixtral_ep2_zero2": TWO_RANK["mixtral_ep2_zero2"],
    "shared_ep2_zero3": TWO_RANK["shared_ep2_zero3"],
    "sparse_ep2": TWO_RANK["sparse_ep2"],
}
PROBE_FOUR = {  # 4 ranks: dp 4, ep 2 -> edp groups {0, 2} and {1, 3}; ep 4 -> every rank one expert
    "mixtral_dp4_ep2": job(MIXTRAL, dp=4, ep=2),
    "shared_dp4_ep2_zero1": job(SHARED, dp=4, ep=2, zero_stage=1),
    "mixtral_dp4_ep2_zero2": job(MIXTRAL, dp=4, ep=2, zero_stage=2),
    "shared_dp4_ep4_zero3": job(SHARED, dp=4, ep=4, zero_stage=3),
}


def baseline(name: str) -> str:
    return name.split("_")[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_groups(tmp_path_factory, ((1, SINGLE), (2, TWO_RANK)))


def max_abs_diff(got: list[float], base: list[float]) -> float:
    return max(abs(g - b) for g, b in zip(got, base))


@pytest.mark.parametrize("name", TWO_RANK)
def test_same_losses_as_single_process(runs, name):
    base, got = global_losses(runs[baseline(name)]), global_losses(runs[name])
    times = sorted(runs[name].ranks[0].step_times_s)
    print(f"{name}: max abs loss difference {max_abs_diff(got, base):.1e} vs {baseline(name)}; "
          f"median step {times[len(times) // 2] * 1e3:.1f} ms")
    assert len(got) == len(base) == 5
    assert max_abs_diff(got, base) < LOSS_ATOL, f"{name}: {got} vs {baseline(name)} {base}"


def test_baselines_differ(runs):
    """The shared expert changes the losses (by far more than the tolerance), so each job has the right baseline."""
    assert max_abs_diff(global_losses(runs["mixtral"]), global_losses(runs["shared"])) > 100 * LOSS_ATOL


def test_tokens_and_metrics_record_ep(runs):
    """Every rank counts its replica's tokens (Appendix F, as DP); the metrics carry the plan with its ep."""
    for name in TWO_RANK:
        single = runs[baseline(name)]
        assert runs[name].summary.total_tokens == single.summary.total_tokens
    m = runs["shared_ep2_zero1"]
    assert m.plan.ep == 2 and m.plan.strategy == "zero1-ep2"
    assert [r.tokens for r in m.ranks] == [128, 128]
    line = summary_lines(m, TWO_RANK["shared_ep2_zero1"])[0]
    assert line.startswith("summary: plan dp=2,tp=1,pp=1,zero=1,") and ",ep=2" in line


def _probe(tmp: Path, jobs: dict[str, TrainerJob], nproc: int) -> dict:
    return run_probe(tmp, "_ep_probe.py", jobs, nproc, "2")


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    out = _probe(tmp_path_factory.mktemp("probe2"), PROBE_TWO, 2)
    out.update(_probe(tmp_path_factory.mktemp("probe4"), PROBE_FOUR, 4))
    return out


@pytest.mark.parametrize("name", [*PROBE_TWO, *PROBE_FOUR])
def test_gradients_and_parameters_equal_the_single_process_model(probed, name):
    r = probed[name]
    print(f"{name}: gradients max abs {r['grad_abs']:.1e}, max rel {r['grad_rel']:.1e} ({r['worst']}); "
          f"parameters after 2 steps max abs {r['param_abs']:.1e}")
    assert r["names"], "every parameter of the single-process model, each expert on exactly one ep rank"
    n_experts = {"mixtral": 4, "shared": 4, "sparse": 8}[baseline(name)]
    assert r["experts_compared"] == 2 * n_experts * 3  # 2 layers x experts x (gate, up, down)
    assert r["grad_abs"] < GRAD_ATOL and r["grad_rel"] < GRAD_RTOL, r
    assert r["param_abs"] < PARAM_ATOL, r


def test_empty_dispatches_are_exercised(probed):
    """The sparse job sends zero rows to some (rank, expert) pairs, whole empty splits, and a rank receives no row
    at all in some all-to-all; its gradients still match (above). The dense jobs route every pair somewhere."""
    sparse = probed["sparse_ep2"]
    assert sparse["zero_counts"] > 0 and sparse["zero_splits"] > 0 and sparse["empty_receives"] > 0, sparse
    assert probed["mixtral_ep2"]["empty_receives"] == 0


def test_ds_config_is_refused_with_ep():
    """ep > 1 runs torch-native; a DeepSpeed config would be ignored, so the trainer refuses it."""
    from gpuadvisor.trainers.strategies import build_strategy

    j = job(MIXTRAL, dp=2, ep=2, zero_stage=1).model_copy(update={"deepspeed_config": {"train_batch_size": 4}})
    ctx = SimpleNamespace(plan=j.plan, job=j, is_cuda=False)
    with pytest.raises(ValueError, match=r"--ds-config\) applies to ep=1 ZeRO plans only"):
        build_strategy(ctx)  # type: ignore[arg-type]
