"""`gpuadvisor study`: the seed papers' experiment on your own cluster in one command.

    spec (models x strategies x GPU counts) -> grid of cells (plans built the papers' way, predicted,
    skipped when they cannot fit) -> trial runner per cell (resumable study folder) -> Appendix F
    aggregation -> results.csv/json, plots, report.md/html

- `spec`: the study's axes and CLI parsing; `grid`: the cells; `state`: the study folder and resuming;
- `execute.run_study`: the loop; `results`: rows and CSV/JSON; `plots`, `recommend`, `report`: outputs.

Nothing here imports torch (trials are subprocesses) or matplotlib (only `plots`, lazily).
"""
from .execute import StudyOutcome, plan_study, resolve_workloads, run_study
from .grid import Cell, build_grid
from .spec import StudySpec

__all__ = ["Cell", "StudyOutcome", "StudySpec", "build_grid", "plan_study", "resolve_workloads", "run_study"]
