"""Synthetic fixed-shape data, deterministic per step (the A6000 paper's dataset, §II-A).

The n-th global batch depends only on (seed, n, shape): it is generated whole from a
`torch.Generator` seeded with both, so it is identical for every strategy and world size, and
each rank then takes its share (Table II of the paper):
- data parallel / ZeRO: its replica's contiguous slice of the global batch, then micro-batches of it;
- tensor parallel: every rank of a TP group takes the same slice (the whole batch when dp = 1);
- pipeline parallel: the replica's slice, cut into micro-batches by the pipeline schedule.
Tokens are uniform over the vocabulary; ResNet images are standard-normal pixels, labels uniform.
"""
from __future__ import annotations

import torch

_STEP_STRIDE = 1_000_003  # prime: (seed, step) -> distinct generator seeds


def _generator(seed: int, step: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed * _STEP_STRIDE + step)
    return g


def token_batch(seed: int, step: int, global_batch: int, seq_len: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch `step`: (inputs, targets), each (global_batch, seq_len) int64, targets shifted by one."""
    if global_batch <= 0 or seq_len <= 0 or vocab_size <= 1:
        raise ValueError(f"bad batch shape: batch={global_batch} seq_len={seq_len} vocab={vocab_size}")
    ids = torch.randint(0, vocab_size, (global_batch, seq_len + 1), generator=_generator(seed, step))
    return ids[:, :-1], ids[:, 1:]


def image_batch(seed: int, step: int, global_batch: int, image_size: int = 32, classes: int = 10
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batch `step` of CIFAR-10-shaped images: (images (B,3,S,S) float32, labels (B,) int64)."""
    if global_batch <= 0:
        raise ValueError(f"bad batch size {global_batch}")
    g = _generator(seed, step)
    x = torch.randn(global_batch, 3, image_size, image_size, generator=g)
    y = torch.randint(0, classes, (global_batch,), generator=g)
    return x, y


def replica_slice(batch: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    """Rows of the global batch owned by data-parallel replica `dp_rank` of `dp` (equal contiguous slices)."""
    if batch.shape[0] % dp:
        raise ValueError(f"global batch {batch.shape[0]} is not divisible by dp={dp}")
    n = batch.shape[0] // dp
    return batch[dp_rank * n:(dp_rank + 1) * n]


def micro_batches(batch: torch.Tensor, count: int) -> list[torch.Tensor]:
    """Split a replica's batch into `count` equal micro-batches, in order."""
    if batch.shape[0] % count:
        raise ValueError(f"replica batch {batch.shape[0]} is not divisible into {count} micro-batches")
    return list(batch.chunk(count))
