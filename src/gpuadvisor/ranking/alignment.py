"""The padding advice: a vocabulary or MLP width off the Tensor Cores' 16-byte grid slows every GEMM that carries it
(compute.alignment_factor, calibration gemm_efficiency.misaligned_rate); padding it is a one-line model change that
nanoGPT ("pad vocab_size up to nearest multiple of 64 for efficiency"), llm.c (padded_vocab_size 50,304) and
Megatron (--make-vocab-size-divisible-by 128) all make. Priced, not asserted: the top plan is estimated again with
the padded model and the gain is said only when it is worth a line."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ..schemas import Cluster, Estimate, Workload

#: pad to a multiple of this many elements (nanoGPT's choice for GPT-2: 50,257 -> 50,304)
PAD_TO = 64
#: say it when padding gains at least this share of tokens/s
MIN_GAIN = 0.02


def _padded(value: int, tp: int) -> int:
    step = PAD_TO * tp
    return -(-value // step) * step


def padding_note(workload: "Workload", cluster: "Cluster", top: "Estimate") -> Optional[str]:
    """One note when the model's vocabulary or MLP width per TP rank of the top plan is off the grid the cost model
    prices (compute.alignment_factor, on the Context's alignment and element bytes) and padding it to a multiple of
    64 x tp predicts at least MIN_GAIN more tokens/s on that plan; else None."""
    from ..costmodel.analytical.compute import alignment_factor
    from ..costmodel.combine import estimate, make_context

    m = workload.model
    if m.kind != "transformer" or not top.feasible or not top.tokens_per_s:
        return None
    ctx = make_context(cluster, workload)
    tp = top.plan.tp

    def off_grid(value: int, element_bytes: float) -> bool:
        return bool(alignment_factor((value / tp,), element_bytes, ctx.align_bytes, ctx.misaligned_rate) < 1.0)

    update, said = {}, []
    if off_grid(m.vocab_size, ctx.act_bytes):  # the LM head runs on the 16-bit curve
        update["vocab_size"] = _padded(m.vocab_size, tp)
        said.append(f"vocabulary {m.vocab_size:,} -> {update['vocab_size']:,}")
    width = m.expert_d_ff or m.d_ff
    if off_grid(width, ctx.linear_elem_bytes):
        key = "expert_d_ff" if m.expert_d_ff else "d_ff"
        update[key] = _padded(width, tp)
        said.append(f"MLP width {width:,} -> {update[key]:,}")
    if not update:
        return None
    padded = workload.model_copy(update={"model": m.model_copy(update=update)})
    gain = estimate(top.plan, cluster, padded).tokens_per_s / top.tokens_per_s - 1.0
    if gain < MIN_GAIN:
        return None
    return (f"pad the model: {' and '.join(said)} (multiples of {PAD_TO} per TP rank) predicts +{gain:.0%} tokens/s "
            f"for the top plan; a width that is not a multiple of 16 bytes keeps its GEMMs off the Tensor Cores' "
            f"aligned loads (~{ctx.misaligned_rate:.2f} of the rate, measured on an H100). Hugging Face: "
            f"model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of={PAD_TO}); nanoGPT, llm.c and "
            "Megatron pad the vocabulary this way")
