"""Network interfaces from sysfs: Ethernet/IPoIB netdevs (/sys/class/net) and RDMA ports (/sys/class/infiniband).

Speeds in /sys/class/net/*/speed are Mb/s; -1, 65535 and 4294967295 (and an unreadable file, which is what a
down link gives) mean unknown. Virtual interfaces (veth, bridges, docker0...) report a nominal speed that says
nothing about the wire (a tc-shaped veth still says 10000), so their speed is left unknown with a warning:
measure them instead. The root directory is a parameter so tests run on fake trees.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ..schemas.bounds import MAX_LINK_GBIT_PER_S
from ..schemas.hardware import Nic

__all__ = ["read_nics", "rdma_netdevs", "virtual_netdevs", "SPEED_SENTINELS_MBPS"]

SPEED_SENTINELS_MBPS = frozenset({-1, 0, 65535, 4294967295})
_ARPHRD_INFINIBAND = 32
_ARPHRD_LOOPBACK = 772
_IFF_LOOPBACK = 0x8
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def _read(path: Path) -> Optional[str]:
    """A sysfs file's stripped text, or None if missing/unreadable/a directory/a broken link."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except (OSError, ValueError):
        return None


def _int(text: Optional[str], base: int = 10) -> Optional[int]:
    """Parse an integer sysfs value, None when absent or malformed."""
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def _link_name(path: Path) -> Optional[str]:
    """Basename of a symlink's target (device/driver -> .../drivers/mlx5_core), None if not a link."""
    try:
        return os.path.basename(os.readlink(path)) or None
    except OSError:
        return None


def _numa(device: Path) -> Optional[int]:
    """device/numa_node, None for -1 (no affinity reported) or unreadable."""
    node = _int(_read(device / "numa_node"))
    return node if node is not None and node >= 0 else None


def _is_virtual(entry: Path) -> bool:
    """A netdev with no backing device, or one that lives under /sys/devices/virtual."""
    try:
        target = os.readlink(entry)
    except OSError:
        target = ""
    return "/devices/virtual/" in target or not (entry / "device").exists()


def _speed_gbit(text: Optional[str]) -> Optional[float]:
    """Mb/s text -> Gbit/s, None for sentinels and junk."""
    mbps = _int(text)
    if mbps is None or mbps in SPEED_SENTINELS_MBPS or mbps <= 0 or mbps / 1000.0 > MAX_LINK_GBIT_PER_S:
        return None
    return mbps / 1000.0


def _netdev(entry: Path, virtual_names: list[str]) -> Nic:
    """One /sys/class/net/<name> entry as a Nic; virtual interfaces are added to `virtual_names`."""
    name = entry.name
    arptype = _int(_read(entry / "type"))
    flags = _int(_read(entry / "flags"), 16)
    loopback = name == "lo" or arptype == _ARPHRD_LOOPBACK or bool(flags is not None and flags & _IFF_LOOPBACK)
    virtual = not loopback and _is_virtual(entry)
    raw_speed = _read(entry / "speed")
    speed = None if loopback or virtual else _speed_gbit(raw_speed)
    if virtual:
        virtual_names.append(f"{name} ({raw_speed} Mb/s)" if _speed_gbit(raw_speed) else name)
    kind = "loopback" if loopback else "infiniband" if arptype == _ARPHRD_INFINIBAND else "ethernet"
    device = entry / "device"
    return Nic(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        speed_gbit_per_s=speed,
        mtu=_int(_read(entry / "mtu")),
        driver=_link_name(device / "driver"),
        operstate=_read(entry / "operstate") or None,
        numa_node=None if virtual or loopback else _numa(device),
    )


def _rate_gbit(text: Optional[str]) -> Optional[float]:
    """'200 Gb/sec (4X HDR)' -> 200.0; None for junk or 0."""
    if not text:
        return None
    m = _RATE.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return value if 0 < value <= MAX_LINK_GBIT_PER_S else None


def _state(text: Optional[str]) -> Optional[str]:
    """'4: ACTIVE' -> 'active'."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip().lower() or None


def _ib_ports(dev: Path) -> list[Nic]:
    """The ports of one RDMA device (/sys/class/infiniband/<dev>/ports/<n>)."""
    ports_dir = dev / "ports"
    try:
        ports = sorted((p for p in ports_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []
    out = []
    driver = _link_name(dev / "device" / "driver")
    # an AWS Elastic Fabric Adapter (efa_0, driver efa) reports no InfiniBand or Ethernet link layer
    efa = driver == "efa" or dev.name.startswith("efa")
    for port in ports:
        layer = (_read(port / "link_layer") or "").lower()
        kind = ("efa" if efa else "infiniband" if layer == "infiniband" else "roce" if layer == "ethernet"
                else "unknown")
        name = dev.name if len(ports) == 1 else f"{dev.name}:{port.name}"
        out.append(Nic(
            name=name,
            kind=kind,  # type: ignore[arg-type]
            speed_gbit_per_s=_rate_gbit(_read(port / "rate")),
            driver=driver,
            operstate=_state(_read(port / "state")),
            numa_node=_numa(dev / "device"),
        ))
    return out


def _listdir(path: Path) -> list[Path]:
    """Sorted entries of a directory, [] if it does not exist or cannot be read."""
    try:
        return sorted(path.iterdir(), key=lambda p: p.name)
    except OSError:
        return []


def read_nics(root: str | os.PathLike[str] = "/", warnings: Optional[list[str]] = None) -> list[Nic]:
    """All network interfaces under `<root>/sys/class/net` and RDMA ports under `<root>/sys/class/infiniband`.

    Args:
        root: filesystem root holding `sys/` ("/" on a real host, a fake tree in tests).
        warnings: if given, notes are appended (virtual interfaces whose speed is only nominal).

    Returns:
        Netdevs first (sorted by name, loopback included with kind "loopback"), then one Nic per RDMA port
        (kind "infiniband", "roce" or "efa", named `mlx5_0`, or `mlx5_0:2` when the device has several ports).
        Unknown or sentinel values are None; nothing here raises on odd trees.
    """
    virtual: list[str] = []
    base = Path(root) / "sys" / "class"
    nics = [_netdev(entry, virtual) for entry in _listdir(base / "net")]
    for dev in _listdir(base / "infiniband"):
        nics.extend(_ib_ports(dev))
    if warnings is not None and virtual:
        warnings.append(
            "virtual interfaces have no real link speed in /sys (speed left unknown; measure with "
            f"`gpuadvisor probe --measure`): {', '.join(virtual)}"
        )
    return nics


def rdma_netdevs(root: str | os.PathLike[str] = "/") -> dict[str, list[str]]:
    """RDMA device -> the netdevs on the same PCI function (mlx5_0 -> ['ens1f0np0'] for RoCE, ['ib0'] for IPoIB)."""
    out: dict[str, list[str]] = {}
    for dev in _listdir(Path(root) / "sys" / "class" / "infiniband"):
        names = [p.name for p in _listdir(dev / "device" / "net")]
        if names:
            out[dev.name] = names
    return out


def virtual_netdevs(root: str | os.PathLike[str] = "/") -> set[str]:
    """Names of netdevs that are loopback or virtual (veth, bridges, docker0...): never a GPU's closest NIC."""
    out: set[str] = set()
    for entry in _listdir(Path(root) / "sys" / "class" / "net"):
        arptype = _int(_read(entry / "type"))
        if entry.name == "lo" or arptype == _ARPHRD_LOOPBACK or _is_virtual(entry):
            out.add(entry.name)
    return out
