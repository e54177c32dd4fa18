"""Enumerate every valid parallel plan for a cluster and a workload.

Degrees dp·tp·pp = nodes·devices_per_node (torchtitan ParallelDims), ZeRO stages 0/1/2/3/3-offload,
placements (TP inside a node unless asked), mesh orders, micro-batching with dp·mb·m = global batch,
pipeline schedules, DDP/ZeRO bucket sizes, comm hooks (opt-in: they change numerics), hpZ, recompute
and sequence parallelism, expert parallelism for MoE models. Every yielded plan passes `check_plan_for`.
TP communication overlap (Plan.tp_comm_overlap: Megatron's --tp-comm-overlap, torchtitan's async TP) is not
enumerated: it needs Transformer Engine or torch.compile with symmetric memory, which neither DeepSpeed nor the
bundled trainers run; `predict --plan ...,tp_comm_overlap=true` and config read-back price it. Megatron's expert
all-to-all overlap (Plan.ep_overlap) likewise: `predict --plan ...,ep_overlap=true` and read-back. Activation
checkpoints in host RAM (Plan.offload_activations, DeepSpeed's cpu_checkpointing) are not enumerated either: the
ranking tries them only when nothing fits (ranking.rank), and `predict --plan` and a ds_config.json with
cpu_checkpointing price them.

Bounded by design: the work grows with the number of distinct shapes, never with the device count or the
batch size (tests/candidates/test_bound.py). Rows <= N·G·T·P·C·M·K with
  N nodes used: 1..8, powers of two, all          <= log2(nodes) + 7   (19 for 16,384 nodes)
  G devices used per node: the same list           <= log2(gpn) + 7     (8 for 8 GPUs, 15 for 1,024)
  T tensor-parallel degrees: divisors <= max_tp     <= 8
  P pipeline degrees: divisors of world/tp <= layers, above DENSE_PP only powers of two and divisors of the
    layer count                                     <= 16 + log2(world) + d(layers)
  M micro-batch sizes: powers of two <= max_micro_batch, the largest divisor below it   <= log2(64) + 2 = 8
  C context-parallel degrees (Plan.cp): 1, and from CP_MIN_SEQ tokens on GPUs the powers of two <= CP_MAX
    dividing world/(tp·pp)                          <= 5
  K knobs per (degrees, micro-batch): ZeRO x schedule x recompute x SP x mesh order x buckets/hpZ
                                                    <= 144 (288 with comm hooks); x 4/3 for an eager attention
                                                    core (its selective recompute: Plan.recompute_attention)
and dp = world/(tp·pp) dividing the batch (x3 batches with allow_batch_change). The batch enters only through
divisibility, in O(max_mb) integer steps (`small_divisors`): a 2^31 batch gives the same rows as 2^20 on up to
1,024 devices.
Measured (7B at the 2^31 batch, default knobs, 2 shared cores whose speed varies up to 2x run to run, the rows
kept as their float array `Rows.array`, tuples only on demand): 128x8 GPUs 192k rows in 0.08-0.11 s; 16,384x8
(the schema's largest device count) 413k rows in 0.20-0.49 s; 128x1,024 939k rows in 1.0-1.1 s
(benchmarks/ranking_speed.py; with a tuple per row built as well: 0.24-0.28, 0.72-0.78 and 1.4-2.1 s).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from ..schemas import Cluster, Plan, Workload, check_plan_for
from ..schemas.plan import handover_zero_impl


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
    # (ZeRO stage, offload code: OFFLOADS): DDP, ZeRO-1/2/3, ZeRO-2 with the optimizer in host RAM (ZeRO-Offload,
    # Ren et al. 2021), ZeRO-3 with the optimizer only or the parameters too (ZeRO-Infinity's CPU offload)
    zero_options: Sequence[tuple[int, int]] = ((0, 0), (1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))
    ddp_bucket_mb: Sequence[float] = (25.0, 100.0)
    zero_reduce_buckets: Sequence[int] = (500_000_000, 50_000_000)
    schedules: Sequence[str] = ("1f1b", "gpipe", "interleaved")
    max_micro_batch: int = 64
    max_tp: int = 8
    batch_choices: Sequence[int] = field(default_factory=tuple)
    # ranking sets this: skip (and count in `pruned`) plans whose model states alone exceed it
    memory_limit_bytes: float = 0.0
    pruned: dict = field(default_factory=dict)


def small_divisors(n: int, cap: int, *, one_more: bool = False) -> list[int]:
    """Divisors of n up to `cap`, ascending, in O(cap) steps whatever n is (a batch may be 2^31).

    one_more: also the smallest divisor above `cap` (O(√n) integer steps, no evaluation), if any.
    """
    out = [d for d in range(1, min(n, cap) + 1) if n % d == 0]
    if one_more and n > cap:
        root = math.isqrt(n)
        above = next((d for d in range(cap + 1, root + 1) if n % d == 0), None)
        if above is None:  # the smallest cofactor n // d above cap, d <= √n
            above = min(n // d for d in range(1, root + 1) if n % d == 0 and n // d > cap)
        out.append(above)
    return out


@lru_cache(maxsize=4096)
def _micro_batches(per_replica: int, max_mb: int) -> tuple[int, ...]:
    """Micro-batch sizes dividing the per-replica batch: powers of two, the largest divisor up to
    max_mb and the full batch if it is that small. At most log2(max_mb) + 2 sizes, O(max_mb) steps."""
    ds = small_divisors(per_replica, max_mb)
    keep = [d for d in ds if d & (d - 1) == 0 or d == per_replica or d == ds[-1]]
    return tuple(keep) or (1,)


# pipeline degrees above this are kept only as powers of two or divisors of the layer count
DENSE_PP = 16
SCHEDULES = ("1f1b", "gpipe", "interleaved")
HOOKS = ("none", "fp16", "bf16", "powersgd")
ORDERS = ("tp-dp-pp", "tp-pp-dp")
# Plan.zero_impl as a row code: unset (Plan.zero_runtime's default), DeepSpeed, FSDP
ZERO_IMPLS = (None, "deepspeed", "fsdp")
# share of the layers that recompute, as enumerated: none, every layer, every other layer (Plan.recompute_interval 2:
# torchtitan's layer-level selective checkpointing default, Megatron's block method over half a stage)
RECOMPUTE_SHARES = (0.0, 1.0, 0.5)
# the "recompute_attention" column's codes: no selective recompute, the attention core's (Plan.recompute_attention),
# op-level (Plan.recompute_ops, never enumerated: `predict` and the torchtitan readback price it)
CORE_RECOMPUTE = (None, "attention", "ops")
# the "zero_offload" column's codes (Plan.offload_code): nothing in host RAM, the optimizer states (DeepSpeed
# offload_optimizer), the optimizer and the parameter partition (offload_param too, stage 3)
OFFLOADS = (None, "optimizer", "optimizer+params")
# one candidate as a tuple (the batch path's row); enumerate_plans turns rows into validated Plans
COLUMNS = ("dp", "tp", "pp", "zero_stage", "zero_offload", "micro_batch_size", "num_micro_batches", "pp_schedule",
           "pp_virtual_stages", "recompute", "sequence_parallel", "mesh_order", "ddp_bucket_mb", "comm_hook",
           "zero_reduce_bucket_size", "zero_hpz_partition_size", "nodes", "devices_per_node", "ep", "tp_comm_overlap",
           "zero_impl", "recompute_attention", "cp", "ep_overlap", "offload_activations", "global_batch")


def row_plan(row: Sequence) -> Plan:
    """The validated Plan of one enumeration row (codes for schedule, hook and mesh order decoded)."""
    f = dict(zip(COLUMNS, row))
    f.pop("global_batch")
    for k in ("dp", "tp", "pp", "zero_stage", "micro_batch_size", "num_micro_batches", "pp_virtual_stages",
              "zero_reduce_bucket_size", "zero_hpz_partition_size", "nodes", "devices_per_node", "ep", "cp"):
        f[k] = int(f[k])
    f.update(Plan.offload_fields(int(f["zero_offload"]), f["zero_stage"]))  # the column is Plan.offload_code
    for k in ("sequence_parallel", "tp_comm_overlap", "ep_overlap", "offload_activations"):
        f[k] = bool(f[k])
    # the column is the core's recompute mode (CORE_RECOMPUTE): none, the attention core's, op-level
    mode = CORE_RECOMPUTE[int(f["recompute_attention"])]
    f["recompute_attention"], f["recompute_ops"] = mode == "attention", mode == "ops"
    f.update(Plan.recompute_fields(float(f["recompute"])))  # the column is Plan.recompute_fraction
    f["pp_schedule"] = SCHEDULES[int(f["pp_schedule"])]
    f["comm_hook"] = HOOKS[int(f["comm_hook"])]
    f["mesh_order"] = ORDERS[int(f["mesh_order"])]
    f["ddp_bucket_mb"] = float(f["ddp_bucket_mb"])
    f["zero_impl"] = ZERO_IMPLS[int(f["zero_impl"])]
    return Plan(**f)


def _batches(workload: Workload, sp: SearchSpace, allow_batch_change: bool | None) -> list[tuple[int, Workload]]:
    abc = workload.training.allow_batch_change if allow_batch_change is None else allow_batch_change
    gb0 = workload.training.global_batch
    batches = list(sp.batch_choices) or ([gb0] + ([gb0 * 2] + ([gb0 // 2] if gb0 % 2 == 0 else []) if abc else []))
    return [(gb, workload if gb == gb0 else workload.model_copy(update={
        "training": workload.training.model_copy(update={"global_batch": gb})})) for gb in batches]


class Rows(Sequence):
    """The enumeration's rows: one float array (`array`, COLUMNS order), the engine's input, and the same rows as
    tuples on demand. The array is assembled from the templates and runs that `_Blocks` collects; the tuples are
    built from the same templates and runs the plain way, one Python tuple per row, only when something iterates
    them (tests, `enumerate_plans`): building them on every enumeration took ~20 ms of the ~100 ms that ranking
    32.8k rows of 7B on 4 x 8 A100 costs here. One row (`rows[i]`, what a shown plan needs) is read off the
    array. A slice is a plain list of tuples."""

    def __init__(self, blocks: "_Blocks") -> None:
        self._blocks = blocks
        self.array: np.ndarray = blocks.array()
        self._tuples: list[tuple] | None = None

    def tuples(self) -> list[tuple]:
        """Every row as a tuple (built once)."""
        if self._tuples is None:
            self._tuples = self._blocks.tuples()
        return self._tuples

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return self.tuples()[i]
        if self._tuples is not None:
            return self._tuples[i]
        return tuple(self.array[i].tolist())

    def __iter__(self):
        return iter(self.tuples())


class _Blocks:
    """Collects the array of `Rows` in enumeration order: each tail (the columns after the micro-batch, one
    distinct list per degrees, ZeRO choice, ep and schedules) as a template, and each emitted run of rows as
    (template, its seven leading columns); `array()` converts every template once and assembles the runs with a
    few vectorised operations, so the work in Python stays one append per run."""

    def __init__(self) -> None:
        self.tails: list[list[tuple]] = []
        self.meta: list[tuple] = []  # (nodes, gpn, ep, 0, gb, cp) of each template
        self.chunks: list[int] = []
        self.leads: list[tuple] = []

    def template(self, tail: list[tuple], nodes: int, gpn: int, ep: int, gb: int, cp: int = 1) -> int:
        """Register `tail` ((sc, v, rc, seqp, order, bucket, hook, zrb, hpz, impl, ra) rows); its template id."""
        self.tails.append(tail)
        self.meta.append((nodes, gpn, ep, 0, gb, cp))
        return len(self.tails) - 1

    def emit(self, template: int, lead: tuple) -> None:
        """A run of rows: `template`'s tail after `lead` (dp, tp, pp, zero, off, mb, m)."""
        self.chunks.append(template)
        self.leads.append(lead)

    def tuples(self) -> list[tuple]:
        """The rows as tuples, run by run: the lead, the template's tail and meta, in COLUMNS order."""
        out: list[tuple] = []
        for template, lead in zip(self.chunks, self.leads):
            nodes, gpn, ep, overlap, gb, cp = self.meta[template]
            out.extend([lead + (sc, v, rc, seqp, order, bucket, hook, zrb, hpz, nodes, gpn, ep, bool(overlap), impl,
                                ra, cp, False, False, gb)
                        for sc, v, rc, seqp, order, bucket, hook, zrb, hpz, impl, ra in self.tails[template]])
        return out

    def array(self) -> np.ndarray:
        sizes = np.array([len(t) for t in self.tails], dtype=np.int64)
        chunk = np.array(self.chunks, dtype=np.int64)
        n = sizes[chunk] if len(chunk) else np.zeros(0, dtype=np.int64)
        out = np.zeros((int(n.sum()), len(COLUMNS)))
        if not len(out):
            return out
        first = np.cumsum(sizes) - sizes  # each template's first row among all tails
        start = np.cumsum(n) - n  # each run's first row in the output
        idx = np.arange(len(out)) - np.repeat(start - first[chunk], n)
        tails = np.fromiter(itertools.chain.from_iterable(itertools.chain.from_iterable(self.tails)), dtype=float,
                            count=int(sizes.sum()) * 11).reshape(-1, 11)[idx]
        meta = np.repeat(np.array(self.meta, dtype=float)[chunk], n, axis=0)
        out[:, :7] = np.repeat(np.array(self.leads, dtype=float), n, axis=0)
        out[:, 7:16] = tails[:, :9]
        out[:, 16:20] = meta[:, :4]
        out[:, 20:22] = tails[:, 9:11]
        out[:, 22] = meta[:, 5]
        # columns 23 (ep_overlap) and 24 (offload_activations) stay 0: never enumerated (module docstring)
        out[:, 25] = meta[:, 4]
        return out


