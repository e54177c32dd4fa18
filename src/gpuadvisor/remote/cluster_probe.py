"""Probe a whole cluster through each node's access, and measure the network between the nodes.

`probe_cluster(hosts)` runs `python -m gpuadvisor probe --json` on every node of a hosts cluster
(a cluster file with `access:` per node), builds each node from its own report and merges them into
one Cluster (node names and access from the hosts file). `measure_internode(cluster)` runs
probes/collectives.py with torchrun on every node at once (one rank per node, c10d rendezvous on
node 0, GLOO/NCCL_SOCKET_IFNAME set per node) and returns the measured Network; it flags a NIC that
delivers far less than its link speed. Link speeds in /sys are not trusted for rates: a shaped or
virtual link (veth says 10000) reads the same as a real one.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from pydantic import Field, ValidationError

from ..errors import UserError
from ..launch.build import rdzv_host_args
from ..hardware.build import cluster_from_probe
from ..hardware.catalog import NIC_PROTOCOL, rate_nic
from ..paths import probes_dir
from ..probe.measure import ProbeError, parse_probe_output
from ..schemas._base import Frozen
from ..schemas.hardware import Cluster, Network, Nic, Node
from ..schemas.measure import CollectiveCurve, MeasureReport
from ..schemas.probe import ProbeReport
from .access import NodeTimeout, describe, node_python, run_on_node
from .group import finish_group, start_group, stop_group, wait_group

__all__ = ["probe_cluster", "probe_node", "measure_internode", "internode_measurement", "InternodeMeasurement",
           "with_network", "socket_env", "DEGRADED_FRACTION"]

#: A NIC delivering less than this fraction of its link speed is flagged (TCP reaches ~50-90% of wire).
DEGRADED_FRACTION = 0.25
_KEEP_RATES = ("peak_tflops_bf16", "peak_tflops_fp32", "achieved_tflops", "memory_bandwidth_gb_per_s", "rate_source")


def probe_node(node: Node, timeout_s: float = 120.0, *, measure_compute: bool = False,
               quick: bool = True) -> tuple[ProbeReport, Optional[MeasureReport]]:
    """`python -m gpuadvisor probe --json` on `node` (with measure_compute: plus the matmul probe, one
    thread per CPU rank as the bundled trainer runs); UserError naming the node when it fails."""
    argv = [node_python(node), "-m", "gpuadvisor", "probe", "--json"]
    if measure_compute:
        argv += ["--measure", "--probes", "matmul", *(["--quick"] if quick else [])]
    try:
        done = run_on_node(node, argv, timeout_s, env={"OMP_NUM_THREADS": "1"} if measure_compute else None)
    except NodeTimeout as exc:
        raise UserError(str(exc)) from None
    if done.returncode != 0:
        last = next((ln.strip() for ln in reversed((done.stderr or done.stdout).splitlines()) if ln.strip()),
                    "no output")
        raise UserError(f"node {describe(node)}: probe failed (exit {done.returncode}: {last[:200]}); "
                        "run `gpuadvisor probe --cluster FILE` (its pre-flight names the problem) / check the node's "
                        "access and gpuadvisor install")
    try:
        if not measure_compute:
            return ProbeReport.model_validate_json(done.stdout), None
        doc = json.loads(done.stdout)
        return ProbeReport.model_validate(doc["probe"]), MeasureReport.model_validate(doc["measure"])
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
        raise UserError(f"node {describe(node)}: probe printed no valid report ({why[:120]}); "
                        "install the same gpuadvisor version there") from None


def _merge_node(hosts_node: Node, report: ProbeReport, notes: list[str],
                measured: Optional[MeasureReport] = None) -> Node:
    """The probed node, named and reached as in the hosts file. Rates: freshly measured (matmul probe on
    the node) first, then rates the hosts file marks measured/user, then the catalog."""
    cpu_ranks = len(hosts_node.devices) if hosts_node.devices and hosts_node.devices[0].kind == "cpu" else None
    if report.gpus:
        cpu_ranks = None
    elif hosts_node.devices and hosts_node.devices[0].kind == "gpu":
        raise UserError(f"node {describe(hosts_node)}: the cluster file lists {len(hosts_node.devices)} GPU(s) but "
                        f"the probe found none ({report.nvml_error or 'NVML reports no GPU'}); fix the driver "
                        "or describe the node with cpu_ranks")
    try:
        built = cluster_from_probe(report, cpu_ranks=cpu_ranks or 1, measured=measured)
    except UserError as exc:
        raise UserError(f"node {describe(hosts_node)}: {exc}") from None
    node = built.nodes[0]
    notes.extend(f"{hosts_node.name}: {n}" for n in built.notes)
    devices = node.devices
    given = {d.index: d for d in hosts_node.devices}
    fresh = measured is not None and bool(measured.matmul)
    if devices and devices[0].kind == "cpu" and not fresh:  # keep rates measured for these CPU ranks (file)
        devices = [d.model_copy(update={k: getattr(given[d.index], k) for k in _KEEP_RATES})
                   if d.index in given and given[d.index].rate_source in ("measured", "user") else d
                   for d in devices]
        links = hosts_node.links if hosts_node.links and len(devices) == len(hosts_node.devices) else node.links
    else:
        links = node.links
    return node.model_copy(update={"name": hosts_node.name, "access": hosts_node.access, "devices": devices,
                                   "links": links})


def _nic_of(node: Node) -> Optional[Nic]:
    """The NIC the node's access names (ifname), else None."""
    return next((n for n in node.nics if n.name == node.access.ifname), None) if node.access.ifname else None


