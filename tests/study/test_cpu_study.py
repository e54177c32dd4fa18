"""A real CPU study (tiny GPT, 1 and 2 gloo ranks, every strategy) through the CLI; the CSV is recomputed from
the per-rank metrics of the saved runs (Appendix F) and every plot is checked against the numbers it drew."""
from __future__ import annotations

import csv
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest

TINY = "L2-H32-A4-V256-S16"
STRATEGIES = ["single", "dp", "tp", "pp", "pp-4p", "zero1", "zero2", "zero3", "zero3-offload"]
STEPS, BATCH, SEQ = 4, 8, 16
PLOTS = ["throughput.png", "efficiency.png", "memory.png", "zero.png", "pipeline.png", "network.png",
         "predicted_vs_measured.png"]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cpu-study") / "s"
    r = subprocess.run([sys.executable, "-m", "gpuadvisor", "study", "--models", TINY, "--strategies", "all",
                        "--gpus", "1,2", "--preset", "cpu-2ranks", "--steps", str(STEPS), "--warmup", "1",
                        "--global-batch", str(BATCH), "--pp-microbatches", "p,4p", "--out", str(out)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "cell 9/9 ok" in r.stderr  # plain progress lines when not on a terminal
    return out


def _rows(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "results.csv").open()))


def _f(x: str) -> float:
    return float(x) if x != "" else math.nan


def test_every_file_and_every_cell(study):
    for f in ["results.csv", "results.json", "report.md", "report.html", "plots.json", *PLOTS]:
        assert (study / f).is_file() and (study / f).stat().st_size > 0, f
    rows = _rows(study)
    assert [r["strategy"] for r in rows] == STRATEGIES
    assert all(r["status"] == "ok" for r in rows), [(r["strategy"], r["status"], r["note"]) for r in rows]
    js = json.loads((study / "results.json").read_text())
    assert [r["cell_id"] for r in js["rows"]] == [r["cell_id"] for r in rows]
    # fixed total tokens per model: every strategy saw steps x global batch x seq tokens
    assert {int(r["total_tokens"]) for r in rows} == {STEPS * BATCH * SEQ}
    for r in rows:
        assert _f(r["predicted_tokens_per_s"]) > 0 and _f(r["predicted_peak_memory_bytes"]) > 0


def test_csv_matches_appendix_f_recomputed_from_rank_metrics(study):
    """tokens: sum over ranks (max for TP); time: slowest rank; efficiency = (tps / tps_1gpu) / N x 100."""
    rows = _rows(study)
    recomputed = {}
    for r in rows:
        m = json.loads((study / r["run_dir"] / "metrics.json").read_text())
        ranks = m["ranks"]
        assert len(ranks) == int(r["gpus"])
        tokens = max(x["tokens"] for x in ranks) if m["plan"]["tp"] > 1 else sum(x["tokens"] for x in ranks)
        time_s = max(x["time_s"] for x in ranks)
        recomputed[r["strategy"]] = (tokens, time_s, tokens / time_s)
        assert int(r["total_tokens"]) == tokens
        assert _f(r["total_time_s"]) == pytest.approx(time_s, rel=1e-12)
        assert _f(r["tokens_per_s"]) == pytest.approx(tokens / time_s, rel=1e-12)
        assert int(r["peak_memory_bytes"]) == max(x["peak_memory_bytes"] for x in ranks)
        assert _f(r["avg_memory_bytes"]) == pytest.approx(sum(x["avg_memory_bytes"] for x in ranks) / len(ranks))
        nic = [b for x in ranks for k, b in x["nic_bytes"].items() if k != "lo"]
        assert int(r["network_tx_bytes"]) == sum(b["tx_bytes"] for b in nic)
        assert int(r["loopback_bytes"]) == sum(b["tx_bytes"] for x in ranks for k, b in x["nic_bytes"].items()
                                               if k == "lo")
    _, base_time, base_tps = recomputed["single"]
    for r in rows:
        _, time_s, tps = recomputed[r["strategy"]]
        n = int(r["gpus"])
        assert _f(r["scaling_factor"]) == pytest.approx(tps / base_tps, rel=1e-9)
        assert _f(r["efficiency_pct"]) == pytest.approx(tps / base_tps / n * 100, rel=1e-9)
        assert _f(r["runtime_overhead_pct"]) == pytest.approx((time_s / base_time - 1) * 100, rel=1e-9, abs=1e-9)
        assert _f(r["measured_over_predicted"]) == pytest.approx(tps / _f(r["predicted_tokens_per_s"]), rel=1e-9)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def test_plots_are_pngs_built_from_the_csv(study):
    rows = {(r["strategy"], r["gpus"]): r for r in _rows(study)}
    data = json.loads((study / "plots.json").read_text())
    assert sorted(data) == sorted(PLOTS)
    for name in PLOTS:
        w, h = _png_size(study / name)
        assert w >= 400 and h >= 300 and (study / name).stat().st_size > 10_000, name
        assert data[name]["title"]
    # every plotted value is the CSV's number for that (strategy, GPU count)
    checked = 0
    for name in ("throughput.png", "efficiency.png", "memory.png", "pipeline.png"):
        for s in data[name]["series"]:
            for x, y in zip(s["x"], s["y"]):
                strategy = "single" if x == "1" else s["label"]
                v = _f(rows[(strategy, x)][s["metric"]])
                v = v / 2**20 if s["unit"] == "MiB" else v
                assert y == pytest.approx(v, rel=1e-9), (name, s["label"], x)
                checked += 1
    for s in data["zero.png"]["series"]:
        for stage, y in zip(s["x"], s["y"]):
            v = _f(rows[(stage, s["label"])][s["metric"]])
            assert y == pytest.approx(v / 2**20 if s["unit"] == "MiB" else v, rel=1e-9)
            checked += 1
    assert checked >= 30
    net = data["network.png"]
    assert net["source"] == "loopback"  # one node: the figure shows gloo's loopback traffic, and says so
    vol = {s["label"]: s["y"][0] for s in net["series"] if s["panel"].endswith("/volume")}
    scale = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[net["series"][0]["unit"]]
    for strategy, y in vol.items():
        assert y * scale == pytest.approx(int(rows[(strategy, "2")]["loopback_bytes"]), rel=1e-9)


def test_report_md_and_self_contained_html(study):
    md = (study / "report.md").read_text()
    for p in PLOTS:
        assert f"![{p}]({p})" in md
    for section in ("## Setup", "## Findings", "## Results", "## Predicted vs measured"):
        assert section in md
    assert "at 2 CPU ranks" in md and "fp32 (bf16 requested)" in md and "no training traffic crossed a NIC" in md
    html = (study / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(PLOTS) and 'src="http' not in html
    assert "<table>" in html