def enumerate_rows(cluster: Cluster, workload: Workload, *, allow_fewer_devices: bool = True,
                   allow_tp_across_nodes: bool = False, allow_comm_hooks: bool = False,
                   allow_batch_change: bool | None = None, space: SearchSpace | None = None) -> Rows:
    """Every candidate as a row of COLUMNS (no pydantic objects: the batch cost model's input).

    Same candidates, same order as `enumerate_plans`; every row is a valid plan (tests check both).
    """
    sp = space or SearchSpace()
    sp.allow_fewer_devices = allow_fewer_devices
    sp.allow_tp_across_nodes = allow_tp_across_nodes or sp.allow_tp_across_nodes
    sp.allow_comm_hooks = allow_comm_hooks or sp.allow_comm_hooks
    transformer = workload.model.kind == "transformer"
    n_nodes, gpn_max = len(cluster.nodes), min(cluster.devices_per_node)
    node_counts = _counts(n_nodes) if sp.allow_fewer_devices else [n_nodes]
    gpn_counts = _counts(gpn_max) if sp.allow_fewer_devices else [gpn_max]
    blocks = _Blocks()
    gpu = cluster.nodes[0].devices[0].kind == "gpu"
    for _, wl in _batches(workload, sp, allow_batch_change):
        for nodes in node_counts:
            for gpn in gpn_counts:
                _for_world(blocks, wl, sp, nodes, gpn, transformer, gpu)
    return Rows(blocks)


