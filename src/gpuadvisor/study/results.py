"""One row per cell, aggregated as the A6000 paper's Appendix F, written as results.csv and results.json.

ExperimentSummary per cell comes from `trainers.aggregate.summarize` over the per-rank metrics of its
run; ComparisonSummary from `trainers.aggregate.compare` against the model's 1-GPU baseline cell.
Network diagnostics are seed 000's: volume = bytes through the NICs (tx + rx, loopback excluded) in the
timed window, throughput = volume x 8 / window time (Gbit/s, full duplex as the seed reports it).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Optional

from pydantic import Field

from ..schemas import ComparisonSummary, ExperimentSummary, RunMetrics
from ..schemas._base import Frozen
from ..trainers.aggregate import compare, summarize
from .grid import Cell
from .state import CellResult, write_file


class StudyRow(Frozen):
    """One cell of the study as results.csv shows it (bytes and seconds; units in the names)."""

    cell_id: str
    model: str
    model_name: str
    strategy: str
    gpus: int
    nodes: int
    devices_per_node: int
    plan: str = Field("", description="Compact plan string (Plan.to_string)")
    micro_batch_size: Optional[int] = None
    num_micro_batches: Optional[int] = None
    global_batch: int
    seq_len: int
    steps: int
    precision: str = Field("", description="Precision the trainer used, e.g. 'fp32 (bf16 requested)' on CPU")
    status: str = Field(description="ok, oom, timeout, crash, rendezvous, invalid_metrics, skipped, pending")
    note: str = ""
    total_tokens: Optional[int] = None
    total_time_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    scaling_factor: Optional[float] = None
    efficiency_pct: Optional[float] = None
    runtime_overhead_pct: Optional[float] = None
    ideal_tokens_per_s: Optional[float] = None
    peak_memory_bytes: Optional[int] = None
    avg_memory_bytes: Optional[float] = None
    total_memory_bytes: Optional[float] = None
    peak_memory_ratio: Optional[float] = None
    avg_utilization_pct: Optional[float] = None
    network_tx_bytes: Optional[int] = None
    network_rx_bytes: Optional[int] = None
    network_gbit_per_s: Optional[float] = None
    loopback_bytes: Optional[int] = Field(None, description="Bytes over 'lo' (gloo between ranks of one host)")
    predicted_tokens_per_s: Optional[float] = None
    predicted_peak_memory_bytes: Optional[int] = None
    predicted_step_time_s: Optional[float] = None
    predicted_network_bytes: Optional[float] = Field(None, description="Busiest NIC tx bytes over the timed steps")
    measured_over_predicted: Optional[float] = None
    run_dir: str = ""
    trial_id: str = ""
    duration_s: Optional[float] = None


COLUMNS = list(StudyRow.model_fields)


def network_gbit_per_s(summary: ExperimentSummary) -> float:
    """Seed 000's network throughput: (tx + rx) bytes x 8 / window seconds, in Gbit/s."""
    return (summary.network_tx_bytes + summary.network_rx_bytes) * 8 / summary.total_time_s / 1e9


def loopback_bytes(metrics: RunMetrics) -> int:
    """Bytes sent over the loopback interface by all ranks (where gloo's same-host traffic goes)."""
    return sum(b.tx_bytes for r in metrics.ranks for nic, b in r.nic_bytes.items() if nic == "lo")


def _metrics(res: Optional[CellResult]) -> Optional[RunMetrics]:
    return res.record.metrics if res is not None and res.record.status == "ok" else None


def build_rows(cells: list[Cell], results: dict[str, CellResult], workloads: dict, steps: int,
               run_dirs: dict[str, str]) -> list[StudyRow]:
    """Aggregate every cell (Appendix F) and compare it with its model's 1-GPU baseline."""
    baselines: dict[str, ExperimentSummary] = {}
    for c in cells:
        m = _metrics(results.get(c.id))
        if c.strategy == "single" and m is not None:
            baselines[c.model] = summarize(m.ranks, m.plan)
    rows = []
    for c in cells:
        wl = workloads[c.model]
        res = results.get(c.id)
        m = _metrics(res)
        est = c.predicted
        d: dict = dict(
            cell_id=c.id, model=c.model, model_name=c.model_name, strategy=c.strategy, gpus=c.gpus, nodes=c.nodes,
            devices_per_node=c.devices_per_node, plan=c.plan.to_string() if c.plan else "",
            micro_batch_size=c.plan.micro_batch_size if c.plan else None,
            num_micro_batches=c.plan.num_micro_batches if c.plan else None,
            global_batch=wl.training.global_batch, seq_len=wl.training.seq_len, steps=steps,
            status="skipped" if c.skip_reason else (res.record.status if res else "pending"),
            note=c.skip_reason or (res.record.error if res and res.record.error else "") or c.note or "",
            run_dir=run_dirs.get(c.id, ""),
        )
        if est is not None:
            d.update(predicted_tokens_per_s=est.tokens_per_s, predicted_peak_memory_bytes=est.memory.total,
                     predicted_step_time_s=est.step_time_s,
                     predicted_network_bytes=est.network_bytes_per_step * steps)
        if res is not None:
            d.update(trial_id=res.record.trial_id, duration_s=res.record.duration_s)
        if m is not None:
            s = summarize(m.ranks, m.plan)
            d.update(precision=m.precision, total_tokens=s.total_tokens, total_time_s=s.total_time_s, tokens_per_s=s.throughput_tokens_per_s,
                     peak_memory_bytes=s.peak_memory_bytes, avg_memory_bytes=s.avg_memory_bytes,
                     total_memory_bytes=s.total_memory_bytes, avg_utilization_pct=s.avg_utilization_pct,
                     network_tx_bytes=s.network_tx_bytes, network_rx_bytes=s.network_rx_bytes,
                     network_gbit_per_s=network_gbit_per_s(s), loopback_bytes=loopback_bytes(m))
            base = baselines.get(c.model)
            if base is not None:
                cmp: ComparisonSummary = compare(s, base, n_devices=c.gpus)
                d.update(scaling_factor=cmp.scaling_factor, efficiency_pct=cmp.scaling_efficiency_pct,
                         runtime_overhead_pct=cmp.runtime_overhead_pct,
                         ideal_tokens_per_s=cmp.ideal_throughput_tokens_per_s, peak_memory_ratio=cmp.peak_memory_ratio)
            if est is not None and est.tokens_per_s:
                d["measured_over_predicted"] = s.throughput_tokens_per_s / est.tokens_per_s
        rows.append(StudyRow(**d))
    return rows


def _csv_value(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def rows_csv(rows: list[StudyRow]) -> str:
    """results.csv text: one header line, one line per cell, full float precision, empty for missing."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        d = r.model_dump()
        w.writerow([_csv_value(d[k]) for k in COLUMNS])
    return buf.getvalue()


def write_results(out: Path, rows: list[StudyRow], meta: dict) -> None:
    """results.csv and results.json (rows plus the study's metadata), each written atomically."""
    write_file(out / "results.csv", rows_csv(rows))
    payload = {"meta": meta, "columns": COLUMNS, "rows": [r.model_dump(mode="json") for r in rows]}
    write_file(out / "results.json", json.dumps(payload, indent=1, default=str))
