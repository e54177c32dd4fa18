"""The exit codes of every `gpuadvisor` command, in one place (README "Exit codes", docs/robustness.md).

    0   OK            the command did what was asked
    1   INTERNAL      a bug in gpuadvisor (Python prints a traceback; please report it)
    2   USAGE         bad input or environment: a flag, file, model, plan, path or missing dependency;
                      one line on stderr names the problem and the fix
    3   NOTHING_FITS  ranking / predict: no plan fits on the cluster (the output says the smallest change)
    4   RUN_FAILED    something that ran failed: no confirm trial succeeded, a study cell failed, a
                      measuring probe failed, `validate` found an ordering that does not hold
    130 INTERRUPTED   Ctrl-C (SIGINT)

The Python API raises `gpuadvisor.errors.UserError` (its `exit_code` is one of the above) for bad input.
"""
from __future__ import annotations

OK = 0
INTERNAL = 1
USAGE = 2
NOTHING_FITS = 3
RUN_FAILED = 4
INTERRUPTED = 130

__all__ = ["OK", "INTERNAL", "USAGE", "NOTHING_FITS", "RUN_FAILED", "INTERRUPTED"]