def enumerate_plans(cluster: Cluster, workload: Workload, *, allow_fewer_devices: bool = True,
                    allow_tp_across_nodes: bool = False, allow_comm_hooks: bool = False,
                    allow_batch_change: bool | None = None, space: SearchSpace | None = None) -> Iterator[Plan]:
    """Yield every valid Plan for `workload` on `cluster` (or on a subset of it when allowed).

    `allow_batch_change` (default: the workload's setting) also tries global batches of 1/2× and 2×.
    """
    rows = enumerate_rows(cluster, workload, allow_fewer_devices=allow_fewer_devices,
                          allow_tp_across_nodes=allow_tp_across_nodes, allow_comm_hooks=allow_comm_hooks,
                          allow_batch_change=allow_batch_change, space=space)
    wls = {gb: wl for gb, wl in _batches(workload, space or SearchSpace(), allow_batch_change)}
    for row in rows:
        try:
            plan = row_plan(row)
            check_plan_for(plan, wls.get(row[-1]) or workload.model_copy(update={
                "training": workload.training.model_copy(update={"global_batch": int(row[-1])})}))
        except ValueError:
            continue
        yield plan


def _for_world(blocks: _Blocks, wl: Workload, sp: SearchSpace, nodes: int, gpn: int, transformer: bool,
               gpu: bool) -> None:
    """Rows on exactly nodes × gpn devices."""
    world = nodes * gpn
    m_ = wl.model
    gb = wl.training.global_batch
    adapters = wl.finetune.adapters  # LoRA/QLoRA run data parallel (DDP, ZeRO/FSDP, offload), as peft users do
    for tp in divisors(world):
        if tp > 1 and (adapters or not transformer or tp > sp.max_tp or m_.n_heads % tp or m_.d_ff % tp):
            continue
        if tp > gpn and not sp.allow_tp_across_nodes:
            continue
        if tp > 1 and tp < gpn and gpn % tp:
            continue
        for pp in divisors(world // tp):
            if pp > 1 and (adapters or not transformer or pp > m_.n_layers):
                continue
            if pp > DENSE_PP and pp & (pp - 1) and m_.n_layers % pp:
                continue  # bounded: past DENSE_PP only powers of two and even splits of the layers
            for cp in context_parallel_degrees(wl, world // (tp * pp), gpu):
                dp = world // (tp * pp * cp)
                if gb % dp:
                    continue
                _for_degrees(blocks, wl, sp, nodes, gpn, dp, tp, pp, gpu, cp)


#: Sequences from this length up get context-parallel candidates (Plan.cp). Below it a sequence's activations
#: are small beside the model states, and the key/value exchange is a larger share of the attention it hides
#: behind (it grows with s/cp, the core with s·s/cp): Megatron-Core and torchtitan document CP for long-context
#: training, their published CP runs start at 8k-16k tokens (torchtitan Llama 3 8B at 64k-256k, Megatron-Bridge
#: Llama 3.1 405B at 8k with CP 2). A bound on the candidates, not a rule: the cost model ranks them.
CP_MIN_SEQ = 8192
#: Largest context-parallel degree enumerated (powers of two up to it; torchtitan's and Megatron-Bridge's public
#: runs use 2-8, 16 at 1M tokens)
CP_MAX = 16


def context_parallel_degrees(wl: Workload, rest: int, gpu: bool) -> list[int]:
    """Context-parallel degrees to try with `rest` = world/(tp·pp) ranks left: 1, and for full training of a dense
    transformer on GPUs with a fused attention core and seq_len >= CP_MIN_SEQ each power of two up to CP_MAX that
    divides `rest` and keeps seq_len divisible by 2·cp (Plan, check_plan_for). MoE models, adapters and CPU ranks
    (the bundled trainers run no ring attention) get 1."""
    m, t = wl.model, wl.training
    if (not gpu or m.kind != "transformer" or m.n_experts or wl.finetune.adapters or t.seq_len < CP_MIN_SEQ
            or wl.core_kernel == "eager"):
        return [1]
    return [1] + [cp for cp in (2 ** k for k in range(1, CP_MAX.bit_length()))
                  if cp <= CP_MAX and rest % cp == 0 and t.seq_len % (2 * cp) == 0]


def _for_degrees(blocks: _Blocks, wl: Workload, sp: SearchSpace, nodes: int, gpn: int, dp: int, tp: int,
                 pp: int, gpu: bool, cp: int = 1) -> None:
    """Rows for fixed degrees: ZeRO, micro-batching, schedules, buckets, recompute, SP, mesh order; each ZeRO row
    with the runtime the hand-over runs it on (handover_zero_impl: FSDP2 for ZeRO-3 across nodes and above DeepSpeed's
    live-parameter cap). With context parallelism (cp > 1) ZeRO shards over dp·cp, without offload, hpZ or comm
    hooks, in the tp-cp-dp-pp order (Plan)."""
    t = wl.training
    gb = t.global_batch
    per_replica = gb // dp
    orders = (0, 1) if (dp > 1 and pp > 1 and cp == 1) else (0,)
    # no recompute, every layer (full), every other layer (RECOMPUTE_SHARES: the recompute column's values); every
    # other layer for pure data parallelism of full training only, where FSDP/DeepSpeed users checkpoint layer by
    # layer (torchtitan's layer-level selective AC): hybrids keep none/full, and the candidate count at scale stays
    recomputes: tuple[float, ...] = RECOMPUTE_SHARES if t.allow_recompute and wl.model.kind == "transformer" else (0.0,)
    if tp * pp > 1 or wl.finetune.adapters:  # transformers' gradient checkpointing (peft) is every layer or none
        recomputes = tuple(r for r in recomputes if r in (0.0, 1.0))
    # the attention core's selective recompute (Megatron --recompute-granularity selective) instead of none or full,
    # where the core stores its s x s scores (an unfused "eager" core, full training: transformers/peft have no
    # such mode); with a fused kernel it only adds a core forward, never a candidate
    rcs = [(rc, False) for rc in recomputes] + ([(0.0, True)] if (
        wl.model.kind == "transformer" and wl.core_kernel == "eager" and not wl.finetune.adapters) else [])
    sps = (False, True) if tp > 1 and (t.seq_len // cp) % tp == 0 else (False,)
    zeros = sp.zero_options if (tp == 1 and pp == 1 and cp == 1) else _hybrid_zeros(sp, pp)
    shard = dp * cp  # ZeRO's and the gradients' group (Plan.gradient_ranks)
    knobs = {z: [k for k in _knobs(sp, shard, z, nodes, gpn, tp * pp * cp == 1) if cp == 1 or k[1] == 0]
             for z in {z for z, _ in zeros}}
    eps = expert_parallel_degrees(wl, dp, tp) if cp == 1 else [1]
    # the bound does not depend on the micro-batch: once per (ZeRO choice, ep)
    exceed: dict[tuple[int, int, int], bool] = {}
    impls: dict[tuple, int] = {}
    tails: dict[tuple, int] = {}  # -> the tail rows' template in `blocks`
    for mb in _micro_batches(per_replica, sp.max_micro_batch):
        m = per_replica // mb
        for zero, off in zeros:
            if zero and shard == 1 and (not off or (zero == 3 and off == 1)):
                continue  # ZeRO sharding needs dp > 1 (offload alone still helps one GPU: ZeRO-2's, or params too)
            if off == 1 and wl.finetune.adapters:
                continue  # the adapters' optimizer states are megabytes: offloading them alone saves nothing
            scheds = list(_schedules(pp, m, wl.model.n_layers, sp))
            for ep in eps:
                if ep > 1 and off:
                    continue  # offload runs without expert parallelism (Plan)
                key = (zero, off, ep)
                if key not in exceed:
                    exceed[key] = bool(sp.memory_limit_bytes) and _states_exceed(wl, sp, shard, tp, pp, zero, off, ep)
                if exceed[key]:
                    # count every plan the bound removes (not one per micro-batch/ZeRO choice)
                    cut = (len(scheds) * len(rcs) * len(sps) * (len(orders) if ep == 1 else 1)
                           * len([k for k in knobs[zero] if ep == 1 or k[3] == 1]))
                    sp.pruned["out of device memory"] = sp.pruned.get("out of device memory", 0) + cut
                    continue
                # the columns after (dp, tp, pp, zero, off, mb, m) repeat for every micro-batch with the same
                # schedules: built once as a template, then one run per micro-batch (_Blocks)
                tkey = (zero, off, ep, tuple(scheds))
                if tkey not in tails:
                    tail: list[tuple] = []
                    for sched, v in scheds:
                        sc = SCHEDULES.index(sched)
                        for rc, ra in rcs:
                            for seqp in sps:
                                for order in (orders if ep == 1 else (0,)):  # ep ranks are consecutive (Plan)
                                    for bucket, hook, zrb, hpz in knobs[zero]:
                                        if ep > 1 and hpz > 1:
                                            continue
                                        impl = impls.get((zero, off, hpz, ep))
                                        if impl is None:
                                            impl = impls[(zero, off, hpz, ep)] = ZERO_IMPLS.index(
                                                handover_zero_impl(wl, zero_stage=zero, tp=tp, pp=pp, ep=ep,
                                                                   zero_offload=bool(off), hpz=hpz, nodes=nodes,
                                                                   gpu=gpu))
                                        tail.append((sc, v, rc, seqp, order, bucket, hook, zrb, hpz, impl, ra))
                    tails[tkey] = blocks.template(tail, nodes, gpn, ep, gb, cp)
                blocks.emit(tails[tkey], (dp, tp, pp, zero, off, mb, m))


def expert_parallel_degrees(wl: Workload, dp: int, tp: int) -> list[int]:
    """Expert-parallel degrees to try: 1, and for MoE models trained in full each power of two (and the expert
    count) that divides the experts and dp·tp and covers whole TP groups (ep a multiple of tp), so the expert
    data-parallel group dp·tp/ep is a slice of dp. At most log2(experts) + 2 of them."""
    m = wl.model
    if m.kind != "transformer" or not m.n_experts or wl.finetune.adapters:
        return [1]
    out = [1]
    for ep in sorted({2 ** k for k in range(1, m.n_experts.bit_length())} | {m.n_experts}):
        if ep > 1 and m.n_experts % ep == 0 and (dp * tp) % ep == 0 and ep % tp == 0:
            out.append(ep)
    return out


def _hybrid_zeros(sp: SearchSpace, pp: int) -> tuple:
    """ZeRO choices with TP/PP (Plan's rules): no offload; ZeRO-2 not with PP. ZeRO-3 with PP is not proposed
    either: torch's pipelining runs it as FSDP per stage, which holds ZeRO-1's memory and syncs once per step
    (costmodel.engine, `fsdp_stage`), so ZeRO-1 with PP, the simpler plan, is the same candidate; Plan still
    accepts it (predict --plan, torchtitan readback)."""
    return tuple((z, off) for z, off in sp.zero_options if not off and not (z >= 2 and pp > 1))


def _states_exceed(wl: Workload, sp: SearchSpace, dp: int, tp: int, pp: int, zero: int, off: int,
                   ep: int = 1) -> bool:
    """Lower bound: weights + grads + optimizer of one stage's TP shard exceed the device (ZeRO §3.1).

    With adapters (LoRA/QLoRA) the bound is the frozen base's share alone (its optimizer states are tiny).
    With expert parallelism a device holds 1/ep of the routed experts, and ZeRO shards their states over the
    expert data-parallel group dp·tp/ep, not dp: the bound divides them by dp like the dense part, which stays
    a lower bound because enumeration keeps ep >= tp.
    """
    from ..costmodel.analytical.memory import model_state_bytes, state_bytes_per_param
    if wl.finetune.adapters:
        from ..workload.finetune import frozen_model_bytes
        wb = state_bytes_per_param(wl.training.precision, wl.training.optimizer)[0]
        base = frozen_model_bytes(wl.model, wl.finetune, wb) / (tp * pp)
        return (base / dp if zero >= 3 else base) > sp.memory_limit_bytes
    per = wl.model.params / (tp * pp)
    if ep > 1:
        from ..workload.shapes import layer_shape
        experts = layer_shape(wl.model).routed_expert_params * wl.model.n_layers
        per = (wl.model.params - experts) / (tp * pp) + experts / (ep * pp)
    w, g, o, _ = model_state_bytes(per, dp, zero, off > 0, wl.training.precision, wl.training.optimizer,
                                   offload_param=off >= 2)
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
            yield s, 1
        else:
            yield s, 1


def _knobs(sp: SearchSpace, dp: int, zero: int, nodes: int, gpn: int, pure_dp: bool = True) -> Iterator[tuple]:
    """(ddp_bucket_mb, comm hook code, zero_reduce_bucket_size, hpz) for the data-parallel part."""
    if dp == 1:
        yield 25.0, 0, 500_000_000, 1
        return
    if zero == 0:
        for b in sp.ddp_bucket_mb:
            yield float(b), 0, 500_000_000, 1
            if sp.allow_comm_hooks:
                for hook in (1, 2, 3):
                    yield float(b), hook, 500_000_000, 1
        return
    for rb in sp.zero_reduce_buckets:
        yield 25.0, 0, int(rb), 1
        if zero == 3 and pure_dp and nodes > 1 and gpn > 1 and dp % gpn == 0:
            yield 25.0, 0, int(rb), gpn
