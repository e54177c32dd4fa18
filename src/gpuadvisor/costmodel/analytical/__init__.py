"""The analytical cost model's formulas (memory.py, compute.py, comm.py, pipeline.py) and their `Context`.

`Context` precomputes everything that depends only on (cluster, workload): rates, shapes, constants, topology.
The formulas are composed for every plan at once by costmodel/engine.py (a single plan is a batch of one).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...errors import UserError
from ...schemas import Cluster, Workload
from ...schemas.plan import DEEPSPEED_MAX_REUSE_DISTANCE, deepspeed_gathers_by_module
from ...schemas.workload import ALL_LINEAR, FLASH_KERNELS
from ..calibration import gemm_curve, load_calibration, pcie_host_bandwidth
from . import comm as C
from . import compute as K
from ...workload import finetune as F
from ...workload.shapes import LayerShape, embedding_params, head_params, layer_shape
from .memory import op_replayed_shares, state_bytes_per_param

__all__ = ["Context"]


def check_fp8_devices(workload: Workload, devices) -> None:
    """One-line UserError when an fp8 workload meets a GPU without FP8 tensor cores (`Device.peak_tflops_fp8` 0).
    CPU ranks train fp32 whatever is asked, as for bf16. Context (pricing) and launch/build.py (hand-over) ask."""
    if workload.training.precision != "fp8":
        return
    bad = next((d for d in devices if d.kind == "gpu" and not d.peak_tflops_fp8), None)
    if bad is not None:
        raise UserError(f"{bad.name} has no FP8 tensor cores (FP8 training needs Ada, Hopper or Blackwell); "
                        "use --precision bf16")


def lacks_bf16(device) -> bool:
    """Whether a GPU has no bf16 tensor cores: those before Ampere (compute capability below 8.0: V100, T4, P100),
    which train in fp16 with loss scaling. A GPU of unknown capability is taken to have them."""
    return device.cc_major is not None and device.cc_major < 8


def check_bf16_devices(workload: Workload, devices) -> None:
    """One-line UserError when a bf16 workload meets a GPU without bf16 tensor cores (lacks_bf16): PyTorch would
    emulate it far below the fp16 rate the catalog holds for them, and DeepSpeed's or the bundled trainers' bf16 config
    would be handed over. `api.suggest` / `predict` / `confirm` choose fp16 there when no precision is given."""
    if workload.training.precision != "bf16":
        return
    bad = next((d for d in devices if lacks_bf16(d)), None)
    if bad is not None:
        raise UserError(f"{bad.name} has no bf16 tensor cores (bf16 needs Ampere or later, compute capability 8.0+; "
                        f"this GPU has {bad.compute_capability}); use --precision fp16 (mixed precision with loss "
                        "scaling)")


def runs_flash3(device) -> bool:
    """Whether a GPU runs FlashAttention-3/4: Hopper and datacenter Blackwell (compute capability 9.x-11.x).
    flash-attn 3 builds for sm90 and FlashAttention-4 for sm100 (Dao-AILab/flash-attention hopper/ and
    flash_attn/cute/), whose tcgen05 / tensor-memory path the RTX Blackwell chips (sm_120: RTX 50-series, RTX PRO
    Blackwell) lack; those, an A100 and the older RTX cards run FlashAttention-2."""
    return device.cc_major is not None and 9 <= device.cc_major < 12


def check_attention_devices(workload: Workload, devices) -> None:
    """One-line UserError when attention_kernel "flash3" (FlashAttention-3 / -4) meets a GPU before Hopper
    (runs_flash3). CPU ranks run PyTorch's SDPA whatever is asked."""
    if workload.training.attention_kernel != "flash3":
        return
    for d in devices:
        if d.kind == "gpu" and not runs_flash3(d):
            cc = d.compute_capability or "an unknown one"
            raise UserError(f"{d.name} cannot run FlashAttention-3/4 (they need Hopper or datacenter Blackwell, "
                            f"compute capability 9.0-11.x; this GPU has {cc}); use --attention-kernel flash "
                            "(FlashAttention-2)")


