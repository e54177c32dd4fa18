"""`gpuadvisor tui`: the interactive wizard (also what plain `gpuadvisor` opens on a terminal)."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tui", help="interactive wizard: hardware, model, goal, ranked plans, trials, export",
                       description="Walk from your hardware to a launch config in a terminal UI.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--preset", metavar="NAME", help="start from a bundled cluster preset instead of probing")
    g.add_argument("--cluster", metavar="FILE", help="start from a cluster file instead of probing")
    p.add_argument("--model", default="1.5B", help="pre-fill the model field (default 1.5B)")
    p.add_argument("--top", type=int, default=5, help="how many plans the results table shows (default 5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from ..errors import UserError

    if args.top < 1:
        raise UserError(f"--top must be at least 1, got {args.top}")
    if not (_isatty(sys.stdin) and _isatty(sys.stdout)):
        which = " and ".join(n for n, s in (("stdin", sys.stdin), ("stdout", sys.stdout)) if not _isatty(s))
        raise UserError(f"gpuadvisor tui needs an interactive terminal, but {which} is not one; run it in a "
                        "terminal, or use `gpuadvisor suggest` in scripts and pipes")
    try:
        from ..tui.app import GpuAdvisorApp  # textual is imported only here
    except ImportError as exc:
        raise UserError(f"the TUI needs textual ({exc}), a dependency of gpuadvisor; install it with: "
                        "pip install 'textual>=0.50'") from None
    GpuAdvisorApp(preset=args.preset, cluster_file=args.cluster, model=args.model, top=args.top).run()
    return 0


def _isatty(stream) -> bool:
    """True when `stream` is a terminal (False when it is closed, replaced or missing)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, OSError):
        return False
