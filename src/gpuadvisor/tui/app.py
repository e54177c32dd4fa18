"""The wizard application: shared state, step navigation, and the six step screens as modes."""
from __future__ import annotations

from typing import Any, Callable, Optional

from textual.app import App
from textual.binding import Binding
from textual.reactive import var

from ..schemas import Cluster, Workload
from .jobproc import JobProcess
from .rankjob import rank_job
from .widgets import ALT_DIGIT_KEYS
from .wording import error_line
from .screens.confirm import ConfirmScreen
from .screens.export import ExportScreen
from .screens.goal import GoalScreen
from .screens.hardware import HardwareScreen
from .screens.model import ModelScreen
from .screens.results import ResultsScreen

#: Wizard steps in order: (mode name, title shown in the step bar).
STEPS: tuple[tuple[str, str], ...] = (
    ("hardware", "Hardware"), ("model", "Model"), ("goal", "Goal"),
    ("results", "Results"), ("confirm", "Confirm"), ("export", "Export"),
)


class GpuAdvisorApp(App[None]):
    """`gpuadvisor tui`: walk from the hardware to a launch config, one screen per step.

    Args:
        preset / cluster_file: start from a bundled preset or a cluster file instead of probing this host.
        model: pre-fill the model field (a size like "1.5B", a preset name or a config.json path).
        top: how many plans the results table shows (same default as `gpuadvisor suggest --top`).
        probe_on_start: probe this host when neither preset nor cluster file is given (off in tests).
    """

    CSS_PATH = "app.tcss"
    TITLE = "gpuadvisor"
    SUB_TITLE = "a few GPUs, now what?"
    MODES = {"hardware": HardwareScreen, "model": ModelScreen, "goal": GoalScreen,
             "results": ResultsScreen, "confirm": ConfirmScreen, "export": ExportScreen}
    DEFAULT_MODE = "hardware"
    # Step jumps never use a bare key a form could want: Alt+1..6 anywhere (priority: no field types them),
    # or 1..6 / Left / Right while the step bar itself has the focus (widgets.StepBar).
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),  # shown in the footer: works in every field
        Binding("q", "quit", "Quit", show=False),
        Binding("escape", "prev_step", "Back"),
        Binding("ctrl+n", "next_step", "Next", priority=True),
        *(Binding(f"alt+{i},{ALT_DIGIT_KEYS[i - 1]}", f"goto('{name}')", f"Go to {title}", show=False,
                  priority=True, key_display=f"alt+{i}") for i, (name, title) in enumerate(STEPS, 1)),
    ]

    # shared wizard state; screens watch these
    cluster: var[Optional[Cluster]] = var(None, init=False)
    workload: var[Optional[Workload]] = var(None, init=False)
    objective: var[str] = var("throughput", init=False)
    price_per_gpu_hour: var[Optional[float]] = var(None, init=False)
    suggestion: var[Any] = var(None, init=False)  # api.Suggestion of the results screen (what-ifs applied)

    def __init__(self, *, preset: Optional[str] = None, cluster_file: Optional[str] = None,
                 model: str = "1.5B", top: int = 5, probe_on_start: bool = True) -> None:
        super().__init__()
        self.start_preset = preset
        self.start_cluster_file = cluster_file
        self.start_model = model
        self.top = top
        self.probe_on_start = probe_on_start
        self.cluster_notes: list[str] = []
        self.probe_report: Any = None
        self.what_if: list[str] = []
        self.confirmed: Any = None  # a trials study that confirmed a winner (the export writes that winner)
        self.confirm_options: dict[str, Any] = {}  # extra keywords for api.confirm (storage, work_dir...)
        # the ranking runs in this warm child process, so an abandoned ranking can be stopped (jobproc)
        self.ranker = JobProcess(preload=("gpuadvisor.api", "gpuadvisor.ranking", "gpuadvisor.tui.rankjob"))
        self.rank_job: Callable[..., Any] = rank_job  # what the Results step runs there (tests: a slow one)
        self.focus_stepbar = False  # the last jump came from the focused step bar: keep the focus there

    def on_mount(self) -> None:
        """Resolve the pre-filled model so later steps can be opened straight away; warm the ranking process."""
        from .. import api

        self.ranker.start()
        try:
            self.workload = api.make_workload(self.start_model)
        except Exception:
            self.workload = None  # the Model step shows why

    def on_unmount(self) -> None:
        self.ranker.close()

    # ---- a ranking is only good for the inputs it was made from ---------------------------------------
    def _inputs_changed(self) -> None:
        """Cluster, model or goal changed: the ranked plans (and trials of them) no longer apply."""
        self.suggestion = None
        self.confirmed = None

    def watch_cluster(self) -> None:
        self._inputs_changed()

    def watch_workload(self) -> None:
        self._inputs_changed()

    def watch_objective(self) -> None:
        self._inputs_changed()

    def watch_price_per_gpu_hour(self) -> None:
        self._inputs_changed()

    # ---- navigation -------------------------------------------------------------------------------
    @property
    def step_names(self) -> list[str]:
        return [name for name, _ in STEPS]

    def action_goto(self, step: str, from_stepbar: bool = False) -> None:
        """Jump to a step if what it needs is there, else say what is missing."""
        if step == self.current_mode:
            return
        missing = self.missing_for(step)
        if missing:
            self.notify(missing, severity="warning", title="Not yet")
            return
        self.focus_stepbar = from_stepbar
        self.switch_mode(step)

    def action_next_step(self, from_stepbar: bool = False) -> None:
        names = self.step_names
        i = names.index(self.current_mode)
        if i + 1 < len(names):
            self.action_goto(names[i + 1], from_stepbar)
        else:
            self.notify("This is the last step.", timeout=3)

    def action_prev_step(self, from_stepbar: bool = False) -> None:
        names = self.step_names
        i = names.index(self.current_mode)
        if i > 0:
            self.action_goto(names[i - 1], from_stepbar)
        else:
            self.notify("This is the first step; press q to quit.", timeout=3)

    def missing_for(self, step: str) -> Optional[str]:
        """Why `step` cannot be shown yet (None when it can)."""
        order = self.step_names
        need = order.index(step)
        if need >= 1 and self.cluster is None:
            return "Choose a cluster first (probe, preset or file)."
        if need >= 2 and self.workload is None:
            return "Enter a valid model and training settings first."
        if need >= 4 and (self.suggestion is None or not self.suggestion.ranking.top):
            return "No ranked plan yet: open Results and wait for the ranking (nothing may fit)."
        return None

    async def action_quit(self) -> None:
        """Quit; running work is stopped first so nothing outlives the TUI (no trial, ranking or thread)."""
        from .screens.confirm import ConfirmScreen

        self.ranker.close()  # kills a running ranking; its waiting thread returns at once
        stack = self._screen_stacks.get("confirm") or []
        confirm = next((s for s in stack if isinstance(s, ConfirmScreen)), None)
        if confirm is not None and confirm.cancel_trials():
            self.notify("Stopping the running trial…")
        self.exit()

    # ---- errors -------------------------------------------------------------------------------------
    def show_error(self, exc: BaseException, what: str) -> None:
        """Show an error as a notification, one line, never a traceback (safe from any thread)."""
        self.notify(error_line(exc), title=f"{what} failed", severity="error", timeout=8, markup=False)
