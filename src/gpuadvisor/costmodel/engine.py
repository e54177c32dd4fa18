"""The cost model's one physics engine: every candidate plan at once, as NumPy arrays.

`evaluate_batch(rows, ctx, rules)` takes enumeration rows (candidates.COLUMNS) and computes, per row, peak
memory per device (and its parts), feasibility (device memory, host RAM for offload, forbid rules), the step
time and its breakdown (compute, exposed TP/PP/DP/ZeRO communication per link kind, pipeline bubble, offload,
optimizer, overhead), bytes per link kind and per node NIC, tokens/s, and which rules fired. A single plan is a
batch of one (`evaluate`). Formulas live in memory.py, compute.py, comm.py and pipeline.py with their sources;
this module composes them. Rows are plain tuples: no pydantic object is built until a plan is shown.
"""
from __future__ import annotations

import functools
import itertools
from typing import Optional, Sequence

import numpy as np

from ..candidates.enumerate import COLUMNS, CORE_RECOMPUTE, HOOKS, ORDERS, SCHEDULES, ZERO_IMPLS
from ..schemas import Plan
from ..schemas.plan import DEEPSPEED_MAX_LIVE_PARAMETERS, DEEPSPEED_MAX_REUSE_DISTANCE, fsdp_by_default
from .analytical import Context
from .analytical.comm import POWERSGD_RANK, Group, allreduce_s, nvls_group, powersgd_ratio
from .analytical.comm import reduce_scatter_s as _rs
from .analytical.comm import ring_allreduce_s as _ring
from .analytical.comm import ring_attention_exchange_s, ring_steps_latency_s
from .analytical.compute import CORE_FORWARD_SHARE, alignment_factor, layer_gemm_efficiency
from .analytical.memory import (MemoryParts, activation_bytes_per_layer, chunked_loss_bytes, logits_bytes,
                                state_bytes_per_param)
from .rules import Rule, load_rules

__all__ = ["Batch", "Eval", "evaluate", "evaluate_batch", "plan_row", "unique_rows", "REASONS", "MEMORY_TIGHT"]

# reason codes of the `reason` array (0: feasible)
REASONS = (None, "out of device memory", "out of host memory for offload")
# A plan above this fraction of usable device memory is flagged and never ranked first while a plan below it
# exists: the allocator's fragmentation varies run to run (PyTorch CUDA memory docs: reserved/allocated
# 1.05-1.2) and the peak of a real step carries temporaries the model does not list (cuBLAS workspaces,
# NCCL channel buffers grown on demand).
MEMORY_TIGHT = 0.90
_GB = 1e9
# bytes of one FP8 element (E4M3 or E5M2), and of one fp32 element (master weights and their gradients)
FP8_BYTES = 1.0
FP32_BYTES = 4.0
# checkpoints DeepSpeed's cpu_checkpointing leaves on the device: the newest (keep_last_count=1) and the two whose
# device tensors its forward stash still holds (max_fwd_stash_count=2): _ActivationOffloadEngine as checkpointing.py
# builds it (DeepSpeed 0.19.8, runtime/activation_checkpointing/offload_activations.py)
ACT_OFFLOAD_RESIDENT = 3.0


def plan_row(p: Plan) -> tuple:
    """The enumeration row of one Plan (candidates.COLUMNS order; the inverse of candidates.row_plan)."""
    return (p.dp, p.tp, p.pp, p.zero_stage, p.offload_code, p.micro_batch_size, p.num_micro_batches,
            SCHEDULES.index(p.pp_schedule), p.pp_virtual_stages, p.recompute_fraction, int(p.sequence_parallel),
            ORDERS.index(p.mesh_order), p.ddp_bucket_mb, HOOKS.index(p.comm_hook), p.zero_reduce_bucket_size,
            p.zero_hpz_partition_size, p.nodes, p.devices_per_node, p.ep, int(p.tp_comm_overlap),
            ZERO_IMPLS.index(p.zero_impl),
            CORE_RECOMPUTE.index("attention" if p.recompute_attention else "ops" if p.recompute_ops else None),
            p.cp, int(p.ep_overlap), int(p.offload_activations), p.global_batch())


class Eval:
    """One plan's result (row i of a Batch), converted to schemas.Estimate only for the plans shown."""

    __slots__ = ("plan", "feasible", "reason", "step_s", "tps", "analytical_tps", "compute_s", "comm", "bubble_s",
                 "offload_s", "optimizer_s", "overhead_s", "mem", "link_bytes", "nic_bytes", "rules", "factor",
                 "learned", "uncertainty", "memory_fraction")

    def __init__(self, plan: Plan):
        self.plan = plan
        self.feasible, self.reason = True, None
        self.comm: dict[str, float] = {}
        self.link_bytes: dict[str, float] = {}
        self.nic_bytes = 0.0
        self.rules: list = []
        self.factor, self.learned, self.uncertainty = 1.0, 1.0, None
        self.bubble_s = self.offload_s = self.optimizer_s = self.overhead_s = 0.0
        self.memory_fraction = 0.0


def _overlapped(comm, last, window, contention):
    """Exposed time of communication beside `window` of compute (PyTorch DDP, Li et al. 2020 §3.2.3).

    The last bucket is always exposed and what exceeds the window is exposed; the hidden part still slows
    compute by `contention` (NCCL kernels share SMs and HBM: Jangda et al. 2022 §2).
    """
    hidden = np.maximum(0.0, np.minimum(comm - last, window))
    return np.where(comm <= 0, 0.0, comm - hidden + contention * hidden)


class _G:
    """Group attributes of each row as arrays (from Topology.group, one call per distinct degree tuple)."""

    def __init__(self, ctx: Context, kind: str, keys: np.ndarray, uniq: list):
        groups: list[Group] = [ctx.topo.group(kind, dp, tp, pp, nodes, gpn, ORDERS[o])
                               for dp, tp, pp, nodes, gpn, o in uniq]

        def arr(attr: str) -> np.ndarray:
            return np.array([getattr(g, attr) for g in groups], dtype=float)[keys]
        self.n, self.nodes, self.per_node = arr("n"), arr("nodes"), arr("per_node")
        self.bw, self.lat, self.intra_bw, self.intra_lat = (arr("bw_gb_per_s"), arr("latency_us"), arr("intra_bw"),
                                                            arr("intra_lat"))
        self.net_bw_per_flow, self.flows = arr("net_bw_per_flow"), arr("flows_per_nic")
        self.node_flows = arr("flows_per_node")  # over all of the busiest node's NICs (what trials measure)
        self.shared_chain = arr("shared_chain")
        self.hier_min, self.tree_bw = ctx.hier_min, ctx.tree_bw  # the all-reduce algorithms in play
        # NCCL's NVLS all-reduce where the group sits on one node's NVLink-SHARP switch (comm.nvls_group)
        self.nvls = (np.array([ctx.nvls_factor if nvls_group(g.nodes, g.kind, g.n) else 0.0 for g in groups])[keys]
                     if ctx.nvls_factor else 0.0)
        self.kind_u = [g.kind for g in groups]
        self.kind = np.array(self.kind_u, dtype=object)[keys]
        self.keys = keys

    def allreduce(self, size, nvls=True):
        """All-reduce on the placed group: min of the flat ring, NCCL's tree, NVLS inside an NVLink-SHARP node and the
        hierarchical one (comm.allreduce_s). `nvls` False (per row or for all) keeps NVLS out: collectives that are a
        reduce-scatter and an all-gather of the same volume (sequence-parallel TP), which NVLS does not speed up."""
        return allreduce_s(size, self.n, self.nodes, self.per_node, self.bw, self.lat, self.intra_bw,
                           self.intra_lat, self.flows, self.net_bw_per_flow, self.hier_min, self.tree_bw,
                           np.where(nvls, self.nvls, 0.0))

    def rs(self, size):
        return _rs(size, self.n, self.bw, self.lat, steps_latency_s=self.ring_lat_s)

    @functools.cached_property
    def ring_lat_s(self):
        """Latency of one ring pass over the group (comm.ring_steps_latency_s): what each extra bucket pays."""
        return ring_steps_latency_s(self.n, self.lat, self.nodes, self.intra_lat)

    def per_kind(self, table: dict, default: float) -> np.ndarray:
        """A per-link-kind constant (TP comm efficiency, DDP contention, P2P call cost) for each row."""
        return _per_kind(self.kind_u, self.keys, table, default)


def _per_kind(kinds, keys: np.ndarray, table: dict, default: float) -> np.ndarray:
    """`table`'s value (else `default`) for each distinct link kind in `kinds`, spread to the rows by `keys`."""
    return np.array([table.get(k, default) for k in kinds], dtype=float)[keys]


class Batch:
    """Arrays of one evaluation (index i = row i). `eval(i)` gives row i as an Eval with its breakdown."""

    def __init__(self, n: int):
        self.n = n
        z = np.zeros(n)
        self.feasible = np.zeros(n, dtype=bool)
        self.reason = np.zeros(n, dtype=np.int64)
        self.forbid: list[Optional[str]] = [None] * n
        self.mem_total = self.step_s = self.tps = self.analytical_tps = z
        self.factor = np.ones(n)
        self.memory_fraction = z
        self.parts: dict[str, np.ndarray] = {}
        self.times: dict[str, np.ndarray] = {}
        self.comm: list[tuple[str, np.ndarray, np.ndarray]] = []   # (label, kind per row, seconds)
        self.links: list[tuple[np.ndarray, np.ndarray]] = []       # (kind per row, bytes)
        self.nic_bytes = z
        self.hits: list[tuple[Rule, np.ndarray]] = []
        self.rows: Sequence[tuple] = []
        self.a = np.zeros((n, 0))  # the rows as one float array (candidates.COLUMNS), for the ranking's sort keys

    def reason_of(self, i: int) -> Optional[str]:
        """Infeasibility reason of row i, None if feasible."""
        if self.forbid[i]:
            return self.forbid[i]
        return REASONS[int(self.reason[i])]

    @property
    def tight(self) -> np.ndarray:
        """Rows above MEMORY_TIGHT of usable device memory."""
        return self.memory_fraction > MEMORY_TIGHT

    def eval(self, i: int, plan: Optional[Plan] = None) -> Eval:
        """Row i as an Eval (plan built from the row unless given)."""
        from ..candidates import row_plan
        e = Eval(plan if plan is not None else row_plan(self.rows[i]))
        e.feasible, e.reason = bool(self.feasible[i]), self.reason_of(i)
        e.step_s, e.tps = float(self.step_s[i]), float(self.tps[i])
        e.analytical_tps = float(self.analytical_tps[i])
        e.factor = float(self.factor[i])
        e.memory_fraction = float(self.memory_fraction[i])
        e.mem = MemoryParts(**{k: float(v[i]) for k, v in self.parts.items()})
        e.rules = [r for r, hit in self.hits if hit[i]]
        e.compute_s = float(self.times["compute"][i])
        e.bubble_s, e.offload_s = float(self.times["bubble"][i]), float(self.times["offload"][i])
        e.optimizer_s, e.overhead_s = float(self.times["optimizer"][i]), float(self.times["overhead"][i])
        for label, kinds, secs in self.comm:
            if secs[i] > 0:
                key = f"{label}@{kinds[i]}"
                e.comm[key] = e.comm.get(key, 0.0) + float(secs[i])
        for kinds, nbytes in self.links:
            if nbytes[i] > 0:
                e.link_bytes[kinds[i]] = e.link_bytes.get(kinds[i], 0.0) + float(nbytes[i])
        e.nic_bytes = float(self.nic_bytes[i])
        return e


def evaluate(plan: Plan, ctx: Context, rules: Optional[tuple[Rule, ...]] = None) -> Eval:
    """One plan: a batch of one (its own allgather bucket and overlap setting included)."""
    b = evaluate_batch([plan_row(plan)], ctx, rules, ag_bucket=[plan.zero_allgather_bucket_size],
                       overlap=[plan.zero_overlap_comm], live=[plan.zero_max_live_parameters],
                       reuse=[plan.zero_max_reuse_distance])
    return b.eval(0, plan)


