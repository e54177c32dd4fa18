"""Pipeline schedules: bubble, step time, and the per-message cost of stage-boundary P2P."""
from __future__ import annotations


def bubble_fraction(pp: int, m: int, virtual: int = 1) -> float:
    """Idle fraction of a pipeline step: (p−1)/(m+p−1) for GPipe/1F1B, (p−1)/v over v chunks.

    Huang et al. 2019 (GPipe) §2.3: bubble O((K−1)/(M+K−1)); Narayanan et al. 2021 §2.2: 1F1B has
    the same bubble, interleaved 1F1B divides it by the number of model chunks v.
    """
    if pp <= 1:
        return 0.0
    idle = (pp - 1) / virtual
    return idle / (m + idle)


def pipeline_step_s(stage_mb_s: float, pp: int, m: int, virtual: int = 1) -> tuple[float, float]:
    """(step seconds, bubble seconds) for m micro-batches of per-stage time `stage_mb_s`.

    Step = (m + (p−1)/v) · t_stage (Narayanan et al. 2021 eq. (1)-(2)); t_stage includes the exposed
    P2P of that micro-batch, so more micro-batches pay more per-message overhead on slow links.
    """
    if pp <= 1:
        return m * stage_mb_s, 0.0
    bubble = (pp - 1) / virtual * stage_mb_s
    return m * stage_mb_s + bubble, bubble


def p2p_call_s(call_s: float, shared_boundaries: int) -> float:
    """Fixed cost of one blocking stage-boundary exchange, serialised over shared PCIe uplinks.

    Megatron-LM (p2p_communication.py) and ColossalAI (pipeline/p2p.py) issue each exchange as a
    blocking batch_isend_irecv followed by a wait and a device synchronisation, so it is not overlapped
    with compute. When k boundaries of the same node cross one shared upstream PCIe port (PXB/PHB/NODE/
    SYS: seed 001 Appendix D), their concurrent exchanges queue behind each other at that port: seed 001
    §IV-B, "with more devices and more microbatches, there is a multiplicative effect on the amount of
    communication overhead that PCIe amplifies". k = 1 for a single boundary or a switch-local (PIX/NVLink)
    path.
    """
    return call_s * max(1, shared_boundaries)


def tied_embedding_grad_bytes(vocab: int, d_model: int, tp: int, grad_bytes: int) -> float:
    """Bytes of the word-embedding gradient all-reduced between the first and the last stage.

    With tied input/output embeddings the first stage (embedding) and the last stage (LM head) each
    hold a copy of the V×h matrix; after the pipeline flush their gradients are all-reduced before the
    optimizer step (Megatron-LM finalize_model_grads `_allreduce_word_embedding_grads`, Shoeybi et al.
    2019 / Narayanan et al. 2021 §2; ColossalAI HybridParallelModule.sync_shared_params). Vocab-parallel
    across tp. In the model's dtype (Megatron grad_reduce_in_fp32 off, ColossalAI bf16/fp16 params).
    """
    return float(vocab) * d_model / tp * grad_bytes


def exchanges_per_slot(pp: int, virtual: int = 1) -> int:
    """Blocking P2P exchanges on the busiest stage per 1F1B slot (one forward + one backward).

    Megatron-LM schedules.py (forward_backward_pipelining_without_interleaving): in steady state a stage
    calls send_forward_recv_backward after its forward and send_backward_recv_forward after its
    backward, each one batched isend/irecv pair (activation out, gradient in, full duplex). The first
    stage has no previous and the last no next stage, so with p = 2 each stage makes one exchange per
    slot; a middle stage (p >= 3) makes two. Interleaved 1F1B: every chunk has both neighbours (2v).
    """
    if pp <= 1:
        return 0
    if virtual > 1:
        return 2 * virtual
    return 2 if pp >= 3 else 1
