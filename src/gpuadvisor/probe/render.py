"""Render a ProbeReport (and optional measurements and health findings) through the shared rich layer.

Every section fits the console width: tables wrap their cells, the GPU x GPU link matrix turns into a pair
list when it is wider than the console.
"""
from __future__ import annotations

from typing import Iterable, Optional

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

from ..cli.console import Column, Group, Text, block, gpu_label, make_table, to_text
from ..schemas.hardware import LinkClass
from ..schemas.measure import MeasureReport
from ..schemas.probe import GpuInfo, ProbeReport, TopoMatrix
from .topo import LINK_RANK, pcie_switch_groups

__all__ = ["render_report", "report_view"]

_GIB = 1024**3


def _wrap(text: str, indent: str = "  ", bullet: str = "- ") -> list[RenderableType]:
    """One bulleted paragraph; continuation lines hang under the text, not under the bullet."""
    if not bullet:
        return [block([Text(text)], indent=len(indent))]
    from rich.table import Table

    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(bullet, Text(text))
    return [_indent(grid, len(indent))]


def _gib(n: Optional[int]) -> str:
    """Bytes as '47.5 GiB', '-' when unknown."""
    return "-" if n is None else f"{n / _GIB:.1f} GiB"


def _opt(v: object) -> str:
    """A value or '-'."""
    return "-" if v is None else str(v)


def _pcie(gen: Optional[int], width: Optional[int]) -> str:
    """'Gen4 x16', parts unknown shown as '?'."""
    if gen is None and width is None:
        return "-"
    return f"Gen{gen if gen else '?'} x{width if width else '?'}"


def _num(title: str) -> Column:
    return Column(title, justify="right", no_wrap=True)


def _pcie_link(g: GpuInfo) -> str:
    """The PCIe link now and, when it is below the card's maximum (idle GPUs train down), the maximum after a
    slash: 'Gen5 x16', 'Gen1/4 x16' (the generation alone below), 'Gen4 x8/Gen4 x16'."""
    now, top = _pcie(g.pcie_gen, g.pcie_width), _pcie(g.pcie_gen_max, g.pcie_width_max)
    if top in (now, "-"):
        return now
    if g.pcie_gen and g.pcie_gen_max and g.pcie_width and g.pcie_width == g.pcie_width_max:
        return f"Gen{g.pcie_gen}/{g.pcie_gen_max} x{g.pcie_width}"
    return f"{now}/{top}"


def _gpu_rows(gpus: list[GpuInfo]) -> list[RenderableType]:
    """The GPU table, then the fields NVML did not give."""
    table = make_table(_num("#"), Column("name", overflow="fold"), _num("memory"), _num("free"),
                       Column("CC", no_wrap=True), Column("PCIe now/max", no_wrap=True),
                       Column("NVLink", no_wrap=True), Column("MIG", no_wrap=True), Column("NUMA", no_wrap=True))
    notes: list[RenderableType] = []
    for g in gpus:
        nvl = "-" if g.nvlinks_total is None else f"{g.nvlinks_active}/{g.nvlinks_total}"
        mig = "-" if g.mig_enabled is None else ("on" if g.mig_enabled else "off")
        table.add_row(str(g.index), gpu_label(g.name), _gib(g.memory_total_bytes), _gib(g.memory_free_bytes),
                      _opt(g.compute_capability), _pcie_link(g), nvl, mig, _opt(g.numa_node))
        if g.missing:
            fields = ", ".join(f"{m.field} ({m.reason})" for m in g.missing)
            notes.extend(_wrap(f"GPU{g.index} fields NVML did not give: {fields}", bullet=""))
    return [_indent(table), *notes]


def _indent(r: RenderableType, n: int = 2) -> RenderableType:
    from rich.padding import Padding

    return Padding(r, (0, 0, 0, n))