#: NIC kinds whose ports a GPU job's NCCL uses as rails (RDMA verbs, AWS's EFA plugin): all but sockets
_RAIL_KINDS = tuple(k for k, p in NIC_PROTOCOL.items() if p != "tcp")


def _rate_rails(node: Node) -> Node:
    """The node with its RDMA ports rated as rails from their kind and speed (hardware.catalog.rate_nic), as a cluster
    file rates them: the probe reports kind and speed only."""
    nics = [rate_nic(n) if n.kind in _RAIL_KINDS and n.bandwidth_gb_per_s is None else n for n in node.nics]
    return node.model_copy(update={"nics": nics})


def _rails(node: Node) -> list[Nic]:
    """The node's rated RDMA ports that are not down."""
    return [n for n in node.nics if n.kind in _RAIL_KINDS and n.bandwidth_gb_per_s and n.operstate != "down"]


def rail_protocol(nodes: list[Node]) -> Optional[str]:
    """The one RDMA protocol (ib, roce, efa) whose rated ports every GPU node has, else None: what a GPU job's NCCL
    sends over between the nodes, one port per GPU where the node has them (costmodel comm.rail_nics)."""
    protos = {frozenset(NIC_PROTOCOL[n.kind] for n in _rails(node)) for node in nodes}
    if len(protos) != 1:
        return None
    (one,) = protos
    return next(iter(one)) if len(one) == 1 else None


def _guess_network(nodes: list[Node], notes: list[str]) -> Optional[Network]:
    """The network until measure_internode replaces it: the nodes' RDMA rails at their catalog rates where every GPU
    node has them (rail_protocol), else an assumed TCP network from the slowest inter-node NIC speed."""
    if len(nodes) < 2:
        return None
    gpu = any(d.kind == "gpu" for n in nodes for d in n.devices)
    proto = rail_protocol(nodes) if gpu else None
    if proto:
        rails = _rails(nodes[0])
        notes.append(f"network: each node's {proto} ports as rails at their catalog rates ({rails[0].link}: "
                     f"{rails[0].bandwidth_gb_per_s:g} GB/s each); measure them (measure_internode) before trusting "
                     "multi-node rankings")
        return Network(bandwidth_gb_per_s=float(rails[0].bandwidth_gb_per_s or 0.0),
                       latency_us=float(rails[0].latency_us or 5.0), protocol=proto,  # type: ignore[arg-type]
                       rate_source="catalog")
    speeds = [s for s in ((_nic_of(n) or Nic(name="?")).speed_gbit_per_s for n in nodes) if s]
    speed = min(speeds) if speeds else 1.0
    notes.append(f"network: assumed from a {speed:g} Gbit/s NIC speed in /sys (TCP at ~60% of wire); "
                 "measure it (measure_internode) before trusting multi-node rankings")
    return Network(bandwidth_gb_per_s=round(speed / 8 * 0.6, 4), latency_us=50.0, protocol="tcp",
                   link_speed_gbit_per_s=speed, nic=nodes[0].access.ifname, rate_source="assumed")


