"""NICs from fake sysfs trees (sentinels, unreadable files, virtual/loopback, IB/RoCE) and CPU/RAM from /proc."""
from __future__ import annotations

import os

import pytest

from gpuadvisor.probe.cpu import read_cpu
from gpuadvisor.probe.sysfs import rdma_netdevs, read_nics

from .fake_host import cpu_tree, ib_device, netdev, typical_host, unreadable, write


def by_name(nics):
    """Nics keyed by name."""
    return {n.name: n for n in nics}


def test_typical_host(tmp_path):
    warnings: list[str] = []
    nics = by_name(read_nics(typical_host(tmp_path), warnings))
    assert list(nics) == ["eno1", "ens1f0np0", "lo", "veth0", "mlx5_0"]
    e = nics["ens1f0np0"]
    assert (e.kind, e.speed_gbit_per_s, e.mtu, e.driver, e.operstate, e.numa_node) == (
        "ethernet", 100.0, 9000, "mlx5_core", "up", 1)
    assert nics["eno1"].speed_gbit_per_s == 1.0 and nics["eno1"].driver == "igb" and nics["eno1"].numa_node == 0
    lo = nics["lo"]
    assert lo.kind == "loopback" and lo.speed_gbit_per_s is None and lo.mtu == 65536
    v = nics["veth0"]
    assert v.kind == "ethernet" and v.speed_gbit_per_s is None and v.numa_node is None
    assert len(warnings) == 1 and "veth0 (10000 Mb/s)" in warnings[0] and "lo" not in warnings[0]
    ib = nics["mlx5_0"]
    assert (ib.kind, ib.speed_gbit_per_s, ib.operstate, ib.driver, ib.numa_node) == (
        "infiniband", 200.0, "active", "mlx5_core", 0)
    assert rdma_netdevs(tmp_path) == {"mlx5_0": ["ib0"]}


@pytest.mark.parametrize("speed", ["-1", "65535", "4294967295", "0", "garbage", ""])
def test_sentinel_and_junk_speeds_are_unknown(tmp_path, speed):
    netdev(tmp_path, "eth0", speed=speed)
    (nic,) = read_nics(tmp_path)
    assert nic.speed_gbit_per_s is None and nic.mtu == 9000


def test_unreadable_files_directory_and_broken_symlink(tmp_path):
    real = netdev(tmp_path, "eth0", speed=None, numa=None, driver=None)
    unreadable(real / "speed")  # a directory where the file should be: reading raises even for root
    (real / "mtu").unlink()
    os.symlink(tmp_path / "nowhere", real / "mtu")  # broken symlink
    (real / "operstate").unlink()
    unreadable(real / "operstate")
    (nic,) = read_nics(tmp_path)
    assert (nic.speed_gbit_per_s, nic.mtu, nic.operstate, nic.driver, nic.numa_node) == (None,) * 5
    assert nic.kind == "ethernet"


def test_numa_minus_one_is_unknown_and_ipoib_kind(tmp_path):
    netdev(tmp_path, "ib0", speed="100000", numa="-1", arptype="32", mtu="2044")
    (nic,) = read_nics(tmp_path)
    assert nic.kind == "infiniband" and nic.numa_node is None and nic.speed_gbit_per_s == 100.0


def test_roce_multi_port_and_odd_rates(tmp_path):
    ib_device(tmp_path, "mlx5_1", {1: ("100 Gb/sec (4X EDR)", "Ethernet", "4: ACTIVE"),
                                   2: ("invalid", "Ethernet", "1: DOWN")}, numa="1", netdevs=("ens2f0", "ens2f1"))
    ib_device(tmp_path, "mlx5_2", {1: ("0 Gb/sec", "Weird", "")})
    nics = by_name(read_nics(tmp_path))
    a, b = nics["mlx5_1:1"], nics["mlx5_1:2"]
    assert (a.kind, a.speed_gbit_per_s, a.operstate, a.numa_node) == ("roce", 100.0, "active", 1)
    assert (b.speed_gbit_per_s, b.operstate) == (None, "down")
    c = nics["mlx5_2"]
    assert (c.kind, c.speed_gbit_per_s, c.operstate) == ("unknown", None, None)
    assert rdma_netdevs(tmp_path) == {"mlx5_1": ["ens2f0", "ens2f1"]}


