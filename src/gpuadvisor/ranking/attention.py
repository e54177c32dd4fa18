"""The attention-kernel advice: on Hopper and Blackwell, FlashAttention-2 (PyTorch SDPA's kernel, what the workload
prices by default) leaves the attention core at about half the GEMM rate, where FlashAttention-3/4 (flash-attn 3 on
Hopper, 4 on Blackwell) run it at its own fitted rate, above cuDNN's (TrainingSettings.attention_kernel "flash3";
calibration gemm_efficiency attn_rel_flash3). At long sequences the
core is most of the step. Priced, not asserted: the top plan is estimated again with "flash3" (the same memory, so
it still fits) and the gain is said only when it is worth a line."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ..schemas import Cluster, Estimate, Workload

#: say it when FlashAttention-3/4 gain at least this share of tokens/s on the top plan
MIN_GAIN = 0.10


def flash3_note(workload: "Workload", cluster: "Cluster", top: "Estimate") -> Optional[str]:
    """One note when the workload prices FlashAttention-2 on GPUs that run FlashAttention-3/4 (every device Hopper or
    later) and the top plan predicts at least MIN_GAIN more tokens/s with them; else None. A core priced unfused
    (attention sinks, Workload.core_kernel) is not told: FlashAttention-3 has no sinks either."""
    from ..costmodel.analytical import runs_flash3
    from ..costmodel.combine import estimate, make_context

    if (workload.model.kind != "transformer" or workload.training.attention_kernel != "flash"
            or workload.core_kernel != "flash" or not top.feasible or not top.tokens_per_s):
        return None
    devices = [d for n in cluster.nodes for d in n.devices]
    if not devices or not all(runs_flash3(d) for d in devices):
        return None
    faster = workload.model_copy(update={"training": workload.training.model_copy(
        update={"attention_kernel": "flash3"})})
    gain = estimate(top.plan, cluster, faster).tokens_per_s / top.tokens_per_s - 1.0
    if gain < MIN_GAIN:
        return None
    share = make_context(cluster, workload).attn_rel / make_context(cluster, faster).attn_rel
    return (f"attention: FlashAttention-3 (Hopper; -4 on Blackwell) predicts +{gain:.0%} tokens/s for the top plan "
            f"at {workload.training.seq_len:,} tokens: PyTorch's SDPA (FlashAttention-2, priced here) runs the "
            f"attention core at {share:.0%} of their rate as fitted on PyTorch runs; install flash-attn 3 and load "
            "the model with attn_implementation='flash_attention_3' (Hugging Face), and rank with "
            "--attention-kernel flash3 (API: attention_kernel='flash3')")
