"""Environment variables and NUMA binding for each node, every one with the reason it is set."""
from __future__ import annotations

from typing import Optional

from ..schemas.hardware import Cluster, Device, Nic, Node
from ..schemas.launch import EnvVar
from ..schemas.plan import Plan

_FAST_KINDS = ("infiniband", "roce")


def inter_node_nic(node: Node, cluster: Cluster) -> Optional[str]:
    """The interface other nodes reach this one through: access.ifname, the network's NIC, else the fastest NIC."""
    if node.access.ifname:
        return node.access.ifname
    names = {n.name for n in node.nics}
    if cluster.network is not None and cluster.network.nic in names:
        return cluster.network.nic
    up = [n for n in node.nics if n.kind not in ("loopback",) and n.name != "lo" and n.operstate != "down"
          and n.kind not in _FAST_KINDS]
    if not up:  # IPoIB / RoCE netdevs carry sockets too
        up = [n for n in node.nics if n.kind != "loopback" and n.name != "lo" and n.operstate != "down"]
    if not up:
        return None
    return max(up, key=lambda n: (n.speed_gbit_per_s or 0.0, n.operstate == "up")).name


def has_rdma(node: Node) -> bool:
    """True when the node has an InfiniBand or RoCE NIC that is not down."""
    return any(n.kind in _FAST_KINDS and n.operstate != "down" for n in node.nics)


def _no_p2p_pairs(node: Node, used: list[Device]) -> list[tuple[int, int]]:
    """Pairs of used devices whose link reports no CUDA peer-to-peer."""
    idx = {d.index for d in used}
    return [(l.a, l.b) for l in node.links if l.a in idx and l.b in idx and l.p2p_supported is False]


def numa_binding(used: list[Device], node: Node) -> Optional[str]:
    """How ranks bind to their GPU's NUMA node, or None when binding brings nothing (one NUMA node, unknown)."""
    numa = [d.numa_node for d in used]
    if any(n is None or n < 0 for n in numa) or (len(set(numa)) < 2 and node.cpu.numa_nodes < 2):
        return None
    ranks = ", ".join(f"rank {i}->node {n}" for i, n in enumerate(numa))
    manual = "; ".join(f"numactl --cpunodebind={n} --membind={n}" for n in sorted(set(numa)))
    return (f"torchrun --numa-binding node binds local rank i to the NUMA node of GPU i ({ranks}); "
            f"by hand: {manual}")


def node_env(node: Node, used: list[Device], plan: Plan, cluster: Cluster, multi_node: bool) -> list[EnvVar]:
    """Per-node variables: socket interface, P2P, threads per rank, visible devices."""
    env: list[EnvVar] = []
    gpu = used[0].kind == "gpu"
    if multi_node:
        nic = inter_node_nic(node, cluster)
        if nic:
            why = f"{node.name} reaches the other nodes through {nic}"
            if gpu:
                env.append(EnvVar(name="NCCL_SOCKET_IFNAME", value=nic, reason=f"{why} (NCCL bootstrap/sockets)"))
            env.append(EnvVar(name="GLOO_SOCKET_IFNAME", value=nic, reason=f"{why} (gloo and torchrun's store)"))
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


def common_env(plan: Plan, nodes: list[Node], used: list[list[Device]], multi_node: bool) -> list[EnvVar]:
    """Variables identical on every node."""
    gpu = used[0][0].kind == "gpu"
    env: list[EnvVar] = []
    if gpu:
        env.append(EnvVar(name="TORCH_NCCL_ASYNC_ERROR_HANDLING", value="1",
                          reason="a failed or hung NCCL collective aborts the job instead of hanging it"))
        if multi_node and not all(has_rdma(n) for n in nodes):
            lacking = ", ".join(n.name for n in nodes if not has_rdma(n))
            env.append(EnvVar(name="NCCL_IB_DISABLE", value="1",
                              reason=f"no usable InfiniBand/RoCE NIC on {lacking}: NCCL uses TCP sockets"))
        if plan.tp > 1 and plan.sequence_parallel:
            env.append(EnvVar(name="CUDA_DEVICE_MAX_CONNECTIONS", value="1",
                              reason="tensor parallel with sequence parallel: one hardware queue keeps the "
                                     "communication kernels ordered before compute (Megatron-LM requirement)"))
    elif plan.zero_stage:
        env.append(EnvVar(name="DS_ACCELERATOR", value="cpu",
                          reason="CPU ranks: DeepSpeed must use its CPU accelerator (gloo)"))
    return env
