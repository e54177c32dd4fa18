"""Render a ProbeReport (and optional measurements and health findings) as a plain-text table, 100 columns wide."""
from __future__ import annotations

import textwrap
from typing import Iterable, Optional

from ..schemas.hardware import LinkClass
from ..schemas.measure import MeasureReport
from ..schemas.probe import GpuInfo, ProbeReport, TopoMatrix
from .topo import LINK_RANK

__all__ = ["render_report", "WIDTH"]

WIDTH = 100
_GIB = 1024**3


def _wrap(text: str, indent: str = "  ", bullet: str = "- ") -> list[str]:
    """One bulleted paragraph wrapped to WIDTH."""
    return textwrap.wrap(text, WIDTH, initial_indent=indent + bullet, subsequent_indent=indent + " " * len(bullet),
                         break_long_words=True, break_on_hyphens=False) or [indent + bullet]


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


def _gpu_rows(gpus: list[GpuInfo]) -> list[str]:
    """The GPU table."""
    head = f"  {'#':>2}  {'name':<26} {'memory':>10} {'free':>10}  {'CC':<4} {'PCIe now':<10} {'PCIe max':<10}" \
           f" {'NVLink':<7} {'MIG':<4} NUMA"
    lines = [head]
    for g in gpus:
        nvl = "-" if g.nvlinks_total is None else f"{g.nvlinks_active}/{g.nvlinks_total}"
        mig = "-" if g.mig_enabled is None else ("on" if g.mig_enabled else "off")
        lines.append(
            f"  {g.index:>2}  {(g.name or '?')[:26]:<26} {_gib(g.memory_total_bytes):>10} {_gib(g.memory_free_bytes):>10}"
            f"  {_opt(g.compute_capability):<4} {_pcie(g.pcie_gen, g.pcie_width):<10}"
            f" {_pcie(g.pcie_gen_max, g.pcie_width_max):<10} {nvl:<7} {mig:<4} {_opt(g.numa_node)}"
        )
        if g.missing:
            fields = ", ".join(f"{m.field} ({m.reason})" for m in g.missing)
            lines.extend(_wrap(f"GPU{g.index} fields NVML did not give: {fields}", indent="      ", bullet=""))
    return lines


def _matrix(topo: TopoMatrix) -> list[str]:
    """The GPU x GPU link matrix (tokens as printed), or a pair list when too wide."""
    n = len(topo.gpus)
    cell = {(lk.a, lk.b): lk.token for lk in topo.links}
    if 8 + 6 * n > WIDTH:
        pairs = [f"{a}-{b} {cell.get((a, b)) or cell.get((b, a)) or '?'}"
                 for i, a in enumerate(topo.gpus) for b in topo.gpus[i + 1:]]
        return _wrap(", ".join(pairs), bullet="")
    lines = ["  " + " " * 6 + "".join(f"{g:<6}" for g in topo.gpus)]
    for a in topo.gpus:
        row = "".join(f"{'X' if a == b else (cell.get((a, b)) or cell.get((b, a)) or '?'):<6}" for b in topo.gpus)
        lines.append(f"  {a:<6}{row}")
    return lines


def _topo_nics(topo: TopoMatrix) -> list[str]:
    """Per topology NIC: its closest class and the GPUs at that class."""
    cls = {(lk.a, lk.b): lk.link_class for lk in topo.links}
    out = []
    for n in topo.nics:
        found = [(g, cls.get((g, n)) or cls.get((n, g))) for g in topo.gpus]
        known = [(g, c) for g, c in found if c is not None and c is not LinkClass.UNKNOWN]
        name = f"{n} ({topo.nic_names[n]})" if n in topo.nic_names else n
        if not known:
            out.append(f"  {name}: no GPU link known")
            continue
        best = min(LINK_RANK[c] for _, c in known)
        gpus = [g for g, c in known if LINK_RANK[c] == best]
        klass = next(c for _, c in known if LINK_RANK[c] == best)
        out.extend(_wrap(f"{name}: {klass.value} to {', '.join(gpus)}", bullet=""))
    return out


def _speed(v: Optional[float]) -> str:
    """Gbit/s as '100 Gb/s', '-' when unknown."""
    return "-" if v is None else f"{v:g} Gb/s"


