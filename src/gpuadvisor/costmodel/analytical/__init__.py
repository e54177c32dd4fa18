"""The analytical cost model: compose memory, compute, communication and pipeline physics for a plan.

`Context` precomputes everything that depends only on (cluster, workload); `evaluate(plan, ctx)` is
the lean hot path returning an `Eval` (plain slots object). Formulas and their sources live in
memory.py, compute.py, comm.py and pipeline.py.
"""
from __future__ import annotations

import math
from typing import Optional

from ...schemas import Cluster, Plan, Workload
from ..calibration import gemm_curve, load_calibration, pcie_host_bandwidth
from . import comm as C
from . import compute as K
from . import memory as M
from .pipeline import (exchanges_per_slot, p2p_bytes_per_microbatch, p2p_call_s, pipeline_step_s,
                       tied_embedding_grad_bytes)

__all__ = ["Context", "Eval", "evaluate"]


class Context:
    """Plan-independent facts of one (cluster, workload): rates, shapes, constants, topology."""

    def __init__(self, cluster: Cluster, workload: Workload, calibration: Optional[dict] = None):
        cal = calibration or load_calibration()
        self.cal, self.cluster, self.workload = cal, cluster, workload
        m, t = workload.model, workload.training
        self.model = m
        self.transformer = m.kind == "transformer"
        self.s = t.seq_len if self.transformer else 1
        self.gb = t.global_batch
        self.precision, self.optimizer = t.precision, t.optimizer
        self.act_bytes = 4 if t.precision == "fp32" else 2
        devs = [d for n in cluster.nodes for d in n.devices]
        dev = min(devs, key=lambda d: (d.memory_bytes, d.peak_tflops_bf16))
        self.device = dev
        self.mem_cap = min(d.memory_bytes for d in devs)
        ge = cal["gemm_efficiency"]
        curve = gemm_curve(dev.name, dev.spec_key, generic=not self.transformer, cal=cal)
        self.family = gemm_curve(dev.name, dev.spec_key, cal=cal).family
        fp32 = t.precision == "fp32" or dev.kind == "cpu"
        peak = dev.peak_tflops_fp32 if fp32 else dev.peak_tflops_bf16
        e_max = curve.e_max if not (fp32 and self.transformer) else float(ge["fp32_e_max"]) * curve.e_max / 0.5
        if dev.achieved_tflops:
            peak = dev.achieved_tflops / float(ge["large_gemm_fraction"])
        self.rate_max = peak * 1e12 * min(e_max, 0.95)
        self.x_half = curve.x_half
        self.mem_bw = dev.memory_bandwidth_gb_per_s * 1e9
        ov, oh, pr = cal["overheads"], cal["overlap"], cal["precision"]
        if dev.kind == "cpu" and "cpu_ranks" in cal:
            # CPU ranks (gloo): the measured matmul rate is the large-GEMM rate itself (no tensor-core/fp32 or
            # cuBLAS scaling), and op dispatch / step costs are the CPU trainer's, not CUDA's (cpu_ranks section)
            cr = cal["cpu_ranks"]
            ov = {**ov, **{k: cr[k] for k in ("kernels_per_layer", "launch_us", "step_overhead_s", "tp_call_us",
                                                    "p2p_call_us", "ddp_step_us")
                           if k in cr}}
            base = dev.achieved_tflops or dev.peak_tflops_fp32
            self.rate_max = base * 1e12 * float(cr["e_max"])
            self.x_half = float(cr["x_half"])
        self.kpl, self.launch_us = float(ov["kernels_per_layer"]), float(ov["launch_us"])
        self.generic_kernels = float(ov.get("generic_kernels", 200))
        self.step_overhead = float(ov["step_overhead_s"])
        self.adam_bpp = float(ov["adam_bytes_per_param"])
        self.elem_traffic = float(ov["elementwise_traffic_per_h"])
        self.call_s = float(ov["collective_call_us"]) * 1e-6
        # a TP collective's host cost (DTensor redistribute + the collective launch); CPU ranks override it
        self.tp_call_s = float(ov.get("tp_call_us", ov["collective_call_us"])) * 1e-6
        self.p2p_call_s = float(ov["p2p_call_us"]) * 1e-6
        # DDP's per-step host cost that no backward hides (0 for GPUs; CPU ranks over gloo: cpu_ranks section)
        self.ddp_step_s = float(ov.get("ddp_step_us", 0.0)) * 1e-6
        self.contention, self.bwd_window = float(oh["contention"]), float(oh["backward_window"])
        self.z3_contention = float(oh["zero3_contention"])
        self.contention_by = {k: float(v) for k, v in (oh.get("contention_by_link") or {}).items()}
        self.ddp_gbytes = 4 if fp32 else int(pr["ddp_grad_bytes_mixed"])
        self.zero_gbytes = 4 if fp32 else int(pr["zero_grad_bytes_mixed"])
        mc = cal["memory"]
        self.cuda_ctx, self.nccl_peer = float(mc["cuda_context_bytes"]), float(mc["nccl_bytes_per_peer"])
        self.frag, self.host_usable = float(mc["fragmentation"]), float(mc["host_ram_usable"])
        off = cal["offload"]
        self.host_bw = pcie_host_bandwidth(dev.pcie_gen, cal) * 1e9
        self.cpu_adam_rate = float(off["cpu_adam_params_per_s_per_core"])
        self.host_ram = min((n.cpu.ram_bytes for n in cluster.nodes), default=0)
        self.cpu_cores = min((n.cpu.cores for n in cluster.nodes), default=1)
        net_eff = 1.0
        if cluster.network is not None:
            net_eff = float(cal["network"]["protocol_efficiency"].get(cluster.network.protocol, 1.0))
        self.topo = C.Topology(cluster, net_efficiency=net_eff)
        self.hier_min = int(cal["network"].get("hierarchical_min_nodes", 3))
        self.tp_eff = {k: float(v) for k, v in cal["tensor_parallel"]["comm_efficiency"].items()}
        self.n_nodes = len(cluster.nodes)
        self.gpn_max = max(cluster.devices_per_node)
        # model shape
        self.params = m.params
        if self.transformer:
            self.L, self.h, self.a, self.V = m.n_layers, m.d_model, m.n_heads, m.vocab_size
            self.p_layer = K.layer_params(m)
            self.p_emb = m.vocab_size * m.d_model + m.max_seq_len * m.d_model
            self.p_head = 0 if m.tied_embeddings else m.vocab_size * m.d_model
            self.tied = bool(m.tied_embeddings)
            self.layer_fpt = K.layer_flops_per_token(m, self.s)
            self.head_fpt = K.head_flops_per_token(m)
            self.fused_attention = dev.kind == "gpu"
        else:
            self.L, self.h, self.a, self.V = 1, 1, 1, 0
            self.p_layer = self.params
            self.p_emb = self.p_head = 0
            self.tied = False
            self.layer_fpt = self.head_fpt = 0.0
            self.fps = float(m.flops_per_sample or 0.0)
            self.act_per_sample = float(m.activation_bytes_per_sample or 0.0)
            self.fused_attention = True
        self.single_best_tps: Optional[float] = None

    def stage_params(self, pp: int) -> tuple[float, float]:
        """(first-stage, last-stage) parameters: layers split evenly, embedding first, head last."""
        if not self.transformer:
            return float(self.params), float(self.params)
        layers = math.ceil(self.L / pp)
        if pp == 1:
            return float(self.params), float(self.params)
        first = layers * self.p_layer + self.p_emb
        # the last stage holds the LM head: a tied head keeps its own copy of the word embedding
        last = layers * self.p_layer + (self.p_head or self.V * self.h) + 2 * self.h
        return float(first), float(last)