def unique_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(m, axis=0, return_inverse=True) of a 2-D array, by a lexsort of its columns: the same distinct rows
    in the same (lexicographic) order and the same inverse, without np.unique's sort of one structured (void)
    element per row, which took ~1 s for the 570k rows of 16,384 x 8 GPUs."""
    if not len(m):
        return m[:0], np.zeros(0, dtype=np.int64)
    order = np.lexsort(m.T[::-1])
    s = m[order]
    new = np.ones(len(m), dtype=bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    inverse = np.empty(len(m), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return s[new], inverse


def _unique_degrees(a: np.ndarray) -> tuple[np.ndarray, list]:
    """(key per row, distinct (dp, tp, pp, nodes, gpn, order) tuples) for group placement."""
    deg = a[:, [0, 1, 2, 16, 17, 11]].astype(np.int64)
    uniq_arr, keys = unique_rows(deg)
    return keys, [tuple(int(x) for x in u) for u in uniq_arr.tolist()]


def _as_array(rows: Sequence[tuple]) -> np.ndarray:
    """The rows as one float array: the one enumeration assembled (candidates.enumerate.Rows), else from a
    list of tuples through one flat iterator (np.asarray converts tuple by tuple and took 20 ms of the 100 ms that
    31.7k rows (7B on 4 x 8 A100) cost to rank; the flat iterator still takes ~20 ms here)."""
    built = getattr(rows, "array", None)
    if built is not None and len(built) == len(rows):
        return built
    if isinstance(rows, np.ndarray) or not isinstance(rows[0], tuple):
        return np.asarray(rows, dtype=float)
    w = len(rows[0])
    return np.fromiter(itertools.chain.from_iterable(rows), dtype=float, count=len(rows) * w).reshape(len(rows), w)


def evaluate_batch(rows: Sequence[tuple], ctx: Context, rules: Optional[tuple[Rule, ...]] = None, *,
                   ag_bucket: Optional[Sequence[float]] = None, overlap: Optional[Sequence[bool]] = None,
                   live: Optional[Sequence[float]] = None, reuse: Optional[Sequence[float]] = None) -> Batch:
    """Evaluate every row (candidates.COLUMNS): memory, feasibility, step time and its parts, traffic, rules.

    `ag_bucket` / `overlap`: DeepSpeed allgather_bucket_size and overlap_comm per row (enumerated plans use
    500M elements and overlap on, the defaults); `live` / `reuse`: DeepSpeed ZeRO-3's stage3_max_live_parameters
    and stage3_max_reuse_distance per row (Plan.zero_max_live_parameters / zero_max_reuse_distance; DeepSpeed's
    1e9 defaults for enumerated plans).

    Context-parallel rows (Plan.cp > 1) are priced as one rank of the group sees them: dp*cp ranks, each with
    s/cp of every sequence (Context.context_parallel), plus ring attention's key/value exchange (`_evaluate`).
    """
    if not len(rows):
        b = Batch(0)
        b.rows = rows
        return b
    a = _as_array(rows)
    n = len(a)
    agb = np.full(n, 500_000_000.0) if ag_bucket is None else np.asarray(ag_bucket, dtype=float)
    ovl = np.ones(n, dtype=bool) if overlap is None else np.asarray(overlap, dtype=bool)
    cap = np.full(n, float(DEEPSPEED_MAX_LIVE_PARAMETERS)) if live is None else np.asarray(live, dtype=float)
    reach = np.full(n, float(DEEPSPEED_MAX_REUSE_DISTANCE)) if reuse is None else np.asarray(reuse, dtype=float)
    rules = load_rules() if rules is None else rules
    cps = a[:, _CP]
    if not (cps > 1).any():
        b = _evaluate(a, ctx, rules, agb, ovl, cap, reach)
    else:
        parts = []
        for c in np.unique(cps).tolist():
            idx = np.flatnonzero(cps == c)
            sub = a[idx]
            if c > 1:  # the group's dp*cp ranks, each with gb*cp sequences of s/cp tokens (Context.context_parallel)
                sub = sub.copy()
                sub[:, 0] *= c
                sub[:, _BATCH] *= c
            parts.append((idx, _evaluate(sub, ctx.context_parallel(int(c)), rules, agb[idx], ovl[idx], cap[idx],
                                         reach[idx])))
        b = _merge(n, parts)
    b.rows, b.a = rows, a
    return b


_CP, _BATCH = COLUMNS.index("cp"), COLUMNS.index("global_batch")
_EPO = COLUMNS.index("ep_overlap")
_AOFF = COLUMNS.index("offload_activations")


def _merge(n: int, parts: list[tuple[np.ndarray, Batch]]) -> Batch:
    """One Batch of n rows from Batches of row subsets (`idx`, batch), each row back at its place."""
    def fill(get) -> np.ndarray:
        arrs = [np.asarray(get(b)) for _, b in parts]
        out = np.empty(n, dtype=arrs[0].dtype)
        for (idx, _), x in zip(parts, arrs):
            out[idx] = x
        return out
    first = parts[0][1]
    b = Batch(n)
    for attr in ("feasible", "reason", "mem_total", "step_s", "tps", "analytical_tps", "factor", "memory_fraction",
                 "nic_bytes"):
        setattr(b, attr, fill(lambda x, attr=attr: getattr(x, attr)))
    b.forbid = fill(lambda x: np.array(x.forbid, dtype=object)).tolist()
    b.parts = {k: fill(lambda x, k=k: x.parts[k]) for k in first.parts}
    b.times = {k: fill(lambda x, k=k: x.times[k]) for k in first.times}
    b.comm = [(label, fill(lambda x, i=i: x.comm[i][1]), fill(lambda x, i=i: x.comm[i][2]))
              for i, (label, _, _) in enumerate(first.comm)]
    b.links = [(fill(lambda x, i=i: x.links[i][0]), fill(lambda x, i=i: x.links[i][1]))
               for i in range(len(first.links))]
    b.hits = [(r, fill(lambda x, i=i: x.hits[i][1])) for i, (r, _) in enumerate(first.hits)]
    return b


def _evaluate(a: np.ndarray, ctx: Context, rules: tuple[Rule, ...], agb: np.ndarray, ovl: np.ndarray,
              cap: np.ndarray, reach: np.ndarray) -> Batch:
    """evaluate_batch of rows that share ctx's context-parallel degree (Context.cp), as one rank sees them."""
    b = Batch(len(a))
    b.a = a
    (dp, tp, pp, zero, off, mb, m, sched, v, rc, sp, order, bucket_mb, hook, zrb, hpz, nodes, gpn) = a.T[:18]
    # the offload code (candidates.OFFLOADS): `off` the optimizer in host RAM, `offp` the parameters too (stage 3)
    offp = (off >= 2) & (zero >= 3)
    off, sp = off > 0, sp > 0  # rc stays the share of layers that recompute (0, 1/interval, 1)
    ep = a[:, 18]
    keys, uniq = _unique_degrees(a)
    g_tp, g_dp, g_pp = (_G(ctx, k, keys, uniq) for k in ("tp", "dp", "pp"))
    # expert parallelism (Plan.ep): a device holds 1/ep of the routed experts (else its TP shard of each), and
    # their gradients sync over the expert data-parallel group dp·tp/ep
    e_shard = np.where(ep > 1, ep, tp)
    edp = np.where(ep > 1, dp * tp / ep, dp)

    fsdp = _zero_on_fsdp(a)
    # rows that run as Megatron (_megatron_rows): its gradient buffer's dtype and in-place sync
    meg = _megatron_rows(ctx, a, fsdp)
    # ... unless the plan names DeepSpeed's ZeRO (Megatron-DeepSpeed): its stage 1 all-reduces the gradient buckets
    # (_data_parallel) and its optimizer holds its buckets (_device), where Megatron's syncs in place
    ds_named = a[:, 20] == ZERO_IMPLS.index("deepspeed")

    # ---- memory (memory.py) ----
    layers, first, last = _stage_params(ctx, pp)
    st = _stage_states(ctx, layers, first, last, pp, tp, e_shard)
    # DeepSpeed ZeRO-3 keeps its last gathers into the backward and its replayed gathers for the layer's backward
    # (_ds_reuse): held in memory, not sent again
    kept, replay = _ds_reuse(ctx, tp, e_shard, layers, rc, fsdp, reach)
    # Megatron's rows that sync in place on its own buffers, the Linears' parameters on a device (Transformer
    # Engine's FP8 copies) and the rows that keep those weights in FP8 only (_fp8_primary)
    in_place = meg & ~ds_named
    lin = _linear_params(ctx, layers, tp, st) if ctx.transformer else np.zeros(len(a))
    f8p = _fp8_primary(ctx, zero, in_place)
    mem = _memory(ctx, a, layers, st, agb, edp, e_shard, fsdp, kept, meg, in_place, lin, f8p)
    b.parts = mem
    total = mem["weights"] + mem["gradients"] + mem["optimizer"] + mem["activations"] + mem["logits"] \
        + mem["comm_buffers"] + mem["framework"]
    b.mem_total = total
    b.memory_fraction = total / ctx.mem_cap
    reason = np.zeros(len(a), dtype=np.int64)
    aoff = a[:, _AOFF] > 0  # activation checkpoints in host RAM (Plan.offload_activations)
    reason[(off | aoff) & bool(ctx.host_ram) & (mem["host"] * gpn > ctx.host_ram * ctx.host_usable)] = 2
    reason[total > ctx.mem_cap] = 1
    b.reason = reason
    ok = reason == 0

    # ---- compute of one micro-batch on the busiest stage (compute.py) ----
    tokens = mb * ctx.s
    # the core's recompute mode (candidates.CORE_RECOMPUTE): the attention core's (ra) or op-level (rop); `rcx` is
    # the replayed share of a layer's forward FLOPs, the recomputing layers' (rc) and op-level's
    # (Context.op_replay), where the forward and backward are told apart
    ra, rop = (x.astype(float) for x in _core_recompute(a))
    rcx = rc + rop * ctx.op_replay
    t_layer, t_head, t_host, t_core = _compute(ctx, mb, tp, sp, rc, tokens, ep, ra, m, rop)
    # kernel dispatch adds to device time (the seed findings are fitted that way; max(host, device) moved two of
    # them past their thresholds: docs/cost-model.md, known gaps)
    t_mb = layers * t_layer + t_head + layers * t_host

    # ---- tensor parallel: 2 all-reduces fwd + 2 bwd per layer per micro-batch (Shoeybi et al. 2019 §3,
    # Fig. 4), +2 per recomputing layer (forward replayed); SP turns them into RS+AG of equal volume. Critical path.
    # The vocabulary-parallel ends add one each (§3; trainers/vocab.py): the embedding's forward all-reduce on the
    # first stage and the head's input-gradient all-reduce on the last, both on one stage when pp = 1.
    size = tokens * ctx.h * ctx.act_bytes
    # op-level recompute replays the forward's collectives it does not save: both all-reduces, or under SP both
    # all-gathers (the reduce-scatters' outputs are saved), one all-reduce's volume
    n_coll = (layers * (4.0 + 2.0 * rc + rop * np.where(sp, 1.0, 2.0))
              + np.where(pp > 1, 1.0, 2.0) * ctx.transformer)
    calls = np.where(sp, 2.0, 1.0)
    t_tp = np.where(tp > 1, n_coll * (g_tp.allreduce(size, nvls=~sp) / g_tp.per_kind(ctx.tp_eff, 1.0)
                                      + calls * ctx.tp_call_s), 0.0)
    # overlapped TP (Megatron-Core --tp-comm-overlap: Transformer Engine userbuffers split each sequence-parallel
    # all-gather / reduce-scatter into chunks pipelined with the GEMM that consumes or produces it; torchtitan
    # async TP the same with SymmetricMemory; Wang et al. 2022 "Overlap communication with dependent computation
    # via decomposition"): at most the layers' GEMM time hides, and of that the stack's share (TE userbuffers all,
    # torch async TP half: calibration overlap.tp_overlap_hidden); the hidden part costs `contention`
    tpo = a[:, 19] > 0
    hid = ctx.tp_overlap_hidden * np.minimum(t_tp, layers * t_layer)
    t_tp = np.where(tpo, t_tp - hid + ctx.contention * hid, t_tp)
    tp_sent = np.where(tp > 1, m * n_coll * 2.0 * (tp - 1) / tp * size, 0.0)

    # ---- context parallelism: ring attention's key/value exchange, hidden behind the core (_context_parallel) ----
    t_cp, cp_sent, g_cp = _context_parallel(ctx, a, keys, uniq, g_dp, tokens, tp, rc, ra, t_core)
    t_cp = layers * t_cp
    cp_sent = layers * cp_sent

    # ---- expert parallelism: token all-to-alls on the critical path (_expert_alltoall) ----
    t_ep, ep_sent, ep_kind, ep_nic = _expert_alltoall(ctx, a, layers, tokens, rc)
    # ... of which Megatron's combined 1F1B (Plan.ep_overlap) hides what the paired micro-batch's compute covers
    epo = a[:, _EPO] > 0
    if epo.any():
        t_ep = np.where(epo, _expert_overlap(ctx, t_ep, layers * t_layer, ep_kind, pp, v, m), t_ep)

    # ---- ZeRO-3 / FSDP: per-layer parameter gathers that prefetch hides only behind that layer's compute ----
    # (on DeepSpeed a model above its live-parameter cap is gathered Linear by Linear: Context.ds_gathers)
    # (and DeepSpeed keeps what _ds_reuse says: `kept`, `replay` above)
    z3_mb, z3_sent = _zero3_per_microbatch(ctx, g_dp, dp, tp, pp, zero, hpz, rcx, layers, t_layer, t_head, e_shard,
                                           np.where(fsdp, 1.0, ctx.ds_gathers(cap)), kept, replay, agb, cap)
    # ... and on DeepSpeed, its host bookkeeping per rank and parameter (Plan.zero_impl), which shows where it
    # outlasts the micro-batch's device work (compute and the exposed gathers) it runs beside
    ds_host = np.where(~fsdp, _deepspeed_zero3_host(ctx, dp, pp, zero, hpz, layers, zrb, kept, replay), 0.0)
    z3_mb = z3_mb + np.maximum(0.0, ds_host - (layers * t_layer + t_head + z3_mb))

    # ---- pipeline (pipeline.py): P2P of b·s·h/t per micro-batch per boundary, fwd and bwd ----
    psize = tokens * ctx.h * ctx.act_bytes / tp
    call = g_pp.per_kind(ctx.p2p_call_by_link, ctx.p2p_call_s) * np.maximum(1.0, g_pp.shared_chain)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_p2p = g_pp.lat * 1e-6 + psize / (g_pp.bw * _GB) + call
    n_x = np.where(v > 1, 2.0 * v, np.where(pp >= 3, 2.0, 1.0))
    stage = t_mb + t_tp + t_cp + t_ep + z3_mb + n_x * t_p2p
    # (m + (p−1)/v)·t_stage for GPipe and 1F1B with any m (m < p too: Megatron's warm-up is min(p−rank−1, m))
    bubble = np.where(pp > 1, (pp - 1) / v * stage, 0.0)
    step = np.where(pp > 1, m * stage + bubble, m * (t_mb + t_tp + t_cp + t_ep + z3_mb))
    t_pp = np.where(pp > 1, m * n_x * t_p2p, 0.0)
    pp_sent = np.where(pp > 1, m * 2 * v * psize, 0.0)
    if ctx.transformer and ctx.tied:
        # tied embeddings: the V×h gradient all-reduced between first and last stage (Megatron
        # finalize_model_grads, ColossalAI sync_shared_params); exposed after the flush
        emb = float(ctx.V) * ctx.h / tp * ctx.zero_gbytes
        t_emb = np.where(pp > 1, _ring(emb, np.full_like(pp, 2.0), g_pp.bw, g_pp.lat) + ctx.call_s, 0.0)
        step = step + t_emb
        t_pp = t_pp + t_emb
        pp_sent = pp_sent + np.where(pp > 1, emb, 0.0)

    # ---- data parallel: DDP / ZeRO-1/2 gradient sync, offload, optimizer ----
    n_train = np.maximum(st["train_first"], st["train_last"])
    w_dev = np.maximum(st["w_first"], st["w_last"])
    # ZeRO-1 beside TP/PP runs as a distributed optimizer unless the plan names DeepSpeed's (`ds_named`)
    dist_opt = ((tp > 1) | (pp > 1) | (a[:, _CP] > 1) | meg) & ~ds_named
    # Megatron's FP8 primary weights all-gather their Linears in FP8 (_fp8_primary)
    fp8_lin = np.where(f8p, lin, 0.0)
    exposed, dp_sent, offload, opt, host_bytes = _data_parallel(ctx, g_dp, dp, m, zero, off, offp, zrb, bucket_mb, hook,
                                                                 n_train, w_dev, t_mb, gpn, ovl, st["exp"], edp,
                                                                 dist_opt, (zero >= 3) & (pp > 1), layers, ~fsdp, meg,
                                                                 fp8_lin)
    # activation checkpoints in host RAM (Plan.offload_activations, pure data parallelism): the copies the backward
    # waits for, per micro-batch, with the optimizer offload's host traffic
    if aoff.any() and ctx.transformer:
        moved, t_ao = _activation_offload(layers, rc, _act(ctx, mb, tp, sp, np.ones_like(sp)),
                                          t_layer * ctx.fwd_frac / (1.0 + rc * ctx.fwd_frac), _host_bw(ctx, gpn))
        offload = offload + np.where(aoff, m * t_ao, 0.0)
        host_bytes = host_bytes + np.where(aoff, m * moved, 0.0)
    z3_total = m * z3_mb
    step_s = step + exposed + offload + opt + ctx.step_overhead
    tps = dp * mb * m * ctx.s / step_s  # the plan's own global batch (it may differ with allow_batch_change)
    b.times = {"compute": m * t_mb, "bubble": bubble, "offload": offload, "optimizer": opt,
               "overhead": np.full(len(a), ctx.step_overhead)}
    b.comm = [("tp", g_tp.kind, m * t_tp), ("cp", g_cp.kind, m * t_cp), ("ep", ep_kind, m * t_ep),
              ("pp", g_pp.kind, t_pp),
              ("dp", g_dp.kind, np.where(zero == 0, exposed, 0)),
              ("zero", g_dp.kind, np.where(zero > 0, exposed + z3_total, 0.0))]
    dp_all = dp_sent + m * z3_sent
    b.links = [(g_tp.kind, tp_sent), (g_cp.kind, m * cp_sent), (ep_kind, m * ep_sent), (g_pp.kind, pp_sent),
               (g_dp.kind, dp_all),
               (np.full(len(a), "host", dtype=object), host_bytes)]
    b.nic_bytes = (g_tp.node_flows * tp_sent + g_pp.node_flows * pp_sent / 2.0 + g_dp.node_flows * dp_all
                   + m * ep_nic + m * g_cp.node_flows * cp_sent)
    # every row keeps its time: a plan over memory (or forbidden by a rule) says how fast it would run if it fit
    # (predict reports both; ranking and confirm take feasible rows only)
    b.analytical_tps = tps

    # ---- rules (rules.py): penalties scale throughput, forbid makes a plan infeasible ----
    factor = np.ones(len(a))
    if rules:
        feats = _features(ctx, a, g_tp, g_dp, g_pp)
        for r in rules:
            hit = np.broadcast_to(np.asarray(r.vcond(feats), dtype=bool), (len(a),))
            b.hits.append((r, hit))
            if r.severity == "penalty":
                factor = np.where(hit, factor * r.factor, factor)
            elif r.severity == "forbid":
                for i in np.flatnonzero(hit & ok):
                    if b.forbid[i] is None:
                        b.forbid[i] = f"forbidden by rule: {r.message}"
    b.factor = factor
    b.step_s = step_s / factor
    b.tps = tps * factor
    b.feasible = ok & np.array([f is None for f in b.forbid], dtype=bool)
    return b


