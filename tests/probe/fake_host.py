"""Build fake /sys and /proc trees in a temporary directory (symlinks, unreadable files, sentinel values)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

CPUINFO_2S = "".join(
    f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\nphysical id\t: {i // 4}\n"
    f"core id\t\t: {(i % 4) // 2}\ncpu cores\t: 2\n\n"
    for i in range(8)
)  # 2 sockets x 2 cores x 2 threads
MEMINFO = "MemTotal:       263843368 kB\nMemFree:        100000000 kB\nMemAvailable:   250000000 kB\n"


def write(path: Path, text: str) -> Path:
    """Create parent directories and write a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def unreadable(path: Path) -> None:
    """Make `path` unreadable even for root: a directory where a file is expected."""
    path.mkdir(parents=True, exist_ok=True)


def _free_pci_slot(root: Path, domain: str) -> Path:
    """The first unused PCI function directory under /sys/devices/<domain> (each device gets its own; a slot
    from hash(name) collided for 1 in 90 PYTHONHASHSEEDs, and one NIC then overwrote the other's numa_node)."""
    bus = domain.split("pci0000:")[1]
    for slot in range(0x10, 0x100):
        pci = root / "sys" / "devices" / domain / f"0000:{bus}:{slot:02x}.0"
        if not pci.exists():
            return pci
    raise RuntimeError(f"no free PCI slot left under {domain}")


def netdev(root: Path, name: str, *, speed: Optional[str] = "100000", mtu: str = "9000", state: str = "up",
           driver: Optional[str] = "mlx5_core", numa: Optional[str] = "1", virtual: bool = False,
           arptype: str = "1", flags: str = "0x1003") -> Path:
    """A /sys/class/net/<name> entry; physical ones link to a PCI device, virtual ones to devices/virtual."""
    if virtual:
        real = root / "sys" / "devices" / "virtual" / "net" / name
    else:
        pci = _free_pci_slot(root, "pci0000:00")
        real = pci / "net" / name
        if numa is not None:
            write(pci / "numa_node", numa + "\n")
        if driver is not None:
            drv = root / "sys" / "bus" / "pci" / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            if not (pci / "driver").exists():
                os.symlink(drv, pci / "driver")
        real.mkdir(parents=True, exist_ok=True)
        if not (real / "device").exists():
            os.symlink(os.path.relpath(pci, real), real / "device")
    real.mkdir(parents=True, exist_ok=True)
    if speed is not None:
        write(real / "speed", speed + "\n")
    write(real / "mtu", mtu + "\n")
    write(real / "operstate", state + "\n")
    write(real / "type", arptype + "\n")
    write(real / "flags", flags + "\n")
    link = root / "sys" / "class" / "net" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(real, link.parent), link)
    return real


def ib_device(root: Path, name: str, ports: dict[int, tuple[str, str, str]], *, numa: str = "0",
              driver: str = "mlx5_core", netdevs: tuple[str, ...] = ()) -> Path:
    """/sys/class/infiniband/<name> with ports {n: (rate, link_layer, state)} and optional sibling netdevs."""
    pci = _free_pci_slot(root, "pci0000:80")
    write(pci / "numa_node", numa + "\n")
    drv = root / "sys" / "bus" / "pci" / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    os.symlink(drv, pci / "driver")
    for nd in netdevs:
        (pci / "net" / nd).mkdir(parents=True, exist_ok=True)
    dev = pci / "infiniband" / name
    for n, (rate, layer, state) in ports.items():
        port = dev / "ports" / str(n)
        write(port / "rate", rate + "\n")
        write(port / "link_layer", layer + "\n")
        write(port / "state", state + "\n")
    os.symlink(os.path.relpath(pci, dev), dev / "device")
    link = root / "sys" / "class" / "infiniband" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(dev, link.parent), link)
    return dev


def cpu_tree(root: Path, *, cpuinfo: Optional[str] = CPUINFO_2S, meminfo: Optional[str] = MEMINFO,
             numa_nodes: int = 2, hostname: str = "fakehost") -> None:
    """/proc/cpuinfo, /proc/meminfo, /sys/devices/system/node/nodeN and the kernel hostname."""
    if cpuinfo is not None:
        write(root / "proc" / "cpuinfo", cpuinfo)
    if meminfo is not None:
        write(root / "proc" / "meminfo", meminfo)
    for n in range(numa_nodes):
        (root / "sys" / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True, exist_ok=True)
    write(root / "sys" / "devices" / "system" / "node" / "possible", f"0-{max(0, numa_nodes - 1)}\n")
    write(root / "proc" / "sys" / "kernel" / "hostname", hostname + "\n")


def typical_host(root: Path) -> Path:
    """A 2-socket host: lo, a 100G ConnectX netdev on NUMA 1, a 1G NIC, a veth, and an HDR IB HCA."""
    cpu_tree(root)
    netdev(root, "lo", speed=None, mtu="65536", state="unknown", driver=None, numa=None, virtual=True,
           arptype="772", flags="0x9")
    netdev(root, "ens1f0np0", speed="100000", numa="1")
    netdev(root, "eno1", speed="1000", mtu="1500", driver="igb", numa="0")
    netdev(root, "veth0", speed="10000", mtu="1500", driver=None, virtual=True)
    ib_device(root, "mlx5_0", {1: ("200 Gb/sec (4X HDR)", "InfiniBand", "4: ACTIVE")}, numa="0", netdevs=("ib0",))
    return root
