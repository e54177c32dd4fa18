"""Environment variables and NUMA binding for each node, every one with the reason it is set.

NCCL has two kinds of network names (NCCL User Guide, "Environment Variables"):
- IP interfaces (netdevs: eno1, ens1f0np0, ib0 for IPoIB) carry sockets: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME;
- RDMA devices (HCAs: mlx5_0, mlx5_0:1, bnxt_re0, efa_0, irdma0) carry the IB verbs transport (InfiniBand or
  RoCE): NCCL_IB_HCA, never NCCL_SOCKET_IFNAME. AWS's Elastic Fabric Adapters (efa_0, Nic.kind "efa") carry NCCL
  through AWS's libfabric plugin (aws-ofi-nccl) instead, which the FI_* variables steer (`efa_env`).
`fabric_env` picks each per node and says why; `socket_tuning` adds NCCL_SOCKET_NTHREADS/NCCL_NSOCKS_PERTHREAD
for 25-100+ GbE TCP, which knowledge/links.yaml's 100gbe rate assumes.
"""
from __future__ import annotations

import re
from typing import Optional

from ..schemas.hardware import Cluster, Device, Nic, Node
from ..schemas.launch import EnvVar
from ..schemas.plan import Plan
from .deepspeed import runs_on_deepspeed

_FAST_KINDS = ("infiniband", "roce")
# RDMA device names the kernel drivers register (/sys/class/infiniband): mlx4/mlx5 (NVIDIA/Mellanox), hfi1/qib
# (Omni-Path/QLogic), bnxt_re (Broadcom), irdma/i40iw (Intel), efa (AWS), rxe/siw (soft RoCE/iWARP), erdma, hns,
# qedr, ocrdma, cxgb4, vmw_pvrdma, mana, ionic; an optional ':port' suffix as the probe writes it
_HCA = re.compile(r"^(mlx[45]|hfi1|qib|bnxt_re|irdma|i40iw|efa|rxe|siw|erdma|hns|qedr|ocrdma|cxgb4|vmw_pvrdma|mana|"
                  r"ionic)_?\d+(:\d+)?$")
# NCCL User Guide, NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD: "for generic 100G networks" 4 and 4;
# their product must not exceed 64. Below 25 Gbit/s one thread and one socket keep up with the wire.
SOCKET_TUNING_MIN_GBIT = 25.0


def is_hca(nic: Nic) -> bool:
    """True for an RDMA device (mlx5_0, mlx5_0:1, efa_0, an EFA under its PCI name...), which is no IP interface."""
    return bool(_HCA.match(nic.name)) or nic.kind == "efa"


def _usable(nic: Nic) -> bool:
    return nic.kind != "loopback" and nic.name != "lo" and nic.operstate != "down"


def hcas(node: Node, used: Optional[list[Device]] = None) -> list[Nic]:
    """The node's usable InfiniBand/RoCE HCAs; with `used`, the rails of those devices when the NICs say which."""
    found = [n for n in node.nics if _usable(n) and is_hca(n) and n.kind != "ethernet"]
    if used is None or not any(n.closest_devices for n in found):
        return found
    idx = {d.index for d in used}
    rails = [n for n in found if idx & set(n.closest_devices)]
    return rails or found


def inter_node_nic(node: Node, cluster: Cluster) -> Optional[str]:
    """The IP interface other nodes reach this one through: access.ifname, the network's NIC, an Ethernet netdev,
    else an IPoIB netdev; never an HCA (mlx5_*). None when the node lists no IP interface."""
    if node.access.ifname and not _HCA.match(node.access.ifname):
        return node.access.ifname
    ip = [n for n in node.nics if _usable(n) and not is_hca(n)]
    if cluster.network is not None and cluster.network.nic in {n.name for n in ip}:
        return cluster.network.nic
    up = [n for n in ip if n.kind not in _FAST_KINDS] or ip  # IPoIB / RoCE netdevs carry sockets too
    if not up:
        return None
    return max(up, key=lambda n: (n.speed_gbit_per_s or 0.0, n.operstate == "up")).name


def has_rdma(node: Node) -> bool:
    """True when the node has an InfiniBand or RoCE NIC (HCA or IPoIB netdev) that is not down."""
    return any(n.kind in _FAST_KINDS and _usable(n) for n in node.nics)


def rdma_fabric(cluster: Cluster, nodes: list[Node]) -> bool:
    """True when the job's inter-node traffic can use IB verbs: the network says ib/roce, or every node has an
    RDMA NIC and the network does not name a TCP link."""
    proto = cluster.network.protocol if cluster.network is not None else "unknown"
    if proto in ("ib", "roce"):
        return True
    return proto == "unknown" and all(has_rdma(n) for n in nodes)


def efa_fabric(cluster: Cluster, nodes: list[Node]) -> bool:
    """True when the job's inter-node traffic goes over AWS EFA: the network says efa, or every node has an EFA and
    the network names no protocol."""
    proto = cluster.network.protocol if cluster.network is not None else "unknown"
    if proto == "efa":
        return True
    return proto == "unknown" and all(any(n.kind == "efa" and _usable(n) for n in node.nics) for node in nodes)