def probe_cluster(hosts_cluster: Cluster, *, timeout_s: float = 120.0, measure_compute: bool = False,
                  quick: bool = True) -> Cluster:
    """Probe every node of `hosts_cluster` through its access and merge the results into one Cluster.

    Each node keeps its name and access from the hosts cluster; devices, links, NICs and CPU come from
    that node's own probe (CPU ranks: as many as the hosts file gives, with its measured rates). The
    network is the hosts file's, else one assumed from the NIC speed (replace it with
    `with_network(cluster, internode_measurement(cluster))`). With measure_compute, every node also runs
    the matmul probe (`probe --measure --probes matmul`, OMP_NUM_THREADS=1: one CPU rank as the trainer
    runs it) and its measured rate replaces catalog and hosts-file rates; the nodes are measured one after
    another so that nodes sharing a host (tests, benchmarks) do not share its cores while timing.
    Raises UserError naming the node that failed.
    """
    if measure_compute:
        results = [probe_node(n, max(timeout_s, 300.0), measure_compute=True, quick=quick)
                   for n in hosts_cluster.nodes]
    else:
        with ThreadPoolExecutor(max_workers=min(8, len(hosts_cluster.nodes))) as pool:
            results = list(pool.map(lambda n: probe_node(n, timeout_s), hosts_cluster.nodes))
    notes: list[str] = list(hosts_cluster.notes)
    nodes = [_rate_rails(_merge_node(h, r, notes, m)) for h, (r, m) in zip(hosts_cluster.nodes, results)]
    network = hosts_cluster.network or _guess_network(nodes, notes)
    return Cluster(name=hosts_cluster.name, nodes=nodes, network=network,
                   source=f"probe ({len(nodes)} nodes via access)", notes=notes)


# ---------------------------------------------------------------- inter-node measurement


class InternodeMeasurement(Frozen):
    """What measure_internode found: the Network for the cost model, the curves, and warnings."""

    network: Network
    curves: list[CollectiveCurve] = Field(default_factory=list)
    p2p_bandwidth_gb_per_s: Optional[float] = Field(None, description="send/recv bandwidth between two nodes")
    warnings: list[str] = Field(default_factory=list, description="Degraded NICs, MTU mismatches, TCP fallback")
    seconds: float = 0.0


def socket_env(node: Node, gpu: bool) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME on GPU nodes) from the node's access.ifname."""
    env = {}
    if node.access.ifname:
        env["GLOO_SOCKET_IFNAME"] = node.access.ifname
        if gpu:
            env["NCCL_SOCKET_IFNAME"] = node.access.ifname
    return env


def master_endpoint(cluster: Cluster, port: int) -> str:
    """node 0's address (access.address, host, or name) and the port."""
    n0 = cluster.nodes[0]
    return f"{n0.access.address or n0.access.host or n0.name}:{port}"


def _busbw(c: CollectiveCurve) -> float:
    """Bus bandwidth of the largest message measured (the asymptote over the measured range).

    Not the probe's fitted value: its fit weighs relative error, so on a token-bucket shaped or
    bursty link the small messages (sent at burst speed) inflate it (50 Mbit/s tbf: fit 0.016 GB/s,
    every message >= 64 KiB 0.006 GB/s)."""
    return max(c.points, key=lambda p: p.size_bytes).busbw_gb_per_s


def _latency_us(c: CollectiveCurve) -> float:
    """Time of the smallest message, microseconds (a per-call latency that no fit can push to 0)."""
    return min(c.points, key=lambda p: p.size_bytes).time_s * 1e6