def deepspeed_replay_regather(numels, tp, distance: float = DEEPSPEED_MAX_REUSE_DISTANCE) -> np.ndarray:
    """Share of a layer's parameter elements that DeepSpeed ZeRO-3 gathers again for the layer's backward after its
    recompute replay gathered them, per TP degree in `tp`; `numels`: the layer's parameter tensors in forward order
    (LayerShape.tensor_numels). A tensor the replay gathers is next used by its own backward, after the replay of
    the tensors behind it in the layer and their backward (twice their elements, of a TP shard); beyond the reuse
    distance (stage3_max_reuse_distance, schemas.plan.DEEPSPEED_MAX_REUSE_DISTANCE) it was released in between.
    0 unless half a layer's TP shard exceeds the distance: GPT-3 175B's layers at TP 1 gather their first two
    thirds again. Counted on DeepSpeed 0.19.8 (benchmarks/deepspeed_zero3_host.py --count, 8 GPT layers, distance
    scaled down): 13.0 layers' elements per backward at a quarter layer, where this and the kept quarter give
    7.75 x (1 + 0.67) = 12.9; 10.0 at 0.63 of a layer, where they give 12.3 (the MLP's first Linear, 5 % beyond
    the distance, stayed)."""
    tp = np.asarray(tp, dtype=float)
    if not len(numels) or not tp.size:
        return np.zeros_like(tp)
    n = np.asarray(numels, dtype=float)
    total = float(n.sum())
    after = total - np.cumsum(n)  # elements the replay and the backward pass between a tensor's two uses
    released = 2.0 * after / tp[..., None] > distance  # per TP degree (leading axes), per tensor (last axis)
    return (released * n).sum(axis=-1) / total


def _nvlink_links(node) -> int:
    """NVLinks per GPU of a node's first device (knowledge/gpus.yaml nvlink_links; 0 when the catalog does not know
    it)."""
    from ...knowledge import find_gpu

    d = node.devices[0]
    spec = find_gpu(d.spec_key or d.name) if d.kind == "gpu" else None
    return spec.nvlink_links if spec else 0