def efa_env() -> list[EnvVar]:
    """AWS EFA: NCCL's net plugin (aws-ofi-nccl, on AWS's Deep Learning AMIs and containers) over libfabric's efa
    provider, with GPUDirect RDMA where the instance has it (p4d, p5 and later)."""
    why = "AWS EFA: NCCL talks to the adapters through AWS's libfabric plugin (aws-ofi-nccl; AWS EFA user guide)"
    return [EnvVar(name="FI_PROVIDER", value="efa", reason=f"{why}: libfabric's efa provider, not TCP"),
            EnvVar(name="FI_EFA_USE_DEVICE_RDMA", value="1",
                   reason="AWS EFA: GPUDirect RDMA between GPU memory and the adapter (p4d, p5 and later; AWS's "
                          "NCCL set-up guides set it)")]


def _no_p2p_pairs(node: Node, used: list[Device]) -> list[tuple[int, int]]:
    """Pairs of used devices whose link reports no CUDA peer-to-peer."""
    idx = {d.index for d in used}
    return [(l.a, l.b) for l in node.links if l.a in idx and l.b in idx and l.p2p_supported is False]


def numa_binding(used: list[Device], node: Node) -> Optional[str]:
    """How ranks bind to their GPU's NUMA node, or None when binding brings nothing (one NUMA node, unknown)."""
    known = [d.numa_node for d in used]
    if any(n is None or n < 0 for n in known):
        return None
    numa = [n for n in known if n is not None]
    if len(set(numa)) < 2 and node.cpu.numa_nodes < 2:
        return None
    ranks = ", ".join(f"rank {i}->node {n}" for i, n in enumerate(numa))
    manual = "; ".join(f"numactl --cpunodebind={n} --membind={n}" for n in sorted(set(numa)))
    return (f"torchrun --numa-binding node binds local rank i to the NUMA node of GPU i ({ranks}); "
            f"by hand: {manual}")


def fabric_env(node: Node, used: list[Device], cluster: Cluster, gpu: bool, rdma: bool,
               efa: bool = False) -> list[EnvVar]:
    """Socket interface (IP netdev) and, on an IB/RoCE fabric, NCCL_IB_HCA for this node's rails (on EFA the
    plugin picks its adapters)."""
    env: list[EnvVar] = []
    nic = inter_node_nic(node, cluster)
    if nic:
        why = f"{node.name} reaches the other nodes through the IP interface {nic}"
        if gpu:
            what = ("NCCL bootstrap only; data goes over IB verbs" if rdma else
                    "NCCL bootstrap only; data goes over EFA" if efa else "NCCL bootstrap and data sockets")
            env.append(EnvVar(name="NCCL_SOCKET_IFNAME", value=nic, reason=f"{why} ({what})"))
        env.append(EnvVar(name="GLOO_SOCKET_IFNAME", value=nic, reason=f"{why} (gloo and torchrun's store)"))
    if gpu and rdma:
        rails = hcas(node, used)
        if rails:
            names = ",".join(n.name for n in rails)
            env.append(EnvVar(name="NCCL_IB_HCA", value=f"={names}",
                              reason=f"InfiniBand/RoCE HCAs {names} of {node.name} (the rails of GPUs "
                                     f"{','.join(str(d.index) for d in used)}): NCCL's IB transport uses exactly "
                                     "these ('=' = exact names, so mlx5_1 does not also match mlx5_10)"))
    return env


