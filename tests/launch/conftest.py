"""Clusters for launch tests, built directly from the schema classes."""
from __future__ import annotations

import pytest
from .launch_fixtures import node

from gpuadvisor.schemas import Cluster, Network, NodeAccess


@pytest.fixture
def one_node() -> Cluster:
    return Cluster(name="one", nodes=[node("n0", 4)], source="test")


@pytest.fixture
def two_nodes() -> Cluster:
    return Cluster(
        name="nano", source="test",
        nodes=[node("n0", access=NodeAccess(method="ssh", host="10.0.0.1", address="10.0.0.1")),
               node("n1", access=NodeAccess(method="ssh", host="10.0.0.2", address="10.0.0.2"))],
        network=Network(bandwidth_gb_per_s=0.117, latency_us=50, protocol="tcp", link_speed_gbit_per_s=1,
                        nic="eno1"))


@pytest.fixture
def no_p2p() -> Cluster:
    return Cluster(name="geforce", nodes=[node("box", 2, p2p=False)], source="test")
