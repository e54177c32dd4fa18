"""With allow_batch_change, plans at another global batch are scored with their own batch."""
from gpuadvisor.costmodel.combine import estimate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import rank
from gpuadvisor.workload.specs import make_workload


def test_changed_batch_plans_scored_with_their_own_batch():
    cluster = load_preset("a6000-4x-pcie")
    wl = make_workload("300M", global_batch=8, allow_batch_change=True)
    r = rank(cluster, wl, top=30)
    changed = [e for e in r.top if e.plan.global_batch() != 8]
    assert changed, "allow_batch_change must offer plans at another global batch"
    for e in changed:
        own = wl.model_copy(update={"training": wl.training.model_copy(
            update={"global_batch": e.plan.global_batch(), "allow_batch_change": False})})
        ref = estimate(e.plan, cluster, own)
        assert abs(e.tokens_per_s - ref.tokens_per_s) <= 1e-9 * ref.tokens_per_s
        assert abs(e.samples_per_s - e.plan.global_batch() / e.step_time_s) <= 1e-9 * e.samples_per_s
