"""Run the standalone measuring probes (probes/*.py) as subprocesses and collect a MeasureReport.

torch is imported only inside the subprocesses: this module checks that it is installed
(``importlib.util.find_spec``) and never imports it. Each probe runs in its own session with a
deadline; on timeout the process group and every process tagged with the run's environment token
(torchrun puts each rank in a session of its own) get SIGTERM, then SIGKILL, so no rank survives.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Callable, Optional

from pydantic import ValidationError

from .. import exitcodes
from ..errors import UserError
from ..paths import probes_dir
from ..schemas.measure import MeasureReport

PROBES = ("collectives", "matmul", "hostcopy")
TERM_GRACE_S = 5.0
CPU_RANKS = 2  # gloo ranks when there is no GPU


class ProbeError(UserError):
    """A measuring probe failed, printed no report, or printed one that does not validate."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=exitcodes.RUN_FAILED)


class ProbeTimeout(ProbeError):
    """A measuring probe ran past its deadline and was killed with its process group."""


def require_torch() -> None:
    """Raise a one-line UserError when torch is not importable in this interpreter."""
    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "measuring needs PyTorch, which is not installed in this Python; "
            "run: pip install 'gpuadvisor[train]'"
        )


TOKEN_VAR = "GPUADVISOR_PROBE_TOKEN"


def _tagged_pids(token: str) -> list[int]:
    """Live processes whose environment carries TOKEN_VAR=token (Linux /proc; [] elsewhere).

    torchrun starts every rank in a session of its own, so killing the launcher's process group
    misses the ranks, and once the launcher dies they are re-parented away from its tree; the
    inherited environment marker still names exactly the processes this probe started.
    """
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone, a zombie, or not ours
            continue
    return found


