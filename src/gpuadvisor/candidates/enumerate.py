"""Enumerate every valid parallel plan for a cluster and a workload.

Degrees dp·tp·pp = nodes·devices_per_node (torchtitan ParallelDims), ZeRO stages 0/1/2/3/3-offload,
placements (TP inside a node unless asked), mesh orders, micro-batching with dp·mb·m = global batch,
pipeline schedules, DDP/ZeRO bucket sizes, comm hooks (opt-in: they change numerics), hpZ, recompute
and sequence parallelism. Every yielded plan passes `check_plan_for`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

from ..schemas import Cluster, Plan, Workload, check_plan_for


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _counts(limit: int, dense_up_to: int = 8) -> list[int]:
    """1..dense_up_to, then powers of two, then `limit` itself (devices or nodes to use)."""
    out = {c for c in range(1, min(limit, dense_up_to) + 1)}
    c = 1
    while c <= limit:
        out.add(c)
        c *= 2
    out.add(limit)
    return sorted(out)


@dataclass
class SearchSpace:
    """Knobs of the enumeration (defaults: the space `suggest` ranks)."""

    allow_fewer_devices: bool = True
    allow_tp_across_nodes: bool = False
    allow_comm_hooks: bool = False
    allow_batch_change: bool = False
    zero_options: Sequence[tuple[int, bool]] = ((0, False), (1, False), (2, False), (3, False), (3, True))
    ddp_bucket_mb: Sequence[float] = (25.0, 100.0)
    zero_reduce_buckets: Sequence[int] = (500_000_000, 50_000_000)
    schedules: Sequence[str] = ("1f1b", "gpipe", "interleaved")
    max_micro_batch: int = 64
    max_tp: int = 8
    batch_choices: Sequence[int] = field(default_factory=tuple)
    # ranking sets this: skip (and count in `pruned`) plans whose model states alone exceed it
    memory_limit_bytes: float = 0.0
    pruned: dict = field(default_factory=dict)


def _micro_batches(per_replica: int, max_mb: int) -> list[int]:
    """Micro-batch sizes dividing the per-replica batch (powers of two and the full batch)."""
    ds = [d for d in divisors(per_replica) if d <= max_mb]
    keep = [d for d in ds if d & (d - 1) == 0 or d == per_replica or d == ds[-1]]
    return keep or [1]


def enumerate_plans(cluster: Cluster, workload: Workload, *, allow_fewer_devices: bool = True,
                    allow_tp_across_nodes: bool = False, allow_comm_hooks: bool = False,
                    allow_batch_change: bool | None = None, space: SearchSpace | None = None) -> Iterator[Plan]:
    """Yield every valid Plan for `workload` on `cluster` (or on a subset of it when allowed).

    `allow_batch_change` (default: the workload's setting) also tries global batches of 1/2× and 2×.
    """
    sp = space or SearchSpace()
    sp.allow_fewer_devices = allow_fewer_devices
    sp.allow_tp_across_nodes = allow_tp_across_nodes or sp.allow_tp_across_nodes
    sp.allow_comm_hooks = allow_comm_hooks or sp.allow_comm_hooks
    abc = workload.training.allow_batch_change if allow_batch_change is None else allow_batch_change
    gb0 = workload.training.global_batch
    batches = list(sp.batch_choices) or ([gb0] + ([gb0 * 2] + ([gb0 // 2] if gb0 % 2 == 0 else []) if abc else []))
    model = workload.model
    transformer = model.kind == "transformer"
    n_nodes, gpn_max = len(cluster.nodes), min(cluster.devices_per_node)
    node_counts = _counts(n_nodes) if sp.allow_fewer_devices else [n_nodes]
    gpn_counts = _counts(gpn_max) if sp.allow_fewer_devices else [gpn_max]
    for gb in batches:
        wl = workload if gb == gb0 else workload.model_copy(update={
            "training": workload.training.model_copy(update={"global_batch": gb})})
        for nodes in node_counts:
            for gpn in gpn_counts:
                yield from _for_world(wl, sp, nodes, gpn, transformer)


def _for_world(wl: Workload, sp: SearchSpace, nodes: int, gpn: int, transformer: bool) -> Iterator[Plan]:
    """Plans on exactly nodes × gpn devices."""
    world = nodes * gpn
    m_ = wl.model
    gb = wl.training.global_batch
    for tp in divisors(world):
        if tp > 1 and (not transformer or tp > sp.max_tp or m_.n_heads % tp or m_.d_ff % tp):
            continue
        if tp > gpn and not sp.allow_tp_across_nodes:
            continue
        if tp > 1 and tp < gpn and gpn % tp:
            continue
        for pp in divisors(world // tp):
            if pp > 1 and (not transformer or pp > m_.n_layers):
                continue
            dp = world // (tp * pp)
            if gb % dp:
                continue
            yield from _for_degrees(wl, sp, nodes, gpn, dp, tp, pp)


def _for_degrees(wl: Workload, sp: SearchSpace, nodes: int, gpn: int, dp: int, tp: int, pp: int) -> Iterator[Plan]:
    """Plans for fixed degrees: ZeRO, micro-batching, schedules, buckets, recompute, SP, mesh order."""
    t = wl.training
    per_replica = t.global_batch // dp
    orders = ("tp-dp-pp", "tp-pp-dp") if (dp > 1 and pp > 1) else ("tp-dp-pp",)
    recomputes = (False, True) if t.allow_recompute and wl.model.kind == "transformer" else (False,)
    sps = (False, True) if tp > 1 else (False,)
    zeros = sp.zero_options if (tp == 1 and pp == 1) else ((0, False),)
    base = dict(dp=dp, tp=tp, pp=pp, nodes=nodes, devices_per_node=gpn)
    for mb in _micro_batches(per_replica, sp.max_micro_batch):
        m = per_replica // mb
        for zero, off in zeros:
            if zero and dp == 1 and not off:
                continue  # ZeRO sharding needs dp > 1 (offload alone still helps one GPU)
            if sp.memory_limit_bytes and _states_exceed(wl, sp, dp, tp, pp, zero, off):
                sp.pruned["out of device memory"] = sp.pruned.get("out of device memory", 0) + 1
                continue
            for sched, v in _schedules(pp, m, wl.model.n_layers, sp):
                for rc in recomputes:
                    for seqp in sps:
                        if seqp and t.seq_len % tp:
                            continue
                        for order in orders:
                            for extra in _knobs(sp, dp, zero, nodes, gpn):
                                fields = dict(base, zero_stage=zero, zero_offload=off, micro_batch_size=mb,
                                              num_micro_batches=m, pp_schedule=sched, pp_virtual_stages=v,
                                              recompute=rc, sequence_parallel=seqp, mesh_order=order, **extra)
                                try:
                                    plan = Plan(**fields)
                                    check_plan_for(plan, wl)
                                except ValueError:
                                    continue
                                yield plan


def _states_exceed(wl: Workload, sp: SearchSpace, dp: int, tp: int, pp: int, zero: int, off: bool) -> bool:
    """Lower bound: weights + grads + optimizer of one stage's TP shard exceed the device (ZeRO §3.1)."""
    from ..costmodel.analytical.memory import model_state_bytes
    per = wl.model.params / (tp * pp)
    w, g, o, _ = model_state_bytes(per, dp, zero, off, wl.training.precision, wl.training.optimizer)
    return w + g + o > sp.memory_limit_bytes


def _schedules(pp: int, m: int, layers: int, sp: SearchSpace) -> Iterator[tuple[str, int]]:
    """(schedule, virtual stages) options for a pipeline of pp stages and m micro-batches."""
    if pp == 1:
        yield "1f1b", 1
        return
    for s in sp.schedules:
        if s == "interleaved":
            if m % pp == 0 and layers % (pp * 2) == 0 and m >= pp:
                yield s, 2
        elif s == "1f1b":
            if m >= pp:
                yield s, 1
        else:
            yield s, 1


def _knobs(sp: SearchSpace, dp: int, zero: int, nodes: int, gpn: int) -> Iterator[dict]:
    """Bucket sizes, comm hooks and hpZ for the data-parallel part."""
    if dp == 1:
        yield {}
        return
    if zero == 0:
        for b in sp.ddp_bucket_mb:
            yield {"ddp_bucket_mb": b}
            if sp.allow_comm_hooks:
                for hook in ("fp16", "bf16", "powersgd"):
                    yield {"ddp_bucket_mb": b, "comm_hook": hook}
        return
    for rb in sp.zero_reduce_buckets:
        yield {"zero_reduce_bucket_size": rb}
        if zero == 3 and nodes > 1 and gpn > 1 and dp % gpn == 0:
            yield {"zero_reduce_bucket_size": rb, "zero_hpz_partition_size": gpn}
