"""DeepSpeed's one-time JIT op build (the CPU shared-memory comm op), run as its own visible step.

ZeRO trials on CPU ranks need DeepSpeed's `deepspeed_shm_comm` C++ op. torch builds it on first use
under a lock file (`<torch_extensions>/<op>/lock`); two ranks building at once abort, so the build
runs once, before any rank starts. Three things can go wrong, and each is handled here:

- A build killed midway leaves torch's `lock` behind and every later build waits on it forever.
  The builder removes a lock whose owner is gone: no process works in (or names) the build folder
  and the lock is older than STALE_LOCK_S.
- A cold build takes minutes on a small host: there is no fixed two-minute limit (BUILD_TIMEOUT_S,
  overridable with GPUADVISOR_OP_BUILD_TIMEOUT), and the caller shows it as a step with elapsed time.
- If gpuadvisor is killed (even with kill -9), the build must not linger: it runs under the trial
  watchdog (`guard.py`), which stops its whole session when the advisor's pipe closes.

`python -m gpuadvisor.trials.opbuild` is the builder (imports torch and DeepSpeed); `ensure_ops`
is the caller's side (no torch import).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping, Optional

from ..errors import UserError

HERE = Path(__file__).resolve().parent
BUILD_TIMEOUT_S = 3600.0
STALE_LOCK_S = 30.0
_done: set[tuple] = set()


def _cache_key(env: Mapping[str, str]) -> tuple:
    return (sys.executable, env.get("DS_ACCELERATOR"), env.get("TORCH_EXTENSIONS_DIR"), env.get("HOME"))


def lock_owner_alive(build_dir: Path, *, me: Optional[int] = None) -> bool:
    """True when some process works in `build_dir` (its cwd, or an argument naming it): the build is live."""
    target = str(build_dir.resolve())
    me = os.getpid() if me is None else me
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            cwd = ""
        if cwd == target or cwd.startswith(target + os.sep):
            return True
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if target.encode() in fh.read():
                    return True
        except OSError:
            continue
    return False


def clear_stale_lock(build_dir: Path, *, stale_s: float = STALE_LOCK_S) -> bool:
    """Remove torch's build `lock` in `build_dir` when its owner is gone; True if one was removed."""
    lock = build_dir / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if age < stale_s or lock_owner_alive(build_dir):
        return False
    lock.unlink(missing_ok=True)
    return True


def ensure_ops(env: Mapping[str, str], *, progress: Optional[Callable[[str], None]] = None,
               timeout_s: Optional[float] = None) -> None:
    """Build DeepSpeed's JIT op once per interpreter/environment (a no-op after the first success).

    Runs the builder under the watchdog; prints progress through `progress` about every 15 s.
    Raises a one-line UserError when the build fails or runs past `timeout_s`.
    """
    key = _cache_key(env)
    if key in _done:
        return
    limit = timeout_s or float(os.environ.get("GPUADVISOR_OP_BUILD_TIMEOUT", BUILD_TIMEOUT_S))
    with tempfile.TemporaryDirectory(prefix="gpuadvisor-opbuild-") as tmp:
        status, log = Path(tmp) / "guard.json", Path(tmp) / "build.log"
        argv = [sys.executable, str(HERE / "guard.py"), "--token", uuid.uuid4().hex, "--timeout", f"{limit:.0f}",
                "--grace", "5", "--status", str(status), "--", sys.executable, "-m", "gpuadvisor.trials.opbuild"]
        start = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(env), start_new_session=True)
        try:
            next_note = 15.0
            while proc.poll() is None:
                time.sleep(0.2)
                waited = time.monotonic() - start
                if progress is not None and waited >= next_note:
                    progress(f"still building DeepSpeed's CPU op ({waited:.0f}s; a cold build takes minutes "
                             "on a small host, once)")
                    next_note += 15.0
        except BaseException:
            proc.send_signal(15)
            proc.wait(timeout=30)
            raise
        finally:
            if proc.stdin:
                proc.stdin.close()
        try:
            reason = json.loads(status.read_text()).get("reason", "exited")
        except (OSError, ValueError):
            reason = "exited"
        text = log.read_text(errors="replace")
    if proc.returncode != 0:
        if reason == "timeout":
            why = f"did not finish in {limit:.0f}s (set GPUADVISOR_OP_BUILD_TIMEOUT to allow longer)"
        else:
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            why = f"failed: {lines[-1][:300] if lines else f'exit code {proc.returncode}'}"
        raise UserError(f"building DeepSpeed's CPU op (needed by ZeRO trials) {why}; check that a C++ compiler and "
                        "ninja are installed, or confirm without ZeRO plans (no plan was blamed)")
    if progress is not None:
        note = next((ln for ln in text.splitlines() if ln.startswith("removed a stale build lock")), "")
        progress(f"DeepSpeed's CPU op is ready ({time.monotonic() - start:.0f}s){'; ' + note if note else ''}")
    _done.add(key)


def _build() -> int:
    """The builder process: clear a stale lock, then build (or load) the op."""
    if not os.environ.get("DS_ACCELERATOR"):
        try:
            import torch

            if not torch.cuda.is_available():
                os.environ["DS_ACCELERATOR"] = "cpu"
        except ImportError:
            pass
    from deepspeed.accelerator import get_accelerator
    from torch.utils.cpp_extension import _get_build_directory

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None:
        print("no DeepSpeed CPU op to build on this accelerator")
        return 0
    build_dir = Path(_get_build_directory(builder.NAME, False))
    if clear_stale_lock(build_dir):
        print(f"removed a stale build lock in {build_dir} (its build was stopped midway)")
    from ..trainers import ensure_deepspeed_ops

    t0 = time.monotonic()
    ensure_deepspeed_ops()
    print(f"built or loaded {builder.NAME} in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(_build())
