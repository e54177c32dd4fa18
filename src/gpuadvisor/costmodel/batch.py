"""The analytical cost model over many plans at once (structure of arrays, NumPy).

`evaluate_batch(rows, ctx, rules)` computes, for every enumeration row (candidates.COLUMNS), what
`combine.fast_eval` computes for one Plan: peak memory, feasibility (memory, host RAM, forbid rules),
step time and tokens/s after rule penalties. It is the same physics, formula for formula, as
analytical/__init__.py (`evaluate`), memory.py, compute.py, comm.py and pipeline.py — their sources
apply here; tests/costmodel/test_batch.py checks agreement to 1e-9 on random plans across presets.
Ranking uses it for every candidate and builds pydantic Estimates only for the plans it shows.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .analytical import Context
from .analytical.comm import Group
from .analytical.memory import state_bytes_per_param
from .rules import Rule, load_rules

__all__ = ["Batch", "evaluate_batch", "REASONS"]

# reason codes of the `reason` array (0: feasible)
REASONS = (None, "out of device memory", "out of host memory for offload")
_ORDERS = ("tp-dp-pp", "tp-pp-dp")
_SCHEDULES = ("1f1b", "gpipe", "interleaved")
_HOOKS = ("none", "fp16", "bf16", "powersgd")
_GB = 1e9


class Batch:
    """Arrays of one batch evaluation (index i = enumeration row i)."""

    __slots__ = ("feasible", "reason", "forbid", "mem_total", "step_s", "tps", "factor")

    def __init__(self, feasible, reason, forbid, mem_total, step_s, tps, factor):
        self.feasible, self.reason, self.forbid = feasible, reason, forbid
        self.mem_total, self.step_s, self.tps, self.factor = mem_total, step_s, tps, factor

    def reason_of(self, i: int) -> Optional[str]:
        """Infeasibility reason of row i (as fast_eval words it), None if feasible."""
        if self.forbid[i]:
            return self.forbid[i]
        return REASONS[int(self.reason[i])]


def _ring(size, n, bw, lat):
    """Ring all-reduce 2(n−1)/n·S/B + 2(n−1)·α (Thakur et al. 2005), 0 where n <= 1 or S <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = 2.0 * (n - 1) / n * size / (bw * _GB) + 2.0 * (n - 1) * lat * 1e-6
    return np.where((n <= 1) | (size <= 0), 0.0, t)


