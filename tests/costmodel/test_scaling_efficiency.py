"""Scaling efficiency (the `eff` column) is tokens/s over devices x one device's rate, and never above 1."""
import pytest

from gpuadvisor import api


@pytest.mark.parametrize("model,preset,batch", [
    ("7B", "dgx-a100-8x", 8),                 # only offload fits one 40 GB card: read 1.18 before
    ("70B", "hgx-h100-8x-8nodes-ib-ndr", 64),  # fits no single device at all
    ("1.5B", "workstation-2x4090", 16),
    ("qwen3-30b-a3b", "hgx-h100-8x", 64),      # MoE with expert parallelism among the candidates
])
def test_efficiency_of_every_shown_plan_is_at_most_one(model, preset, batch):
    s = api.suggest(model, preset=preset, global_batch=batch, top=20)
    effs = [e.scaling_efficiency for e in s.ranking.top if e.scaling_efficiency is not None]
    assert effs, "no efficiency shown"
    assert max(effs) <= 1.0 + 1e-9, effs
    assert min(effs) > 0.0


def test_efficiency_baseline_ignores_offload_when_the_model_fits_one_device_only_with_it():
    """7B on 40 GB cards: the baseline is one device's compute rate, so 8 devices read well below 1."""
    s = api.suggest("7B", preset="dgx-a100-8x", global_batch=8, top=5)
    top = s.ranking.top[0]
    assert top.plan.world_size == 8
    assert 0.3 < top.scaling_efficiency < 0.95
