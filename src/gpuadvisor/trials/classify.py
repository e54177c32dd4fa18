"""Decide what happened in a trial: ok, oom, timeout, crash, rendezvous or invalid_metrics."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional

from pydantic import ValidationError

from ..schemas import RunMetrics, TrainerJob

OOM_PATTERNS = re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|std::bad_alloc", re.I)
RDZV_PATTERNS = re.compile(
    r"RendezvousError|RendezvousConnectionError|RendezvousTimeoutError|RendezvousClosedError|"
    r"Address already in use|EADDRINUSE|DistNetworkError|server socket has failed to (listen|bind)|"
    r"failed to bind|Connection refused.*(rendezvous|store|TCPStore)|TCPStore.*(timed out|refused)",
    re.I,
)


class Outcome(NamedTuple):
    """Classification result: status, one-line error, the rank's error file, validated metrics."""

    status: str
    error: Optional[str] = None
    error_file: Optional[str] = None
    metrics: Optional[RunMetrics] = None


def read_error_files(out_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The trainer's error-rank<r>.json files, lowest rank first (unreadable ones as 'exception')."""
    found = []
    for p in sorted(out_dir.glob("error-rank*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0)):
        try:
            data = json.loads(p.read_text())
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as exc:
            data = {"cause": "exception", "message": f"unreadable error file: {exc}"}
        found.append((p, data))
    return found


def _one_line(text: object, limit: int = 300) -> str:
    """Collapse whitespace and cut to `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite(obj: Any) -> bool:
    """True if every number nested in obj is finite."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v) for v in obj)
    return True


def validate_metrics(path: Path, job: TrainerJob) -> tuple[Optional[RunMetrics], Optional[str]]:
    """Load and check metrics.json: schema, enough timed steps, finite positive numbers."""
    if not path.is_file():
        return None, f"metrics file {path.name} is missing"
    try:
        raw = json.loads(path.read_text())  # Python's json accepts NaN/Infinity: check them below
    except (OSError, ValueError) as exc:
        return None, f"metrics file is not JSON: {_one_line(exc)}"
    if not _finite(raw):
        return None, "metrics contain non-finite numbers (NaN or Inf)"
    try:
        m = RunMetrics.model_validate(raw)
    except ValidationError as exc:
        return None, "metrics fail the schema: " + _one_line(
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3]))
    if m.steps < job.steps:
        return None, f"metrics cover {m.steps} timed steps, {job.steps} were asked"
    if not m.ranks:
        return None, "metrics have no per-rank results"
    short = [r.rank for r in m.ranks if len(r.step_times_s) < job.steps]
    if short:
        return None, f"ranks {short} timed fewer than {job.steps} steps after warm-up"
    if m.summary.throughput_tokens_per_s <= 0 or m.summary.total_time_s <= 0:
        return None, "metrics report non-positive throughput or time"
    if m.plan != job.plan:
        return None, "metrics were produced for a different plan"
    return m, None


_SIGNALS = re.compile(r"terminate called|Error|error:|exception|Signal \d+|SIG[A-Z]+|Killed|Aborted")


def _telling_line(stderr_tail: str) -> str:
    """The stderr line that says what went wrong: the last one naming an error or signal, else the last line
    that is not decoration (torchrun frames its report with ===== and ----- rules)."""
    lines = [ln for ln in stderr_tail.splitlines() if ln.strip() and not set(ln.strip()) <= set("=-*")]
    for ln in lines:  # the first error line is the cause; torchrun's later lines repeat it as ChildFailedError
        if _SIGNALS.search(ln) and "ChildFailedError" not in ln and not ln.lstrip().startswith(("File ", "raise ")):
            return ln.strip()
    return lines[-1].strip() if lines else ""


def classify(out_dir: Path, job: TrainerJob, exit_code: Optional[int], stop_reason: str,
             stderr_tail: str) -> Outcome:
    """Classify a finished trial from its exit code, guard stop reason, error files, stderr and metrics."""
    errors = read_error_files(out_dir)
    if stop_reason == "timeout":
        return Outcome("timeout", "trial ran past its wall-clock deadline and was stopped (hang or too slow)",
                       str(errors[0][0]) if errors else None)
    for path, data in errors:
        if data.get("cause") == "oom":
            return Outcome("oom", _one_line(f"rank {data.get('rank', '?')} ran out of memory: "
                                            f"{data.get('message', '')}"), str(path))
    if OOM_PATTERNS.search(stderr_tail):
        m = OOM_PATTERNS.search(stderr_tail)
        line = next((ln for ln in stderr_tail.splitlines() if m and m.group(0) in ln), "out of memory")
        return Outcome("oom", _one_line(line), str(errors[0][0]) if errors else None)
    for path, data in errors:
        if data.get("cause") == "timeout":
            return Outcome("timeout", _one_line(f"rank {data.get('rank', '?')} timed out: "
                                                f"{data.get('message', '')}"), str(path))
    if exit_code not in (0, None) or stop_reason != "exited":
        if RDZV_PATTERNS.search(stderr_tail) and not errors:
            m = RDZV_PATTERNS.search(stderr_tail)
            line = next((ln for ln in stderr_tail.splitlines() if m and m.group(0) in ln), m.group(0) if m else "")
            return Outcome("rendezvous", "rendezvous failed: " + _one_line(line))
        if errors:
            path, data = errors[0]
            return Outcome("crash", _one_line(f"rank {data.get('rank', '?')} failed "
                                              f"({data.get('cause', 'exception')}): {data.get('message', '')}"),
                           str(path))
        last = _telling_line(stderr_tail)
        if stop_reason == "exited":
            # every rank reported and rank 0 wrote metrics.json after the last step; a rank then died in
            # teardown (e.g. "terminate called without an active exception" from a c10d/gloo thread at exit):
            # the measurement stands, and the note says what happened after it
            metrics, _ = validate_metrics(out_dir / "metrics.json", job)
            if metrics is not None and len({r.rank for r in metrics.ranks}) == job.plan.world_size:
                return Outcome("ok", _one_line(f"measured; then the trainer exited with code {exit_code} in "
                                               f"teardown: {last}"), metrics=metrics)
        why = f"stopped ({stop_reason})" if stop_reason != "exited" else f"exit code {exit_code}"
        return Outcome("crash", _one_line(f"trainer {why}: {last}"))
    metrics, problem = validate_metrics(out_dir / "metrics.json", job)
    if metrics is None:
        return Outcome("invalid_metrics", problem)
    return Outcome("ok", metrics=metrics)
