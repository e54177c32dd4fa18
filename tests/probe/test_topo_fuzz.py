"""Fuzz the topology parser: random text and mutated real captures may only raise TopoParseError."""
from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor.probe.topo import TopoParseError, parse_topo
from gpuadvisor.schemas.probe import TopoMatrix

CAPTURES = [p.read_text() for p in sorted((Path(__file__).resolve().parents[1] / "fixtures" / "topo").glob("*.txt"))]
TOKENS = ["GPU0", "GPU1", "GPU12", "NIC0", "mlx5_3", " X ", "X", "NV4", "NV", "PIX", "PXB", "PHB", "NODE", "SYS",
          "SOC", "N/A", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "\x1b[4m", "\x1b[0m", "Legend:", "NIC0: mlx5_0",
          "0-7", "3", "\t", " ", "\n", "\r\n", "", "\x00", "é", "GPU0GPU1"]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_typed_error(text: str) -> None:
    """Parsing returns a valid TopoMatrix or raises TopoParseError, nothing else."""
    try:
        m = parse_topo(text)
    except TopoParseError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(m, TopoMatrix) and m.gpus
    assert all(lk.a != lk.b for lk in m.links)


@FAST
@given(st.text(max_size=400))
def test_random_text(text):
    parse_or_typed_error(text)


@FAST
@given(st.lists(st.sampled_from(TOKENS), max_size=120))
def test_random_token_soup(tokens):
    parse_or_typed_error("".join(tokens))


@st.composite
def mutated_capture(draw):
    """A real capture with a few character-level or line-level edits."""
    text = draw(st.sampled_from(CAPTURES))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "drop_line", "dup_line", "swap_lines", "cut"]))
        lines = text.split("\n")
        if kind in ("drop_line", "dup_line", "swap_lines") and len(lines) > 1:
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if kind == "drop_line":
                del lines[i]
            elif kind == "dup_line":
                lines.insert(j, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        pos = draw(st.integers(0, max(0, len(text) - 1)))
        if kind == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 20)):]
        elif kind == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos:]
        elif kind == "replace":
            text = text[:pos] + draw(st.text(min_size=1, max_size=5)) + text[pos + 1:]
        else:
            text = text[:pos]
    return text


@FAST
@given(mutated_capture())
def test_mutated_real_captures(text):
    parse_or_typed_error(text)


def test_unmutated_captures_all_parse():
    for text in CAPTURES:
        assert parse_topo(text).gpus


def test_a_superscript_numa_id_is_unreadable_not_a_crash():
    """Found by test_mutated_real_captures: '¹' passes str.isdigit() and int() refuses it. A NUMA cell of one is
    read as unknown with a warning (str.isdecimal), as any other unreadable id."""
    for text in (t for t in CAPTURES if "NUMA Affinity" in t):
        lines = text.split("\n")
        row = next((i for i, ln in enumerate(lines) if ln.startswith("GPU0") and ln.rstrip()[-1:].isdecimal()), None)
        if row is None:
            continue
        lines[row] = lines[row].rstrip()[:-1] + "¹"
        m = parse_topo("\n".join(lines))
        assert m.gpus and any("unreadable NUMA id '¹'" in w for w in m.warnings), m.warnings
        return
    raise AssertionError("no capture ends its GPU0 row with a NUMA id")