def _network_warnings(cluster: Cluster, bw_gb_per_s: float, gpu: bool) -> list[str]:
    """Flag NICs delivering far less than their link speed, MTU mismatches, unused InfiniBand/RoCE."""
    out = []
    for node in cluster.nodes:
        nic = _nic_of(node)
        if nic is not None and nic.speed_gbit_per_s:
            frac = bw_gb_per_s * 8 / nic.speed_gbit_per_s
            if frac < DEGRADED_FRACTION:
                out.append(f"{node.name}: {nic.name} delivers {bw_gb_per_s * 8:.3g} Gbit/s of its "
                           f"{nic.speed_gbit_per_s:g} Gbit/s link ({frac:.0%}): possible degraded link; check the "
                           f"MTU, that {nic.name} is the interface between the nodes, and (InfiniBand/RoCE) that "
                           "NCCL does not fall back to TCP (NCCL_DEBUG=INFO); a shaped, shared or virtual link "
                           "reads the same")
        # an RDMA port beside a socket interface: NCCL used the port (data over verbs) unless the measured rate is
        # well under the port's rated one (a fall-back to TCP), or the port is unrated
        rdma = [n for n in node.nics if n.kind in ("infiniband", "roce") and n.operstate != "down"]
        rated = max((n.bandwidth_gb_per_s or 0.0 for n in rdma), default=0.0)
        if gpu and rdma and (not rated or bw_gb_per_s < 0.5 * rated) and nic is not None and nic.kind == "ethernet":
            out.append(f"{node.name}: has an InfiniBand/RoCE port but traffic goes through {nic.name} (TCP); "
                       "point access.ifname at the RDMA netdev or unset NCCL_IB_DISABLE")
    mtus = {n.name: m for n in cluster.nodes if (m := (_nic_of(n) or Nic(name="?")).mtu)}
    if len(set(mtus.values())) > 1:
        shown = ", ".join(f"{k} {v}" for k, v in mtus.items())
        out.append(f"MTU differs between nodes ({shown}): set the same MTU on every inter-node interface")
    return out


def internode_measurement(cluster: Cluster, *, port: int = 29530, timeout_s: float = 300.0, quick: bool = True,
                          max_bytes: Optional[int] = None, log_dir: Optional[Path] = None) -> InternodeMeasurement:
    """Measure all-reduce and point-to-point bandwidth/latency between the nodes (one rank per node).

    Runs `torchrun --nnodes N --nproc-per-node 1 --node-rank i --rdzv-backend c10d --rdzv-endpoint
    <node 0>:port probes/collectives.py` on every node through its access, gloo on CPU / NCCL on GPU
    nodes, with GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME from access.ifname. A node failing or the
    deadline passing stops every node's processes and raises ProbeError naming the node.
    """
    if len(cluster.nodes) < 2:
        raise UserError("measuring the inter-node network needs at least 2 nodes; add nodes to the cluster file")
    gpu = all(n.devices and n.devices[0].kind == "gpu" for n in cluster.nodes)
    token = uuid.uuid4().hex
    endpoint = master_endpoint(cluster, port)
    ops = "all_reduce,send_recv"
    extra = ["--quick"] if quick else []
    if max_bytes:
        extra += ["--max-bytes", str(max_bytes)]
    commands = []
    for i, node in enumerate(cluster.nodes):
        argv = [node_python(node), "-m", "torch.distributed.run", "--nnodes", str(len(cluster.nodes)),
                "--nproc-per-node", "1", "--node-rank", str(i), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", endpoint, "--rdzv-id", f"gpa-net-{token[:8]}", "--max-restarts", "0"]
        argv += rdzv_host_args(node, i)
        argv += [str(probes_dir() / "collectives.py"), "--ops", ops, "--timeout", str(int(timeout_s)), *extra]
        commands.append((node, argv, {**socket_env(node, gpu), "OMP_NUM_THREADS": "1"}))
    own_dir = log_dir is None
    folder = Path(tempfile.mkdtemp(prefix="gpa-net-")) if log_dir is None else Path(log_dir)
    start = time.monotonic()
    procs = start_group(commands, folder, token, label="net")
    failed, timed_out = wait_group(procs, start + timeout_s)
    if failed or timed_out:
        left = stop_group(procs, token)
        why = (f"did not finish within {timeout_s:.0f} s" if timed_out or failed is None else
               f"failed on node {describe(failed.node)} (exit {failed.returncode}: "
               f"{_last_line(failed.stderr_tail())})")
        survivors = f"; processes left: {left}" if left else ""
        raise ProbeError(f"inter-node measurement {why}{survivors} (each node's output: {folder}); run "
                         "`gpuadvisor probe --cluster FILE` (pre-flight) and check the rendezvous port and "
                         "access.ifname")
    finish_group(procs, token)
    report = None
    for p in procs:
        try:
            report = parse_probe_output(p.stdout_text())
            break
        except ProbeError:
            continue
    if report is None:
        raise ProbeError(f"inter-node measurement printed no report on any node (each node's output: {folder}); "
                         "run it by hand to see why")
    if own_dir:  # a folder of our own, read: nothing left to debug (a failure above keeps it and names it)
        shutil.rmtree(folder, ignore_errors=True)
    curves = report.collectives
    ar = next((c for c in curves if c.op == "all_reduce" and c.points), None)
    sr = next((c for c in curves if c.op == "send_recv" and c.points), None)
    if ar is None and sr is None:
        raise ProbeError(f"inter-node measurement produced no curves ({'; '.join(report.warnings) or 'no reason'})")
    bw = _busbw(ar) if ar is not None else _busbw(sr)  # type: ignore[arg-type]
    n = len(cluster.nodes)
    lat = _latency_us(sr) if sr is not None else _latency_us(ar) / (2 * (n - 1))  # type: ignore[arg-type]
    net = measured_network(cluster, bw, lat, gpu)
    return InternodeMeasurement(network=net, curves=curves, p2p_bandwidth_gb_per_s=_busbw(sr) if sr else None,
                                warnings=[*_network_warnings(cluster, bw, gpu), *report.warnings],
                                seconds=round(time.monotonic() - start, 2))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:200]


