"""The study folder: its state file, one result file per finished cell, and resuming.

    DIR/study.json         fingerprint, spec, grid (cells with plans and predictions), attempts per cell
    DIR/cells/<id>.json    the finished cell: its key and TrialRecord (written atomically when it ends)
    DIR/runs/<id>/         the trial's folder (job.json, metrics.json, logs, record.json)

A finished cell (its result file exists with the same key) is never run again. A cell that was
running when gpuadvisor died has no result file: its leftovers are stopped and it is run again, at
most once more (then it is recorded as a crash). A folder made for another cluster, run length or
gpuadvisor version is refused: one-line UserError naming the difference and the fix.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Optional

from pydantic import Field

from .. import __version__
from ..errors import UserError
from ..schemas import Cluster, TrialRecord
from ..schemas._base import Frozen
from ..trials.atomic import write_atomic
from ..trials.fingerprint import cluster_digest
from .grid import Cell
from .spec import StudySpec

STATE = "study.json"
MAX_ATTEMPTS = 2


class CellResult(Frozen):
    """What DIR/cells/<id>.json holds: the key the cell was run for and its trial record."""

    id: str
    key: str
    record: TrialRecord
    finished_at: float = Field(description="Unix time the cell finished")
    attempts: int = 1


class StudyState(Frozen):
    """DIR/study.json."""

    fingerprint: str
    fingerprint_parts: dict[str, str]
    spec: StudySpec
    cluster_name: str
    cells: list[Cell]
    attempts: dict[str, int] = Field(default_factory=dict, description="Launches started per cell id")
    created_at: float
    version: str = __version__


def write_file(path: Path, data: "str | bytes") -> Path:
    """Write a study file atomically (temp file, fsync, rename) with the usual permissions."""
    return write_atomic(path, data)


def _h(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint_parts(cluster: Cluster, spec: StudySpec) -> dict[str, str]:
    """What every measurement of the folder depends on (the grid itself may grow between runs)."""
    parts = {"cluster": cluster_digest(cluster)[:16], "run length": _h([spec.steps, spec.warmup]),
             "gpuadvisor version": __version__}
    if spec.finetune.adapters:  # full fine-tuning adds nothing, so folders made before LoRA still resume
        parts["fine-tuning"] = _h(spec.finetune.model_dump(mode="json"))
    return parts


class StudyDir:
    """Reads and writes one study folder."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.cells_dir = self.root / "cells"
        self.runs_dir = self.root / "runs"

    def run_dir(self, cell_id: str) -> Path:
        return self.runs_dir / cell_id

    def load_state(self) -> Optional[StudyState]:
        path = self.root / STATE
        if not path.exists():
            return None
        try:
            return StudyState.model_validate_json(path.read_text())
        except ValueError as exc:
            raise UserError(f"{path} is not a study state file ({str(exc).splitlines()[0]}); "
                            "pick another --out folder") from None

    def open(self, cluster: Cluster, spec: StudySpec, cells: list[Cell]) -> tuple[StudyState, bool]:
        """Create the state, or resume it after checking the fingerprint; returns (state, resumed)."""
        parts = fingerprint_parts(cluster, spec)
        fp = _h(parts)
        old = self.load_state()
        if old is not None and old.fingerprint != fp:
            diff = [k for k in parts if old.fingerprint_parts.get(k) != parts[k]] or ["settings"]
            raise UserError(f"{self.root} holds a study made for a different {', '.join(diff)}; refusing to mix "
                            "results: use a new --out folder, or rerun with the original settings")
        attempts = dict(old.attempts) if old else {}
        state = StudyState(fingerprint=fp, fingerprint_parts=parts, spec=spec, cluster_name=cluster.name,
                           cells=cells, attempts=attempts, created_at=old.created_at if old else time.time())
        self.save(state)
        return state, old is not None

    def save(self, state: StudyState) -> None:
        write_file(self.root / STATE, state.model_dump_json(indent=1))

    def result(self, cell: Cell) -> Optional[CellResult]:
        """The finished result of `cell` if one exists for its key."""
        path = self.cells_dir / f"{cell.id}.json"
        try:
            res = CellResult.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return None
        return res if res.key == cell.key else None

    def save_result(self, cell: Cell, record: TrialRecord, attempts: int) -> CellResult:
        res = CellResult(id=cell.id, key=cell.key, record=record, finished_at=time.time(), attempts=attempts)
        write_file(self.cells_dir / f"{cell.id}.json", res.model_dump_json(indent=1))
        return res
