"""Megatron-LM / Megatron-Core `pretrain_gpt.py` argument list for a plan.

Flag names from Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM commit 000c4ac2):
_add_network_size_args (--num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
--group-query-attention, --num-query-groups, --max-position-embeddings, --swiglu,
--untie-embeddings-and-output-weights), _add_training_args (--micro-batch-size, --global-batch-size,
--train-iters, --recompute-granularity/--recompute-method/--recompute-num-layers), _add_mixed_precision_args
(--bf16, --fp16), _add_distributed_args (--tensor-model-parallel-size, --pipeline-model-parallel-size,
--num-layers-per-virtual-pipeline-stage, --sequence-parallel, --use-distributed-optimizer,
--overlap-grad-reduce, --overlap-param-gather, --use-torch-fsdp2), --seq-length (_add_data_args),
--optimizer-cpu-offload with --use-precision-aware-optimizer, --no-gradient-accumulation-fusion, --ckpt-format
(_add_checkpointing_args); FSDP2 rules from validate_args.
Mapping (ZeRO with or without TP/PP):
- ZeRO-1 -> --use-distributed-optimizer (with --overlap-grad-reduce --overlap-param-gather), with any TP and PP
  degree: Megatron shards the fp32 main weights and Adam states over the data-parallel group of each TP/PP rank.
- ZeRO-2 -> the same distributed optimizer: Megatron has no ZeRO-2 on that path. It reduce-scatters gradients,
  but into a full-size gradient buffer, so the memory is ZeRO-1's (more than the prediction's). Megatron's own
  "FSDP ZeRO-2" (--use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward) carries FSDP2's restrictions below.
- ZeRO-3 -> --use-torch-fsdp2 (with TP: FSDP2 + TP). validate_args refuses it with pipeline parallelism, with
  fp16, with tied embeddings (it needs --untie-embeddings-and-output-weights), with the distributed optimizer and
  with gradient-accumulation fusion (--no-gradient-accumulation-fusion is written), and wants --ckpt-format
  torch_dist or torch_dcp (torch_dist written; torch_dcp is untested with TP). Plans it refuses get no file
  (`unsupported`): ZeRO-3 with pp > 1 runs as torchtitan's FSDP per pipeline stage instead.
- offload -> --optimizer-cpu-offload with --use-precision-aware-optimizer (pure data parallelism only).
- Llama-family shapes (_add_network_size_args, _add_regularization_args): --normalization RMSNorm,
  --position-embedding-type rope (no learned position table), --disable-bias-linear (--add-qkv-bias for Qwen2),
  --kv-channels when head_dim * heads != hidden, --qk-layernorm, dropout 0.0 where the family has none.
- MoE models (Megatron-Core MoE, megatron/core/transformer/moe/README.md; arguments.py _add_moe_args):
  --num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size, grouped
  GEMMs and the all-to-all token dispatcher; Plan.ep -> --expert-model-parallel-size with
  --expert-tensor-parallel-size 1 (MoE parallel folding: the ep ranks come from a stage's TP x DP ranks), or
  the TP degree when ep = 1 (experts split like the dense MLP).
- gradients: with --bf16 Megatron keeps and reduces them in fp32 (arguments.py sets
  accumulate_allreduce_grads_in_fp32), as the cost model prices it; TrainingSettings.grad_reduce_in_bf16 writes
  --grad-reduce-in-bf16.
- precision fp8 (`FP8_ARGS`, _add_transformer_engine_args): --bf16 plus --transformer-impl transformer_engine and
  --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max: E4M3 forward,
  E5M2 gradients, per-tensor delayed scaling from a 1024-step amax history, the settings of Megatron's own H100 FP8
  example (examples/llama/train_llama3_8b_h100_fp8.sh; its published rows are in
  knowledge/measurements/public/megatron_lm.csv as "fp8 (hybrid format) + bf16"). Per-tensor scaling is what the
  cost model prices (calibration.yaml `fp8`); delayed is Megatron's default --fp8-recipe and takes the scale from
  the amax history, so its casts read each tensor once, fewer bytes than the current-scaling casts the cost model
  charges (the prediction errs slow, not fast). TrainingSettings.fp8_param_gather writes --fp8-param-gather on a
  ZeRO-1 plan (the distributed optimizer): the Linears' weights kept in FP8 only and all-gathered in FP8, as NVIDIA's
  NeMo / Megatron-Bridge FP8 recipes run. Not written: the finer recipes (mxfp8, blockwise: more scale traffic than
  priced). Transformer Engine swaps the transformer layers' Linears; Megatron's output layer
  is a plain ColumnParallelLinear and stays bf16.
- cp -> --context-parallel-size (_add_distributed_args): ring attention over the cp ranks in Transformer Engine's
  attention (--cp-comm-type p2p, its default; --transformer-impl transformer_engine, the default, is needed). The
  data-parallel group of the gradients and of the distributed optimizer / FSDP2 is then dp x cp
  (parallel_state's data-parallel group with context parallelism), the plan's gradient_ranks; --global-batch-size
  counts dp only. validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with CP as with TP on pre-Blackwell GPUs
  (a warning only with FSDP2, which refuses 1).
Megatron needs --pipeline-model-parallel-size > 2 or so for interleaving: virtual stages are passed as layers
per virtual stage.
Plan.recompute_attention is Megatron's selective recompute, --recompute-granularity selective (its default
--recompute-modules core_attn: the attention core's forward replays in the backward).
"""
from __future__ import annotations

