"""The chunked-loss advice: a language model's loss holds its logits, tokens x vocabulary of them, which at long
sequences or large vocabularies (Llama 3's 128,256) is a large share of a GPU's memory and forces recompute, smaller
micro-batches or more sharding. Liger-Kernel's fused linear cross-entropy computes the head and the loss a chunk of
tokens at a time and never holds them (memory.chunked_loss_bytes); on a Hugging Face model it is one line
(AutoLigerKernelForCausalLM, or use_liger_kernel in TRL / Axolotl / LLaMA-Factory). Priced, not asserted: the
workload is ranked again with kernels "liger" and the gain is said only when it is worth a line."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..schemas import Cluster, Ranking, Workload

#: rank again when the loss's logits take at least this share of the top plan's peak memory (or nothing fits) ...
LOGITS_SHARE = 0.25
#: ... or when one sequence's logits take this share of a device (long contexts: there the logits push the ranking
#: to tensor parallelism, whose vocabulary-parallel head hides them from the top plan's own share)
SEQUENCE_SHARE = 0.10
#: say it when the chunked loss's best plan is at least this much faster than the top plan
MIN_GAIN = 0.05

LIGER = ("Liger-Kernel's fused norms, rotary and SwiGLU and its chunked linear cross-entropy, which never holds the "
         "logits (Hugging Face: AutoLigerKernelForCausalLM, or use_liger_kernel in TRL / Axolotl / LLaMA-Factory; "
         "--kernels liger, API kernels='liger')")


def chunked_loss_note(workload: "Workload", cluster: "Cluster", ranking: "Ranking", **kw: Any) -> Optional[str]:
    """One note when the loss's logits weigh on the top plan (LOGITS_SHARE of its peak) or on a device
    (SEQUENCE_SHARE per sequence), or nothing fits, and ranking the same workload with Liger-Kernel's layers and loss
    (kernels "liger") finds a plan MIN_GAIN faster (objectives throughput and time), or one that fits; else None.
    Not for stacks whose loss is already chunked or Transformer Engine's (cudnn), nor for models without a
    vocabulary."""
    from ..costmodel.analytical.memory import logits_bytes
    from ..costmodel.combine import make_context
    from .rank import plan_label, rank

    t = workload.training
    if workload.model.kind != "transformer" or t.kernels == "liger" or t.attention_kernel == "cudnn":
        return None
    top = ranking.top[0] if ranking.top else None
    if top is not None and ranking.objective not in ("throughput", "time"):
        return None  # a faster plan is what it offers
    share = top.memory.logits / top.memory.total if top is not None and top.memory.total else 1.0
    one = 0.0
    if top is not None and share < LOGITS_SHARE:
        ctx = make_context(cluster, workload)
        one = logits_bytes(t.seq_len, 1, workload.model.vocab_size, fused=not ctx.eager_loss)
        if one < SEQUENCE_SHARE * ctx.mem_cap:
            return None
    chunked = workload.model_copy(update={"training": t.model_copy(update={"kernels": "liger"})})
    found = rank(cluster, chunked, objective=ranking.objective, top=1, **kw)
    if not found.top:
        return None
    alt = found.top[0]
    if top is None:
        return (f"nothing fits with the loss holding whole logits; with {LIGER}: best plan {plan_label(alt.plan)} at "
                f"{alt.tokens_per_s:,.0f} tokens/s")
    gain = alt.tokens_per_s / top.tokens_per_s - 1.0
    # a top plan that fits only with its checkpoints in host RAM (rank._checkpoints_in_host_ram) against one that
    # needs no such thing: worth the line at any gain that is not a loss
    simpler = top.plan.offload_activations and not alt.plan.offload_activations and gain > -MIN_GAIN
    if gain < MIN_GAIN and not simpler:
        return None
    held = (f"the loss holds {top.memory.logits / 2**30:.1f} GiB of logits, {share:.0%} of the top plan's peak"
            if share >= LOGITS_SHARE else f"the loss's logits take {one / 2**30:.1f} GiB per sequence of "
            f"{t.seq_len:,} tokens, which only some plans can hold")
    return (f"{held}; with {LIGER}: best plan {plan_label(alt.plan)} at {alt.tokens_per_s:,.0f} tokens/s "
            f"({gain:+.0%}" + (", its activation checkpoints on the device)" if simpler else ")"))