class Eval:
    """Lean result of the hot path (converted to schemas.Estimate only for the plans shown)."""

    __slots__ = ("plan", "feasible", "reason", "step_s", "tps", "analytical_tps", "compute_s", "comm",
                 "bubble_s", "offload_s", "optimizer_s", "overhead_s", "mem", "mem_other", "link_bytes",
                 "nic_bytes", "rules", "factor", "learned", "uncertainty")

    def __init__(self, plan: Plan):
        self.plan = plan
        self.feasible, self.reason = True, None
        self.comm: dict[str, float] = {}
        self.link_bytes: dict[str, float] = {}
        self.nic_bytes = 0.0
        self.rules: list = []
        self.factor, self.learned, self.uncertainty = 1.0, 1.0, None
        self.bubble_s = self.offload_s = self.optimizer_s = self.overhead_s = 0.0


def _add(d: dict, key: str, v: float) -> None:
    if v > 0:
        d[key] = d.get(key, 0.0) + v


def _microbatch_compute(p: Plan, ctx: Context, tokens: int, tp: int) -> float:
    """Seconds of fwd+bwd compute of one micro-batch on the busiest pipeline stage."""
    rc = p.recompute
    if not ctx.transformer:
        flops = p.micro_batch_size * ctx.fps
        x = flops / 1e9
        t = flops / (ctx.rate_max * x / (x + ctx.x_half))
        return t + K.launch_time_s(1, ctx.generic_kernels, ctx.launch_us)
    layers = math.ceil(ctx.L / p.pp)
    extra = 4.0 / 3.0 if rc else 1.0
    flops = tokens * (layers * ctx.layer_fpt * extra + ctx.head_fpt) / tp
    x = K.gemm_size(tokens, ctx.h, tp)
    t = flops / (ctx.rate_max * x / (x + ctx.x_half))
    t += K.elementwise_time_s(tokens, layers * extra, ctx.h, ctx.act_bytes, ctx.elem_traffic, ctx.mem_bw,
                              tp if p.sequence_parallel else 1)
    return t + K.launch_time_s(layers * extra, ctx.kpl, ctx.launch_us)


