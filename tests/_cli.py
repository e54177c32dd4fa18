"""Helpers of the CLI tests: a command's one-line error."""
from __future__ import annotations


def one_line(err: str, *needles: str) -> str:
    """The single `gpuadvisor: error: ...` line of stderr, holding every needle (the test fails otherwise)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuadvisor: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]