def _rs(size, n, bw, lat):
    """Ring reduce-scatter / all-gather (n−1)/n·S/B + (n−1)·α, 0 where n <= 1 or S <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (n - 1) / n * size / (bw * _GB) + (n - 1) * lat * 1e-6
    return np.where((n <= 1) | (size <= 0), 0.0, t)


def _overlapped(comm, last, window, contention):
    """comm.overlapped_exposed_s over arrays (Li et al. 2020 §3.2.3)."""
    hidden = np.maximum(0.0, np.minimum(comm - last, window))
    return np.where(comm <= 0, 0.0, comm - hidden + contention * hidden)


class _G:
    """Group attributes of each row as arrays (from Topology.group, one call per distinct degrees)."""

    def __init__(self, ctx: Context, kind: str, keys: np.ndarray, uniq: list):
        groups: list[Group] = [ctx.topo.group(kind, dp, tp, pp, nodes, gpn, _ORDERS[o]) for dp, tp, pp, nodes, gpn, o
                               in uniq]
        def arr(attr, dtype=float):
            return np.array([getattr(g, attr) for g in groups], dtype=dtype)[keys]
        self.n, self.nodes, self.per_node = arr("n"), arr("nodes"), arr("per_node")
        self.bw, self.lat, self.intra_bw, self.intra_lat = arr("bw_gb_per_s"), arr("latency_us"), arr("intra_bw"), \
            arr("intra_lat")
        self.net_bw_per_flow, self.flows = arr("net_bw_per_flow"), arr("flows_per_nic")
        self.shared_chain = arr("shared_chain")
        self.kind = np.array([g.kind for g in groups], dtype=object)[keys]
        self.kind_u = [g.kind for g in groups]
        self.keys = keys

    def allreduce(self, size, hier_min: int):
        """comm.group_allreduce_s: min(flat ring, hierarchical) per row."""
        flat = _ring(size, self.n, self.bw, self.lat)
        use = (self.nodes >= hier_min) & (self.per_node > 1) & (self.intra_bw != np.inf) & (self.n > 1)
        if not use.any():
            return flat
        k, m = self.nodes, self.per_node
        with np.errstate(divide="ignore", invalid="ignore"):
            inter_bw = np.where(self.flows > 0, self.net_bw_per_flow / m, self.bw)
            hier = (_rs(size, m, self.intra_bw, self.intra_lat) + _ring(size / m, k, inter_bw, self.lat)
                    + _rs(size, m, self.intra_bw, self.intra_lat))
        return np.where(use, np.minimum(flat, hier), flat)

    def rs(self, size):
        return _rs(size, self.n, self.bw, self.lat)

    def per_kind(self, table: dict, default: float) -> np.ndarray:
        """A per-link-kind constant (tp comm_efficiency, DDP contention) for each row."""
        return np.array([table.get(k, default) for k in self.kind_u], dtype=float)[self.keys]


def evaluate_batch(rows: list[tuple], ctx: Context, rules: Optional[tuple[Rule, ...]] = None) -> Batch:
    """Evaluate every row (candidates.COLUMNS) like fast_eval: analytical model, then rules."""
    a = np.asarray(rows, dtype=float)
    if a.size == 0:
        z = np.zeros(0)
        return Batch(z.astype(bool), z.astype(int), [], z, z, z, z)
    (dp, tp, pp, zero, off, mb, m, sched, v, rc, sp, order, bucket_mb, hook, zrb, hpz, nodes, gpn) = a.T[:18]
    off, rc, sp = off > 0, rc > 0, sp > 0
    # distinct degree tuples -> group placements
    deg = a[:, [0, 1, 2, 16, 17, 11]].astype(np.int64)
    code = np.zeros(len(a), dtype=np.int64)
    for j in range(6):  # one integer per degree tuple (each degree < 2^10 here; else exact fallback)
        code = code * 1024 + deg[:, j]
    if deg.max() < 1024:
        ucode, first_idx, keys = np.unique(code, return_index=True, return_inverse=True)
        uniq_arr = deg[first_idx]
    else:
        uniq_arr, keys = np.unique(deg, axis=0, return_inverse=True)
    keys = keys.reshape(-1)
    uniq = [tuple(int(x) for x in u) for u in uniq_arr]
    g_tp, g_dp, g_pp = (_G(ctx, k, keys, uniq) for k in ("tp", "dp", "pp"))

    # ---- memory (analytical._memory, memory.py) ----
    if ctx.transformer:
        layers = np.ceil(ctx.L / pp)
        first = np.where(pp == 1, float(ctx.params), layers * ctx.p_layer + ctx.p_emb)
        last = np.where(pp == 1, float(ctx.params), layers * ctx.p_layer + (ctx.p_head or ctx.V * ctx.h) + 2 * ctx.h)
    else:
        layers = np.ones_like(pp)
        first = last = np.full_like(pp, float(ctx.params))
    first_t, last_t = first / tp, last / tp
    if ctx.transformer:
        act1 = _act(ctx, mb, tp, sp, rc)
        full = np.where(rc, _act(ctx, mb, tp, sp, np.zeros_like(rc)), 0.0)
        inflight = np.where(pp == 1, 1.0, np.where(sched == 1, m, np.where(
            sched == 2, np.minimum(m, pp * (1.0 + (pp - 1) / (pp * v))), np.minimum(pp, m))))
        acts0 = layers * act1 * inflight + full
        acts_last = layers * act1 + full
        logits = 4.0 * ctx.s * mb * ctx.V / tp
    else:
        acts0 = acts_last = ctx.act_per_sample * mb
        logits = np.zeros_like(mb)
    tot0, host0 = _device_total(ctx, first_t, acts0, np.where(pp == 1, logits, 0.0), dp, tp, pp, zero, off, hpz, zrb,
                                bucket_mb)
    tot1, host1 = _device_total(ctx, last_t, acts_last, logits, dp, tp, pp, zero, off, hpz, zrb, bucket_mb)
    mem_total = np.where(tot1 > tot0, tot1, tot0)
    host = np.where(tot1 > tot0, host1, host0)
    reason = np.zeros(len(a), dtype=np.int64)
    out_host = off & bool(ctx.host_ram) & (host * gpn > ctx.host_ram * ctx.host_usable)
    reason[out_host] = 2
    reason[mem_total > ctx.mem_cap] = 1
    ok = reason == 0

    # ---- compute of one micro-batch on the busiest stage (analytical._microbatch_compute) ----
    tokens = mb * ctx.s
    if ctx.transformer:
        extra = np.where(rc, 4.0 / 3.0, 1.0)
        flops = tokens * (layers * ctx.layer_fpt * extra + ctx.head_fpt) / tp
        x = tokens * ctx.h / tp / 1e6
        t_mb = flops / (ctx.rate_max * x / (x + ctx.x_half))
        t_mb = t_mb + tokens * (layers * extra) * ctx.elem_traffic * ctx.h * ctx.act_bytes / np.where(sp, tp, 1.0) \
            / ctx.mem_bw
        t_mb = t_mb + (layers * extra) * ctx.kpl * ctx.launch_us * 1e-6
    else:
        flops = mb * ctx.fps
        x = flops / 1e9
        t_mb = flops / (ctx.rate_max * x / (x + ctx.x_half)) + 1 * ctx.generic_kernels * ctx.launch_us * 1e-6

    # ---- tensor parallel (Shoeybi et al. 2019; Korthikanti et al. 2022) ----
    size = tokens * ctx.h * ctx.act_bytes
    n_coll = layers * np.where(rc, 6.0, 4.0)
    calls = np.where(sp, 2.0, 1.0)
    t_tp = np.where(tp > 1, n_coll * (g_tp.allreduce(size, ctx.hier_min) / g_tp.per_kind(ctx.tp_eff, 1.0)
                                      + calls * ctx.tp_call_s), 0.0)

    # ---- pipeline (pipeline.py) ----
    psize = tokens * ctx.h * ctx.act_bytes / tp
    with np.errstate(divide="ignore", invalid="ignore"):
        t_p2p = g_pp.lat * 1e-6 + psize / (g_pp.bw * _GB) + ctx.p2p_call_s * np.maximum(1.0, g_pp.shared_chain)
    n_x = np.where(v > 1, 2.0 * v, np.where(pp >= 3, 2.0, 1.0))
    stage = t_mb + t_tp + n_x * t_p2p
    step_pp = m * stage + (pp - 1) / v * stage
    if ctx.transformer and ctx.tied:
        emb = float(ctx.V) * ctx.h / tp * ctx.zero_gbytes
        step_pp = step_pp + _ring(emb, np.full_like(pp, 2.0), g_pp.bw, g_pp.lat) + ctx.call_s
    step = np.where(pp > 1, step_pp, m * (t_mb + t_tp))

    # ---- data parallel: DDP / ZeRO, offload, optimizer (analytical._data_parallel) ----
    n_dev = np.maximum(first, last) / tp
    exposed, offload, opt = _data_parallel(ctx, g_dp, dp, tp, m, zero, off, hpz, zrb, bucket_mb, hook, n_dev, t_mb,
                                          gpn)
    step_s = step + exposed + offload + opt + ctx.step_overhead
    tps = dp * mb * m * ctx.s / step_s  # the plan's own global batch (it may differ with allow_batch_change)
    step_s = np.where(ok, step_s, np.inf)
    tps = np.where(ok, tps, 0.0)

    # ---- rules (rules.py), vectorised ----
    rules = load_rules() if rules is None else rules
    factor = np.ones(len(a))
    forbid: list = [None] * len(a)
    if rules:
        feats = _features(ctx, a, g_tp, g_dp, g_pp)
        for r in rules:
            hit = np.broadcast_to(np.asarray(r.vcond(feats), dtype=bool), (len(a),))
            if r.severity == "penalty":
                factor = np.where(hit, factor * r.factor, factor)
            elif r.severity == "forbid":
                for i in np.flatnonzero(hit & ok):
                    if forbid[i] is None:
                        forbid[i] = f"forbidden by rule: {r.message}"
        tps = tps * factor
        step_s = step_s / factor
    feasible = ok & np.array([f is None for f in forbid], dtype=bool)
    return Batch(feasible, reason, forbid, mem_total, step_s, tps, factor)


def _act(ctx: Context, mb, tp, sp, rc):
    """memory.activation_bytes_per_layer over arrays (Korthikanti et al. 2022 Table 2)."""
    scale = ctx.act_bytes / 2.0
    sbh = float(ctx.s) * mb * ctx.h
    attn = 0.0 if ctx.fused_attention else 5.0 * ctx.a * ctx.s / ctx.h
    per = np.where(tp == 1, 34.0 + attn, np.where(sp, 34.0 / tp + attn / tp, 10.0 + 24.0 / tp + attn / tp))
    return np.where(rc, 2.0 * sbh * scale / np.where(sp, tp, 1.0), sbh * per * scale)


def _device_total(ctx: Context, params, acts, lg, dp, tp, pp, zero, off, hpz, zrb, bucket_mb):
    """(peak bytes, host bytes) of one device holding `params` (memory.model_state_bytes + buffers)."""
    wb, gbb, ob = state_bytes_per_param(ctx.precision, ctx.optimizer)
    w, g, o = params * wb, params * gbb, params * ob
    o = np.where(zero >= 1, o / dp, o)
    g = np.where(zero >= 2, g / dp, g)
    w = np.where(zero >= 3, w / dp + np.where(hpz > 1, params * wb / hpz, 0.0), w)
    host = np.where(off, o + params * 4.0 / dp + np.where(zero >= 3, params * wb / dp, 0.0), 0.0)
    w = np.where(off & (zero >= 3) & (hpz == 1), params * wb / dp, w)
    o = np.where(off, 0.0, o)
    zg = ctx.zero_gbytes
    buf = np.where(zero > 0, 2 * np.minimum(zrb, params) * zg + np.minimum(500_000_000, params) * zg,
                   np.where(dp > 1, 2 * bucket_mb * 2 ** 20, 0.0))
    live = w + g + o + acts + lg + buf
    peers = (dp > 1).astype(float) + (tp > 1) + 2.0 * (pp > 1)
    fw = ctx.cuda_ctx + peers * ctx.nccl_peer + ctx.frag * live
    return live + fw, host


def _data_parallel(ctx: Context, g: _G, dp, tp, m, zero, off, hpz, zrb, bucket_mb, hook, n_dev, t_mb, gpn):
    """(exposed sync, offload, optimizer) seconds: DDP (Li et al. 2020), ZeRO (Rajbhandari et al. 2020)."""
    window = (2.0 / 3.0) * t_mb * ctx.bwd_window
    lat = g.lat * 1e-6
    multi = dp > 1
    # DDP
    gb_ddp = n_dev * ctx.ddp_gbytes
    gb_ddp = np.where((hook == 1) | (hook == 2), n_dev * 2, gb_ddp)
    ratio = min(1.0, 4 * 2.0 / max(ctx.h if ctx.transformer else 256, 1))
    gb_ddp = np.where(hook == 3, gb_ddp * ratio, gb_ddp)
    bucket = bucket_mb * 2 ** 20
    nb = np.maximum(1.0, np.ceil(gb_ddp / bucket))
    t = g.allreduce(gb_ddp, ctx.hier_min) + (nb - 1) * 2 * (dp - 1) * lat + nb * ctx.call_s
    last = g.allreduce(np.minimum(bucket, gb_ddp), ctx.hier_min)
    ddp = _overlapped(t, last, window, g.per_kind(ctx.contention_by, ctx.contention)) + ctx.ddp_step_s
    # ZeRO (zero_overlap_comm is on for every enumerated plan)
    zgb = n_dev * ctx.zero_gbytes
    zbucket = zrb * ctx.zero_gbytes
    znb = np.maximum(1.0, np.ceil(zgb / zbucket))
    ag_after = g.rs(zgb) + ctx.call_s
    t1 = g.allreduce(zgb, ctx.hier_min) + (znb - 1) * 2 * (dp - 1) * lat + znb * ctx.call_s
    last1 = g.allreduce(np.minimum(zbucket, zgb), ctx.hier_min)
    z1 = _overlapped(t1, last1, window, ctx.contention) + ag_after
    t2 = g.rs(zgb) + (znb - 1) * (dp - 1) * lat + znb * ctx.call_s
    last2 = g.rs(np.minimum(zbucket, zgb))
    z2 = m * _overlapped(t2, last2, window, ctx.contention) + ag_after
    ag = g.rs(zgb) + ctx.call_s
    ag_bwd = np.where(hpz == 1, ag, _rs(zgb, hpz, g.intra_bw, g.intra_lat))
    rs3 = g.rs(zgb) + znb * ctx.call_s
    layer_bytes = np.minimum(zbucket, ctx.p_layer / tp * ctx.zero_gbytes)
    last3 = g.rs(layer_bytes)
    z3 = m * _overlapped(ag + ag_bwd + rs3, last3, t_mb * ctx.bwd_window, ctx.z3_contention)
    exposed = np.where(zero == 0, ddp, np.where(zero == 1, z1, np.where(zero == 2, z2, z3)))
    exposed = np.where(multi, exposed, 0.0)
    # optimizer: GPU Adam (memory-bound) or CPU Adam with ZeRO-Offload (Ren et al. 2021 §4.2)
    n_opt = np.where(zero >= 1, n_dev / dp, n_dev)
    cores = np.maximum(1.0, ctx.cpu_cores / np.maximum(1.0, gpn))
    cpu_adam = n_opt / (ctx.cpu_adam_rate * cores)
    copies = 2 * n_opt * 2 + np.where(zero >= 3, m * 2 * n_opt * 2, 0.0)
    offload = np.where(off, cpu_adam + copies / ctx.host_bw, 0.0)
    opt = np.where(off, 0.0, n_opt * ctx.adam_bpp / ctx.mem_bw)
    return exposed, offload, opt


def _features(ctx: Context, a: np.ndarray, g_tp: _G, g_dp: _G, g_pp: _G) -> dict:
    """rules.plan_features over arrays (strings as object arrays)."""
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
        "comm_hook": np.array(_HOOKS, dtype=object)[hook.astype(int)], "recompute": rc > 0,
        "schedule": np.array(_SCHEDULES, dtype=object)[sched.astype(int)], "sequence_parallel": sp > 0,
        "device": np.full(len(a), ctx.device.kind, dtype=object),
    }