class _Matrix:
    """The GPU x GPU link matrix (tokens as printed); a pair list when the console is too narrow for it."""

    def __init__(self, topo: TopoMatrix):
        self.topo = topo

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        topo = self.topo
        cell = {(lk.a, lk.b): lk.token for lk in topo.links}

        def tok(a: str, b: str) -> str:
            return "X" if a == b else (cell.get((a, b)) or cell.get((b, a)) or "?")

        col = max([6, *(len(g) + 1 for g in topo.gpus)])
        if 2 + col * (len(topo.gpus) + 1) > options.max_width:
            pairs = [f"{a}-{b} {tok(a, b)}" for i, a in enumerate(topo.gpus) for b in topo.gpus[i + 1:]]
            yield from _wrap(", ".join(pairs), bullet="")
            return
        lines = ["  " + " " * col + "".join(f"{g:<{col}}" for g in topo.gpus)]
        lines += [f"  {a:<{col}}" + "".join(f"{tok(a, b):<{col}}" for b in topo.gpus) for a in topo.gpus]
        yield block([line.rstrip() for line in lines])


def _topo_nics(topo: TopoMatrix) -> list[RenderableType]:
    """Per topology NIC: its closest class and the GPUs at that class."""
    cls = {(lk.a, lk.b): lk.link_class for lk in topo.links}
    out: list[RenderableType] = []
    for n in topo.nics:
        found = [(g, cls.get((g, n)) or cls.get((n, g))) for g in topo.gpus]
        known = [(g, c) for g, c in found if c is not None and c is not LinkClass.UNKNOWN]
        name = f"{n} ({topo.nic_names[n]})" if n in topo.nic_names else n
        if not known:
            out.extend(_wrap(f"{name}: no GPU link known", bullet=""))
            continue
        best = min(LINK_RANK[c] for _, c in known)
        gpus = [g for g, c in known if LINK_RANK[c] == best]
        klass = next(c for _, c in known if LINK_RANK[c] == best)
        out.extend(_wrap(f"{name}: {klass.value} to {', '.join(gpus)}", bullet=""))
    return out


def _speed(v: Optional[float]) -> str:
    """Gbit/s as '100 Gb/s', '-' when unknown."""
    return "-" if v is None else f"{v:g} Gb/s"


def _nic_rows(report: ProbeReport) -> list[RenderableType]:
    """The NIC table."""
    table = make_table(Column("name", overflow="fold"), Column("kind", overflow="fold"), _num("speed"), _num("mtu"),
                       Column("state", overflow="fold"), Column("NUMA", no_wrap=True),
                       Column("driver", overflow="fold"), Column("closest GPUs", overflow="fold"))
    for n in report.nics:
        closest = ",".join(str(i) for i in n.closest_devices) or "-"
        table.add_row(n.name, n.kind, _speed(n.speed_gbit_per_s), _opt(n.mtu), _opt(n.operstate), _opt(n.numa_node),
                      _opt(n.driver), closest)
    return [_indent(table)]


def _cpu_line(report: ProbeReport) -> list[RenderableType]:
    """CPU and RAM in one paragraph."""
    c = report.cpu
    avail = f" ({_gib(c.ram_available_bytes)} available)" if c.ram_available_bytes is not None else ""
    text = (f"{c.model or 'unknown CPU'}: {c.sockets} socket(s), {c.cores} cores, {c.threads} threads, "
            f"{c.numa_nodes} NUMA node(s); RAM {_gib(c.ram_bytes) if c.ram_bytes else 'unknown'}{avail}")
    return _wrap(text, bullet="")