import shlex
from typing import Optional

from ..schemas.plan import Plan
from ..schemas.workload import Workload
from ..workload.shapes import layer_shape

FILE = "megatron_args.txt"
#: FP8 Linears through Transformer Engine (written after --bf16; the module docstring says why this recipe)
FP8_ARGS = ["--transformer-impl", "transformer_engine", "--fp8-format", "hybrid", "--fp8-recipe", "delayed",
            "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]


def unsupported(plan: Plan, workload: Workload) -> Optional[str]:
    """Why Megatron-LM cannot run this plan as written (None when it can): its --use-torch-fsdp2 rules."""
    if plan.zero_stage != 3:
        return None
    why = []
    if plan.pp > 1:
        why.append("pipeline parallelism (use torchtitan.toml: FSDP per pipeline stage)")
    if workload.training.precision == "fp16":
        why.append("fp16 (train in bf16)")
    if workload.model.tied_embeddings:
        why.append(f"tied embeddings ('{workload.model.name}' ties them; FSDP2 needs "
                   "--untie-embeddings-and-output-weights, a different model)")
    if not why:
        return None
    return ("Megatron-LM runs ZeRO-3 as --use-torch-fsdp2, which its validate_args refuses with " + "; ".join(why))


def megatron_args(plan: Plan, workload: Workload, *, steps: int) -> list[str]:
    """The argument list (model shape, parallel degrees, batch, precision, recompute)."""
    m, t = workload.model, workload.training
    a = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
         *(["--context-parallel-size", str(plan.cp)] if plan.cp > 1 else []),
         "--micro-batch-size", str(plan.micro_batch_size), "--global-batch-size", str(plan.global_batch()),
         "--seq-length", str(t.seq_len), "--max-position-embeddings", str(max(m.max_seq_len, t.seq_len)),
         "--num-layers", str(m.n_layers), "--hidden-size", str(m.d_model), "--ffn-hidden-size", str(m.d_ff),
         "--num-attention-heads", str(m.n_heads), "--train-iters", str(steps)]
    if m.n_kv_heads and m.n_kv_heads != m.n_heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv_heads)]
    shape = layer_shape(m)
    if m.mlp == "swiglu":
        a.append("--swiglu")
    if shape.rmsnorm:
        a += ["--normalization", "RMSNorm"]
    if not m.max_seq_len:  # no learned position table: rotary (Llama family)
        a += ["--position-embedding-type", "rope"]
    if not shape.bias:
        a.append("--disable-bias-linear")
        if shape.qkv_bias:
            a.append("--add-qkv-bias")
    if m.head_dim and m.head_dim * m.n_heads != m.d_model:
        a += ["--kv-channels", str(m.head_dim)]
    if shape.qk_norm:
        a.append("--qk-layernorm")
    if not shape.dropout:
        a += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    if m.n_experts:
        a += ["--num-experts", str(m.n_experts), "--moe-router-topk", str(m.experts_per_token),
              "--moe-ffn-hidden-size", str(m.expert_d_ff or m.d_ff), "--moe-grouped-gemm",
              "--moe-token-dispatcher-type", "alltoall", "--expert-model-parallel-size", str(plan.ep),
              "--expert-tensor-parallel-size", str(1 if plan.ep > 1 else plan.tp)]
        if m.shared_expert_d_ff:
            a += ["--moe-shared-expert-intermediate-size", str(m.shared_expert_d_ff)]
        if plan.ep_overlap:
            # the combined 1F1B schedule hides the all-to-alls behind the paired micro-batch's compute; delaying the
            # weight gradients gives the backward's all-to-alls more to hide behind (Megatron-Core MoE README,
            # "--overlap-moe-expert-parallel-comm --delay-wgrad-compute")
            a += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if plan.pp_virtual_stages > 1:
        a += ["--num-layers-per-virtual-pipeline-stage", str(m.n_layers // (plan.pp * plan.pp_virtual_stages))]
    if plan.sequence_parallel:
        a.append("--sequence-parallel")
    if plan.tp_comm_overlap:
        a.append("--tp-comm-overlap")  # Transformer Engine userbuffers (needs TE; Megatron validate_args)
    # Plan.zero_overlap_comm (default on): the gradient sync hidden behind the backward
    if plan.zero_stage in (1, 2):
        a.append("--use-distributed-optimizer")
        if plan.zero_overlap_comm:
            a += ["--overlap-grad-reduce", "--overlap-param-gather"]
    elif plan.zero_stage == 3:
        a += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion", "--ckpt-format", "torch_dist"]
    elif plan.dp > 1 and plan.zero_overlap_comm:
        a.append("--overlap-grad-reduce")
    if plan.zero_offload:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    if plan.recompute and plan.recompute_interval == 1:
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif plan.recompute:
        # every k-th layer: Megatron's block method checkpoints the first N layers of each model chunk (pipeline
        # stage or virtual stage) and stores the rest, the same count per chunk (rounded up: never less memory
        # saved than the plan assumes)
        a += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
              str(recompute_layers_per_chunk(plan, m.n_layers))]
    elif plan.recompute_attention:
        a += ["--recompute-granularity", "selective"]
    if t.precision in ("bf16", "fp16"):
        a.append(f"--{t.precision}")
    elif t.precision == "fp8":  # FP8 GEMMs in Transformer Engine's Linears, bf16 everywhere else
        a += ["--bf16", *FP8_ARGS]
    if t.grad_reduce_in_bf16 and t.precision in ("bf16", "fp8"):
        a.append("--grad-reduce-in-bf16")  # bf16 gradient buffer (Megatron's default with --bf16 is fp32)
    if t.fp8_param_gather and t.precision == "fp8" and plan.zero_stage == 1:
        # FP8 primary weights, all-gathered in FP8 by the distributed optimizer (the cost model prices them on
        # ZeRO-1 only: engine._fp8_primary; Megatron refuses the switch without a sharded optimizer)
        a.append("--fp8-param-gather")
    return a


def recompute_layers_per_chunk(plan: Plan, n_layers: int) -> int:
    """Layers each model chunk recomputes under `plan` (Megatron --recompute-num-layers with the block method):
    ceil(layers per chunk / recompute_interval), at least 1."""
    per_chunk = max(1, n_layers // (plan.pp * plan.pp_virtual_stages))
    return max(1, -(-per_chunk // plan.recompute_interval))


def megatron_text(plan: Plan, workload: Workload, *, steps: int, marker: str) -> str:
    """The file: a comment header and the arguments, one flag per line (append to your pretrain_gpt.py line)."""
    args = megatron_args(plan, workload, steps=steps)
    lines = [f"# {marker}: Megatron-LM arguments for plan {plan.to_string()} ({workload.model.name})",
             "# use: torchrun <launch.sh's torchrun flags> pretrain_gpt.py $(grep -v '^#' megatron_args.txt) "
             "<your data/tokenizer/optimizer args>"]
    if workload.model.mlp == "geglu":
        lines.append("# GeGLU (Gemma): Megatron-LM has --swiglu but no GeGLU flag; set the activation in your model "
                     "provider (gated_linear_unit with gelu)")
    if workload.training.precision == "fp8":
        lines.append("# fp8: Transformer Engine FP8 Linears (hybrid E4M3/E5M2, per-tensor delayed scaling) on top of "
                     "--bf16; needs Transformer Engine and an FP8 GPU (Ada, Hopper, Blackwell)")
    if plan.zero_stage == 2:
        lines.append("# ZeRO-2 -> distributed optimizer: Megatron keeps a full-size gradient buffer (ZeRO-1 memory)")
    if plan.cp > 1:
        lines.append(f"# CP: --context-parallel-size {plan.cp} splits each sequence over {plan.cp} ranks (ring "
                     "attention, --cp-comm-type p2p); gradients reduced" + (" and sharded" if plan.zero_stage else "")
                     + f" over dp x cp = {plan.gradient_ranks} ranks")
    if plan.ep_overlap:
        lines.append("# EP overlap (--overlap-moe-expert-parallel-comm): Megatron-Core >= 0.14, torch >= 2.6 and "
                     "Transformer Engine (--delay-wgrad-compute; TE >= 2.8 beside --overlap-grad-reduce); "
                     + ("CUDA_DEVICE_MAX_CONNECTIONS=32 (launch.sh)" if plan.tp == 1 else
                        "TP wants CUDA_DEVICE_MAX_CONNECTIONS=1 on pre-Blackwell GPUs where the overlap prefers 32 "
                        "(Megatron warns; launch.sh keeps 1 with sequence parallelism)"))
    both = "TP/CP" if plan.tp > 1 and plan.cp > 1 else "CP" if plan.cp > 1 else "TP"
    if plan.zero_stage == 3 and (plan.tp > 1 or plan.cp > 1):
        lines.append(f"# FSDP2 + {both}: leave CUDA_DEVICE_MAX_CONNECTIONS unset (FSDP2 refuses 1; Megatron warns on "
                     f"pre-Blackwell GPUs that {both} prefers 1)")
    elif plan.tp > 1 or plan.cp > 1:
        lines.append(f"# {both}: Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 on pre-Blackwell GPUs (validate_args)")
    i = 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        lines.append(shlex.join(args[i:j]))
        i = j
    return "\n".join(lines) + "\n"


def parse_megatron_text(text: str) -> list[str]:
    """The argument list of a megatron_args.txt / a pasted command line (comments dropped)."""
    body = " ".join(line.split("#", 1)[0] for line in text.splitlines())
    return shlex.split(body.replace("\\\n", " "))
