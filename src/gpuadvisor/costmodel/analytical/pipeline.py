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


def p2p_bytes_per_microbatch(tokens: int, d_model: int, act_bytes: int, tp: int = 1) -> float:
    """Activation (or its gradient) crossing one stage boundary: b·s·h elements.

    Narayanan et al. 2021 §4.1 scatter/gather optimisation: with TP each rank sends 1/t of it.
    """
    return tokens * d_model * act_bytes / tp
