"""The goal "largest model that fits" (tui/rankjob.largest_fitting): a binary search over the size table."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.tui.rankjob import largest_fitting
from gpuadvisor.workload import catalog


def _ladder(seq_len: int, global_batch: int):
    """Every catalog size that takes `seq_len`, smallest first, as workloads."""
    out = []
    for _, (label, _) in sorted(catalog.sizes().items()):
        try:
            out.append(api.make_workload(label, seq_len=seq_len, global_batch=global_batch))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("seq_len", [1024, 2048])
def test_largest_fitting_is_the_last_size_that_fits(seq_len):
    cluster = load_preset("workstation-2x4090")
    # only the workload's training settings matter (seq len, batch, precision)
    found = largest_fitting(cluster, api.make_workload("7B", seq_len=seq_len, global_batch=16))
    ladder = _ladder(seq_len, 16)
    names = [wl.model.name for wl in ladder]
    i = names.index(found.model.name)
    assert api.suggest(found, cluster=cluster, top=1).ranking.top
    assert i + 1 < len(ladder) and not api.suggest(ladder[i + 1], cluster=cluster, top=1).ranking.top
    assert found.training.seq_len == seq_len
    if seq_len == 2048:
        # GPT-2's sizes (1024 positions) refuse 2048 tokens; they are skipped, not read as "too big"
        assert not any(n.startswith("gpt2") for n in names) and found.model.max_seq_len in (0, 2048)
