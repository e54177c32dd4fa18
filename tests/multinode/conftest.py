"""Fixtures of the multi-node tests: an emulated 2-node cluster (network namespaces, shaped veth)."""
from __future__ import annotations

import pytest

from gpuadvisor.hardware.cluster_file import load_cluster

from .emucluster import EmulatedCluster, clean_stale, unavailable_reason

RATE = "1gbit"


@pytest.fixture(scope="session")
def emu():
    """Two namespaces gpa-<pid>-n0/n1 joined by a veth pair shaped to 1 Gbit/s; removed at the end."""
    why = unavailable_reason()
    if why:
        pytest.skip(f"emulated multi-node cluster unavailable: {why}")
    clean_stale()
    cluster = EmulatedCluster(2, rate=RATE)
    try:
        cluster.up()
    except Exception as exc:  # e.g. veth or tc refused in this container
        cluster.down()
        pytest.skip(f"emulated multi-node cluster unavailable: {exc}")
    yield cluster
    cluster.down()


@pytest.fixture
def no_leftovers(emu):
    """Asserts after the test that no process is left in any node namespace (and kills any that is)."""
    yield emu
    left = emu.leftover_pids()
    if left:
        from .emucluster import kill_namespace_pids
        for ns in left:
            kill_namespace_pids(ns)
    assert not left, f"processes left in the emulated nodes: {left}"


@pytest.fixture
def hosts(emu, tmp_path):
    """The emulated cluster as a Cluster loaded from its cluster file (access: prefix ip netns exec)."""
    return load_cluster(emu.write_cluster_file(tmp_path / "hosts.yaml"))