def evaluate(p: Plan, ctx: Context) -> Eval:
    """Analytical step time, memory and traffic of plan `p` (no rules, no learned factor)."""
    e = Eval(p)
    dp, tp, pp, m, mb, v = p.dp, p.tp, p.pp, p.num_micro_batches, p.micro_batch_size, p.pp_virtual_stages
    topo, nodes, gpn, order = ctx.topo, p.nodes, p.devices_per_node, p.mesh_order
    layers = math.ceil(ctx.L / pp) if ctx.transformer else 1
    first, last = ctx.stage_params(pp)
    _memory(p, ctx, e, first / tp, last / tp, layers)
    if not e.feasible:  # peak memory decides; skip the timing (most large-model candidates end here)
        e.step_s, e.tps = float("inf"), 0.0
        e.analytical_tps, e.compute_s = 0.0, 0.0
        return e
    tokens = mb * ctx.s
    t_mb = _microbatch_compute(p, ctx, tokens, tp)
    # tensor parallel: 2 all-reduces fwd + 2 bwd per layer per micro-batch (Shoeybi et al. 2019 §3,
    # Fig. 4), +2 with recompute (forward replayed); SP turns them into RS+AG of equal volume
    # (Korthikanti et al. 2022 §4.2.2). On the critical path.
    t_tp = 0.0
    if tp > 1:
        g = topo.group("tp", dp, tp, pp, nodes, gpn, order)
        size = tokens * ctx.h * ctx.act_bytes
        n_coll = layers * (6 if p.recompute else 4)
        calls = 2 if p.sequence_parallel else 1
        t_tp = n_coll * (C.group_allreduce_s(size, g, ctx.hier_min) / ctx.tp_eff.get(g.kind, 1.0)
                         + calls * ctx.tp_call_s)
        sent = m * n_coll * 2.0 * (tp - 1) / tp * size
        _add(e.link_bytes, g.kind, sent)
        e.nic_bytes += g.flows_per_nic * sent
        _add(e.comm, f"tp@{g.kind}", m * t_tp)
    # pipeline: P2P of b·s·h per micro-batch per boundary, fwd and bwd (Narayanan et al. 2021 §2.2)
    if pp > 1:
        g = topo.group("pp", dp, tp, pp, nodes, gpn, order)
        size = p2p_bytes_per_microbatch(tokens, ctx.h, ctx.act_bytes, tp)
        t_p2p = C.p2p_s(size, g.bw_gb_per_s, g.latency_us) + p2p_call_s(ctx.p2p_call_s, g.shared_chain)
        n_x = exchanges_per_slot(pp, v)
        stage = t_mb + t_tp + n_x * t_p2p
        step, bubble = pipeline_step_s(stage, pp, m, v)
        e.bubble_s = bubble
        sent = m * 2 * v * size
        _add(e.link_bytes, g.kind, sent)
        e.nic_bytes += g.flows_per_nic * sent / 2.0
        _add(e.comm, f"pp@{g.kind}", m * n_x * t_p2p)
        if ctx.transformer and ctx.tied:
            emb = tied_embedding_grad_bytes(ctx.V, ctx.h, tp, ctx.zero_gbytes)
            t_emb = C.ring_allreduce_s(emb, 2, g.bw_gb_per_s, g.latency_us) + ctx.call_s
            step += t_emb
            _add(e.link_bytes, g.kind, emb)
            e.nic_bytes += g.flows_per_nic * emb
            _add(e.comm, f"pp@{g.kind}", t_emb)
    else:
        step = m * (t_mb + t_tp)
    e.compute_s = m * t_mb
    n_dev = max(first, last) / tp
    dp_exposed, offload, opt = _data_parallel(p, ctx, e, n_dev, t_mb)
    e.offload_s, e.optimizer_s, e.overhead_s = offload, opt, ctx.step_overhead
    e.step_s = step + dp_exposed + offload + opt + ctx.step_overhead
    e.tps = p.global_batch() * ctx.s / e.step_s  # the plan's own batch (allow_batch_change)
    e.analytical_tps = e.tps
    return e


