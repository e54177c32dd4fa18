"""The `gpuadvisor` command line. Each subcommand lives in its own module with `register(sub)`.

Imports stay light: no torch/deepspeed here or on the `suggest` path (ranking must start fast).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

from .. import __version__, exitcodes
from .argtypes import OneLineParser

# subcommand module names under gpuadvisor.cli, in help order
COMMANDS = ("suggest", "predict", "probe", "presets", "validate", "measurements", "study", "tui")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand that is installed."""
    parser = OneLineParser(
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
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed as one line
        return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    if not getattr(args, "func", None):
        commands = parser._subparsers._group_actions[0].choices or ()  # type: ignore[union-attr]
        if sys.stdin.isatty() and sys.stdout.isatty() and "tui" in commands:
            args = parser.parse_args(["tui"])
        else:
            parser.print_help()
            return exitcodes.USAGE
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # UserError and pydantic/plan validation: one line, no traceback
        if os.environ.get("GPUADVISOR_DEBUG"):
            raise
        msg = " ".join(str(exc).split())
        print(f"gpuadvisor: error: {msg}", file=sys.stderr)
        return getattr(exc, "exit_code", exitcodes.USAGE)
    except BrokenPipeError:
        return _quiet_pipe()
    except OSError as exc:  # an output/input path the command could not use (missing folder, no permission)
        if os.environ.get("GPUADVISOR_DEBUG") or not exc.filename:
            raise
        why = exc.strerror or type(exc).__name__
        print(f"gpuadvisor: error: cannot use '{exc.filename}': {why}; check that the folder exists and is "
              "writable (or pick another path)", file=sys.stderr)
        return exitcodes.USAGE
    except KeyboardInterrupt:
        print("gpuadvisor: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED


def _quiet_pipe() -> int:
    """Output piped into `head`: stop quietly, as other CLI tools do."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return exitcodes.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