def _nic_rows(report: ProbeReport) -> list[str]:
    """The NIC table."""
    lines = [f"  {'name':<18} {'kind':<10} {'speed':>10} {'mtu':>6}  {'state':<8} {'NUMA':<4}  {'driver':<12} closest GPUs"]
    for n in report.nics:
        closest = ",".join(str(i) for i in n.closest_devices) or "-"
        lines.append(
            f"  {n.name[:18]:<18} {n.kind:<10} {_speed(n.speed_gbit_per_s):>10} {_opt(n.mtu):>6}  "
            f"{_opt(n.operstate)[:8]:<8} {_opt(n.numa_node):<4}  {_opt(n.driver)[:12]:<12} {closest}"
        )
    return lines


def _cpu_line(report: ProbeReport) -> list[str]:
    """CPU and RAM in one or two lines."""
    c = report.cpu
    avail = f" ({_gib(c.ram_available_bytes)} available)" if c.ram_available_bytes is not None else ""
    text = (f"{c.model or 'unknown CPU'}: {c.sockets} socket(s), {c.cores} cores, {c.threads} threads, "
            f"{c.numa_nodes} NUMA node(s); RAM {_gib(c.ram_bytes) if c.ram_bytes else 'unknown'}{avail}")
    return _wrap(text, bullet="")


def _measure_rows(m: MeasureReport) -> list[str]:
    """Collective, GEMM and copy measurements, one line each."""
    lines = [f"  {m.device_kind} x{m.world_size} on {m.hostname}" + (f" (torch {m.torch_version})" if m.torch_version else "")]
    for c in m.collectives:
        bw = "-" if c.busbw_gb_per_s is None else f"{c.busbw_gb_per_s:.2f} GB/s"
        alpha = "-" if c.alpha_us is None else f"{c.alpha_us:.1f} us"
        lines.append(f"  {c.op:<15} {c.backend:<5} {c.world_size:>3} ranks {c.nodes} node(s)  busbw {bw:>12}  alpha {alpha}")
    for g in m.matmul:
        lines.append(f"  matmul {g.device:<8} {g.device_name[:30]:<30} {g.dtype:<9} best {g.best_tflops:.2f} TFLOP/s")
    for cp in m.copies:
        lines.append(f"  copy {cp.direction} {'pinned' if cp.pinned else 'pageable':<8} {_gib(cp.size_bytes):>10}  {cp.gb_per_s:.2f} GB/s")
    lines.extend(line for w in m.warnings for line in _wrap(w))
    return lines


def _section(title: str, body: Iterable[str]) -> list[str]:
    """A titled block."""
    return ["", title, *body]


def render_report(report: ProbeReport, *, measured: Optional[MeasureReport] = None,
                  health: Optional[list[str]] = None) -> str:
    """Render a probe report as a human-readable plain-text table no wider than 100 columns.

    Args:
        report: what the inventory probe found.
        measured: optional measurements (`probe --measure`), shown under "Measured".
        health: optional findings, shown under "Health" (an empty list says "no findings").

    Returns:
        The text, newline-terminated.
    """
    head = f"Host {report.hostname}"
    if report.driver_version:
        head += f"   driver {report.driver_version}"
    if report.cuda_version:
        head += f"   CUDA {report.cuda_version}"
    lines = [head]
    if report.gpus:
        lines += _section(f"GPUs ({len(report.gpus)})", _gpu_rows(report.gpus))
    else:
        lines += _section("GPUs", _wrap(f"no GPU found: {report.nvml_error or 'NVML listed none'}", bullet=""))
    if report.p2p:
        def yn(v: Optional[bool]) -> str:
            return "?" if v is None else ("yes" if v else "no")
        items = [f"{s.a}-{s.b} read {yn(s.read)} write {yn(s.write)}" for s in report.p2p]
        lines += _section("Peer-to-peer (NVML)", _wrap("; ".join(items), bullet=""))
    topo = report.topology
    if topo is not None:
        lines += _section("Links (nvidia-smi topo -m)", _matrix(topo))
        if topo.nics:
            lines += _section("Topology NICs (closest GPUs)", _topo_nics(topo))
    elif report.topology_error:
        lines += _section("Links", _wrap(f"no topology: {report.topology_error}", bullet=""))
    lines += _section("NICs", _nic_rows(report) if report.nics else ["  none found"])
    lines += _section("CPU / RAM", _cpu_line(report))
    if measured is not None:
        lines += _section("Measured", _measure_rows(measured))
    if health is not None:
        lines += _section("Health", [x for f in health for x in _wrap(f)] or ["  no findings"])
    notes = list(report.warnings) + (list(topo.warnings) if topo is not None else [])
    if notes:
        lines += _section("Warnings", [x for w in notes for x in _wrap(w)])
    return "\n".join(line.rstrip()[:WIDTH] for line in lines) + "\n"
