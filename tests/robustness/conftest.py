"""Fixtures and counters of the fault-and-fuzz suite; the counts are printed at the end of the run.

`COUNTS["inputs"]` counts inputs fed to the CLI/API (fuzzed and hand-written), `COUNTS["faults"]` the faults
injected (kill -9, stale locks, missing dependencies, concurrent runs...), `COUNTS["found"]` inputs that
produced anything other than a typed, one-line error (must stay 0: each would be a bug).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

COUNTS: Counter = Counter()
TINY = "L2-H32-A4-V256-S16"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private GPUADVISOR_HOME (studies, trial folders, measurement store) for one test."""
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def pytest_terminal_summary(terminalreporter):  # noqa: D103 - pytest hook
    if not COUNTS:
        return
    line = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
    terminalreporter.write_line(f"robustness counts: {line}")
    out = os.environ.get("GPUADVISOR_ROBUSTNESS_COUNTS")
    if out:
        Path(out).write_text(json.dumps(dict(COUNTS), indent=1) + "\n")