def _host_checkpoints(layers, rc) -> np.ndarray:
    """Checkpoints per micro-batch that DeepSpeed's cpu_checkpointing keeps in host RAM (Plan.offload_activations):
    every recomputing layer's but the ACT_OFFLOAD_RESIDENT still on the device (_activation_offload)."""
    return np.maximum(0.0, layers * rc - ACT_OFFLOAD_RESIDENT)


def _host_bw(ctx: Context, gpn) -> np.ndarray:
    """Bytes/s of each rank's copies to and from host RAM: the pinned rate of its PCIe slot (Context.host_bw) over
    the ranks of its node that share the slot's switch uplink and copy at the same time (Context.host_sharing)."""
    g = np.clip(np.asarray(gpn, dtype=np.int64), 1, len(ctx.host_sharing) - 1)
    return ctx.host_bw / ctx.host_sharing[g]


def _activation_offload(layers, rc, ckpt, t_fwd, bw) -> tuple[np.ndarray, np.ndarray]:
    """(host-link bytes, exposed seconds) per micro-batch of DeepSpeed's cpu_checkpointing (Plan.offload_activations),
    as its side-stream engine runs it (runtime/activation_checkpointing/offload_activations.py, DeepSpeed PR #8282, in
    0.19.8); `ckpt`: one checkpoint's bytes, `t_fwd`: one layer's forward seconds.

    Each recomputing layer (layers·rc of them) hands its input (`ckpt` bytes) to the engine. The newest stays on the
    device (keep_last_count 1), the others are copied device-to-host into pinned buffers on a side stream while the
    next layers compute, and the last two copied keep their device tensors in the forward stash (max_fwd_stash_count
    2), so the backward takes those three without a copy: the rest live in host RAM. A forward copy shows only where
    it outlasts a layer's forward. The backward's restore_input issues the host-to-device copy when the layer's
    recompute needs it and the compute stream waits for it (no prefetch): every restored checkpoint is exposed.
    Bandwidth `bw`: ZeRO-Offload's copies' (_host_bw)."""
    n = layers * rc
    restored = _host_checkpoints(layers, rc)
    copy = ckpt / bw
    sent = np.maximum(0.0, n - 1.0) + restored  # down, all but the newest; up, all but the three resident
    return sent * ckpt, np.maximum(0.0, n - 1.0) * np.maximum(0.0, copy - t_fwd) + restored * copy


