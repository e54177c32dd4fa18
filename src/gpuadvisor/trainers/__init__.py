"""The bundled trainers: one GPT (and a ResNet-18), deterministic synthetic data, single/DDP/TP/PP/ZeRO,
TP x DP / PP x DP hybrids and expert parallelism beside DP (MoE, `experts.py`), per-rank metrics aggregated
as in the A6000 paper (Appendix F).

Run: `torchrun --nproc-per-node N -m gpuadvisor.trainers --plan job.json --out DIR`
(or plain `python -m gpuadvisor.trainers ...` for a 1-rank plan). See docs/trainers.md.
`gpuadvisor.trainers.aggregate` and `.layout` import without torch; everything else needs it.
"""


def ensure_deepspeed_ops() -> None:
    """Build DeepSpeed's JIT communication op once, before ranks start (two ranks building it at once crash).

    Imports torch and deepspeed; the trial runner and launch.sh call it in a separate process.
    """
    from .strategies.zero import ensure_deepspeed_ops as _build

    _build()