def _measure_rows(m: MeasureReport) -> list[RenderableType]:
    """Collective, GEMM and copy measurements, one table row each."""
    out: list[RenderableType] = _wrap(f"{m.device_kind} x{m.world_size} on {m.hostname}"
                                      + (f" (torch {m.torch_version})" if m.torch_version else ""), bullet="")
    table = make_table(Column("measurement", overflow="fold"), Column("on", overflow="fold"),
                       _num("result"), Column("detail", overflow="fold"))
    for c in m.collectives:
        bw = "-" if c.busbw_gb_per_s is None else f"{c.busbw_gb_per_s:.2f} GB/s"
        alpha = "-" if c.alpha_us is None else f"{c.alpha_us:.1f} us"
        table.add_row(c.op, f"{c.backend}, {c.world_size} ranks, {c.nodes} node(s)", f"busbw {bw}",
                      f"alpha {alpha}")
    for g in m.matmul:
        table.add_row("matmul", f"{g.device} {g.device_name}", f"best {g.best_tflops:.2f} TFLOP/s", g.dtype)
    for cp in m.copies:
        table.add_row(f"copy {cp.direction}", "pinned" if cp.pinned else "pageable", f"{cp.gb_per_s:.2f} GB/s",
                      _gib(cp.size_bytes))
    if m.collectives or m.matmul or m.copies:
        out.append(_indent(table))
    out.extend(x for w in m.warnings for x in _wrap(w))
    return out


def _section(title: str, body: Iterable[RenderableType]) -> list[RenderableType]:
    """A titled block."""
    return [Text(""), Text(title, style="bold"), *body]


def report_view(report: ProbeReport, *, measured: Optional[MeasureReport] = None,
                health: Optional[list[str]] = None) -> RenderableType:
    """A probe report as a rich renderable: host line, GPUs, links, NICs, CPU/RAM, measurements, health, warnings.

    Args:
        report: what the inventory probe found.
        measured: optional measurements (`probe --measure`), shown under "Measured".
        health: optional findings, shown under "Health" (an empty list says "no findings").
    """
    head = f"Host {report.hostname}"
    if report.driver_version:
        head += f"   driver {report.driver_version}"
    if report.cuda_version:
        head += f"   CUDA {report.cuda_version}"
    parts: list[RenderableType] = [Text(head, style="bold")]
    if report.gpus:
        parts += _section(f"GPUs ({len(report.gpus)})", _gpu_rows(report.gpus))
    else:
        parts += _section("GPUs", _wrap(f"no GPU found: {report.nvml_error or 'NVML listed none'}", bullet=""))
    if report.p2p:
        def yn(v: Optional[bool]) -> str:
            return "?" if v is None else ("yes" if v else "no")
        items = [f"{s.a}-{s.b} read {yn(s.read)} write {yn(s.write)}" for s in report.p2p]
        parts += _section("Peer-to-peer (NVML)", _wrap("; ".join(items), bullet=""))
    topo = report.topology
    if topo is not None:
        parts += _section("Links (nvidia-smi topo -m)", [_Matrix(topo)])
        if topo.nics:
            parts += _section("Topology NICs (closest GPUs)", _topo_nics(topo))
        shared: dict[int, list[str]] = {}
        for i, tree in enumerate(pcie_switch_groups(topo)):
            if tree is not None:
                shared.setdefault(tree, []).append(topo.gpus[i])
        if shared:
            parts += _section("PCIe switches (GPUs that share one uplink to host RAM)",
                              _wrap("; ".join(", ".join(g) for g in shared.values()), bullet=""))
    elif report.topology_error:
        parts += _section("Links", _wrap(f"no topology: {report.topology_error}", bullet=""))
    parts += _section("NICs", _nic_rows(report) if report.nics else _wrap("none found", bullet=""))
    parts += _section("CPU / RAM", _cpu_line(report))
    if measured is not None:
        parts += _section("Measured", _measure_rows(measured))
    if health is not None:
        parts += _section("Health", [x for f in health for x in _wrap(f)] or _wrap("no findings", bullet=""))
    notes = list(report.warnings) + (list(topo.warnings) if topo is not None else [])
    if notes:
        parts += _section("Warnings", [x for w in notes for x in _wrap(w)])
    return Group(*parts)


def render_report(report: ProbeReport, *, measured: Optional[MeasureReport] = None,
                  health: Optional[list[str]] = None, width: Optional[int] = None) -> str:
    """report_view as plain text, `width` columns wide (default: the terminal's or COLUMNS); newline-terminated."""
    return to_text(report_view(report, measured=measured, health=health), width)
