"""The advice-quality benchmark's metrics (benchmarks/advice_quality.py): tau, resolved tau, regret."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "advice_quality.py"
_spec = importlib.util.spec_from_file_location("advice_quality", _PATH)
aq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(aq)


def _row(name, predicted, runs):
    return {"strategy": name, "predicted": predicted, "runs": runs, "measured": sorted(runs)[len(runs) // 2],
            "status": "ok"}


def test_kendall_tau_extremes():
    assert aq.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert aq.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert aq.kendall_tau([1, 2, 3], [10, 30, 20]) == pytest.approx(1 / 3)


def test_resolved_tau_skips_overlapping_runs_and_counts_wrong_orders():
    rows = [_row("a", 3.0, [100, 101, 102]), _row("b", 2.0, [99, 103, 104]),  # a/b overlap: not resolved
            _row("c", 1.0, [200, 210, 205])]  # c beats both beyond doubt, predicted slowest: 2 wrong pairs
    tau, n = aq.resolved_tau(rows)
    assert n == 2 and tau == -1.0
    s = aq.summarize(rows)
    assert s["pick"] == "a" and s["best"] == "c" and s["trials_to_best"] == 3
    assert s["regret"] == pytest.approx(205 / 101 - 1, abs=1e-3)
    assert s["pairs_resolved"] == 2 and s["tau"] == -1.0  # medians 101 < 103 < 205: every pair reversed


def test_resolved_tau_none_when_nothing_is_resolved():
    assert aq.resolved_tau([_row("a", 2.0, [1, 3]), _row("b", 1.0, [2, 4])]) == (None, 0)


def _two_node_cluster(tmp_path, bandwidth_gb_per_s):
    from gpuadvisor.hardware.cluster_file import load_cluster

    from .emucluster import EmulatedCluster

    emu = EmulatedCluster(2, rate=None)  # only its cluster file: no namespace is created
    path = emu.write_cluster_file(tmp_path / "hosts.yaml", network={"bandwidth_gb_per_s": bandwidth_gb_per_s,
                                                                     "latency_us": 100},
                                  device_rates={"achieved_tflops": 0.11, "memory_bandwidth_gb_per_s": 20})
    return load_cluster(path)


def _workload(name):
    from gpuadvisor.schemas import TrainingSettings, Workload

    return Workload(model=aq.MODELS[name], training=TrainingSettings(seq_len=64, global_batch=8, precision="fp32"))


def test_plans_for_every_layout_without_memory_knobs_or_indistinguishable_twins(tmp_path):
    cluster, wl = _two_node_cluster(tmp_path, 0.1), _workload("tiny-0.3M")
    plans = aq.plans_for(cluster, wl)
    shapes = {}
    for plan, pred, variant in plans:
        assert not (plan.zero_stage or plan.recompute or plan.sequence_parallel)
        shapes.setdefault(plan.strategy, []).append((variant, pred, plan))
    assert set(shapes) == {"single", "dp", "pp", "tp"}
    for strategy, vs in shapes.items():
        preds = [p for _, p, _ in sorted(vs, key=lambda v: v[0])]
        assert preds == sorted(preds, reverse=True), f"{strategy}: variant 0 must be the best predicted"
        assert len(set(round(p, 6) for p in preds)) == len(preds), f"{strategy}: twins kept"
    # global batch 8 on 2 ranks: micro-batches 1/2/4/8 on one rank, 1/2/4 per DP rank, 4 TP micro-batch sizes
    assert len(shapes["single"]) == 4 and len(shapes["dp"]) == 3 and len(shapes["tp"]) == 4
    schedules = {p.pp_schedule for _, _, p in shapes["pp"]}
    assert "interleaved" in schedules  # the interleaved pipeline is its own layout
    best_only = aq.plans_for(cluster, wl, every=False)
    assert sorted(p.strategy for p, _, _ in best_only) == ["dp", "pp", "single", "tp"]
    assert all(v == 0 for _, _, v in best_only)


@pytest.mark.parametrize("pred, expected", [(51200.0, 150), (512.0, 3), (1e9, 400)])
def test_steps_for_fills_the_time_window(pred, expected):
    # 512 tokens per step: 51200 tok/s -> 10 ms per step -> 150 steps for 1.5 s; slow plans keep the floor
    assert aq.steps_for(pred, 512, min_steps=3, min_seconds=1.5) == expected


def test_label_names_layout():
    assert aq._label({"strategy": "pp", "mb": 2, "m": 4, "schedule": "interleaved"}) == "pp 2x4 il"
    assert aq._label({"strategy": "dp", "mb": 4, "m": 1, "schedule": "1f1b"}) == "dp 4x1"
    assert aq._label({"strategy": "single"}) == "single"


def test_tau_over_best_of_each_shape_ignores_other_variants():
    rows = [_row("single", 3.0, [300]), _row("dp", 2.0, [200]), {**_row("dp", 1.0, [400]), "variant": 1}]
    s = aq.summarize(rows)
    assert s["tau_shapes"] == 1.0  # single > dp, as predicted
    # the dp variant predicted last ran first: 2 of 3 pairs wrong
    assert s["tau"] == pytest.approx(-1 / 3, abs=1e-3)
    assert s["best"] == "dp" and s["trials_to_best"] == 3


def test_markdown_shows_summary_and_each_shapes_best_plan():
    rows = [{**_row("single", 3.0, [290, 300, 310]), "variant": 0, "mb": 8, "m": 1, "schedule": "1f1b"},
            {**_row("pp", 2.0, [150, 200, 210]), "variant": 0, "mb": 2, "m": 4, "schedule": "interleaved"},
            {**_row("pp", 1.0, [100]), "variant": 1, "mb": 8, "m": 1, "schedule": "gpipe"}]
    text = aq.markdown({"settings": [{"rate": "1gbit", "model": "m", "network": {"bandwidth_gb_per_s": 0.1},
                                      "rows": rows, "summary": aq.summarize(rows)}]})
    summary = ("| 1gbit | m | 0.1 | 3 | 1.0 | 1.0 (3) | 1.0 | 0.0 | 1 | single 8x1 | "
               "single 8x1 > pp 2x4 il > pp 8x1 gpipe |")
    assert summary in text
    assert "| 1gbit | m | single 8x1: 3 / 300 (290-310) | - | pp 2x4 il: 2 / 200 (150-210) | - |" in text
