"""Megatron-LM / Megatron-Core `pretrain_gpt.py` argument list for a plan.

Flag names from Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM commit 000c4ac2):
_add_network_size_args (--num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
--group-query-attention, --num-query-groups, --max-position-embeddings, --swiglu,
--untie-embeddings-and-output-weights), _add_training_args (--micro-batch-size, --global-batch-size,
--train-iters, --recompute-granularity/--recompute-method/--recompute-num-layers), _add_mixed_precision_args
(--bf16, --fp16), _add_distributed_args (--tensor-model-parallel-size, --pipeline-model-parallel-size,
--num-layers-per-virtual-pipeline-stage, --sequence-parallel, --use-distributed-optimizer,
--overlap-grad-reduce, --overlap-param-gather, --use-torch-fsdp2), --seq-length (_add_data_args),
--optimizer-cpu-offload with --use-precision-aware-optimizer.
Mapping: ZeRO-1/2 -> the distributed optimizer (shards optimizer states; gradients are reduce-scattered);
ZeRO-3 -> --use-torch-fsdp2; offload -> --optimizer-cpu-offload. Megatron needs --pipeline-model-parallel-size
> 2 or so for interleaving: virtual stages are passed as layers per virtual stage.
Extension point: selective recompute and ZeRO with TP/PP (distributed optimizer) are not Plan fields yet.
"""
from __future__ import annotations

import shlex

from ..schemas.plan import Plan
from ..schemas.workload import Workload

FILE = "megatron_args.txt"


def megatron_args(plan: Plan, workload: Workload, *, steps: int) -> list[str]:
    """The argument list (model shape, parallel degrees, batch, precision, recompute)."""
    m, t = workload.model, workload.training
    a = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp),
         "--micro-batch-size", str(plan.micro_batch_size), "--global-batch-size", str(plan.global_batch()),
         "--seq-length", str(t.seq_len), "--max-position-embeddings", str(max(m.max_seq_len, t.seq_len)),
         "--num-layers", str(m.n_layers), "--hidden-size", str(m.d_model), "--ffn-hidden-size", str(m.d_ff),
         "--num-attention-heads", str(m.n_heads), "--train-iters", str(steps)]
    if m.n_kv_heads and m.n_kv_heads != m.n_heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv_heads)]
    if m.mlp == "swiglu":
        a.append("--swiglu")
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if plan.pp_virtual_stages > 1:
        a += ["--num-layers-per-virtual-pipeline-stage", str(m.n_layers // (plan.pp * plan.pp_virtual_stages))]
    if plan.sequence_parallel:
        a.append("--sequence-parallel")
    if plan.zero_stage in (1, 2):
        a += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif plan.zero_stage == 3:
        a.append("--use-torch-fsdp2")
    elif plan.dp > 1:
        a.append("--overlap-grad-reduce")
    if plan.zero_offload:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    if plan.recompute:
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if t.precision in ("bf16", "fp16"):
        a.append(f"--{t.precision}")
    return a


def megatron_text(plan: Plan, workload: Workload, *, steps: int, marker: str) -> str:
    """The file: a comment header and the arguments, one flag per line (append to your pretrain_gpt.py line)."""
    args = megatron_args(plan, workload, steps=steps)
    lines = [f"# {marker}: Megatron-LM arguments for plan {plan.to_string()} ({workload.model.name})",
             "# use: torchrun <launch.sh's torchrun flags> pretrain_gpt.py $(grep -v '^#' megatron_args.txt) "
             "<your data/tokenizer/optimizer args>"]
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
