"""report.md and a self-contained report.html (plots embedded as base64) from the study's rows.

The document is built once as a list of blocks (heading, paragraph, list, table, image) and rendered
twice, so the Markdown and the HTML always say the same thing.
"""
from __future__ import annotations

import base64
import html
import json
import re
import time
from pathlib import Path
from typing import Any, Optional

from .plots import gpu_label, make_plots
from .recommend import findings
from .results import StudyRow
from .state import write_file

MIB = 2**20
Block = tuple[str, Any]

CAPTIONS = {
    "throughput.png": "Throughput vs GPUs per strategy (every line starts at the 1-GPU baseline; dashed: ideal "
                      "linear scaling). Seed 001 Fig. 1a.",
    "efficiency.png": "Throughput scaling efficiency = (throughput / 1-GPU throughput) / N x 100. Above 80% is "
                      "desirable, below 70% poor (seed 001 App. F).",
    "memory.png": "Peak memory per device (max over ranks); black ticks: the cost model's predicted peak. Seed 001 "
                  "Fig. 1b.",
    "zero.png": "ZeRO stages: throughput and peak memory per stage and GPU count. Seed 001 Fig. 2.",
    "pipeline.png": "Pipeline parallelism with m = p (maximum bubble) and m = 4p micro-batches. Seed 001 sec. IV-B.",
    "network.png": "Network volume (bytes through the NICs in the timed window, tx + rx) and network throughput "
                   "(volume x 8 / window time), per strategy. Seed 000's diagnostics.",
    "predicted_vs_measured.png": "The cost model's predicted throughput against the measured one, every "
                                 "successful cell; grey band: within 2x.",
}


def _n(x: Optional[float], fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def _mib(x: Optional[float]) -> str:
    return "-" if x is None else f"{x / MIB:,.1f}"


def _bytes(x: Optional[float]) -> str:
    if x is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} B"


def _params(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f}{unit}"
    return f"{n:,.0f}"


def _setup_blocks(meta: dict, rows_: list[StudyRow]) -> list[Block]:
    models = meta.get("models", {})
    used = {r.model: r.precision for r in rows_ if r.precision}
    rows = [[m, d["name"], _params(d["params"]), d["layers"], d["hidden"], d["heads"], d["seq_len"],
             d["global_batch"], used.get(m, d["precision"]), f"{d['tokens_per_cell']:,}"] for m, d in models.items()]
    return [
        ("h2", "Setup"),
        ("p", f"Cluster `{meta.get('cluster')}` ({meta.get('cluster_source')}): {meta.get('nodes')} node(s), "
              f"{meta.get('devices')} device(s) ({', '.join(meta.get('device_kinds', []))}); trials ran on host "
              f"`{meta.get('host')}`. gpuadvisor {meta.get('gpuadvisor_version')}."),
        ("p", f"Every cell runs {meta.get('warmup')} untimed warm-up steps and {meta.get('steps')} timed steps of "
              "the model's fixed global batch, so each strategy and GPU count of a model processes the same total "
              "tokens (seed 001 sec. II-A): DP and ZeRO split the batch across ranks, TP gives every rank the whole "
              "batch, PP cuts it into m micro-batches. Metrics are aggregated as seed 001 Appendix F: tokens summed "
              "over ranks (max for TP), time = slowest rank, peak memory = max over ranks."),
        ("table", (["model", "resolved", "params", "layers", "hidden", "heads", "seq", "global batch", "precision",
                    "tokens per cell"], rows)),
    ]


def _results_blocks(rows: list[StudyRow]) -> list[Block]:
    out: list[Block] = [("h2", "Results")]
    for model in dict.fromkeys(r.model for r in rows):
        body = []
        for r in rows:
            if r.model != model:
                continue
            plan = f"mb={r.micro_batch_size} m={r.num_micro_batches}" if r.micro_batch_size else "-"
            body.append([r.strategy, gpu_label(r), plan, _n(r.tokens_per_s), _n(r.scaling_factor, "{:.2f}"),
                         _n(r.efficiency_pct, "{:.0f}%"), _n(r.runtime_overhead_pct, "{:+.0f}%"),
                         _mib(r.peak_memory_bytes), _mib(r.avg_memory_bytes),
                         _bytes((r.network_tx_bytes or 0) + (r.network_rx_bytes or 0)) if r.status == "ok" else "-",
                         _n(r.network_gbit_per_s, "{:.3f}"), r.status])
        out.append(("h3", model))
        out.append(("table", (["strategy", "GPUs", "micro-batch x count", "tokens/s", "scaling", "efficiency", "runtime overhead",
                               "peak MiB", "avg MiB", "net volume", "net Gbit/s", "status"], body)))
    return out


def _prediction_blocks(rows: list[StudyRow]) -> list[Block]:
    body = []
    for r in rows:
        if r.plan == "" and r.predicted_tokens_per_s is None:
            continue
        ratio = None
        if r.peak_memory_bytes and r.predicted_peak_memory_bytes:
            ratio = r.peak_memory_bytes / r.predicted_peak_memory_bytes
        body.append([r.model, r.strategy, gpu_label(r), _n(r.predicted_tokens_per_s), _n(r.tokens_per_s),
                     _n(r.measured_over_predicted, "{:.2f}"), _mib(r.predicted_peak_memory_bytes),
                     _mib(r.peak_memory_bytes), _n(ratio, "{:.2f}"), _n(r.predicted_step_time_s, "{:.4f}"),
                     _n(r.total_time_s / r.steps if r.total_time_s else None, "{:.4f}"), r.status])
    return [("h2", "Predicted vs measured"),
            ("p", "Every cell of the grid, with what the cost model predicted before the run. Memory on CPU ranks "
                  "is the process's resident memory, not a device allocator's, so it is not comparable with the "
                  "prediction's model of device memory."),
            ("table", (["model", "strategy", "GPUs", "predicted tokens/s", "measured tokens/s", "measured/predicted",
                        "predicted peak MiB", "measured peak MiB", "measured/predicted", "predicted s/step",
                        "measured s/step", "status"], body))]


