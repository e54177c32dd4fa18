"""The local measurement store: one MeasurementRow per line in user_data_dir()/measurements.jsonl.

Every completed trial appends its rows (flock + fsync per line, so several advisor processes may
append at once); the learned correction refits from these rows plus knowledge/measurements.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterable, Optional, Union

from pydantic import ValidationError

from ..errors import UserError
from ..paths import user_data_dir
from ..schemas import Cluster, Estimate, MeasurementRow, TrialRecord, Workload
from .atomic import append_line, write_atomic
from .plausible import implausible

STORE_NAME = "measurements.jsonl"


def default_store_path() -> Path:
    """The local store, next to the default study database."""
    return user_data_dir() / STORE_NAME


def cluster_fingerprint(cluster: Cluster) -> str:
    """Short stable hash of a cluster model (source_group of local rows: local-<fingerprint>)."""
    from .fingerprint import cluster_digest

    return cluster_digest(cluster)[:12]


def parse_rows(lines: Iterable[str], where: str, *, strict: bool) -> tuple[list[MeasurementRow], list[str]]:
    """Validate JSONL lines; strict raises a one-line UserError naming the first bad line."""
    rows, bad = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = MeasurementRow.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            why = f"{'.'.join(map(str, first['loc'])) or 'row'}: {first['msg']}"
            if strict:
                raise UserError(f"{where} line {n} is not a valid measurement row ({why}); fix or remove it") from None
            bad.append(f"line {n}: {why}")
            continue
        why_not = implausible(row)
        if why_not:
            if strict:
                raise UserError(f"{where} line {n} ({row.id}) is not plausible: {why_not}; fix or remove it")
            bad.append(f"line {n}: {why_not}")
            continue
        rows.append(row)
    return rows, bad


class MeasurementStore:
    """Append-only JSONL of MeasurementRow; ids are unique (duplicates are skipped on import)."""

    def __init__(self, path: Union[str, Path, None] = None):
        self.path = Path(path) if path else default_store_path()

    def rows(self) -> list[MeasurementRow]:
        """Every valid row; a torn or invalid line (crash mid-append) is skipped."""
        if not self.path.is_file():
            return []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            rows, _ = parse_rows(fh, str(self.path), strict=False)
        return rows

    def ids(self) -> set[str]:
        """Ids already in the store."""
        return {r.id for r in self.rows()}

    def append(self, row: MeasurementRow) -> bool:
        """Append one row atomically; False (nothing written) if its id is already stored."""
        if row.id in self.ids():
            return False
        append_line(self.path, row.model_dump_json())
        return True

    def import_file(self, path: Union[str, Path]) -> tuple[int, int]:
        """Validate every row of a JSONL file, then append the new ones; returns (added, skipped duplicates)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot read {p}: {exc.strerror or exc}; check the path") from None
        rows, _ = parse_rows(text.splitlines(), str(p), strict=True)
        seen, added, skipped = self.ids(), 0, 0
        for row in rows:
            if row.id in seen:
                skipped += 1
                continue
            append_line(self.path, row.model_dump_json())
            seen.add(row.id)
            added += 1
        return added, skipped

    def export(self, out: Union[str, Path, None] = None) -> str:
        """All valid rows as JSONL text; written atomically to `out` when given."""
        text = "".join(r.model_dump_json() + "\n" for r in self.rows())
        if out is not None:
            write_atomic(out, text)
        return text


def rows_from_trial(record: TrialRecord, cluster: Cluster, workload: Workload,
                    estimate: Optional[Estimate] = None) -> list[MeasurementRow]:
    """The measurement rows of one finished trial: throughput + peak memory, or the OOM bound."""
    host = socket.gethostname()
    common = dict(source=f"measured on {host} by gpuadvisor confirm", cluster=cluster, workload=workload,
                  source_group=f"local-{cluster_fingerprint(cluster)}", plan=record.plan)
    notes = {"study": record.study, "trial_id": record.trial_id, "status": record.status,
             "predicted_tokens_per_s": record.predicted_tokens_per_s,
             "predicted_peak_memory_bytes": record.predicted_peak_memory_bytes}
    if estimate is not None:
        notes["analytical_tokens_per_s"] = estimate.analytical_tokens_per_s
    if record.status == "ok" and record.measured_tokens_per_s:
        rows = [MeasurementRow(id=f"{record.trial_id}-tokens_per_s", metric="tokens_per_s",
                               value=record.measured_tokens_per_s, unit="tokens/s", notes=json.dumps(notes), **common)]
        if record.measured_peak_memory_bytes:
            rows.append(MeasurementRow(id=f"{record.trial_id}-peak_memory_bytes", metric="peak_memory_bytes",
                                       value=float(record.measured_peak_memory_bytes), unit="bytes",
                                       notes=json.dumps(notes), **common))
        return rows
    if record.status == "oom":
        devs = [d for n in cluster.nodes for d in n.devices]
        cap = min(d.memory_bytes for d in devs) if devs else 0
        return [MeasurementRow(id=f"{record.trial_id}-oom", metric="peak_memory_bytes", value=float(cap),
                               unit="bytes", notes=json.dumps(notes),
                               assumptions=["OOM: the peak exceeded the device capacity; value is a lower bound"],
                               **common)]
    return []
