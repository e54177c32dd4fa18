"""The `gpuadvisor` command line. Each subcommand lives in its own module with `register(sub)`.

Imports stay light: no torch/deepspeed here or on the `suggest` path (ranking must start fast).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

from .. import __version__
from ..errors import UserError

# subcommand module names under gpuadvisor.cli, in help order
COMMANDS = ("suggest", "predict", "probe", "presets", "validate", "measurements", "study", "tui")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand that is installed."""
    parser = argparse.ArgumentParser(
        prog="gpuadvisor",
        description="You've got a few GPUs, now what? Probe, rank parallel plans, confirm, launch.",
    )
    parser.add_argument("--version", action="version", version=f"gpuadvisor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"gpuadvisor.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpuadvisor.cli.{name}_cmd":
                continue  # subcommand not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: parse, dispatch, and turn user errors into one line on stderr."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        if sys.stdin.isatty() and sys.stdout.isatty() and "tui" in parser._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
            args = parser.parse_args(["tui"])
        else:
            parser.print_help()
            return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # UserError and pydantic/plan validation: one line, no traceback
        if os.environ.get("GPUADVISOR_DEBUG"):
            raise
        msg = " ".join(str(exc).split())
        print(f"gpuadvisor: error: {msg}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        print("gpuadvisor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head`: stop quietly, as other CLI tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