def _context_parallel(ctx: Context, a: np.ndarray, keys: np.ndarray, uniq: list, g_dp: _G, tokens, tp, rc, ra,
                      t_core) -> tuple[np.ndarray, np.ndarray, _G]:
    """(exposed seconds, bytes sent) per layer per micro-batch of ring attention's key/value exchange, and the
    context-parallel group's placement, for rows of ctx's degree cp (Context.cp; zeros and the dp group at 1).

    A rank's chunk is the K and V of its s/cp tokens (its TP shard of the key/value heads; Megatron replicates a
    KV head that TP would split below one). The forward passes the chunks around the ring once
    (comm.ring_attention_exchange_s), a replayed forward (full recompute `rc`, the core's `ra`) again, the
    backward twice (the chunks and their gradients). Each step overlaps the block the rank computes meanwhile
    (Liu et al. 2023 §3; Megatron-Core runs the P2P on its own stream), so only what outlasts the core's own time
    of that pass is exposed; the hidden part slows the core by `contention` as other overlapped collectives do.
    The group: cp consecutive ranks after tp (tp-cp-dp-pp), the dp group of a plan with degrees (cp, tp, dp*pp)."""
    if ctx.cp == 1:
        return np.zeros(len(a)), np.zeros(len(a)), g_dp
    cp = ctx.cp
    g_cp = _G(ctx, "dp", keys, [(cp, t, d // cp * p, nodes, gpn, o) for d, t, p, nodes, gpn, o in uniq])
    shape = ctx.shape
    kv = np.maximum(shape.kv_dim / tp, float(shape.head_dim))
    chunk = 2.0 * tokens * kv * ctx.act_bytes
    one = ring_attention_exchange_s(chunk, cp, g_cp.bw, g_cp.lat, ctx.call_s)
    passes = 3.0 + rc + ra
    window = t_core * (1.0 + rc + ra + 2.0)  # the core's forward(s) and its backward (twice the forward)
    exposed = _overlapped(passes * one, 0.0, window, ctx.contention)
    return exposed, passes * (cp - 1) * chunk, g_cp


def _expert_alltoall(ctx: Context, a: np.ndarray, layers, tokens, rc):
    """(seconds, bytes sent per rank, link kind, bytes leaving the busiest node) of expert parallelism's
    all-to-alls for one micro-batch on one stage.

    Every MoE layer dispatches each token's hidden state to the ranks holding its top-k experts and combines
    the results back: two all-to-alls forward, two backward (their gradients), two more when a recomputing layer
    replays the forward (GShard, Lepikhin et al. 2021 §3.2; Megatron-Core's "alltoall" token dispatcher). A
    rank's tokens (b·s/tp: expert TP 1 splits a TP group's tokens) times k copies of h values leave for the
    other ep−1 ranks in equal shares (balanced routing, as the MoE benchmarks force it). The group is ep
    consecutive ranks (Plan); its share inside the node moves at the slowest intra-node link, the rest over
    the node's NICs, which every rank of the node loads at once (each group does its all-to-all together).
    Not overlapped with compute (Megatron-Core's default). Reaches moe.alltoall_efficiency of the link rate.
    """
    n_rows = len(a)
    ep = a[:, 18]
    none = np.zeros(n_rows)
    if not ctx.transformer or not ctx.p_layer_exp or not (ep > 1).any():
        return none, none, np.full(n_rows, "none", dtype=object), none
    dp, tp, pp, nodes, gpn = a[:, 0], a[:, 1], a[:, 2], a[:, 16], a[:, 17]
    # the ep group is the "tp" group of the plan whose tensor-parallel degree is ep (ranks consecutive)
    deg = np.stack([np.round(dp * tp / ep), ep, pp, nodes, gpn], axis=1).astype(np.int64)
    uniq, keys = unique_rows(deg)
    groups = [ctx.topo.group("tp", d, e, p, no, g, "tp-dp-pp") for d, e, p, no, g in uniq.tolist()]

    def arr(f) -> np.ndarray:
        return np.array([f(g) for g in groups], dtype=float)[keys]
    n, per_node, span = arr(lambda g: g.n), arr(lambda g: g.per_node), arr(lambda g: g.nodes)
    intra_bw = arr(lambda g: g.intra_bw if g.nodes > 1 else g.bw_gb_per_s)
    lat = arr(lambda g: g.latency_us) * 1e-6
    kind = np.array(["network" if g.nodes > 1 else g.kind for g in groups], dtype=object)[keys]
    size = tokens / tp * ctx.top_k * ctx.h * ctx.act_bytes  # bytes one rank sends + keeps per all-to-all
    with np.errstate(divide="ignore", invalid="ignore"):
        intra = np.where(per_node > 1, size * (per_node - 1) / n / (intra_bw * _GB), 0.0)
        off_node = size * (n - per_node) / n
        inter = np.where(span > 1, off_node / (ctx.topo.node_net_bw * _GB / gpn), 0.0)
    one = np.maximum(intra, inter) / ctx.a2a_eff + lat + ctx.call_s
    count = layers * (4.0 + 2.0 * rc)
    on = ep > 1
    with np.errstate(divide="ignore", invalid="ignore"):
        sent = count * size * (n - 1) / n
    return (np.where(on, count * one, 0.0), np.where(on, sent, 0.0), np.where(on, kind, "none"),
            np.where(on & (span > 1), count * off_node * gpn, 0.0))


def _expert_overlap(ctx: Context, t_ep, window, kind, pp, v, m) -> np.ndarray:
    """Exposed seconds per micro-batch of the expert all-to-alls (`t_ep`, _expert_alltoall) under Megatron-Core's
    combined 1F1B schedule (Plan.ep_overlap: --overlap-moe-expert-parallel-comm --delay-wgrad-compute).

    The schedule pairs one micro-batch's forward with another's backward, layer by layer, and runs each one's
    all-to-alls on a communication stream beside the other's compute (Megatron-Core combined_1f1b: the attention
    forward beside the combine's backward, the MLP's backward and forward beside the dispatches, the attention
    backward beside the forward combine). A pair hides up to its compute (`window`: one micro-batch's layers on this
    stage, forward and backward), the hidden part costing the link kind's contention as other overlapped collectives
    do (calibration overlap.contention_by_link). Unpaired passes keep their all-to-alls exposed: with pp = 1 the
    first forward and the last backward (1 of m micro-batches' worth); interleaved, the warm-up forwards on the
    first stage, (pp−1)·2 + (v−1)·pp + 1 chunks (Megatron schedules.py, one more under the overlap), and as many
    cool-down backwards, of m·v chunks.
    """
    warm = np.where(pp > 1, (pp - 1) * 2.0 + (v - 1) * pp + 1.0, 1.0)
    unpaired = np.minimum(1.0, warm / (m * v))
    kinds, keys = np.unique(kind.astype(str), return_inverse=True)
    cont = _per_kind(kinds.tolist(), keys, ctx.contention_by, ctx.contention)
    hidden = np.minimum(t_ep, window)
    return unpaired * t_ep + (1.0 - unpaired) * (t_ep - hidden + cont * hidden)


def _stage_params(ctx: Context, pp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layers per stage, first-stage params, last-stage params): embedding first, LM head last."""
    if not ctx.transformer:
        full = np.full_like(pp, float(ctx.params))
        return np.ones_like(pp), full, full
    layers = np.ceil(ctx.L / pp)
    first = np.where(pp == 1, float(ctx.params), layers * ctx.p_layer + ctx.p_emb)
    # the last stage holds the LM head: a tied head keeps its own copy of the word embedding
    last = np.where(pp == 1, float(ctx.params),
                    layers * ctx.p_layer + (ctx.p_head or ctx.V * ctx.h) + ctx.p_final_norm)
    return layers, first, last


def _stage_states(ctx: Context, layers, first, last, pp, tp, e_shard) -> dict[str, np.ndarray]:
    """Per-device parameters, weight bytes and trainable parameters of the first and last stage (this shard).

    Full training: every parameter trains and is stored at the weight precision; the routed experts are split
    e_shard ways (ep with expert parallelism, else tp), the rest tp ways (`exp`: the device's expert share).
    Adapters (LoRA/QLoRA, no expert parallelism): the frozen base at its storage bytes (Context._finetune), the
    embedding/head 16-bit and frozen, only the layers' adapters train. `layers`, `first`, `last`: _stage_params.
    """
    if not ctx.adapters:
        exp = layers * ctx.p_layer_exp / e_shard
        moved = exp - layers * ctx.p_layer_exp / tp  # 0 without expert parallelism
        p_first, p_last = first / tp + moved, last / tp + moved
        return {"p_first": p_first, "p_last": p_last, "exp": exp,
                "w_first": p_first * ctx.weight_bytes, "w_last": p_last * ctx.weight_bytes,
                "train_first": p_first, "train_last": p_last}
    ends_first = np.where(pp == 1, float(ctx.p_emb + ctx.p_head + ctx.p_final_norm), float(ctx.p_emb))
    ends_last = np.where(pp == 1, 0.0, float((ctx.p_head or ctx.V * ctx.h) + ctx.p_final_norm))
    w_first = (layers * ctx.w_layer_bytes + ends_first * ctx.weight_bytes) / tp
    w_last = (layers * ctx.w_layer_bytes + ends_last * ctx.weight_bytes) / tp
    train = layers * ctx.p_layer_train / tp
    return {"p_first": first / tp, "p_last": last / tp, "exp": np.zeros_like(train),
            "w_first": w_first, "w_last": w_last, "train_first": train, "train_last": train}


def _act(ctx: Context, mb, tp, sp, rc, ra=False, amp=False, rop=False):
    """Stored activations of one layer for one micro-batch (memory.activation_bytes_per_layer); `ra`: the attention
    core recomputes (Plan.recompute_attention); `amp`: the plan runs under torch.autocast (_autocast); `rop`:
    op-level selective checkpointing (Plan.recompute_ops)."""
    return activation_bytes_per_layer(ctx.s, mb, ctx.h, ctx.a, tp, sp, rc, ctx.fused_attention, ctx.act_bytes,
                                      shape=ctx.shape, frozen=ctx.frozen_roles, te=ctx.te_layers,
                                      fp8=ctx.fp8_linears, recompute_core=ra, autocast=amp, eager=ctx.eager_layers,
                                      recompute_ops=rop, sp_keeps_gathered=ctx.sp_keeps_gathered)


def _core_recompute(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows recomputing the attention core (Plan.recompute_attention) and rows checkpointing op by op
    (Plan.recompute_ops): the codes of the column candidates.CORE_RECOMPUTE names."""
    code = a[:, 21]
    return code == CORE_RECOMPUTE.index("attention"), code == CORE_RECOMPUTE.index("ops")


def _zero_on_fsdp(a: np.ndarray) -> np.ndarray:
    """Rows whose ZeRO-2/3 the runtime shards as FSDP: the plan's zero_impl, else Plan.zero_runtime's default
    (fsdp_by_default); the other ZeRO rows run on DeepSpeed."""
    zero, tp, pp, ep, impl = a[:, 3], a[:, 1], a[:, 2], a[:, 18], a[:, 20]
    return (impl == ZERO_IMPLS.index("fsdp")) | ((impl == ZERO_IMPLS.index(None))
                                                  & fsdp_by_default(zero, tp, pp, ep, a[:, _CP]))


def _autocast(ctx: Context, a: np.ndarray, fsdp: np.ndarray) -> np.ndarray:
    """Rows that run eager layers under torch.autocast (Context.eager_layers): every bundled strategy but
    DeepSpeed's (pure data-parallel ZeRO not on FSDP, launch.deepspeed.runs_on_deepspeed; hybrids with TP/PP/EP are
    torch-native), which casts the module to bf16 itself. A 16-bit run only: fp32 has nothing to cast."""
    if not ctx.eager_layers or ctx.act_bytes != 2:
        return np.zeros(len(a), dtype=bool)
    zero, tp, pp, ep = a[:, 3], a[:, 1], a[:, 2], a[:, 18]
    return ~((zero > 0) & ~fsdp & (tp == 1) & (pp == 1) & (ep == 1) & (a[:, _CP] == 1))


def _megatron_rows(ctx: Context, a: np.ndarray, fsdp: np.ndarray) -> np.ndarray:
    """Rows that run as Megatron: DDP or its distributed optimizer (ZeRO-1) beside TP, PP or expert parallelism
    (Megatron-Core's MoE parallel folding) on 16-bit parameters, not under torch.autocast (the bundled trainers').
    Megatron-Core's DDP keeps one contiguous gradient buffer whose buckets are views, reduced in place, and the
    distributed optimizer all-gathers into the parameter buffer in place. With bf16 that buffer is fp32
    (`Context.megatron_grad_bytes`)."""
    if not ctx.transformer or ctx.act_bytes != 2:
        return np.zeros(len(a), dtype=bool)
    zero, tp, pp, ep = a[:, 3], a[:, 1], a[:, 2], a[:, 18]
    return ~_autocast(ctx, a, fsdp) & ~fsdp & (zero <= 1) & ((tp > 1) | (pp > 1) | (ep > 1) | (a[:, _CP] > 1))


def _linear_params(ctx: Context, layers, tp, st) -> np.ndarray:
    """Parameters of the layers' Linears on one device (Transformer Engine's modules on the `cudnn` stack): the
    dense share split tp ways and the device's routed experts (_stage_states `exp`); Megatron's output layer is a
    plain ColumnParallelLinear, not counted."""
    return layers * (ctx.p_layer - ctx.p_layer_exp) / tp + st["exp"]


def _fp8_primary(ctx: Context, zero: np.ndarray, in_place: np.ndarray) -> np.ndarray:
    """Rows whose Linears keep their weights in FP8 as the only copy (Context.fp8_params, Megatron's
    --fp8-param-gather, "keep the compute param in fp8 ... and perform the param all-gather in fp8"): Megatron-Core's
    distributed optimizer on its own buffers (ZeRO-1 in place, `in_place`), which Megatron requires for the switch
    (arguments.py: --use-distributed-optimizer, FSDP2 or Megatron-FSDP); its DDP (ZeRO-0) rows keep bf16 weights.
    Transformer Engine then holds each Linear's row-wise FP8 data and its transposed copy (1 + 1 bytes: the cached
    copies of calibration fp8.te_weight_cache_bytes_per_param) and the fp32 master stays in the optimizer's shard."""
    return in_place & (zero == 1) & ctx.fp8_params


def _memory(ctx: Context, a: np.ndarray, layers, st, agb, edp, e_shard, fsdp, kept, meg,
            in_place, lin, f8p) -> dict[str, np.ndarray]:
    """Memory parts of the most loaded device (stage 0 or the last stage) and host RAM per rank; `kept`: the layers
    DeepSpeed ZeRO-3 still holds gathered when the backward starts (_ds_reuse); `meg`: the rows that run as
    Megatron (_megatron_rows), whose gradients are `Context.megatron_grad_bytes` each; `in_place`: those of them
    that sync in place on Megatron's buffers (not under DeepSpeed's ZeRO), so hold no bucket copies; `lin`: the
    Linears' parameters on the device (_linear_params); `f8p`: rows keeping those in FP8 only (_fp8_primary)."""
    dp, tp, pp, zero, off, mb, m, sched, v, rc, sp = a.T[:11]
    hpz, zrb, bucket_mb = a.T[15], a.T[14], a.T[12]
    offp = (off >= 2) & (zero >= 3)  # candidates.OFFLOADS: the parameters in host RAM too
    off, sp = off > 0, sp > 0  # rc: the share of layers that recompute (Plan.recompute_fraction)
    amp = _autocast(ctx, a, fsdp)
    if ctx.transformer:
        ra, rop = _core_recompute(a)
        plain = _act(ctx, mb, tp, sp, np.zeros_like(sp), amp=amp)
        stored = _act(ctx, mb, tp, sp, np.zeros_like(sp), ra, amp, rop) if (ra.any() or rop.any()) else plain
        # a recomputing layer stores its input only, the others everything (every k-th layer: the average)
        ckpt = _act(ctx, mb, tp, sp, np.ones_like(sp))
        act1 = rc * ckpt + (1.0 - rc) * stored
        # the layer being recomputed holds its full activations; under the core's selective recompute the layer in
        # its backward holds its replayed scores, plain - stored, under op-level recompute its replayed rest
        # (ra, rop and rc > 0 exclude each other: Plan)
        full = np.where(rc > 0, stored, 0.0) + (plain - stored)
        # GPipe keeps all m micro-batches (Huang et al. 2019); 1F1B min(p, m) (Narayanan et al. 2021 §2.2.1);
        # interleaved p·(1 + (p−1)/(p·v)) layer-chunks' worth (memory.inflight_microbatches)
        inflight = np.where(pp == 1, 1.0, np.where(sched == 1, m, np.where(
            sched == 2, np.minimum(m, pp * (1.0 + (pp - 1) / (pp * v))), np.minimum(pp, m))))
        # Megatron's combined 1F1B (Plan.ep_overlap) starts a micro-batch's forward before its partner's backward
        # frees anything: one more layer with pp = 1, one more warm-up chunk (layers / v) when interleaved
        # (schedules.py get_pp_rank_microbatches: num_warmup_microbatches + 1 under overlap_moe_expert_parallel_comm)
        epo = a[:, _EPO] > 0
        if epo.any():
            inflight = inflight + epo * np.where(pp == 1, 1.0 / np.maximum(layers, 1.0), 1.0 / v)
        acts0 = layers * act1 * inflight + full
        acts_last = layers * act1 + full
        # DeepSpeed's cpu_checkpointing (Plan.offload_activations; pp = 1) keeps the checkpoints in host RAM but
        # the few still on the device (_host_checkpoints)
        moved = np.where(a[:, _AOFF] > 0, _host_checkpoints(layers, rc) * ckpt, 0.0)
        acts0, acts_last = acts0 - moved, acts_last - moved
        logits = (chunked_loss_bytes(ctx.s, mb, ctx.V, ctx.h, ctx.act_bytes, ctx.weight_bytes, tp)
                  if ctx.chunked_loss else logits_bytes(ctx.s, mb, ctx.V, tp, fused=not ctx.eager_loss))
    else:
        acts0 = acts_last = ctx.act_per_sample * mb
        logits = np.zeros_like(mb)
        moved = np.zeros_like(mb)
    # Transformer Engine's cached FP8 weight copies (calibration fp8.te_weight_cache_bytes_per_param): the layers'
    # Linears on this device; Megatron's output layer is not a TE module and stays bf16
    cache = ctx.te_fp8_cache_bytes * lin
    # ... which are the Linears' only weights under Megatron's --fp8-param-gather (`f8p`): no 16-bit copy
    cache = np.where(f8p, cache - ctx.weight_bytes * lin, cache)
    # unsharded gradients under torch.autocast are fp32 (the parameters are): DDP and the distributed optimizer
    # of the bundled trainers; DeepSpeed's bf16 ZeRO-1 keeps bf16 module gradients, Megatron with bf16 an fp32 grad
    # buffer (Context.megatron_grad_bytes)
    # FSDP per pipeline stage (ZeRO-3 with PP) accumulates each stage's unsharded gradients over the micro-batches
    # without syncing (PipelineStage.backward_maybe_with_nosync), and FSDP2 upcasts them to its reduce dtype to
    # accumulate (FSDPParam.to_accumulated_grad_if_needed: unsharded_accumulated_grad = grad.to(reduce_dtype)),
    # fp32 in the bundled trainers and torchtitan (mixed_precision_reduce = "float32")
    g32 = ((zero < 2) & amp) | ((zero >= 3) & (pp > 1)) | (meg & (ctx.megatron_grad_bytes == 4))
    # without data parallelism (no DDP buckets), accumulation or pipelining, eager PyTorch's
    # zero_grad(set_to_none=True) leaves no gradient at the peak, the start of the backward: they are created as the
    # activations are freed, so the step holds max(gradients, activations + logits) beside the weights and optimizer
    # (measured on one H200: the 1.5B at micro-batch 4 and 16 peaked 5.8 GiB, its fp32 gradients, under w + g + o +
    # activations)
    freed = (dp == 1) & (pp == 1) & (m == 1) & (zero == 0) & ctx.eager_layers
    # DeepSpeed ZeRO-3 still holds the forward's last gathers when the backward starts (_ds_reuse): the LM head and
    # the layers they fill up to stage3_max_reuse_distance (~2 GB of 16-bit weights, the figure Hugging Face's
    # DeepSpeed guide gives for the 1e9 default)
    held = np.where(fsdp, 0.0, kept * _layer_bytes(ctx, tp, e_shard)
                    + (np.minimum(ctx.p_head / tp, DEEPSPEED_MAX_REUSE_DISTANCE) * ctx.weight_bytes
                       if ctx.transformer else 0.0))
    p0 = _device(ctx, st["p_first"], st["w_first"], st["train_first"], acts0, np.where(pp == 1, logits, 0.0), dp,
                 tp, pp, zero, off, offp, hpz, zrb, bucket_mb, agb, st["exp"], edp, e_shard, cache, g32, freed, amp,
                 held, in_place)
    p1 = _device(ctx, st["p_last"], st["w_last"], st["train_last"], acts_last, logits, dp, tp, pp, zero, off, offp,
                 hpz, zrb, bucket_mb, agb, st["exp"], edp, e_shard, cache, g32, freed, amp, held, in_place)
    heavier = p1["_total"] > p0["_total"]
    parts = {k: np.where(heavier, p1[k], p0[k]) for k in p0 if k != "_total"}
    parts["host"] = parts["host"] + moved  # pinned host buffers of the offloaded checkpoints
    dev, host = offload_host_buffers(ctx, st["train_first"] / dp, m, zero, off)
    parts["comm_buffers"] = parts["comm_buffers"] + dev
    parts["host"] = parts["host"] + host
    return parts


def offload_host_buffers(ctx: Context, n_opt, m, zero, off):
    """(device bytes, host bytes) of the buffers ZeRO-Offload's gradient copies go through (DeepSpeed 0.19.8;
    _offload_gradient_copies), for a partition of `n_opt` parameters: stage 3's gradient partition in host RAM
    (stage3.py grad_partitions_flat_buffer, the model's dtype), stage 1/2's host accumulation buffers once there is
    accumulation (accumulated_grads_in_cpu), and stage 1/2's two staging buffers of the largest trainable tensor,
    one on the device and one in host RAM (temp_grad_buffer_for_gpu_offload / _for_cpu_offload). DeepSpeed's
    estimators (estimate_zero2/3_model_states_mem_needs) count none of them."""
    z12 = off & (zero < 3)
    staging = np.where(z12, ctx.largest_tensor * ctx.weight_bytes, 0.0)
    acc = np.where(off & ((zero >= 3) | (m > 1)), n_opt * ctx.grad_bytes_zero, 0.0)
    return staging, acc + staging


def _sharded(x, exp_frac, dp, edp):
    """ZeRO's shard of `x` on one device: the dense share over dp, the routed-expert share over the expert
    data-parallel group edp (Megatron-Core's distributed optimizer shards expert parameters over it)."""
    return np.where(exp_frac > 0, x * ((1.0 - exp_frac) / dp + exp_frac / edp), x / dp)


def _device(ctx: Context, params, wbytes, train, acts, lg, dp, tp, pp, zero, off, offp, hpz, zrb, bucket_mb, agb,
            exp, edp, e_shard, fp8_cache, g32=False, freed=False, amp=False, held=0.0, in_place=False) -> dict:
    """Memory parts of one device holding `params` (its stage's TP shard): `wbytes` of weights, `train` trainable.

    ZeRO §5 (Rajbhandari et al. 2020): stage 1 shards the optimizer over dp, 2 also gradients, 3 also weights;
    ZeRO-Offload (Ren et al. 2021 §4) keeps fp32 states and the fp32 gradient partition in host RAM (`off`; the
    parameter partition too with `offp`, stage 3's offload_param); ZeRO++ hpZ (Wang et al. 2023 §3.2) adds a
    node-local weight shard.
    Buffers: DeepSpeed's reduce bucket (×2, double-buffered) and allgather bucket, or DDP's two bucket copies.
    `exp` of the `train` parameters are routed experts, sharded by ZeRO over edp (_sharded). `fp8_cache`: Transformer
    Engine's FP8 weight copies, counted with the weights; under ZeRO-3 sharded like them (TE scatters a cached
    workspace over the FSDP group it is given, get_weight_workspace(fsdp_group=...)). `g32`: rows whose unsharded
    gradients are fp32 (4 bytes) whatever the training precision (_memory). `freed`: rows whose gradients and
    activations do not coexist at the peak (_memory). `amp` (rows under torch.autocast, torch.optim's AdamW): the
    optimizer step is a second peak, weights, states, gradients and foreach Adam's fp32 temporary of the states'
    size (torch/optim/adamw.py _multi_tensor_adamw: exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs)), without
    autocast's 16-bit weight copies; on the H200 it is the 2.7B-with-recompute row's peak (49.9 GiB measured,
    49.4 so counted: fp32 weights, gradients, Adam's two states and the temporary). The peak is the larger of the
    backward's start and that step; `gradients` is reported as what gradients and the step add beyond the
    activations, so the parts sum to the peak. `held`: gathered ZeRO-3 weights DeepSpeed keeps into the backward
    (_memory), counted where they exceed FSDP's two gathered layers. `in_place`: rows whose data-parallel sync runs
    in place on the contiguous gradient and parameter buffers (Megatron-Core's DDP and distributed optimizer: its
    buckets are views of them), so no bucket copies are added.
    """
    _, gbb, ob = state_bytes_per_param(ctx.precision, ctx.optimizer)
    if ctx.adapters:
        gbb, ob = 4, 8  # fp32 adapters: fp32 gradients, Adam's fp32 m and v (no separate master copy)
    w, g, o = wbytes, train * np.where(g32, max(gbb, 4), gbb), train * ob
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(train > 0, exp / train, 0.0)
    # ZeRO-3 with PP is FSDP per pipeline stage as torch.distributed.pipelining runs it: every backward leaves the
    # stage's parameters unsharded and accumulates unsharded gradients until the last micro-batch
    # (PipelineStage.backward_maybe_with_nosync: set_reshard_after_backward(False), set_requires_gradient_sync(False)),
    # so at the peak the device holds its stage's whole weights and gradients (fp32: g32), as ZeRO-1 does
    z3 = (zero >= 3) & (pp == 1)
    o = np.where(zero >= 1, _sharded(o, f, dp, edp), o)
    g = np.where((zero >= 2) & ((zero < 3) | z3), _sharded(g, f, dp, edp), g)
    w = np.where(z3, _sharded(w, f, dp, edp) + np.where(hpz > 1, wbytes / hpz, 0.0), w)
    host = np.where(off, o + train * 4.0 / dp + np.where(offp, wbytes / dp, 0.0), 0.0)
    # ZeRO-3 offload_param keeps the partition in host RAM: the device holds only the gathered layers (below),
    # as DeepSpeed's estimate_zero3_model_states_mem_needs counts it (offload_param=cpu: largest layer only)
    w = np.where(offp & (hpz == 1), 0.0, w)
    # ZeRO-2/3 offload: gradients stream to host RAM through the reduce bucket (`buf`), as DeepSpeed's estimators
    # count it (stage 2 cpu_offload: the 16-bit parameters only; stage 3 offload_optimizer alone: 2 B/param / N)
    g = np.where(off & (zero >= 2), 0.0, g)
    o = np.where(off, 0.0, o)
    w = w + np.where(z3, _sharded(fp8_cache, f, dp, edp), fp8_cache)
    zg = ctx.zero_gbytes
    # ZeRO-3 / FSDP also holds the gathered weights of the layer being computed and the prefetched next one
    gathered = np.where(z3, np.maximum(2.0 * _layer_bytes(ctx, tp, e_shard), held), 0.0) if ctx.transformer else 0.0
    # DeepSpeed's reduce bucket fills with what trains (the adapters with LoRA)
    # allgather_bucket_size is ZeRO-1/2's post-step parameter all-gather; stage 3 gathers per layer (`gathered`)
    buf = np.where(zero > 0, 2 * np.minimum(zrb, train) * zg + np.where(zero < 3, np.minimum(agb, params) * zg, 0.0),
                   np.where(dp > 1, 2 * bucket_mb * 2 ** 20, 0.0))
    buf = np.where(in_place, 0.0, buf) + gathered
    base = w + o + acts + lg + buf
    start = base + np.where(freed, 0.0, g)  # the backward's start: activations, logits' buffers
    # the optimizer step: no activation left, nor autocast's 16-bit weight copies (the `weights` part of an autocast
    # row: its fp32 parameters are in `optimizer`, 12 bytes with Adam's states); foreach Adam's temporary, sharded
    # like the states
    adam = 4.0 if ctx.optimizer in ("adam", "adamw") else 0.0
    temp = np.where(amp & ~off, np.where(zero >= 1, _sharded(train * adam, f, dp, edp), train * adam), 0.0)
    step = np.where(amp, 0.0, w) + o + buf + g + temp
    g = np.maximum(start, step) - base
    live = w + g + o + acts + lg + buf
    peers = (dp > 1).astype(float) + (tp > 1) + 2.0 * (pp > 1)
    fw = ctx.cuda_ctx + peers * ctx.nccl_peer + ctx.frag * live
    return {"weights": w, "gradients": g, "optimizer": o, "activations": acts, "logits": lg + 0.0 * w,
            "comm_buffers": buf, "framework": fw, "host": host, "_total": live + fw}


def _compute(ctx: Context, mb, tp, sp, rc, tokens, a_ep, ra, m, rop=0.0) -> tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray, np.ndarray]:
    """(device seconds per layer, device seconds of the LM head, host seconds per layer, device seconds of one
    layer's attention-core forward) for one micro-batch.

    GEMMs at the family's saturating efficiency, pass by pass (compute.layer_gemm_efficiency: attention
    projections of per-rank width q_dim/tp, the MLP of width/tp — a routed expert's width, split by tp only
    without expert parallelism —, the attention core and the LM head at their own; the core at the family's
    attn_rel), non-GEMM work as bytes
    over HBM bandwidth (compute.elementwise_time_s; replicated across TP ranks unless SP splits it), and the
    host's dispatch of the layer's kernels (compute.launch_time_s). A recomputing layer replays its forward (×4/3;
    `rc` is the share of layers that recompute); with `ra` (Plan.recompute_attention) every layer replays its
    attention core's forward: a third of the core's FLOPs (two of its six GEMM passes), the unfused core's forward
    score traffic and its kernels (Context.core_kernels), and no TP collective or weight gather (the core has no
    weights and its heads are local). With `rop` (Plan.recompute_ops) every layer replays the forward of the
    Linears op-level checkpointing does not save (Context.op_unsaved: their share of the projections' and the MLP's
    FLOPs), its elementwise work and its kernels, not the core (its output is saved). `m`: micro-batches per step,
    over which Transformer Engine's once-per-step FP8 weight casts are spread.
    """
    if not ctx.transformer:
        flops = mb * ctx.fps
        x = flops / 1e9
        t = flops / (ctx.rate_max * x / (x + ctx.x_half))
        return t, np.zeros_like(t), np.full_like(t, ctx.generic_kernels * ctx.launch_us * 1e-6), np.zeros_like(t)
    extra = 1.0 + rc * ctx.fwd_frac  # a recomputing layer replays its forward (1/3 of 6N; more with adapters)
    def rate(rows, width, curve=ctx.linear_curve, aligned=()):
        # saturating in each pass's output size and reduction length (compute.layer_gemm_efficiency), on the
        # Linears' curve or the 16-bit one (ctx.bf16_curve: attention core, LM head); `aligned`: the GEMM's leading
        # dimensions besides h, whose 16-byte alignment it needs at full rate (compute.alignment_factor)
        rate_max, x_half, w_half = curve
        elem = ctx.linear_elem_bytes if curve is ctx.linear_curve else ctx.act_bytes
        return (rate_max * layer_gemm_efficiency(rows, ctx.h, width, x_half, w_half)
                * alignment_factor((ctx.h, *aligned), elem, ctx.align_bytes, ctx.misaligned_rate))
    # a TP GEMM keeps its tokens and one side at h; it narrows only where the split width falls below h (issue
    # 13: sizing every GEMM at tokens·h/tp made TP-8 runs of large models ~1.5x too slow on H100)
    fs = ctx.flops_split
    mlp_w = ctx.mlp_width / np.where(a_ep > 1, 1.0, tp)  # experts whole under expert parallelism
    # a routed expert's GEMM has only the rows routed to it: b·s·k/E of a rank's tokens without expert
    # parallelism, ep times more with it (each rank computes its E/ep experts for the tokens of ep ranks, its
    # TP group's tokens split tp ways under expert TP 1); grouped GEMMs run them in one launch, tile by tile
    mlp_rows = tokens
    if ctx.top_k:
        mlp_rows = tokens * ctx.top_k / ctx.model.n_experts * np.where(a_ep > 1, a_ep / tp, 1.0)
    core_rate = ctx.attn_rel * rate(tokens, ctx.h, ctx.bf16_curve)
    core_extra = extra + ra * CORE_FORWARD_SHARE
    op_proj, op_mlp = ctx.op_unsaved
    proj_extra = extra + rop * ctx.fwd_frac * op_proj
    mlp_extra = extra + rop * ctx.fwd_frac * op_mlp
    proj_w = ctx.q_width / tp
    ffn_w = mlp_w / (2.0 if ctx.shape.gated else 1.0)  # one Linear's width: gate and up are two
    t_layer = tokens / tp * (proj_extra * fs["proj"] / rate(tokens, proj_w, aligned=(proj_w,))
                             + mlp_extra * fs["mlp"] / rate(mlp_rows, mlp_w, aligned=(ffn_w,))
                             + core_extra * fs["core"] / core_rate)
    extra = extra + rop * ctx.fwd_frac  # op-level recompute replays every elementwise kernel of the forward
    traffic = ctx.elem_traffic + ctx.fp8_cast_traffic  # FP8: scale and cast every Linear input / output gradient
    t_layer = t_layer + tokens * extra * traffic * ctx.h * ctx.act_bytes / np.where(sp, tp, 1.0) / ctx.mem_bw
    hf_whole, hf_split = ctx.hf_traffic  # Hugging Face's eager code beyond it (compute.hf_eager_traffic)
    if hf_whole or hf_split:
        t_layer = t_layer + tokens * extra * (hf_whole / np.where(sp, tp, 1.0) + hf_split / tp) / ctx.mem_bw
    fwd_b, bwd_b = ctx.score_traffic
    if bwd_b:
        # an unfused attention core moves its b·(a/tp)·s² scores through HBM pass by pass
        # (compute.unfused_attention_bytes); a recomputing layer replays the forward passes
        t_layer = t_layer + tokens * ctx.a / tp * ctx.s * (fwd_b * (1.0 + rc + ra + rop) + bwd_b) / ctx.mem_bw
    if ctx.fp8_weight_cast:
        # FP8 weights are cast once per pass (forward, transposed for backward, again for a replayed forward);
        # Transformer Engine casts both copies on a step's first micro-batch and reuses its cached workspace on the
        # other m - 1 and on the replay (Context.te_fp8_cache_bytes): once per step, spread over its micro-batches
        casts = 2.0 / m if ctx.te_fp8_cache_bytes else 2.0 + rc + rop
        t_layer = t_layer + casts * ctx.fp8_weight_cast * ctx.w_layer_bytes / ctx.weight_bytes / tp / ctx.mem_bw
    t_head = tokens * ctx.head_fpt / tp / rate(tokens, ctx.V / tp, ctx.bf16_curve, aligned=(ctx.V / tp,))
    # the eager loss's fp32 passes over the logits (compute.EAGER_LOSS_BYTES_PER_LOGIT; vocab-parallel across tp)
    t_head = t_head + tokens * ctx.V / tp * ctx.loss_bytes / ctx.mem_bw
    # QLoRA dequantises the layer's NF4 Linears before each pass that multiplies by them (fwd, bwd, replay)
    t_layer = t_layer + (1.0 + extra) * ctx.dequant_s_per_layer / tp
    # the host's dispatch: the layer's kernels, an eager MoE loop over this rank's E/ep experts, the core's replay
    t_host = (extra * (ctx.kpl + ctx.moe_loop_kernels / a_ep) + ra * ctx.core_kernels) * ctx.launch_us * 1e-6
    # the core's forward alone, once (what context parallelism's key/value exchange hides behind: _context_parallel)
    t_core = tokens / tp * CORE_FORWARD_SHARE * fs["core"] / core_rate
    return t_layer, t_head, t_host, t_core


def _layer_bytes(ctx: Context, tp, e_shard):
    """Weight bytes of one layer on one device: its TP shard, the routed experts split e_shard ways."""
    return ctx.w_layer_bytes / tp + ctx.p_layer_exp * ctx.weight_bytes * (1.0 / e_shard - 1.0 / tp)


def _ds_reuse(ctx: Context, tp, e_shard, layers, rc, fsdp, distance=DEEPSPEED_MAX_REUSE_DISTANCE
              ) -> tuple[np.ndarray, np.ndarray]:
    """(layers whose forward gather DeepSpeed ZeRO-3 keeps into their backward, share of a layer its backward
    gathers again after the recompute replay gathered it) per row; (0, 0) on FSDP, which re-gathers every layer
    once in the backward (FSDP2's pre-backward unshard serves the checkpoint's replay too).

    DeepSpeed releases a gathered parameter only when its next use is more than stage3_max_reuse_distance elements
    away in the recorded module trace (`distance` per row, Plan.zero_max_reuse_distance; DeepSpeed's default
    schemas.plan.DEEPSPEED_MAX_REUSE_DISTANCE, 1e9): the forward's last `distance` elements (the LM head, then the
    last layers) are still gathered when the backward starts, so those layers' backward gathers nothing, and a model
    under the distance gathers only in its forward. The replay and the backward of a layer share its gather unless
    half the layer's shard exceeds the distance (Context.ds_replay_regather)."""
    distance = np.asarray(distance, dtype=float)
    if not ctx.transformer:
        whole = np.where(ctx.p_layer / tp <= distance, 1.0, 0.0)
        return np.where(fsdp, 0.0, whole * np.ones_like(layers)), np.zeros_like(layers)
    numel = ctx.p_layer / tp + ctx.p_layer_exp * (1.0 / e_shard - 1.0 / tp)  # one layer's gathered elements
    room = np.maximum(0.0, distance - ctx.p_head / tp)
    kept = np.minimum(layers, room / np.maximum(numel, 1.0))
    replay = rc * ctx.ds_replay_regather(tp, distance)
    return np.where(fsdp, 0.0, kept), np.where(fsdp, 0.0, replay)


def _ds_module_chain(numels, gather_s, compute_s, bucket, cap=DEEPSPEED_MAX_LIVE_PARAMETERS) -> np.ndarray:
    """Seconds of one layer's gathers that DeepSpeed ZeRO-3's prefetch leaves exposed, module by module, per row.

    `numels` (rows x modules): per-rank elements of each module the pass meets, in the order it meets them (0 for
    a norm, whose persistent parameters are never gathered); `gather_s` / `compute_s`: the layer's gather and
    compute seconds, shared out by elements. DeepSpeed's fetch_sub_module (partitioned_param_coordinator.py), at
    each module's pre-forward hook: gathers the module if no prefetch did (the compute waits for it), then pops the
    trace's next parameters while what it pops stays under min(max_live_parameters - elements gathered now,
    stage3_prefetch_bucket_size), each one more all-gather on the one all-gather stream; the module is released
    after it computes. So a module as large as the live-parameter cap (1e9 elements: a 530B's 1.7e9-element MLP
    Linear) prefetches nothing while it computes, and the gather after it waits in the open. Three layers are
    simulated; the middle one is returned (steady state)."""
    rows, n = numels.shape
    seq = np.tile(numels, 3)
    total = np.maximum(numels.sum(axis=1), 1.0)
    g_el, c_el = gather_s / total, compute_s / total  # seconds per element
    done = np.zeros_like(seq)
    issued = seq <= 0  # a norm's parameters are resident
    now, free, live, exposed = (np.zeros(rows) for _ in range(4))
    head = np.zeros(rows, dtype=np.int64)  # the prefetch queue's next module
    for j in range(3 * n):
        need = ~issued[:, j]  # gathered on demand at its own hook
        fin = np.maximum(now, free) + seq[:, j] * g_el
        done[:, j] = np.where(need, fin, done[:, j])
        free = np.where(need, fin, free)
        live = live + np.where(need, seq[:, j], 0.0)
        issued[:, j] = True
        head = np.maximum(head, j + 1)
        wait = np.where(seq[:, j] > 0, np.maximum(0.0, done[:, j] - now), 0.0)
        if n <= j < 2 * n:
            exposed = exposed + wait
        now = now + wait
        budget, popped = np.minimum(cap - live, bucket), np.zeros(rows)
        for k in range(j + 1, 3 * n):
            open_ = (popped < budget) & (head <= k)
            if not open_.any():
                break
            go = open_ & (head == k) & ~issued[:, k]
            skip = open_ & (head == k) & issued[:, k]  # a norm: nothing to gather, the queue moves on
            fin = np.maximum(now, free) + seq[:, k] * g_el
            done[:, k] = np.where(go, fin, done[:, k])
            free = np.where(go, fin, free)
            live = live + np.where(go, seq[:, k], 0.0)
            popped = popped + np.where(go, seq[:, k], 0.0)
            issued[:, k] |= go
            head = np.where(go | skip, k + 1, head)
        now = now + seq[:, j] * c_el
        live = live - seq[:, j]
    return exposed


def _zero3_per_microbatch(ctx: Context, g: _G, dp, tp, pp, zero, hpz, rc, layers, t_layer, t_head, e_shard,
                          gathers=1.0, kept=0.0, replay=0.0, bucket=None, cap=DEEPSPEED_MAX_LIVE_PARAMETERS):
    """(exposed seconds, bytes sent per rank) of ZeRO-3 / FSDP parameter and gradient traffic per micro-batch.

    FSDP and ZeRO-3 gather each layer's weights before its forward and again before its backward, and
    reduce-scatter its gradients after the backward; the next layer's gather is prefetched while the current
    layer computes, so it hides only behind that layer's compute (Zhao et al. 2023, "PyTorch FSDP", §3.3-3.4
    backward/forward prefetch; Rajbhandari et al. 2021, ZeRO-Infinity §6.2 overlap-centric design). The first
    gather of the forward and the last reduce-scatter of the backward have nothing to hide behind; the
    embedding/head weights are gathered with the first/last layer. Hidden traffic still costs `zero3_contention`.
    hpZ makes the backward gather node-local (ZeRO++ §3.2). With expert parallelism a layer's gather holds
    1/ep of its experts (over the expert data-parallel group, priced here on the dp group's links). `gathers`:
    collectives a layer's gather takes (FSDP one per block; DeepSpeed one per Linear above its live-parameter cap
    `cap`, Plan.zero_max_live_parameters, Context.ds_gathers): the same bytes, each further
    collective one more ring latency and call. `kept` of the layers (the forward's last) are still gathered when
    the backward reaches them, and `replay` is the share of a layer gathered again after its recompute replay
    (_ds_reuse: DeepSpeed's reuse distance; FSDP 0 and 0).
    """
    if not ctx.transformer:
        layers = np.ones_like(dp)
    per_layer = _layer_bytes(ctx, tp, e_shard)          # weights gathered (frozen base + adapters with LoRA)
    # gradients reduce-scattered (only adapters' with LoRA, whose models have no expert parallelism)
    grads = (ctx.p_layer_train / tp + ctx.p_layer_exp * (1.0 / e_shard - 1.0 / tp)) * ctx.z3_grad_bytes
    extra_calls = gathers - 1.0
    ag = g.rs(per_layer) + ctx.call_s + extra_calls * (g.ring_lat_s + ctx.call_s)
    hpz_lat = ring_steps_latency_s(hpz, g.intra_lat)  # the node-local ring's, once for both terms
    ag_bwd = np.where(hpz > 1, _rs(per_layer, hpz, g.intra_bw, g.intra_lat, steps_latency_s=hpz_lat) + ctx.call_s
                      + extra_calls * (hpz_lat + ctx.call_s), ag)
    rs = g.rs(grads) + ctx.call_s
    extra = 1.0 + rc * ctx.fwd_frac
    t_f = t_layer * ctx.fwd_frac / extra       # forward ≈ 1/3 of a layer's fwd+bwd FLOPs (PaLM app. B: 2N vs 4N)
    t_b = t_layer - t_f                        # backward (and the replayed forward with recompute)
    ends = (ctx.p_emb + ctx.p_head) / tp * ctx.weight_bytes if ctx.transformer else 0.0
    # gather fwd + bwd and reduce-scatter of embedding/head (frozen with adapters: no reduce-scatter)
    t_ends = 2.0 * g.rs(ends) + (0.0 if ctx.adapters else g.rs(ends))
    # the backward starts with the layers it kept (their gradients' reduce-scatter only), then re-gathers the rest
    k = np.minimum(kept, layers - 1.0)
    ag_re = ag_bwd * (1.0 + replay)
    # a layer's gathers hide behind the layer before it (FSDP's block prefetch); DeepSpeed gathering Linear by
    # Linear prefetches module by module under its live-parameter cap (_ds_module_chain; the backward meets the
    # modules in reverse, its replay's and re-gathers shared out the same way), and the reduce-scatter hides in
    # what compute the gathers leave
    fwd_gap = np.maximum(0.0, ag - t_f)
    bwd_gap = np.maximum(0.0, ag_re + rs - t_b)
    on = (zero >= 3) & (dp > 1) & (pp == 1)
    # a window of a layer or more (bucket >= a layer, cap >= two) streams as the layer-level prefetch does: only
    # DeepSpeed's Linear-by-Linear rows with a shorter one are simulated (no modules: a layer of 0, none)
    window = np.inf if bucket is None else np.asarray(bucket, dtype=float)  # no bucket given: the cap alone
    layer = ctx.ds_modules.sum() / np.asarray(tp, dtype=float)
    cap = np.asarray(cap, dtype=float)
    chain = on & (np.asarray(gathers) > 1.0) & ((window < layer) | (cap < 2.0 * layer))
    if chain.any():
        i = np.flatnonzero(chain)

        def pick(x):
            return np.broadcast_to(x, chain.shape)[i]
        per_rank = ctx.ds_modules[None, :] / pick(tp)[:, None]
        f_gap = _ds_module_chain(per_rank, pick(ag), pick(t_f), pick(window), pick(cap))
        b_gath = _ds_module_chain(per_rank[:, ::-1], pick(ag_re), pick(t_b), pick(window), pick(cap))
        b_gap = b_gath + np.maximum(0.0, pick(rs) - np.maximum(0.0, pick(t_b) - (pick(ag_re) - b_gath)))
        fwd_gap = np.broadcast_to(fwd_gap, chain.shape).copy()
        bwd_gap = np.broadcast_to(bwd_gap, chain.shape).copy()
        fwd_gap[i] = np.maximum(fwd_gap[i], f_gap)
        bwd_gap[i] = np.maximum(bwd_gap[i], b_gap)
    fwd_exp = (layers - 1) * fwd_gap + ag
    bwd_exp = (layers - 1 - k) * bwd_gap + k * np.maximum(0.0, rs - t_b) + rs
    hidden = ((layers - 1) * (ag - fwd_gap) + (layers - 1 - k) * (ag_re + rs - bwd_gap)
              + k * np.minimum(rs, t_b))
    exposed = fwd_exp + bwd_exp + np.maximum(0.0, t_ends - t_head) + ctx.z3_contention * hidden
    n = g.n
    regathered = np.where(hpz > 1, 0.0, (layers - kept) * (1.0 + replay))  # hpZ's backward gathers stay in the node
    with np.errstate(divide="ignore", invalid="ignore"):
        sent = ((layers * (per_layer + grads) + regathered * per_layer) * (n - 1) / n
                + (2.0 if ctx.adapters else 3.0) * ends * (n - 1) / n)
    # `on` (above): with PP the stage's FSDP syncs once per step (_data_parallel)
    return np.where(on, exposed, 0.0), np.where(on, sent, 0.0)


def _deepspeed_zero3_host(ctx: Context, dp, pp, zero, hpz, layers, zrb, kept, replay):
    """Seconds of DeepSpeed ZeRO-3's host bookkeeping per micro-batch, which grows with ranks x parameters.

    Each gather (a layer's forward; in the backward, the layers it did not keep (`kept`, _ds_reuse), once for the
    replay and the backward with recompute, plus the `replay` share gathered again; over the hpZ group when there
    is one) walks every rank's shard of every parameter tensor of the layer
    (partition_parameters.py AllGatherCoalescedHandle.wait: a narrow per rank per parameter, then torch.cat), and
    every gradient in a multi-tensor reduce bucket is cut into world_size chunks and interleaved
    (coalesced_collectives.py reduce_scatter_coalesced; Context.ds_interleaved_tensors). FSDP gathers into one
    flat buffer per block and copies out with one op, so it pays none of this. The host runs it while the device
    works through the queue, so only what outlasts the device's work shows (the caller's max). Constants:
    calibration.yaml overheads.deepspeed_zero3_*, measured by benchmarks/deepspeed_zero3_host.py."""
    n_t = float(len(ctx.layer_tensors))
    bwd_group = np.where(hpz > 1, hpz, dp)
    gather = n_t * (layers * dp + (layers - kept) * (1.0 + replay) * bwd_group) * ctx.ds_gather_s
    sizes, which = np.unique(zrb, return_inverse=True)  # a few bucket sizes per batch: simulate each once
    per_layer = np.array([ctx.ds_interleaved_tensors(float(z)) for z in sizes])[which.reshape(-1)]
    reduce = layers * per_layer * dp * ctx.ds_reduce_s
    on = (zero >= 3) & (dp > 1) & (pp == 1)
    return np.where(on, gather + reduce, 0.0)


def _bucketed_allreduce(ctx: Context, g: _G, total, bucket, nb):
    """(seconds of all `nb` bucket all-reduces of `total` bytes, seconds of one full bucket): nb − 1 full buckets
    and the rest, each its own collective (algorithm, latency and host call): rings pay twice the ring's step
    latency per bucket (comm.ring_steps_latency_s), NCCL trees 2·log2(nodes)·α. The one bucket is what no backward
    can hide (`_overlapped`'s `last`)."""
    full = np.minimum(bucket, total)
    one = g.allreduce(full)
    rest = total - (nb - 1) * full
    return (nb - 1) * one + g.allreduce(rest) + nb * ctx.call_s, one


def _data_parallel(ctx: Context, g: _G, dp, m, zero, off, offp, zrb, bucket_mb, hook, n_dev, w_dev, t_mb, gpn, ovl,
                   exp, edp, megatron, fsdp_stage, layers, deepspeed, meg, fp8_lin):
    """(exposed sync s, bytes sent, offload s, optimizer s, host-link bytes) per step for DDP, ZeRO-1/2 and ZeRO-3
    with PP (synced once per step, `fsdp_stage` below).

    DDP (Li et al. 2020 §3.2): fp32 gradients (AMP) in bucket_cap_mb buckets, once per step with gradient
    accumulation (no_sync), overlapped with the last micro-batch's backward; fp16/bf16 hooks halve the bytes,
    PowerSGD compresses (Vogels et al. 2019). ZeRO (Rajbhandari et al. 2020 §5, §7) sends model-dtype
    gradients in reduce_bucket_size buckets: stage 1 once per step, stage 2 a reduce-scatter per bucket on every
    micro-step (seed 001 §IV-C), both all-gather the updated parameters after the step. Stage 3's traffic is
    per layer (_zero3_per_microbatch). Offload: CPU Adam and the host copies (Ren et al. 2021 §4.2).
    `n_dev`: trainable parameters on this device (the adapters with LoRA); `w_dev`: its weight bytes.
    `exp` of them are routed experts whose gradients sync over the expert data-parallel group of `edp` ranks
    (dp·tp/ep, a slice of the dp group): the same ring over fewer ranks, (e−1)/e of the bytes instead of
    (d−1)/d, priced as that share of the dp group's traffic; none when edp = 1. `megatron`: rows whose ZeRO-1
    runs as Megatron-Core's distributed optimizer (beside TP or PP, unless zero_impl puts it on DeepSpeed, as
    Megatron-DeepSpeed does). `fsdp_stage`: ZeRO-3 with PP, FSDP per pipeline
    stage as torch.distributed.pipelining runs it (torchtitan 3D): gradients accumulate unsharded and are
    reduce-scattered once, after the stage's last backward (PipelineStage.backward_maybe_with_nosync), which nothing
    hides; the parameters are all-gathered once per step, layer by layer ahead of the first micro-batch's forward
    (torchtitan apply_fsdp: no resharding under PP, "to avoid per-microbatch all-gathers"). `layers`: FSDP units.
    `deepspeed`: rows whose ZeRO runs on DeepSpeed (Plan.zero_runtime). `meg`: rows that run as Megatron
    (_megatron_rows), whose distributed optimizer reduce-scatters gradients of Context.megatron_grad_bytes (fp32 with
    bf16) and all-gathers the 16-bit parameters, of which `fp8_lin` (its Linears under --fp8-param-gather,
    _fp8_primary) in FP8, one byte each. DeepSpeed's stages 1 and 2 all-reduce each
    gradient bucket and keep their partition (stage_1_and_2.py average_tensor -> allreduce_and_scatter under
    zero_optimization.use_multi_rank_bucket_allreduce, default true), twice a reduce-scatter's bytes: stage 2 on
    every micro-step, stage 1 once per step; FSDP's SHARD_GRAD_OP reduce-scatters.
    """
    window = (2.0 / 3.0) * t_mb * ctx.bwd_window  # backward of the last micro-batch
    multi = dp > 1
    n_opt = np.where(zero >= 1, _sharded(n_dev, np.where(n_dev > 0, exp / np.maximum(n_dev, 1e-30), 0.0), dp, edp),
                     n_dev)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(multi, ((edp - 1) / edp) / ((dp - 1) / dp), 1.0)
        f8 = np.where(n_dev > 0, fp8_lin / n_dev, 0.0)  # the share of them all-gathered in FP8
    n_dev = n_dev - exp + exp * share  # what the gradient sync moves, in dp-group terms
    # Megatron's own rows (`meg`) sync its gradient buffer's dtype in buckets of max(40M, 1M x dp) parameters
    # (Megatron-Core DistributedDataParallelConfig.bucket_size default), DDP and distributed optimizer alike
    mel = np.maximum(40e6, 1e6 * dp)
    zgb = n_dev * ctx.grad_bytes_zero
    mgb = np.where(meg, n_dev * ctx.megatron_grad_bytes, zgb)  # what a distributed optimizer reduce-scatters
    gb_ddp = np.where(meg, mgb, n_dev * ctx.grad_bytes_ddp)
    gb_ddp = np.where((hook == 1) | (hook == 2), n_dev * 2, gb_ddp)
    ratio = powersgd_ratio(POWERSGD_RANK, ctx.h if ctx.transformer else 256)
    gb_ddp = np.where(hook == 3, gb_ddp * ratio, gb_ddp)
    bucket = np.where(meg & (hook == 0), mel * ctx.megatron_grad_bytes, bucket_mb * 2 ** 20)
    nb = np.maximum(1.0, np.ceil(gb_ddp / bucket))
    t, last = _bucketed_allreduce(ctx, g, gb_ddp, bucket, nb)
    # not overlapped (`ovl` off): DeepSpeed's engine at stage 0 and its pipeline engine all-reduce after the
    # backward (engine.py allreduce_gradients, pipe/engine.py ReduceGrads), Megatron without --overlap-grad-reduce
    # in finalize_model_grads; PyTorch DDP always overlaps (the plans gpuadvisor enumerates)
    # the hidden part's contention by the ring's link kind (NCCL's network transport occupies few SMs)
    cont = g.per_kind(ctx.contention_by, ctx.contention)
    ddp = np.where(ovl, _overlapped(t, last, window, cont), t)
    ddp = ddp + ctx.ddp_step_s
    zbucket = zrb * ctx.zero_gbytes
    znb = np.maximum(1.0, np.ceil(zgb / zbucket))
    # the parameters' all-gather after the step: the 16-bit weights on Megatron's own rows (its FP8 Linears one byte
    # each), else the gradients' dtype
    mwb = np.where(meg, n_dev * (ctx.weight_bytes - f8 * (ctx.weight_bytes - FP8_BYTES)), zgb)
    ag_after = g.rs(mwb) + ctx.call_s
    # DeepSpeed's stage 1 all-reduces the gradient buckets (stage_1_and_2.py average_tensor); on Megatron's layers
    # under DeepSpeed (Megatron-DeepSpeed, not `megatron` below) in the dtype its JSON gives them
    # (Context.megatron_grad_bytes: bf16 by default, fp32 under BF16_Optimizer's buffered_allreduce_fallback)
    zgb1 = np.where(meg, mgb, zgb)
    zbucket1 = zrb * np.where(meg, ctx.megatron_grad_bytes, ctx.zero_gbytes)
    t1, last1 = _bucketed_allreduce(ctx, g, zgb1, zbucket1, np.maximum(1.0, np.ceil(zgb1 / zbucket1)))
    z1 = np.where(ovl, _overlapped(t1, last1, window, cont), t1) + ag_after
    # ZeRO-1 beside TP/PP is Megatron-Core's distributed optimizer, launched with --overlap-grad-reduce and
    # --overlap-param-gather (launch/megatron.py): gradients reduce-scattered bucket by bucket during the last
    # backward, the updated parameters all-gathered bucket by bucket during the next step's first forward
    # (Megatron-Core distributed optimizer docs, "overlap_param_gather"); only the last bucket of each shows
    # Megatron's own rows reduce-scatter its gradient buffer's dtype (fp32 with bf16) and all-gather the 16-bit
    # parameters, in its buckets (`mel` above); the bundled trainers' distributed optimizer sends model-dtype
    # gradients in DeepSpeed-sized buckets
    mnb = np.maximum(1.0, np.where(meg, np.ceil(n_dev / mel), znb))
    rs1 = g.rs(mgb) + (mnb - 1) * g.ring_lat_s + mnb * ctx.call_s
    bucket1 = g.rs(np.where(meg, np.minimum(mel, n_dev) * ctx.megatron_grad_bytes, np.minimum(zbucket, zgb)))
    dopt = (_overlapped(rs1, bucket1, window, cont)
            + _overlapped(ag_after, bucket1, ctx.fwd_frac * t_mb, cont))
    # without --overlap-grad-reduce the distributed optimizer reduce-scatters after the backward
    # (finalize_model_grads) and all-gathers after the step, both exposed
    z1 = np.where(megatron, np.where(ovl, dopt, rs1 + ag_after), z1)
    t2 = np.where(deepspeed, t1, g.rs(zgb) + (znb - 1) * g.ring_lat_s + znb * ctx.call_s)
    last2 = np.where(deepspeed, last1, g.rs(np.minimum(zbucket, zgb)))
    z2 = m * np.where(ovl, _overlapped(t2, last2, window, cont), t2) + ag_after
    units = np.maximum(layers, 1.0)
    per_unit = (units - 1) * g.ring_lat_s + units * ctx.call_s  # one collective per FSDP unit (layer)
    rs_grads = g.rs(n_dev * ctx.z3_grad_bytes)  # one micro-step's gradients reduce-scattered (ZeRO-3)
    rs_stage = rs_grads + per_unit
    ag_stage = g.rs(w_dev) + per_unit
    fsdp = rs_stage + _overlapped(ag_stage, g.rs(w_dev / units), ctx.fwd_frac * t_mb, cont)
    exposed = np.where(zero == 0, ddp, np.where(zero == 1, z1, np.where(zero == 2, z2, np.where(fsdp_stage, fsdp,
                                                                                                   0.0))))
    exposed = np.where(multi, exposed, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(multi, (dp - 1) / dp, 0.0)
    sent = np.where(zero == 0, 2.0 * frac * gb_ddp, np.where(zero == 1, np.where(megatron, frac * (mgb + mwb),
                                                                                    frac * (2.0 * zgb1 + mwb)),
                                                              np.where(zero == 2, (m * np.where(deepspeed, 2.0, 1.0)
                                                                                   + 1) * frac * zgb, 0.0)))
    sent = np.where(fsdp_stage, frac * (n_dev * ctx.z3_grad_bytes + w_dev), sent)
    opt = np.where(off, 0.0, n_opt * ctx.adam_bpp / ctx.mem_bw)  # GPU Adam is memory-bound (compute.adam_time_s)
    offload, host = np.zeros(len(dp)), np.zeros(len(dp))
    if not off.any():
        return exposed, sent, offload, opt, host
    i = np.flatnonzero(off)  # the offload rows only (few of a batch)

    def pick(x):
        return np.broadcast_to(x, off.shape)[i]
    o_dp, o_m, o_zero, o_n, o_gpn = pick(dp), pick(m), pick(zero), pick(n_opt), pick(gpn)
    cpu_adam = o_n / (ctx.cpu_adam_rate * np.maximum(1.0, ctx.cpu_cores / np.maximum(1.0, o_gpn)))
    # the gradients' copies to host RAM, beside the backward or not (_offload_gradient_copies); the reduction
    # already on that stream: the micro-step's reduce (stage 1 the boundary's), ZeRO-3's reduce-scatter
    busy = np.where(pick(multi), np.where(o_zero >= 3, pick(rs_grads),
                                          np.where(o_zero == 1, pick(t1), pick(t2))), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.where(o_zero >= 3, 1.0 / np.maximum(pick(layers), 1.0),
                        np.minimum(1.0, pick(zbucket) / np.maximum(pick(zgb), 1e-30)))
    bw = _host_bw(ctx, o_gpn)
    grads_s, grads_b = _offload_gradient_copies(o_n, o_m, o_zero, pick(ovl), pick(window), busy, tail, bw,
                                                ctx.grad_bytes_zero)
    # after CPU Adam the updated 16-bit partition goes back up to the device, exposed; with offload_param it stays
    # in host RAM (the update writes it there) and ZeRO-3 fetches it instead, fwd and bwd, every micro-batch
    up = np.where(pick(offp), o_m * 2 * pick(w_dev) / o_dp, o_n * ctx.weight_bytes)
    offload[i] = cpu_adam + up / bw + grads_s
    host[i] = up + grads_b
    return exposed, sent, offload, opt, host


def _offload_gradient_copies(n_opt, m, zero, ovl, window, busy, tail, bw, gb):
    """(exposed seconds, host-link bytes) per step of ZeRO-Offload's gradient copies to and from host RAM, for the
    `n_opt` parameters of a rank's partition, as DeepSpeed 0.19.8 runs them (`offload_host_buffers`: their buffers).

    Stages 1 and 2 (runtime/zero/stage_1_and_2.py): with accumulation (m > 1) every micro-step copies the
    partition's gradients down to a host buffer in the model's dtype (data_types.grad_accum_dtype's default) and,
    from the second on, first back up to add them on the device (async_accumulate_grad_in_cpu_via_gpu: m down,
    m − 1 up; stage 1 reduces at the boundary only: one each). The host waits for one parameter's copies before
    it queues the next's (_wait_for_offload_copies, an event.synchronize()), so the backward queues no more work and
    none of them hides. At the boundary the fp32 gradient goes down (async_inplace_copy_grad_to_fp32_buffer_from_gpu,
    `.to(float32)` on the device first): after the others with m > 1, else on the reduction stream beside the backward.
    Stage 3 (runtime/zero/stage3.py partition_grads) keeps the partition's gradient buffer in host RAM (self.device
    is the CPU under offload_optimizer): each micro-step moves it once each way (the first copies it down and back
    up; the later ones bring the sum up, add on the device and copy down), and the boundary sends the fp32 gradient
    (_offload_grad_partition_at_boundary); all on the reduce-and-partition stream, which the backward outruns by a
    few buckets at most (max_param_reduce_events).
    Copies on a stream hide behind the micro-step's backward `window` less the reduction already on it (`busy`),
    but the share `tail` of the last layer or bucket, which has no backward left (_overlapped, without contention:
    the copy engines run them); `ovl` off (overlap_comm false) puts that stream on the compute stream. `bw`: the
    rank's host-link bytes/s (_host_bw); `gb`: bytes of one gradient in the model's dtype (2 with bf16/fp16)."""
    many = m > 1
    z3 = zero >= 3
    free = np.maximum(0.0, window - busy)

    def beside(c):
        return np.where(ovl, _overlapped(c, c * tail, free, 0.0), c)
    mb_s = n_opt * 2.0 * gb / bw                       # stage 3: one micro-step's copies down and up
    fp32_s = n_opt * FP32_BYTES / bw                   # the boundary's fp32 gradient
    z3_s = (m - 1.0) * beside(mb_s) + beside(mb_s + fp32_s)
    # stages 1/2: down and up per micro-step (m + m − 1 transfers; stage 1 two) and the fp32, all waited for
    acc = np.where(zero == 2, 2.0 * m - 1.0, 2.0)
    z12_s = np.where(many, n_opt * acc * gb / bw + fp32_s, beside(fp32_s))
    moved = n_opt * (np.where(z3, 2.0 * m, np.where(many, acc, 0.0)) * gb + FP32_BYTES)
    return np.where(z3, z3_s, z12_s), moved


def _features(ctx: Context, a: np.ndarray, g_tp: _G, g_dp: _G, g_pp: _G) -> dict:
    """Rule features (rules.FEATURES) over arrays (strings as object arrays)."""
    dp, tp, pp, zero, off, mb, m, sched, v, rc, sp, order, bucket_mb, hook, zrb, hpz, nodes, gpn = a.T[:18]
    net = ctx.cluster.network
    gbit = float("inf")
    if net is not None:
        gbit = net.link_speed_gbit_per_s or net.bandwidth_gb_per_s * 8
    none = np.array("none", dtype=object)
    return {
        "world": dp * tp * pp, "dp": dp, "tp": tp, "pp": pp, "zero": zero, "offload": off > 0, "nodes": nodes,
        "gpn": gpn, "params_m": np.full(len(a), ctx.params / 1e6),
        "tp_crosses_nodes": (tp > 1) & (g_tp.nodes > 1), "pp_crosses_nodes": (pp > 1) & (g_pp.nodes > 1),
        "dp_crosses_nodes": (dp > 1) & (g_dp.nodes > 1), "network_gbit": np.where(nodes > 1, gbit, np.inf),
        "tp_link": np.where(tp > 1, g_tp.kind, none), "dp_link": np.where(dp > 1, g_dp.kind, none),
        "pp_link": np.where(pp > 1, g_pp.kind, none),
        "m": m, "mb": mb, "m_over_p": m / pp, "micro_steps": m,
        "comm_hook": np.array(HOOKS, dtype=object)[hook.astype(int)], "recompute": rc > 0,
        "schedule": np.array(SCHEDULES, dtype=object)[sched.astype(int)], "sequence_parallel": sp > 0,
        "device": np.full(len(a), ctx.device.kind, dtype=object), "ep": a[:, 18],
    }