def _data_parallel(p: Plan, ctx: Context, e: Eval, n_dev: float, t_mb: float) -> tuple[float, float, float]:
    """(exposed gradient/parameter sync, offload, optimizer) seconds per step for DDP or ZeRO."""
    dp, m, z = p.dp, p.num_micro_batches, p.zero_stage
    window = (2.0 / 3.0) * t_mb * ctx.bwd_window  # backward of the last micro-batch
    exposed = 0.0
    if dp > 1:
        g = ctx.topo.group("dp", dp, p.tp, p.pp, p.nodes, p.devices_per_node, p.mesh_order)
        lat = g.latency_us * 1e-6
        if z == 0:
            # DDP (Li et al. 2020 §3.2): fp32 grads (AMP) in bucket_cap_mb buckets, once per step with
            # gradient accumulation (no_sync); fp16/bf16 hooks halve bytes, PowerSGD compresses
            gbytes = n_dev * ctx.ddp_gbytes
            if p.comm_hook in ("fp16", "bf16"):
                gbytes = n_dev * 2
            elif p.comm_hook == "powersgd":
                gbytes *= C.powersgd_ratio(4, ctx.h if ctx.transformer else 256)
            bucket = p.ddp_bucket_mb * 2 ** 20
            nb = max(1, math.ceil(gbytes / bucket))
            t = C.group_allreduce_s(gbytes, g, ctx.hier_min) + (nb - 1) * 2 * (dp - 1) * lat + nb * ctx.call_s
            last = C.group_allreduce_s(min(bucket, gbytes), g, ctx.hier_min)
            exposed = C.overlapped_exposed_s(t, last, window, ctx.contention_by.get(g.kind, ctx.contention))
            exposed += ctx.ddp_step_s
            sent = 2.0 * (dp - 1) / dp * gbytes
            _add(e.comm, f"dp@{g.kind}", exposed)
        else:
            # ZeRO (Rajbhandari et al. 2020 §5, §7): grads in model dtype, reduce_bucket_size buckets
            gbytes = n_dev * ctx.zero_gbytes
            wbytes = n_dev * ctx.zero_gbytes
            bucket = p.zero_reduce_bucket_size * ctx.zero_gbytes
            nb = max(1, math.ceil(gbytes / bucket))
            ag_after = C.group_rs_s(wbytes, g) + ctx.call_s  # updated params all-gathered after step
            if z == 1:
                # stage 1: all-reduce once at the accumulation boundary (seed 001 §III-B)
                t = C.group_allreduce_s(gbytes, g, ctx.hier_min) + (nb - 1) * 2 * (dp - 1) * lat + nb * ctx.call_s
                last = C.group_allreduce_s(min(bucket, gbytes), g, ctx.hier_min)
                exposed = (C.overlapped_exposed_s(t, last, window, ctx.contention) if p.zero_overlap_comm
                           else t) + ag_after
                sent = 3.0 * (dp - 1) / dp * gbytes
            elif z == 2:
                # stage 2: reduce-scatter per bucket on every micro-step (seed 001 §IV-C)
                t = C.group_rs_s(gbytes, g) + (nb - 1) * (dp - 1) * lat + nb * ctx.call_s
                last = C.group_rs_s(min(bucket, gbytes), g)
                per = C.overlapped_exposed_s(t, last, window, ctx.contention) if p.zero_overlap_comm else t
                exposed = m * per + ag_after
                sent = (m + 1) * (dp - 1) / dp * gbytes
            else:
                # stage 3: all-gather params fwd and bwd + reduce-scatter grads per micro-step, ≈1.5×
                # DDP volume, prefetched and overlapped with the whole micro-step (ZeRO-Infinity §6.2);
                # hpZ makes the backward all-gather intra-node (ZeRO++ §3.2)
                hpz = p.zero_hpz_partition_size
                ag = C.group_rs_s(wbytes, g) + ctx.call_s
                ag_bwd = ag if hpz == 1 else C.reduce_scatter_s(wbytes, hpz, g.intra_bw, g.intra_lat)
                rs = C.group_rs_s(gbytes, g) + nb * ctx.call_s
                layer_bytes = min(bucket, ctx.p_layer / p.tp * ctx.zero_gbytes)
                last = C.group_rs_s(layer_bytes, g)
                per = C.overlapped_exposed_s(ag + ag_bwd + rs, last, t_mb * ctx.bwd_window, ctx.z3_contention)
                exposed = m * per
                sent = m * (3.0 if hpz == 1 else 2.0) * (dp - 1) / dp * gbytes
            _add(e.comm, f"zero@{g.kind}", exposed)
        _add(e.link_bytes, g.kind, sent)
        e.nic_bytes += g.flows_per_nic * sent
    # optimizer: GPU Adam (memory-bound) or CPU Adam with ZeRO-Offload (Ren et al. 2021 §4.2)
    n_opt = n_dev / dp if z >= 1 else n_dev
    if p.zero_offload:
        cores = max(1.0, ctx.cpu_cores / max(1, p.devices_per_node))
        cpu_adam = n_opt / (ctx.cpu_adam_rate * cores)
        copies = 2 * n_opt * 2  # grads down, updated params up (fp16/bf16)
        if z >= 3:
            copies += m * 2 * n_opt * 2  # parameter partition fetched for fwd and bwd
        host = copies / ctx.host_bw
        _add(e.link_bytes, "host", copies)
        return exposed, cpu_adam + host, 0.0
    return exposed, 0.0, K.adam_time_s(n_opt, ctx.adam_bpp, ctx.mem_bw)


