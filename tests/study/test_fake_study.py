"""The study loop with the fake trainers (fast, no torch): outputs, failures, resume bookkeeping, refusals."""
from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from gpuadvisor.cli.console import make_console
from gpuadvisor.cli.progress import LiveProgress
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.study.execute import run_study
from gpuadvisor.study.progress import StudyProgress
from gpuadvisor.study.spec import StudySpec, parse_gpus
from gpuadvisor.study.state import StudyDir

FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "fake_trainers"
TINY = "L2-H32-A4-V256-S16"


def _spec(strategies=("dp", "tp", "pp", "zero1"), steps=3, pp=("p", "4p")) -> StudySpec:
    return StudySpec(models=[TINY], strategies=list(strategies), gpus=parse_gpus("1,2"), steps=steps, warmup=1,
                     pp_microbatches=list(pp), global_batch=8)


def _run(out, spec=None, trainer="ok", env=None, progress=False, plots=False):
    return run_study(spec or _spec(), load_preset("cpu-2ranks"), out, progress=progress,
                     trainer_module=str(FAKES / f"{trainer}.py"), launcher="local", env=env or {},
                     trial_timeout_s=60, grace_s=1.0, plots=plots)


def _starts(path: Path) -> list[str]:
    return sorted(set(path.read_text().splitlines())) if path.exists() else []


def test_outputs_and_report(tmp_path):
    out = tmp_path / "s"
    res = _run(out, plots=True)
    assert [r.status for r in res.rows] == ["ok"] * 6
    for f in ["results.csv", "results.json", "report.md", "report.html", "plots.json", "study.json",
              "throughput.png", "efficiency.png", "memory.png", "zero.png", "pipeline.png", "network.png",
              "predicted_vs_measured.png"]:
        assert (out / f).stat().st_size > 0, f
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    base = next(r for r in rows if r["strategy"] == "single")
    assert float(base["efficiency_pct"]) == pytest.approx(100.0) and float(base["scaling_factor"]) == 1.0
    dp = next(r for r in rows if r["strategy"] == "dp")
    assert float(dp["efficiency_pct"]) == pytest.approx(
        float(dp["tokens_per_s"]) / float(base["tokens_per_s"]) / 2 * 100)
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 7 and 'src="http' not in html
    assert '<html lang="en">' in html and '<meta name="viewport" content="width=device-width' in html
    figures = json.loads((out / "plots.json").read_text())
    assert {f["devices"] for f in figures.values()} == {"CPU ranks"}  # a CPU study never says GPUs
    panels = [t for f in figures.values() for t in f["panels"]]
    assert panels and all("2-layer transformer, hidden 32, 4 heads" in t and TINY not in t for t in panels)
    md = (out / "report.md").read_text()
    assert "![throughput.png](throughput.png)" in md and "## Findings" in md and "## Predicted vs measured" in md
    ours = [line for line in md.splitlines() if "paper" not in line]  # the papers' own results stay on GPUs
    assert not [line for line in ours if "GPU" in line.replace("NVLink / PCIe", "")] and "1-rank baseline" in md
    # single node: the network figure says so instead of drawing empty axes
    plots = json.loads((out / "plots.json").read_text())
    assert plots["network.png"]["source"] in ("loopback", "none")
    assert "no training traffic crossed a NIC" in md


def test_failures_are_classified_and_reported(tmp_path):
    out = tmp_path / "s"
    env = {"FAKE_CRASH_PLANS": "dp=1,tp=2,pp=1,zero_stage=0,micro_batch_size=8,num_micro_batches=1,ddp_bucket_mb=25.0"}
    res = _run(out, spec=_spec(strategies=("dp", "tp"), pp=("p",)), env=env, plots=True)
    st = {r.strategy: r for r in res.rows}
    assert st["tp"].status == "crash" and st["dp"].status == "ok"
    assert "tp" in (out / "report.md").read_text().split("## Skipped and failed cells")[1]


def test_resume_after_interrupt_runs_only_what_is_left(tmp_path):
    out, started = tmp_path / "s", tmp_path / "started.txt"
    env = {"FAKE_STARTED_FILE": str(started)}

    def stop_after_two(ev):
        if ev.get("event") == "result" and ev["n"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(out, env=env, progress=stop_after_two)
    first = _starts(started)
    assert len({line.split("\t")[1] for line in first}) == 2
    cells_before = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    res = _run(out, env=env)
    assert sorted(res.reused) == sorted(n[:-5] for n in cells_before) and len(res.ran) == 4
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir() if p.name in cells_before} == cells_before
    runs = [line.split("\t")[1] for line in _starts(started)]
    assert len(set(runs)) == 6  # each cell's folder started exactly once overall
    assert all(r.status == "ok" for r in res.rows)
    again = _run(out, env=env)
    assert again.ran == [] and len(again.reused) == 6


