"""Parse the matrix printed by `nvidia-smi topo -m` (or `-mp`) into a TopoMatrix.

Real captures vary a lot: tabs or spaces, ANSI underline escapes around the header, GPU names run together
in the header, multi-word column names joined by single spaces, trailing empty tab fields, NIC columns
named `NIC#` (with a `NIC Legend:` block) or `mlx5_#`, `CPU Affinity` / `NUMA Affinity` / `GPU NUMA ID`
columns, old legends (`SOC`), no legend, and a second `topo -p2p` matrix pasted below. The device columns
are taken from the row labels (nvidia-smi prints one row per column, in column order), so a mangled
header does not matter; the header only names the extra columns.

Codes (nvidia-smi legend): X self, NV# a bonded set of # NVLinks, PIX at most one PCIe bridge, PXB several
bridges without the host bridge, PHB through a PCIe host bridge, NODE between host bridges in one NUMA
node, SYS (older name SOC) across the SMP interconnect between NUMA nodes.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Optional

from ..errors import UserError
from ..schemas.hardware import SWITCHED, LinkClass, joined
from ..schemas.probe import TopoLink, TopoMatrix

__all__ = ["TopoParseError", "parse_topo", "classify_token", "pcie_switch_groups", "LINK_RANK"]


class TopoParseError(UserError):
    """The text is not a `nvidia-smi topo -m` matrix the parser can read."""


# lower is closer; used to pick the closest NIC for a GPU
LINK_RANK: dict[LinkClass, int] = {
    LinkClass.SELF: 0,
    LinkClass.NVLINK: 1,
    LinkClass.PIX: 2,
    LinkClass.PXB: 3,
    LinkClass.PHB: 4,
    LinkClass.NODE: 5,
    LinkClass.SYS: 6,
    LinkClass.UNKNOWN: 7,
}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[@-_]?")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_GPU = re.compile(r"GPU\d+")
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_NV = re.compile(r"NV(\d+)")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_EXTRA_COLUMNS = re.compile(r"CPU\s+Affinity|NUMA\s+Affinity|GPU\s+NUMA\s+ID", re.IGNORECASE)
_DEFAULT_EXTRAS = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
_SIMPLE = {
    "PIX": LinkClass.PIX,
    "PXB": LinkClass.PXB,
    "PHB": LinkClass.PHB,
    "NODE": LinkClass.NODE,
    "SYS": LinkClass.SYS,
    "SOC": LinkClass.SYS,
}
_HINT = "pass the unmodified output of `nvidia-smi topo -m`"


def classify_token(token: str) -> tuple[LinkClass, int]:
    """Map one matrix cell (`NV12`, `PIX`, `SOC`...) to its LinkClass and NVLink count.

    Unknown tokens map to `LinkClass.UNKNOWN` with count 0; the caller decides whether to warn.
    """
    t = token.strip().upper()
    if t == "X":
        return LinkClass.SELF, 0
    if t in _SIMPLE:
        return _SIMPLE[t], 0
    m = _NV.fullmatch(t)
    if m:
        return LinkClass.NVLINK, int(m.group(1))
    return LinkClass.UNKNOWN, 0


def _clean(text: str) -> list[str]:
    """Strip ANSI escapes and control characters; split into lines."""
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return [_CTRL.sub("", line) for line in text.split("\n")]


def _cells(line: str) -> list[str]:
    """Split a matrix line into cells: by tab when it has tabs (keeping empty fields), else by spaces."""
    if "\t" not in line:
        return line.split()
    out: list[str] = []
    for part in line.split("\t"):
        words = part.split()
        if len(words) > 1:
            out.extend(words)  # mixed separators: "mlx5_1 CPU" inside one tab field
        else:
            out.append(part.strip())
    while out and out[0] == "":
        out.pop(0)
    return out


def _is_row(cells: list[str]) -> bool:
    """A matrix row: a device label followed by at least one cell."""
    return len(cells) >= 2 and bool(_LABEL.fullmatch(cells[0])) and not cells[0].endswith(":")


def _find_rows(lines: list[str]) -> tuple[int, list[tuple[str, list[str]]], list[str]]:
    """Locate the first matrix block: index of its first row, the rows, and warnings."""
    warnings: list[str] = []
    start = -1
    for i, line in enumerate(lines):
        cells = _cells(line)
        if _is_row(cells) and _GPU.fullmatch(cells[0]) and "X" in [c.upper() for c in cells[1:]]:
            start = i
            break
    if start < 0:
        raise TopoParseError(f"no GPU rows found (expected lines like 'GPU0  X  NV4 ...'); {_HINT}")
    rows: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for line in lines[start:]:
        cells = _cells(line)
        if not cells or not _is_row(cells):
            break
        if cells[0] in seen:
            warnings.append(f"row {cells[0]} repeats; a second matrix below the first was ignored")
            break
        seen.add(cells[0])
        rows.append((cells[0], cells[1:]))
    return start, rows, warnings


def _header(lines: list[str], start: int) -> Optional[str]:
    """The header line just above the first row, if it names GPU0."""
    for line in reversed(lines[:start]):
        if line.strip():
            return line if "GPU0" in line else None
    return None


def _columns(header: Optional[str], labels: list[str], warnings: list[str]) -> tuple[list[str], list[str]]:
    """Device columns and extra column names (CPU Affinity...) from the header and the row labels."""
    if header is None:
        warnings.append("no header line above the matrix; columns taken from the row labels")
        return labels, []
    extras = [" ".join(m.group(0).split()) for m in _EXTRA_COLUMNS.finditer(header)]
    tokens = _EXTRA_COLUMNS.sub(" ", header).split()
    if tokens == labels or "".join(tokens) == "".join(labels):
        return labels, extras
    if set(labels) <= set(tokens) and len(set(tokens)) == len(tokens):
        missing = [t for t in tokens if t not in labels]
        warnings.append(f"columns without a row: {', '.join(missing)} (truncated capture?)")
        return tokens, extras
    warnings.append("header does not match the row labels; columns taken from the row labels")
    return labels, extras


def _fit_extras(cells: list[str], n: int) -> list[str]:
    """Drop empty padding fields (leftmost first) until the extra cells match the n extra columns."""
    cells = list(cells)
    i = 0
    while len(cells) > n and i < len(cells):
        if cells[i] == "":
            cells.pop(i)
        else:
            i += 1
    return cells[:n]


def _numa(value: str, label: str, warnings: list[str]) -> Optional[int]:
    """A NUMA id cell: an integer, or None for empty / N/A / anything else (with a warning)."""
    v = value.strip()
    if v.isdecimal():  # not isdigit: superscripts pass it and int() refuses them
        return int(v)
    if v and v.upper() != "N/A":
        warnings.append(f"{label}: unreadable NUMA id {v!r}, treated as unknown")
    return None


def parse_topo(text: str) -> TopoMatrix:
    """Parse the text of `nvidia-smi topo -m` (or `topo -mp`) into a TopoMatrix.

    Args:
        text: the command's output, as printed or pasted (ANSI escapes, tabs or spaces, legends and a
            trailing `topo -p2p` matrix are all accepted).

    Returns:
        The matrix: GPU and NIC labels in column order, one TopoLink per unordered device pair,
        CPU/NUMA affinity per device, the NIC legend, and warnings (unknown link codes, header oddities,
        asymmetric cells).

    Raises:
        TopoParseError: the text holds no recognisable matrix (no GPU row, or rows too short).
    """
    if not isinstance(text, str):
        raise TopoParseError(f"topology text must be a string, got {type(text).__name__}; {_HINT}")
    lines = _clean(text)
    start, rows, warnings = _find_rows(lines)
    labels = [label for label, _ in rows]
    columns, extras = _columns(_header(lines, start), labels, warnings)
    gpus = [c for c in columns if _GPU.fullmatch(c)]
    if not gpus:
        raise TopoParseError(f"no GPU columns found in the matrix; {_HINT}")
    ncol = len(columns)
    extra_names = extras or _DEFAULT_EXTRAS
    cell: dict[tuple[str, str], str] = {}
    cpu_affinity: dict[str, str] = {}
    numa_affinity: dict[str, Optional[int]] = {}
    gpu_numa_id: dict[str, Optional[int]] = {}
    for label, cells in rows:
        if label not in columns:
            warnings.append(f"row {label} has no column; ignored")
            continue
        if len(cells) < len(gpus):
            raise TopoParseError(
                f"row {label} has {len(cells)} cells but the matrix has {len(gpus)} GPU columns; {_HINT}"
            )
        if len(cells) < ncol:
            warnings.append(f"row {label} is short ({len(cells)} of {ncol} cells)")
        for col, value in zip(columns, cells[:ncol]):
            cell[(label, col)] = value
        own = cell.get((label, label), "")
        if own.upper() != "X":
            warnings.append(f"row {label}: expected X on the diagonal, found {own!r}")
        for name, value in zip(extra_names, _fit_extras(cells[ncol:], len(extra_names))):
            key = name.upper().split()
            if key == ["CPU", "AFFINITY"] and value and value.upper() != "N/A":
                cpu_affinity[label] = value
            elif key == ["NUMA", "AFFINITY"] and (value or _GPU.fullmatch(label)):
                numa_affinity[label] = _numa(value, label, warnings)
            elif key == ["GPU", "NUMA", "ID"] and (value or _GPU.fullmatch(label)):
                gpu_numa_id[label] = _numa(value, label, warnings)
    links = _links(columns, cell, warnings)
    nic_names = {}
    for line in lines:
        m = _NIC_LEGEND.fullmatch(line)
        if m:
            nic_names[m.group(1)] = m.group(2)
    return TopoMatrix(
        gpus=gpus,
        nics=[c for c in columns if c not in gpus],
        nic_names=nic_names,
        links=links,
        cpu_affinity=cpu_affinity,
        numa_affinity=numa_affinity,
        gpu_numa_id=gpu_numa_id,
        warnings=warnings,
    )


def _links(columns: list[str], cell: dict[tuple[str, str], str], warnings: list[str]) -> list[TopoLink]:
    """One TopoLink per unordered pair that has a cell; warn on unknown codes and asymmetry."""
    links: list[TopoLink] = []
    unknown: dict[str, str] = {}
    for i, a in enumerate(columns):
        for b in columns[i + 1:]:
            fwd, back = cell.get((a, b), ""), cell.get((b, a), "")
            token = fwd or back
            if not token:
                continue
            if fwd and back and fwd.upper() != back.upper():
                warnings.append(f"{a}-{b} reads {fwd!r} but {b}-{a} reads {back!r}; using {fwd!r}")
            klass, count = classify_token(token)
            if klass is LinkClass.SELF:
                warnings.append(f"{a}-{b} is marked X (self) off the diagonal; treated as unknown")
                klass = LinkClass.UNKNOWN
            elif klass is LinkClass.UNKNOWN:
                unknown.setdefault(token, f"{a}-{b}")
            links.append(TopoLink(a=a, b=b, token=token, link_class=klass, nvlink_count=count))
    for token, where in unknown.items():
        warnings.append(f"unknown link code {token!r} (first at {where}) treated as unknown")
    return links


def pcie_switch_groups(m: TopoMatrix) -> list[Optional[int]]:
    """Per GPU of a parsed matrix, the PCIe switch tree it sits behind (the lowest GPU index of the tree), or None
    where it shares none.

    Two GPUs share a tree when the matrix joins them by PIX or PXB (PCIe switches, no host bridge), or when both
    reach one NIC that way: an NVLink machine's matrix prints NV# between its GPUs, which hides their PCIe path, but
    its NIC columns still show it (DGX A100: GPU0 and GPU1 are PXB to the same two ConnectX ports)."""
    n = len(m.gpus)
    pos = {g: i for i, g in enumerate(m.gpus)}
    pairs: list[tuple[int, int]] = []
    near: dict[str, list[int]] = {}  # NIC -> the GPUs that reach it through switches only
    for link in m.links:
        if link.link_class not in SWITCHED:
            continue
        a, b = pos.get(link.a), pos.get(link.b)
        if a is not None and b is not None:
            pairs.append((a, b))
        elif a is not None:
            near.setdefault(link.b, []).append(a)
        elif b is not None:
            near.setdefault(link.a, []).append(b)
    pairs += [(gpus[0], g) for gpus in near.values() for g in gpus[1:]]
    tree = joined(range(n), pairs)
    size = Counter(tree.values())
    return [tree[i] if size[tree[i]] > 1 else None for i in range(n)]