def _signal_all(proc: subprocess.Popen, token: str, sig: int) -> None:
    """Send sig to the probe's process group and to every process carrying its token."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _tagged_pids(token):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stop_all(proc: subprocess.Popen, token: str, grace_s: float) -> None:
    """SIGTERM everything the probe started, wait up to grace_s, then SIGKILL what is left."""
    _signal_all(proc, token, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and (proc.poll() is None or _tagged_pids(token)):
        time.sleep(0.05)
    _reap_all(proc, token)


def _reap_all(proc: subprocess.Popen, token: str, settle_s: float = 2.0) -> None:
    """SIGKILL everything still alive from the probe until nothing carrying its token remains."""
    end = time.monotonic() + settle_s
    while True:
        _signal_all(proc, token, signal.SIGKILL)
        if (proc.poll() is not None and not _tagged_pids(token)) or time.monotonic() > end:
            return
        time.sleep(0.02)


def _tail(text: str, lines: int = 1) -> str:
    """The last non-empty lines of text, joined on one line."""
    kept = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)[-300:]


def _describe(argv: Sequence[str]) -> str:
    """A short one-line name for a command: its .py script, else its program."""
    scripts = [os.path.basename(a) for a in argv if a.endswith(".py")]
    name = scripts[0] if scripts else os.path.basename(argv[0]) if argv else "?"
    return " ".join(name.split())[:80]


def run_probe(argv: Sequence[str], timeout_s: float, env: Optional[Mapping[str, str]] = None,
              grace_s: Optional[float] = None, name: Optional[str] = None) -> str:
    """Run one probe command (argument list, no shell) in its own session; return its stdout.

    On timeout the session's process group and every process tagged with this run's token (the
    torchrun ranks sit in sessions of their own) get SIGTERM, `grace_s` seconds (default
    TERM_GRACE_S) later SIGKILL, and ProbeTimeout is raised. After a normal exit any straggler
    is killed too. `env` replaces the inherited environment (the token is added to it); `name`
    labels the probe in error messages. Raises ProbeError when the command cannot start or exits non-zero.
    """
    argv = [str(a) for a in argv]
    label = name or _describe(argv)
    token = uuid.uuid4().hex
    full_env = dict(os.environ if env is None else env)
    full_env[TOKEN_VAR] = token
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=full_env)
    except OSError as exc:
        raise ProbeError(f"cannot start probe {label} ({argv[0]}): {exc}; check the Python path") from exc
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        _stop_all(proc, token, TERM_GRACE_S if grace_s is None else grace_s)
        proc.communicate()
        raise ProbeTimeout(
            f"probe {label} did not finish within {timeout_s:.0f} s and was killed; "
            "raise the timeout or use --quick"
        ) from None
    finally:
        _reap_all(proc, token)
    if proc.returncode != 0:
        raise ProbeError(
            f"probe {label} exited with status {proc.returncode}: "
            f"{_tail(err) or _tail(out) or 'no output'}; run it by hand to see the full error"
        )
    return out


def parse_probe_output(text: str) -> MeasureReport:
    """The MeasureReport in a probe's stdout: the last line that is a JSON object.

    Other lines (warnings from torch or the launcher) are ignored. Raises ProbeError when no line
    is a JSON object or the object does not match the MeasureReport schema.
    """
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        try:
            return MeasureReport.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ProbeError(
                f"probe printed a report that does not match MeasureReport ({loc}: {first['msg']}); "
                "the probes/ folder and the gpuadvisor package are from different versions"
            ) from exc
    raise ProbeError(f"probe printed no JSON report (last output: {_tail(text) or 'nothing'}); "
                     "run it by hand to see why")


def probe_commands(nproc: int, quick: bool = False) -> dict[str, list[str]]:
    """The argument lists that run each probe: collectives under torchrun, the others plain."""
    folder = probes_dir()
    extra = ["--quick"] if quick else []
    return {
        "collectives": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", str(nproc), str(folder / "collectives.py"), *extra],
        "matmul": [sys.executable, str(folder / "matmul.py"), *extra],
        "hostcopy": [sys.executable, str(folder / "hostcopy.py"), *extra],
    }


def _gpu_count(timeout_s: float) -> int:
    """CUDA devices torch sees (CUDA_VISIBLE_DEVICES honoured), asked in a subprocess."""
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    out = run_probe([sys.executable, "-c", code], timeout_s)
    try:
        return int(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeError(f"could not count GPUs with torch (got {out.strip()[:80]!r}); "
                         "check that 'python -c \"import torch\"' works") from None


def merge_reports(parts: Mapping[str, MeasureReport], commands: Mapping[str, Sequence[str]],
                  warnings: Sequence[str] = ()) -> MeasureReport:
    """Combine the per-probe reports into one, with provenance and every warning labelled by probe."""
    if not parts:
        raise ValueError("merge_reports needs at least one probe report")
    first = next(iter(parts.values()))
    kinds = {p.device_kind for p in parts.values()}
    return MeasureReport(
        hostname=first.hostname,
        device_kind="gpu" if "gpu" in kinds else "cpu",
        world_size=max(p.world_size for p in parts.values()),
        collectives=[c for p in parts.values() for c in p.collectives],
        matmul=[m for p in parts.values() for m in p.matmul],
        copies=[c for p in parts.values() for c in p.copies],
        torch_version=first.torch_version,
        command="; ".join(shlex.join(list(commands[name])) for name in parts),
        warnings=[*warnings, *(f"{name}: {w}" for name, p in parts.items() for w in p.warnings)],
    )


def run_measurements(nproc: int | None = None, quick: bool = False, timeout_s: float = 300,
                     *, probes: Sequence[str] = PROBES,
                     commands: Optional[Mapping[str, Sequence[str]]] = None,
                     progress: Optional[Callable[[str, int, int, float], None]] = None) -> MeasureReport:
    """Run the measuring probes on this host and return what they measured.

    nproc: ranks for the collective sweep; default the number of GPUs, or 2 gloo CPU ranks when
    there is none (with one GPU the sweep is skipped: collectives need two ranks).
    quick: fewer sizes and iterations (seconds on a laptop CPU).
    timeout_s: wall-clock budget for all probes together; a probe past it is killed with its
    process group and reported as a warning.
    probes: which of "collectives", "matmul", "hostcopy" to run.
    commands: name -> argument list, replacing the default commands (tests, custom launchers).
    progress: called as progress(name, i, n, seconds_left) before probe i (1-based) of n starts.

    torchrun is started with --standalone, whose rendezvous binds port 0 so the OS picks a free
    port (no race between choosing and binding). A failing probe becomes a warning; if every
    probe fails the first error is raised (ProbeError / ProbeTimeout, one-line UserErrors).
    """
    require_torch()
    deadline = time.monotonic() + timeout_s
    warnings: list[str] = []
    if commands is None:
        unknown = [p for p in probes if p not in PROBES]
        if unknown:
            raise UserError(f"unknown probe(s) {unknown}; choose from {', '.join(PROBES)}")
        if nproc is None:
            gpus = _gpu_count(max(deadline - time.monotonic(), 1.0))
            nproc = gpus if gpus else CPU_RANKS
        if nproc < 1:
            raise UserError(f"nproc must be at least 1, got {nproc}; pass the number of ranks to use")
        selected = list(probes)
        if nproc < 2 and "collectives" in selected:
            selected.remove("collectives")
            warnings.append(f"collectives: skipped, they need at least 2 ranks and nproc is {nproc}; "
                            "pass nproc=2 or more (one rank per GPU)")
        all_cmds = probe_commands(nproc, quick)
        commands = {name: all_cmds[name] for name in selected}

    parts: dict[str, MeasureReport] = {}
    errors: list[ProbeError] = []
    for i, (name, argv) in enumerate(commands.items(), 1):
        left = deadline - time.monotonic()
        if progress is not None:
            progress(name, i, len(commands), left)
        if left <= 0:
            errors.append(ProbeTimeout(f"probe {name} not started: the {timeout_s:.0f} s budget was spent; "
                                       "raise the timeout or use --quick"))
            warnings.append(f"{name}: {errors[-1]}")
            continue
        try:
            parts[name] = parse_probe_output(run_probe(argv, left, name=name))
        except ProbeError as exc:
            errors.append(exc)
            warnings.append(f"{name}: {exc}")
    if not parts:
        if errors:
            raise errors[0]
        raise UserError(warnings[0] if warnings else "no probe selected; pass at least one probe name")
    return merge_reports(parts, commands, warnings)
