"""Minimal launcher for tests: start N ranks with torchrun's environment, without importing torch.

`python .../trials/locallaunch.py --nproc N -- python trainer.py ...`. Exits non-zero when a
rank fails (and stops the others), like torchrun. Ranks share the launcher's session.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def _free_port() -> int:
    """A free TCP port on localhost for MASTER_PORT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    """Start the ranks, wait, stop all when one fails."""
    ap = argparse.ArgumentParser(prog="gpuadvisor.trials.locallaunch")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    port = str(_free_port())
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.nproc),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(cmd, env=env, shell=False))

    def forward_term(*_: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.terminate()

    signal.signal(signal.SIGTERM, forward_term)
    while True:
        codes = [p.poll() for p in procs]
        bad = [c for c in codes if c not in (None, 0)]
        if bad:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            time.sleep(0.5)
            for p in procs:
                if p.poll() is None:
                    p.kill()
            print(f"locallaunch: a rank failed with exit code {bad[0]}", file=sys.stderr)
            return 1
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