class Context:
    """Plan-independent facts of one (cluster, workload): rates, shapes, constants, topology."""

    def __init__(self, cluster: Cluster, workload: Workload, calibration: Optional[dict] = None, cp: int = 1):
        cal = calibration or load_calibration()
        self.cal, self.cluster, self.workload = cal, cluster, workload
        m, t = workload.model, workload.training
        self.model = m
        self.transformer = m.kind == "transformer"
        # context parallelism (Plan.cp; `context_parallel`): a rank holds s/cp of each sequence's tokens, so every
        # per-token quantity (activations, logits, TP and PP messages, GEMM rows) takes s/cp, while attention spans
        # the whole sequence: the FLOPs per token are the full length's (`seq`). The engine prices a cp row as the
        # row with dp*cp ranks of s/cp-token sequences (gb*cp of them) plus the key/value exchange.
        self.cp = cp
        self.seq = t.seq_len if self.transformer else 1
        self.s = self.seq // cp
        self.gb = t.global_batch * cp
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
        self.w_half = curve.w_half
        # the attention kernel of the training stack (TrainingSettings.attention_kernel): FlashAttention-2, cuDNN's,
        # or an unfused core ("eager"), which runs Q·Kᵀ and P·V as cuBLAS batched GEMMs (the GEMM rate) and moves the
        # materialised scores through HBM in between (score_traffic, set with the model shape below)
        # (Workload.core_kernel: attention sinks on the flash stack run unfused)
        kernel = workload.core_kernel
        eager = kernel == "eager"
        # FlashAttention-3/4 ("flash3") at attn_rel_flash3: fitted on ml-engineering's 8k-256k Llama 3.1 8B sweep on
        # H200 and B200, whose long rows the core dominates (calibration.yaml gemm_efficiency, hopper and blackwell)
        check_attention_devices(workload, devs)
        self.attn_rel = {"cudnn": curve.attn_rel_cudnn, "flash3": curve.attn_rel_flash3,
                         "eager": 1.0}.get(kernel, curve.attn_rel)
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
            self.w_half, self.attn_rel = 0.0, 1.0  # fitted on the CPU trainer's whole step (cpu_ranks section)
        # (rate_max, x_half, w_half) of the Linears' GEMMs and of the 16-bit ones, the attention core and the LM
        # head: one curve, unless the Linears run FP8 (FlashAttention/cuDNN attention are bf16; Transformer Engine's
        # Megatron output layer and torchao's float8 converter, which skips torchtitan's "output", leave the head
        # in bf16). Set after the CPU ranks' own constants, which both use.
        self.bf16_curve = (self.rate_max, self.x_half, self.w_half)
        self.fp8_cast_traffic, self.fp8_weight_cast = 0.0, 0.0
        # Transformer Engine layers (the "cudnn" stack: Megatron-Core, NeMo) store activations their own way
        # (memory.activation_terms `te`) and, with FP8, cache each weight's FP8 copies (te_fp8_cache_bytes)
        self.te_layers = t.attention_kernel == "cudnn"
        # sequence-parallel TP on PyTorch's DTensor (the flash stack: torchtitan, the bundled trainers) keeps the
        # all-gathered inputs of the column-parallel Linears; Megatron's and TE's layers keep the shard
        # (memory.activation_bytes_per_layer `sp_keeps_gathered`; Megatron-DeepSpeed's unfused stack is Megatron's)
        self.sp_keeps_gathered = t.attention_kernel in FLASH_KERNELS
        # eager PyTorch layers and loss (TrainingSettings.kernels): what they store beside the paper's count
        # (memory.activation_terms `eager`, `autocast`; memory.LOGIT_BYTES_EAGER)
        # (Hugging Face's modeling code, "hf", stores as the bundled trainers' eager modules do)
        self.eager_layers = t.kernels in ("eager", "hf") and not self.te_layers
        # the loss on an fp32 copy of the logits: eager, or beside compiled layers ("fused-layers")
        self.eager_loss = t.kernels in ("eager", "hf", "fused-layers") and not self.te_layers
        self.loss_bytes = K.EAGER_LOSS_BYTES_PER_LOGIT if self.eager_loss else 0.0
        # a fused linear cross-entropy (Liger's): the logits a chunk at a time (memory.chunked_loss_bytes)
        self.chunked_loss = t.kernels == "liger" and not self.te_layers
        self.fp8_linears, self.te_fp8_cache_bytes = False, 0.0
        check_fp8_devices(workload, devs)
        check_bf16_devices(workload, devs)
        if t.precision == "fp8" and dev.kind == "gpu":  # Workload refuses fp8 for non-transformers
            self._fp8(dev, cal)
        # Megatron's FP8 primary weights (TrainingSettings.fp8_param_gather: --fp8-param-gather): on Transformer
        # Engine's layers the cached FP8 copies are then the Linears' only weights (engine._fp8_primary)
        self.fp8_params = bool(t.fp8_param_gather and self.te_fp8_cache_bytes)
        self.linear_curve = (self.rate_max, self.x_half, self.w_half)
        # GEMMs with a leading dimension off the 16-byte grid run below their curve (compute.alignment_factor); the
        # Linears' elements are FP8 bytes under fp8, the rest 16-bit (or fp32); CPU BLAS has no such rule
        self.align_bytes = float(ge["alignment_bytes"]) if dev.kind == "gpu" else 0.0
        self.misaligned_rate = float(ge["misaligned_rate"])
        self.linear_elem_bytes = 1.0 if self.fp8_linears else float(self.act_bytes)
        self.kpl, self.launch_us = float(ov["kernels_per_layer"]), float(ov["launch_us"])
        self.generic_kernels = float(ov.get("generic_kernels", 200))
        self.step_overhead = float(ov["step_overhead_s"])
        self.adam_bpp = float(ov["adam_bytes_per_param"])
        self.elem_traffic = float(ov["elementwise_traffic_per_h"])
        self.call_s = float(ov["collective_call_us"]) * 1e-6
        # a TP collective's host cost (DTensor redistribute + the collective launch); CPU ranks override it
        self.tp_call_s = float(ov.get("tp_call_us", ov["collective_call_us"])) * 1e-6
        self.p2p_call_s = float(ov["p2p_call_us"]) * 1e-6
        # a pipeline exchange's fixed cost by the link it crosses (calibration overheads.p2p_call_us_by_link);
        # CPU ranks use their own p2p_call_us for every link
        self.p2p_call_by_link = ({} if dev.kind == "cpu" else
                                 {k: float(v) * 1e-6 for k, v in (ov.get("p2p_call_us_by_link") or {}).items()})
        # DDP's per-step host cost that no backward hides (0 for GPUs; CPU ranks over gloo: cpu_ranks section)
        self.ddp_step_s = float(ov.get("ddp_step_us", 0.0)) * 1e-6
        self.contention, self.bwd_window = float(oh["contention"]), float(oh["backward_window"])
        self.z3_contention = float(oh["zero3_contention"])
        # overlapped TP's hidden share on this stack (TE userbuffers vs torch async TP)
        self.tp_overlap_hidden = float(oh["tp_overlap_hidden"][t.attention_kernel])
        self.contention_by = {k: float(v) for k, v in (oh.get("contention_by_link") or {}).items()}
        self.ddp_gbytes = 4 if fp32 else int(pr["ddp_grad_bytes_mixed"])
        self.zero_gbytes = 4 if fp32 else int(pr["zero_grad_bytes_mixed"])
        # Megatron's gradient buffer per parameter (engine._megatron_rows): fp32 with bf16 (and FP8's bf16 weights)
        # unless the run reduces in bf16 (TrainingSettings.grad_reduce_in_bf16), the parameters' fp16 with fp16
        self.megatron_grad_bytes = (4 if fp32 else 2 if t.precision == "fp16" or t.grad_reduce_in_bf16
                                    else int(pr["megatron_grad_bytes_bf16"]))
        mc = cal["memory"]
        self.cuda_ctx, self.nccl_peer = float(mc["cuda_context_bytes"]), float(mc["nccl_bytes_per_peer"])
        self.frag, self.host_usable = float(mc["fragmentation"]), float(mc["host_ram_usable"])
        off = cal["offload"]
        # pinned copies to and from host RAM: as measured (probes/hostcopy.py), else the link the device and its slot
        # train to (NVML's current generation drops at idle, as hardware.catalog reads it for device links), at its
        # width: an x8 slot halves ZeRO-Offload's copies
        self.host_bw = (dev.host_copy_gb_per_s or pcie_host_bandwidth(dev.pcie_gen_max or dev.pcie_gen, cal,
                                                                      dev.pcie_width_max or dev.pcie_width)) * 1e9
        # ... shared by the ranks behind one PCIe switch tree: per ranks-per-node count (comm.host_uplink_sharing)
        self.host_sharing = np.array(C.host_uplink_sharing(cluster), dtype=float)
        self.cpu_adam_rate = float(off["cpu_adam_params_per_s_per_core"])
        self.host_ram = min((n.cpu.ram_bytes for n in cluster.nodes), default=0)
        self.cpu_cores = min((n.cpu.cores for n in cluster.nodes), default=1)
        net_eff = 1.0
        if cluster.network is not None:
            net_eff = float(cal["network"]["protocol_efficiency"].get(cluster.network.protocol, 1.0))
        self.topo = C.Topology(cluster, net_efficiency=net_eff)
        self.hier_min = int(cal["network"].get("hierarchical_min_nodes", 3))
        # NCCL trees compete with rings on GPUs; gloo (CPU ranks) rings only
        self.tree_bw = 0.0 if dev.kind == "cpu" else float(cal["network"].get("nccl_tree_bw_factor", 0.0))
        # NCCL's NVLS all-reduce inside a node whose NVSwitch reduces (comm.nvswitch_sharp), on every node with GPUs
        self.nvls_factor = (float(cal["network"].get("nvls_bw_factor", 0.0))
                            if all(C.nvswitch_sharp(n, _nvlink_links(n)) for n in C.alike_nodes(cluster) if n.devices)
                            else 0.0)
        self.tp_eff = {k: float(v) for k, v in cal["tensor_parallel"]["comm_efficiency"].items()}
        self.n_nodes = len(cluster.nodes)
        self.gpn_max = max(cluster.devices_per_node)
        # model shape
        self.params = m.params
        if self.transformer:
            self.L, self.h, self.a, self.V = m.n_layers, m.d_model, m.n_heads, m.vocab_size
            self.p_layer = K.layer_params(m)
            self.shape: Optional[LayerShape] = layer_shape(m)
            self.p_emb = embedding_params(m)
            self.p_head = head_params(m)
            self.p_final_norm = self.shape.norm_params(m.d_model)
            self.tied = bool(m.tied_embeddings)
            self.layer_fpt = K.layer_flops_per_token(m, self.seq)
            self.head_fpt = K.head_flops_per_token(m)
            # fused kernels (FlashAttention, SDPA, cuDNN) keep no s x s scores; an unfused core (and CPU ranks)
            # stores them, and on GPUs its score passes are HBM traffic (compute.unfused_attention_bytes)
            self.fused_attention = dev.kind == "gpu" and not eager
            self.score_traffic = (K.unfused_attention_bytes(self.act_bytes, bool(self.shape.dropout))
                                  if dev.kind == "gpu" and eager else (0.0, 0.0))
            # kernels of the core's forward, which its selective recompute launches again: Megatron's unfused
            # CoreAttention.forward runs baddbmm (Q·Kᵀ), the fused scale-mask-softmax, dropout and bmm (·V);
            # a fused core is one kernel
            self.core_kernels = 4.0 if eager else 1.0
            # Hugging Face's modeling code run eagerly ("hf"): its op-by-op norms, rotary, K/V repeat and gate moves
            # more bytes than a fused layer (compute.hf_eager_traffic: whole under TP, split tp ways)
            self.hf_traffic = (K.hf_eager_traffic(self.shape, not m.max_seq_len, self.act_bytes)
                               if t.kernels == "hf" and dev.kind == "gpu" and not self.te_layers else (0.0, 0.0))
            # each GEMM kind's width before TP (engine._compute sizes them; flops_split in _finetune)
            self.q_width = float(self.shape.q_dim)
            self.mlp_width = float((self.shape.expert_d_ff if self.shape.moe else self.shape.d_ff)
                                   * (2 if self.shape.gated else 1))
            # MoE: what expert parallelism splits (all routed experts of a layer) and the tokens it moves
            self.p_layer_exp = float(self.shape.routed_expert_params)
            self.top_k = self.shape.experts_per_token
            self.a2a_eff = float(cal.get("moe", {}).get("alltoall_efficiency", 1.0))
            # an eager MoE layer loops over its routed experts in Python (the bundled trainers' MoE, HF
            # transformers' MoE blocks): each expert's mask, nonzero, gather, MLP, weighting and scatter-add,
            # forward and backward, dispatched from the host (overheads.moe_expert_kernels, in kernels_per_layer's
            # unit; engine._compute divides the loop by ep). Grouped-GEMM stacks (fused) launch a few kernels.
            self.moe_loop_kernels = (self.shape.n_experts * float(ov["moe_expert_kernels"])
                                     if self.shape.moe and self.eager_layers else 0.0)
            # DeepSpeed ZeRO-3 walks parameters one by one: each layer's tensors (LayerShape.tensor_numels)
            self.layer_tensors = self.shape.tensor_numels()
            self._finetune(workload, cal)
            # layer_fpt by GEMM kind (adapters included when they train); an unfused core scores every key and masks
            # the ones outside a sliding window afterwards (HF's eager_attention_forward, TE's unfused attention)
            self.flops_split = K.layer_flops_split(m, self.seq, workload.finetune if self.adapters else None)
            if eager and m.sliding_window:
                full = K.attention_flops_per_token(m.model_copy(update={"sliding_window": 0,
                                                                        "sliding_window_layers": None}), self.seq)
                self.flops_split = {**self.flops_split, "core": full}
            # op-level selective checkpointing (Plan.recompute_ops) replays the Linears it does not save: their
            # share of the projections' and of the MLP's FLOPs (memory.op_replayed_shares); op_replay is that share
            # of the layer's forward FLOPs
            self.op_unsaved = op_replayed_shares(self.shape)
            fs = self.flops_split
            self.op_replay = ((fs["proj"] * self.op_unsaved[0] + fs["mlp"] * self.op_unsaved[1])
                              / (fs["proj"] + fs["mlp"] + fs["core"]))
        else:
            self.L, self.h, self.a, self.V = 1, 1, 1, 0
            self.p_layer = self.params
            self.p_emb = self.p_head = self.p_final_norm = 0
            self.shape = None
            self.p_layer_exp, self.top_k, self.a2a_eff = 0.0, 0, 1.0
            self.moe_loop_kernels = 0.0
            self.tied = False
            self.layer_fpt = self.head_fpt = 0.0
            self.op_unsaved, self.op_replay = (0.0, 0.0), 0.0
            self.fps = float(m.flops_per_sample or 0.0)
            self.act_per_sample = float(m.activation_bytes_per_sample or 0.0)
            self.fused_attention = True
            self.score_traffic = (0.0, 0.0)
            self.core_kernels = 0.0
            self.hf_traffic = (0.0, 0.0)
            self.layer_tensors = []  # a generic model's parameter tensors are not known: not priced
            self._finetune(workload, cal)
        # the largest trainable tensor, by which DeepSpeed ZeRO-1/2 under offload sizes its two gradient staging
        # buffers (stage_1_and_2.py temp_grad_buffer_for_gpu_offload / _for_cpu_offload): a language model's
        # vocabulary matrix, else its largest layer tensor; an adapter's r x d matrices are too small to count
        self.largest_tensor = 0.0 if self.adapters else float(max([*self.layer_tensors,
                                                                   self.V * self.h if self.transformer else 0]))
        self.ds_gather_s = float(ov["deepspeed_zero3_gather_us"]) * 1e-6
        self.ds_reduce_s = float(ov["deepspeed_zero3_reduce_us"]) * 1e-6
        # DeepSpeed ZeRO-3 gathers Linear by Linear once the model outgrows its live-parameter cap (ds_gathers) ...
        self.ds_module_count = float(self.shape.gathered_modules()) if self.shape is not None else 1.0
        # ... and the modules its hooks meet, whose prefetch its live-parameter cap gates (engine._ds_module_chain)
        self.ds_modules = (np.array(self.shape.gathered_module_numels(), dtype=float)
                           if self.shape is not None else np.zeros(0))
        self._ds_interleaved: dict[float, float] = {}
        self._ds_replay: dict[tuple[float, float], float] = {}
        self._cp: dict[int, "Context"] = {cp: self}
        self.single_best_tps: Optional[float] = None

    def context_parallel(self, cp: int) -> "Context":
        """This (cluster, workload) as one rank of a cp-way context-parallel group sees it (built once per cp)."""
        got = self._cp.get(cp)
        if got is None:
            got = self._cp[cp] = Context(self.cluster, self.workload, self.cal, cp=cp * self.cp)
        return got

    def ds_interleaved_tensors(self, bucket_elements: float) -> float:
        """Gradient tensors per layer that DeepSpeed ZeRO-3 interleaves rank by rank before a reduce-scatter.

        DeepSpeed fills a reduce bucket with gradients in the order the backward produces them and flushes it
        when the next one would overflow `reduce_bucket_size` (stage3.py, __add_grad_to_ipg_bucket);
        reduce_scatter_coalesced (runtime/comm/coalesced_collectives.py) then slices every gradient of a bucket
        into world_size chunks and torch.cat's them interleaved, unless the bucket holds a single tensor (which a
        power-of-two world divides). Simulated over the model's layers, once per bucket size. Adapters' gradients
        are not counted (LoRA runs reduce only them)."""
        got = self._ds_interleaved.get(bucket_elements)
        if got is not None:
            return got
        if self.adapters or not self.layer_tensors:
            self._ds_interleaved[bucket_elements] = 0.0
            return 0.0
        interleaved, fill, count = 0, 0, 0
        for numel in list(reversed(self.layer_tensors)) * self.L:
            if fill + numel > bucket_elements and fill > 0:
                interleaved += count if count > 1 else 0
                fill, count = 0, 0
            fill, count = fill + numel, count + 1
        interleaved += count if count > 1 else 0
        got = self._ds_interleaved[bucket_elements] = interleaved / self.L
        return got

    def ds_gathers(self, cap) -> np.ndarray:
        """Collectives one layer's gather takes on DeepSpeed ZeRO-3 per row: one per Linear (ds_module_count) when the
        model is above the row's stage3_max_live_parameters `cap` (Plan.zero_max_live_parameters;
        schemas.plan.deepspeed_gathers_by_module), else one."""
        above = deepspeed_gathers_by_module(self.model, np.asarray(cap, dtype=float))
        return np.where(above, self.ds_module_count, 1.0)

    def ds_replay_regather(self, tp: np.ndarray, distance=DEEPSPEED_MAX_REUSE_DISTANCE) -> np.ndarray:
        """deepspeed_replay_regather of this model's layer at each row's TP degree and reuse distance (once per
        distinct pair)."""
        tp = np.asarray(tp, dtype=float)
        dist = np.broadcast_to(np.asarray(distance, dtype=float), tp.shape)
        degrees, at = np.unique(tp, return_inverse=True)
        reach, ad = np.unique(dist, return_inverse=True)
        table = np.empty((len(degrees), len(reach)))
        for i, t in enumerate(degrees.tolist()):
            for j, d in enumerate(reach.tolist()):
                if (t, d) not in self._ds_replay:
                    self._ds_replay[(t, d)] = float(deepspeed_replay_regather(self.layer_tensors, [t], d)[0])
                table[i, j] = self._ds_replay[(t, d)]
        return table[at.reshape(tp.shape), ad.reshape(tp.shape)]

    def _fp8(self, dev, cal: dict) -> None:
        """FP8 Linears (Transformer Engine / torchao float8 training; calibration.yaml `fp8` has the sources).

        The Linears' GEMMs run on the FP8 peak at `large_gemm_ratio` of the bf16 curve's share of it, and their
        size and width half-points scale by the rate ratio (the same shape finishes its math in half the time,
        its fill and epilogue do not); the attention core and the LM head stay on the bf16 curve. Casting costs
        HBM traffic: every Linear input and output gradient is scanned for its scale and written in FP8
        (`cast_traffic_per_h`), every weight once per pass (`weight_cast_bytes_per_param`).
        """
        f8 = cal["fp8"]
        ratio = dev.peak_tflops_fp8 / dev.peak_tflops_bf16
        self.rate_max = self.rate_max * ratio * float(f8["large_gemm_ratio"])
        self.x_half, self.w_half = self.x_half * ratio, self.w_half * ratio
        self.fp8_cast_traffic = float(f8["cast_traffic_per_h"])
        self.fp8_weight_cast = float(f8["weight_cast_bytes_per_param"])
        self.fp8_linears = True
        if self.te_layers:
            self.te_fp8_cache_bytes = float(f8["te_weight_cache_bytes_per_param"])

    def _finetune(self, workload: Workload, cal: dict) -> None:
        """What training changes with full fine-tuning or adapters (LoRA/QLoRA; workload.finetune has sources).

        Sets the weight bytes of a layer and of the embedding/head (frozen base: 16-bit, QLoRA Linears NF4; the
        fp32 adapters on top), trainable parameters per layer (all, or the adapters'), the gradient bytes that
        data parallelism moves (fp32 adapter gradients), the training FLOPs per token (a frozen Linear skips its
        weight gradient: 4N instead of 6N) and the forward's share of them (what recompute replays).
        """
        ft = workload.finetune
        self.adapters = ft.adapters and self.transformer
        wb = state_bytes_per_param(self.precision, self.optimizer)[0]
        self.weight_bytes = float(wb)   # bytes of one 16-bit (or fp32) weight
        self.dequant_s_per_layer = 0.0  # QLoRA: HBM time to dequantise one layer's Linears once (per pass)
        # Linear roles without a trainable weight (their inputs need not be stored): none unless adapters
        self.frozen_roles: frozenset = frozenset()
        # full training: every weight trains, the forward is 1/3 of the FLOPs (compute.layer_forward_fraction)
        self.fwd_frac = K.layer_forward_fraction(self.model, self.seq)
        self.p_layer_train, self.w_layer_bytes = float(self.p_layer), float(self.p_layer) * wb
        self.z3_grad_bytes = float(self.zero_gbytes)
        self.grad_bytes_ddp, self.grad_bytes_zero = self.ddp_gbytes, self.zero_gbytes
        if not self.adapters:
            return
        shape = self.shape
        assert shape is not None
        self.p_layer_train = float(F.adapter_params_per_layer(shape, ft))
        self.frozen_roles = frozenset(ALL_LINEAR) - frozenset(ft.target_modules)
        # the fp32 adapters (peft keeps adapter weights in fp32 under autocast) on a frozen base
        self.w_layer_bytes = F.frozen_layer_bytes(shape, ft, wb) + 4.0 * self.p_layer_train
        self.layer_fpt = K.layer_flops_per_token(self.model, self.seq, ft)
        self.head_fpt = K.head_flops_per_token(self.model, ft)
        self.fwd_frac = K.layer_forward_fraction(self.model, self.seq, ft)
        self.z3_grad_bytes = 4.0  # only the fp32 adapter gradients are reduce-scattered
        self.grad_bytes_ddp = self.grad_bytes_zero = 4
        if ft.method == "qlora":
            per = float(cal.get("finetune", {}).get("qlora_dequant_bytes_per_param", 2.5))
            self.dequant_s_per_layer = F.linear_weight_params(shape) * per / self.mem_bw