def test_cell_interrupted_twice_is_recorded_not_rerun(tmp_path):
    out = tmp_path / "s"
    spec = _spec(strategies=("dp",), pp=("p",))
    _run(out, spec=spec)
    sd = StudyDir(out)
    state = sd.load_state()
    dp = next(c for c in state.cells if c.strategy == "dp")
    (out / "cells" / f"{dp.id}.json").unlink()  # as if gpuadvisor died twice during this cell
    sd.save(state.model_copy(update={"attempts": {**state.attempts, dp.id: 2}}))
    res = _run(out, spec=spec)
    row = next(r for r in res.rows if r.strategy == "dp")
    assert res.ran == [] and row.status == "crash" and "interrupted 2 times" in row.note


def test_mismatched_folder_is_refused(tmp_path):
    out = tmp_path / "s"
    _run(out, spec=_spec(strategies=("dp",), pp=("p",)))
    with pytest.raises(UserError, match="different run length"):
        _run(out, spec=_spec(strategies=("dp",), pp=("p",), steps=4))


def test_progress_plain_and_live():
    buf = io.StringIO()
    p = StudyProgress(LiveProgress("gpuadvisor study", console=make_console(buf, width=200), live=False))
    p({"event": "cell", "n": 1, "total": 3, "label": "m dp x2", "elapsed_s": 5, "eta_s": 65})
    p({"event": "result", "n": 1, "total": 3, "label": "m dp x2", "status": "ok", "tokens_per_s": 1234.0,
       "duration_s": 7})
    assert buf.getvalue().splitlines() == ["gpuadvisor study: cell 1/3: m dp x2 (elapsed 5s, ETA 1m05s)",
                                           "gpuadvisor study: cell 1/3 ok: m dp x2 1,234 tokens/s (7s)"]
    live = io.StringIO()
    q = StudyProgress(LiveProgress("gpuadvisor study", console=make_console(live, force_terminal=True, width=100)))
    q({"event": "cell", "n": 2, "total": 3, "label": "m tp x2", "elapsed_s": 5, "eta_s": 65})
    deadline = time.monotonic() + 10
    while "cell 1s" not in live.getvalue() and time.monotonic() < deadline:  # the clock ticks by itself
        time.sleep(0.1)
    q({"event": "done", "message": "done"})
    text = live.getvalue()
    assert "[2/3] m tp x2" in text and "cell 1s  elapsed 6s  ETA 1m04s" in text and "done" in text


def test_no_plots_names_only_the_files_it_wrote(tmp_path):
    events: list[dict] = []
    res = _run(tmp_path / "s", spec=_spec(strategies=("dp",), pp=("p",)), progress=events.append, plots=False)
    done = next(e for e in events if e["event"] == "done")["message"]
    assert "report.md" not in done and "results.csv" in done and "report.md" not in res.files


def test_study_json_outside_dry_run(tmp_path, capsys, monkeypatch):
    import gpuadvisor.study.execute as execute
    from gpuadvisor.cli import main

    real = execute.run_study

    def with_fake_trainer(spec, cluster, out, **kw):
        kw.update(trainer_module=str(FAKES / "ok.py"), launcher="local", grace_s=1.0, trial_timeout_s=60)
        return real(spec, cluster, out, **kw)

    monkeypatch.setattr(execute, "run_study", with_fake_trainer)
    rc = main(["study", "--models", TINY, "--strategies", "dp", "--gpus", "1,2", "--cpu-ranks", "2", "--steps", "3",
               "--warmup", "1", "--global-batch", "8", "--out", str(tmp_path / "s"), "--no-plots", "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout is only the JSON; progress went to stderr
    assert rc == 0 and [r["status"] for r in doc["rows"]] == ["ok", "ok"]
    assert doc["files"] == ["results.csv", "results.json"] and "gpuadvisor study:" in captured.err


def test_missing_matplotlib_fails_before_any_cell(tmp_path, monkeypatch):
    """Plots asked for but matplotlib absent: one line naming the extra, and nothing run or written."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    out = tmp_path / "s"
    with pytest.raises(UserError, match=r"pip install 'gpuadvisor\[plots\]'.*--no-plots"):
        _run(out, plots=True)
    assert not out.exists()
    assert [r.status for r in _run(out, plots=False).rows] == ["ok"] * 6  # without plots it still runs