def measure_internode(cluster: Cluster, *, port: int = 29530, timeout_s: float = 300.0, quick: bool = True) -> Network:
    """The measured inter-node Network (see `internode_measurement` for curves and warnings)."""
    return internode_measurement(cluster, port=port, timeout_s=timeout_s, quick=quick).network


def measured_network(cluster: Cluster, bw: float, lat: float, gpu: bool) -> Network:
    """The Network a one-rank-per-node measurement gives: on GPU nodes with RDMA rails (rail_protocol) the rails'
    protocol, unpinned (each GPU keeps its own port: with_network rates the ports from it), else the one interface
    the measurement ran over (access.ifname), shared by the node's ranks."""
    proto = rail_protocol(cluster.nodes) if gpu else None
    if proto:
        return Network(bandwidth_gb_per_s=round(bw, 5), latency_us=round(lat, 2), protocol=proto,  # type: ignore
                       rate_source="measured")
    speeds = [s for s in ((_nic_of(x) or Nic(name="?")).speed_gbit_per_s for x in cluster.nodes) if s]
    return Network(bandwidth_gb_per_s=round(bw, 5), latency_us=round(lat, 2), protocol="tcp" if not gpu else "unknown",
                   link_speed_gbit_per_s=min(speeds) if speeds else None, nic=cluster.nodes[0].access.ifname,
                   rate_source="measured")


def _measured_rails(node: Node, cluster: Cluster) -> Node:
    """The node's rails (comm.rail_nics: what the cost model sends over) at the measured rate of `cluster.network`: one
    rank per node (on its first device) drove the ports closest to that device, so each port gets the measured busbw
    over their count."""
    from ..costmodel.analytical.comm import rail_nics

    net = cluster.network
    assert net is not None
    rails = rail_nics(node, cluster)
    first = min((d.index for d in node.devices), default=0)
    used = max(1, sum(1 for n in rails if first in n.closest_devices)) if any(n.closest_devices for n in rails) else 1
    per_port = round(net.bandwidth_gb_per_s / used, 5)
    nics = [n.model_copy(update={"bandwidth_gb_per_s": per_port, "latency_us": net.latency_us,
                                 "rate_source": "measured"}) if n in rails else n for n in node.nics]
    return node.model_copy(update={"nics": nics})


def with_network(cluster: Cluster, m: "InternodeMeasurement | Network") -> Cluster:
    """`cluster` with the measured network (and its warnings in the notes); on rails (measured_network) every port of
    the network's protocol takes the measured rate."""
    net = m if isinstance(m, Network) else m.network
    notes = list(cluster.notes)
    nodes = cluster.nodes
    if isinstance(m, InternodeMeasurement):
        notes.append(f"network: measured {net.bandwidth_gb_per_s:.4g} GB/s all-reduce busbw, "
                     f"{net.latency_us:.0f} us latency between {len(cluster.nodes)} nodes")
        notes.extend(m.warnings)
    if net.rate_source == "measured" and net.nic is None and net.protocol in ("ib", "roce", "efa"):
        with_net = cluster.model_copy(update={"network": net})
        nodes = [_measured_rails(n, with_net) for n in cluster.nodes]
        notes.append(f"network: one rank per node measured the {net.protocol} ports closest to its GPU; every GPU "
                     "keeps its own ports (rails) at that rate per port")
    return cluster.model_copy(update={"network": net, "notes": notes, "nodes": nodes})