def _memory(p: Plan, ctx: Context, e: Eval, first: float, last: float, layers: int) -> None:
    """Peak bytes of the most loaded device (stage 0 or the last stage) and host RAM per rank."""
    tp, pp, mb = p.tp, p.pp, p.micro_batch_size
    hpz = p.zero_hpz_partition_size
    if ctx.transformer:
        act1 = M.activation_bytes_per_layer(ctx.s, mb, ctx.h, ctx.a, tp, p.sequence_parallel, p.recompute,
                                            ctx.fused_attention, ctx.act_bytes)
        if p.recompute:  # the layer being recomputed holds its full activations
            full = M.activation_bytes_per_layer(ctx.s, mb, ctx.h, ctx.a, tp, p.sequence_parallel, False,
                                                ctx.fused_attention, ctx.act_bytes)
        else:
            full = 0.0
        inflight = M.inflight_microbatches(pp, p.num_micro_batches, p.pp_schedule, p.pp_virtual_stages)
        acts0 = layers * act1 * inflight + full
        acts_last = layers * act1 + full
        logits = M.logits_bytes(ctx.s, mb, ctx.V, tp)
    else:
        acts0 = acts_last = ctx.act_per_sample * mb
        logits = 0.0
    best = None
    for params, acts, lg in ((first, acts0, logits if pp == 1 else 0.0), (last, acts_last, logits)):
        w, g, o, host = M.model_state_bytes(params, p.dp, p.zero_stage, p.zero_offload, ctx.precision,
                                            ctx.optimizer, hpz)
        if p.zero_stage:
            buf = 2 * min(p.zero_reduce_bucket_size, params) * ctx.zero_gbytes
            buf += min(p.zero_allgather_bucket_size, params) * ctx.zero_gbytes
        elif p.dp > 1:
            buf = 2 * p.ddp_bucket_mb * 2 ** 20
        else:
            buf = 0.0
        parts = M.MemoryParts(w, g, o, acts, lg, buf, 0.0, host)
        peers = (p.dp > 1) + (tp > 1) + 2 * (pp > 1)
        parts.framework = M.framework_bytes(parts.total, ctx.cuda_ctx, ctx.frag, peers, ctx.nccl_peer)
        if best is None or parts.total > best.total:
            best = parts
    e.mem = best
    if best.total > ctx.mem_cap:
        e.feasible = False
        e.reason = "out of device memory"
    elif p.zero_offload and ctx.host_ram and best.host * p.devices_per_node > ctx.host_ram * ctx.host_usable:
        e.feasible = False
        e.reason = "out of host memory for offload"