def test_efa_is_its_own_kind_and_rates_as_an_efa_rail(tmp_path):
    """An AWS Elastic Fabric Adapter (efa_N, driver efa) has no InfiniBand or Ethernet link layer: kind "efa", which
    the catalog rates from its speed as an EFA rail (knowledge/links.yaml efa-100g-rail), not as InfiniBand."""
    from gpuadvisor.hardware.catalog import rate_nic

    ib_device(tmp_path, "efa_0", {1: ("100 Gb/sec (4X EDR)", "Unspecified", "4: ACTIVE")}, driver="efa")
    ib_device(tmp_path, "rdmap16s27", {1: ("100 Gb/sec (4X EDR)", "Unspecified", "4: ACTIVE")}, driver="efa")
    nics = by_name(read_nics(tmp_path))
    assert {n.kind for n in nics.values()} == {"efa"}
    rated = rate_nic(nics["efa_0"])
    assert (rated.link, rated.bandwidth_gb_per_s, rated.latency_us) == ("efa-100g-rail", 11.4, 75.0)


def test_fractional_ib_rate(tmp_path):
    ib_device(tmp_path, "mlx4_0", {1: ("56.25 Gb/sec (4X FDR)", "InfiniBand", "4: ACTIVE")})
    assert read_nics(tmp_path)[0].speed_gbit_per_s == 56.25


def test_empty_root_gives_no_nics(tmp_path):
    warnings: list[str] = []
    assert read_nics(tmp_path, warnings) == [] and warnings == []


def test_cpu_two_sockets(tmp_path):
    cpu_tree(tmp_path)
    c = read_cpu(tmp_path)
    assert (c.sockets, c.cores, c.threads, c.numa_nodes) == (2, 4, 8, 2)
    assert c.model == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
    assert c.ram_bytes == 263843368 * 1024 and c.ram_available_bytes == 250000000 * 1024


def test_cpu_arm_style_cpuinfo_falls_back_to_sysfs_topology(tmp_path):
    info = "".join(f"processor\t: {i}\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\n" for i in range(4))
    cpu_tree(tmp_path, cpuinfo=info + "Hardware\t: Ampere Altra\n", numa_nodes=1)
    for i in range(4):
        topo = tmp_path / "sys" / "devices" / "system" / "cpu" / f"cpu{i}" / "topology"
        write(topo / "physical_package_id", "0\n")
        write(topo / "core_id", f"{i}\n")
    c = read_cpu(tmp_path)
    assert (c.sockets, c.cores, c.threads, c.numa_nodes) == (1, 4, 4, 1)


def test_cpu_unreadable_everything_gives_defaults_and_warnings(tmp_path):
    unreadable(tmp_path / "proc" / "cpuinfo")
    warnings: list[str] = []
    c = read_cpu(tmp_path, warnings)
    assert (c.sockets, c.cores, c.threads, c.numa_nodes, c.ram_bytes) == (1, 1, 1, 1, 0)
    assert c.ram_available_bytes is None and len(warnings) == 2


def test_cpu_on_this_host():
    c = read_cpu("/")
    assert c.threads >= 1 and c.ram_bytes > 0


def test_zero_and_absurd_link_speeds_are_unknown(tmp_path):
    """A netdev reporting 0 Mb/s, or a rate beyond any link (a Nic refuses both), reads as an unknown speed."""
    netdev(tmp_path, "eth0", speed="0")
    netdev(tmp_path, "eth1", speed="999999999")
    ib_device(tmp_path, "mlx5_0", {1: ("900000 Gb/sec (4X XDR)", "InfiniBand", "4: ACTIVE")})
    assert {n.name: n.speed_gbit_per_s for n in read_nics(tmp_path)} == {"eth0": None, "eth1": None, "mlx5_0": None}