def node_env(node: Node, used: list[Device], plan: Plan, cluster: Cluster, multi_node: bool,
             rdma: bool = False, efa: bool = False) -> list[EnvVar]:
    """Per-node variables: socket interface, IB HCAs, P2P, threads per rank, visible devices."""
    env: list[EnvVar] = []
    gpu = used[0].kind == "gpu"
    if multi_node:
        env += fabric_env(node, used, cluster, gpu, rdma, efa)
    if gpu:
        pairs = _no_p2p_pairs(node, used)
        if pairs:
            shown = ", ".join(f"{a}-{b}" for a, b in pairs[:4])
            env.append(EnvVar(name="NCCL_P2P_DISABLE", value="1",
                              reason=f"GPUs {shown} on {node.name} have no CUDA peer-to-peer: copy through host "
                                     "memory instead of failing or hanging"))
        all_idx = sorted(d.index for d in node.devices)
        mine = [d.index for d in used]
        if mine != all_idx:
            env.append(EnvVar(name="CUDA_VISIBLE_DEVICES", value=",".join(map(str, mine)),
                              reason=f"the plan uses {len(mine)} of the {len(all_idx)} GPUs of {node.name}"))
    threads = max(1, (node.cpu.cores or 1) // max(1, len(used)))
    env.append(EnvVar(name="OMP_NUM_THREADS", value=str(threads),
                      reason=f"{node.cpu.cores} physical cores / {len(used)} ranks: no CPU oversubscription "
                             "(torchrun otherwise sets 1)"))
    return env


def _tcp_speed_gbit(cluster: Cluster, nodes: list[Node]) -> Optional[float]:
    """Wire speed of the TCP network: the network's nominal speed, else the slowest node's socket NIC."""
    if cluster.network is not None and cluster.network.link_speed_gbit_per_s:
        return cluster.network.link_speed_gbit_per_s
    speeds = []
    for n in nodes:
        name = inter_node_nic(n, cluster)
        speeds += [x.speed_gbit_per_s for x in n.nics if x.name == name and x.speed_gbit_per_s]
    return min(speeds) if len(speeds) == len(nodes) and speeds else None


def socket_tuning(speed_gbit: Optional[float]) -> list[EnvVar]:
    """NCCL socket threads for fast TCP: one thread and one socket cannot fill 25-100+ GbE."""
    if speed_gbit is None or speed_gbit < SOCKET_TUNING_MIN_GBIT:
        return []
    threads = 4 if speed_gbit >= 50 else 2
    src = ("NCCL User Guide: 'for generic 100G networks' NCCL_SOCKET_NTHREADS=4 and NCCL_NSOCKS_PERTHREAD=4, "
           "product <= 64; knowledge/links.yaml's 100gbe rate assumes it")
    return [EnvVar(name="NCCL_SOCKET_NTHREADS", value=str(threads),
                   reason=f"{speed_gbit:g} Gbit/s TCP: {threads} CPU helper threads per connection ({src})"),
            EnvVar(name="NCCL_NSOCKS_PERTHREAD", value="4",
                   reason=f"{speed_gbit:g} Gbit/s TCP: 4 sockets per thread spread the stream over several TCP "
                          "flows (default 1)")]


def common_env(plan: Plan, nodes: list[Node], used: list[list[Device]], multi_node: bool,
               cluster: Optional[Cluster] = None) -> list[EnvVar]:
    """Variables identical on every node."""
    gpu = used[0][0].kind == "gpu"
    env: list[EnvVar] = []
    if gpu:
        env.append(EnvVar(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="1",
                          reason="a failed or hung NCCL collective aborts the job instead of hanging it"))
        if multi_node and cluster is not None:
            env += network_env(cluster, nodes)
        # not with ZeRO-3 (FSDP2 + TP): Megatron-LM's --use-torch-fsdp2 refuses CUDA_DEVICE_MAX_CONNECTIONS=1
        # (validate_args: "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
        if plan.tp > 1 and plan.sequence_parallel and plan.zero_stage != 3:
            env.append(EnvVar(name="CUDA_DEVICE_MAX_CONNECTIONS", value="1",
                              reason="tensor parallel with sequence parallel: one hardware queue keeps the "
                                     "communication kernels ordered before compute (Megatron-LM requirement)"))
        elif plan.ep_overlap and plan.tp == 1:  # (Plan: no context parallelism beside expert parallelism)
            env.append(EnvVar(name="CUDA_DEVICE_MAX_CONNECTIONS", value="32",
                              reason="expert all-to-all overlap: the communication stream runs beside the paired "
                                     "micro-batch's compute on its own hardware queues (Megatron-LM's MoE examples "
                                     "set 32 with --overlap-moe-expert-parallel-comm)"))
    elif runs_on_deepspeed(plan):
        env.append(EnvVar(name="DS_ACCELERATOR", value="cpu",
                          reason="CPU ranks: DeepSpeed must use its CPU accelerator (gloo)"))
    return env


def network_env(cluster: Cluster, nodes: list[Node]) -> list[EnvVar]:
    """IB/RoCE vs EFA vs TCP settings for the whole job, each with its reason."""
    net = cluster.network
    if efa_fabric(cluster, nodes):
        return efa_env()
    if rdma_fabric(cluster, nodes):
        proto = net.protocol if net is not None and net.protocol in ("ib", "roce") else "ib/roce"
        if proto == "roce":
            return [EnvVar(name="NCCL_IB_DISABLE", value="0",
                           reason="RoCE network: NCCL's IB verbs transport runs over RoCE (GID chosen by NCCL; "
                                  "set NCCL_IB_GID_INDEX only if your fabric needs a given RoCEv2 GID)")]
        return [EnvVar(name="NCCL_IB_DISABLE", value="0",
                       reason=f"{proto} network: NCCL uses InfiniBand verbs (GPUDirect RDMA where the driver "
                              "allows), sockets only for bootstrap")]
    env: list[EnvVar] = []
    with_rdma = sorted({x.name for n in nodes for x in n.nics if x.kind in _FAST_KINDS and _usable(x)})
    if with_rdma:
        nic = net.nic if net is not None and net.nic else "its socket interface"
        env.append(EnvVar(name="NCCL_IB_DISABLE", value="1",
                          reason=f"the cluster's network is TCP over {nic}, although the nodes have InfiniBand/RoCE "
                                 f"({', '.join(with_rdma)}): the prediction is for TCP; drop this line (and "
                                 "predict with network ib-*) to use the faster fabric"))
    else:
        env.append(EnvVar(name="NCCL_IB_DISABLE", value="1",
                          reason="no InfiniBand/RoCE NIC on any node: NCCL uses TCP sockets (skips probing "
                                 "for IB devices)"))
    return env + socket_tuning(_tcp_speed_gbit(cluster, nodes))