def _skipped_blocks(rows: list[StudyRow]) -> list[Block]:
    body = [[r.model, r.strategy, gpu_label(r), r.status, r.note] for r in rows if r.status != "ok"]
    if not body:
        return []
    return [("h2", "Skipped and failed cells"), ("table", (["model", "strategy", "GPUs", "status", "reason"], body))]


def build_blocks(rows: list[StudyRow], meta: dict, plots: list[str]) -> list[Block]:
    """The report as blocks: setup, findings, plots, tables."""
    blocks: list[Block] = [("h1", "gpuadvisor study"),
                           ("p", f"Generated {time.strftime('%Y-%m-%d %H:%M')}; {sum(r.status == 'ok' for r in rows)} "
                                 f"of {len(rows)} cells measured.")]
    blocks += _setup_blocks(meta, rows)
    blocks += [("h2", "Findings"), ("ul", findings(rows))]
    if plots:
        blocks.append(("h2", "Plots"))
        for p in plots:
            blocks += [("img", p), ("p", CAPTIONS.get(p, ""))]
    blocks += _results_blocks(rows) + _prediction_blocks(rows) + _skipped_blocks(rows)
    blocks += [("p", "Columns of results.csv: tokens_per_s = total tokens / slowest rank's timed window; "
                     "scaling_factor = tokens_per_s / 1-GPU tokens_per_s; efficiency_pct = scaling_factor / GPUs x 100; "
                     "runtime_overhead_pct = (time / 1-GPU time - 1) x 100; network_gbit_per_s = (tx + rx) x 8 / time.")]
    return [_cpu_words(b) for b in blocks] if meta.get("device_kind") == "cpu" else blocks


# a CPU study's ranks are not GPUs: the report's prose, captions and table headers say so
_CPU_WORDS = (("1-GPU", "1-rank"), ("one GPU", "one rank"), ("GPU count", "rank count"), ("GPUs", "CPU ranks"),
              ("GPU", "CPU rank"))


def _cpu_words(block: Block) -> Block:
    """The block with GPU wording replaced by CPU-rank wording (text, list items, table headers; not cells)."""
    def sub(text: str) -> str:
        out = []
        for sentence in re.split(r"(?<=[.;]) ", text):
            if "paper" not in sentence:  # what the papers measured stays on GPUs
                for a, b in _CPU_WORDS:
                    sentence = sentence.replace(a, b)
            out.append(sentence)
        return " ".join(out)

    kind, v = block
    if kind in ("h1", "h2", "h3", "p"):
        return kind, sub(v)
    if kind == "ul":
        return kind, [sub(x) for x in v]
    if kind == "table":
        head, body = v
        return kind, ([sub(str(h)) for h in head], body)
    return block


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    """Render blocks as GitHub Markdown (images linked relative to the report)."""
    out: list[str] = []
    for kind, v in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + v)
        elif kind == "p":
            if v:
                out.append(v)
        elif kind == "ul":
            out.append("\n".join(f"- {x}" for x in v))
        elif kind == "img":
            out.append(f"![{v}]({v})")
        elif kind == "table":
            head, body = v
            lines = ["| " + " | ".join(map(_md_cell, head)) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in body]
            out.append("\n".join(lines))
        out.append("")
    return "\n".join(out)


def _inline_code(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;"
         "padding:3px 7px;text-align:right}th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}"
         "img{max-width:100%;border:1px solid #ddd}code{background:#f4f4f4;padding:0 3px}")


def to_html(blocks: list[Block], out: Path) -> str:
    """Render blocks as one self-contained HTML page (PNGs embedded as base64 data URIs)."""
    body: list[str] = []
    for kind, v in blocks:
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{html.escape(v)}</{kind}>")
        elif kind == "p" and v:
            body.append(f"<p>{_inline_code(v)}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline_code(x)}</li>" for x in v) + "</ul>")
        elif kind == "img":
            data = base64.b64encode((out / v).read_bytes()).decode()
            body.append(f'<img alt="{html.escape(v)}" src="data:image/png;base64,{data}">')
        elif kind == "table":
            head, rows = v
            t = "<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>"
            t += "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
            body.append(f"<table>{t}</table>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>gpuadvisor study</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(out: Path, rows: list[StudyRow], meta: dict) -> list[str]:
    """Draw the plots (plus plots.json), then write report.md and report.html; returns the file names."""
    plots, data = make_plots(rows, out, meta)
    write_file(out / "plots.json", json.dumps(data, indent=1))
    blocks = build_blocks(rows, meta, plots)
    write_file(out / "report.md", to_markdown(blocks))
    write_file(out / "report.html", to_html(blocks, out))
    return plots + ["plots.json", "report.md", "report.html"]
