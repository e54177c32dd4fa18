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
