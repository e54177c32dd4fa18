"""Host CPU and memory from /proc/cpuinfo, /sys/devices/system/{cpu,node} and /proc/meminfo.

The root directory is a parameter so tests run on fake trees. Counts fall back to the sysfs CPU topology
when /proc/cpuinfo lacks `physical id`/`core id` (ARM, some VMs).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ..schemas.hardware import CpuInfo

__all__ = ["read_cpu"]

_NODE = re.compile(r"node(\d+)")
_CPU = re.compile(r"cpu(\d+)")


def _read(path: Path) -> Optional[str]:
    """File text, or None when missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one key->value dict per logical CPU (blocks separated by blank lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip().lower()] = value.strip()
    if current:
        blocks.append(current)
    return [b for b in blocks if "processor" in b]


def _sys_topology(root: Path) -> tuple[set[str], set[tuple[str, str]], int]:
    """(packages, (package, core) pairs, logical CPUs) from /sys/devices/system/cpu/cpu*/topology."""
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    n = 0
    try:
        entries = list((root / "sys" / "devices" / "system" / "cpu").iterdir())
    except OSError:
        return packages, cores, 0
    for cpu in entries:
        if not _CPU.fullmatch(cpu.name):
            continue
        topo = cpu / "topology"
        pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        if pkg is None or core is None:
            continue
        n += 1
        packages.add(pkg.strip())
        cores.add((pkg.strip(), core.strip()))
    return packages, cores, n


def _model(blocks: list[dict[str, str]]) -> Optional[str]:
    """The CPU model name (x86 'model name', POWER 'cpu', ARM 'hardware'/'cpu part')."""
    for key in ("model name", "cpu", "hardware", "processor name"):
        for b in blocks:
            value = b.get(key)
            if value and not value.isdigit():
                return " ".join(value.split())
    return None


def _numa_nodes(root: Path) -> int:
    """Number of nodeN directories under /sys/devices/system/node (at least 1)."""
    try:
        names = [p.name for p in (root / "sys" / "devices" / "system" / "node").iterdir()]
    except OSError:
        return 1
    return max(1, sum(1 for n in names if _NODE.fullmatch(n)))


def _meminfo(root: Path) -> dict[str, int]:
    """/proc/meminfo values in bytes (the file says kB)."""
    out: dict[str, int] = {}
    for line in (_read(root / "proc" / "meminfo") or "").splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts and parts[0].isdecimal():
            unit = parts[1].lower() if len(parts) > 1 else ""
            out[key.strip()] = int(parts[0]) * (1024 if unit == "kb" else 1)
    return out


def read_cpu(root: str | os.PathLike[str] = "/", warnings: Optional[list[str]] = None) -> CpuInfo:
    """Sockets, physical cores, logical CPUs, NUMA nodes, model and RAM of the host under `root`.

    Args:
        root: filesystem root holding `proc/` and `sys/` ("/" on a real host, a fake tree in tests).
        warnings: if given, notes about unreadable sources are appended.

    Returns:
        A CpuInfo; values that cannot be read keep the schema defaults (1 socket/core/thread, 0 RAM)
        and add a warning.
    """
    base = Path(root)
    notes: list[str] = []
    text = _read(base / "proc" / "cpuinfo")
    blocks = _cpuinfo_blocks(text) if text else []
    sys_pkgs, sys_cores, sys_n = _sys_topology(base)
    threads = len(blocks) or sys_n
    pkgs = {b["physical id"] for b in blocks if "physical id" in b} or sys_pkgs
    cores = {(b["physical id"], b["core id"]) for b in blocks if "physical id" in b and "core id" in b} or sys_cores
    if not threads:
        notes.append("could not read /proc/cpuinfo or /sys/devices/system/cpu; CPU counts are defaults")
    mem = _meminfo(base)
    if "MemTotal" not in mem:
        notes.append("could not read MemTotal from /proc/meminfo; host RAM unknown")
    if warnings is not None:
        warnings.extend(notes)
    return CpuInfo(
        model=_model(blocks),
        sockets=max(1, len(pkgs)),
        cores=max(1, len(cores) or threads),
        threads=max(1, threads),
        numa_nodes=_numa_nodes(base),
        ram_bytes=mem.get("MemTotal", 0),
        ram_available_bytes=mem.get("MemAvailable"),
    )
