"""The torch-free support check agrees with what the trainers refuse, and the trial planner skips such plans."""
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan
from gpuadvisor.trainers.support import unsupported_reason
from gpuadvisor.trials.space import DefaultPlanner
from gpuadvisor.workload.specs import make_workload, model_from_args


def test_unsupported_reasons():
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="fp32")
    hybrid = Plan(tp=2, pp=2, micro_batch_size=1, num_micro_batches=8, devices_per_node=4)
    assert "tp > 1 with pp > 1" in unsupported_reason(hybrid, wl, cuda=True)
    hook = Plan(dp=2, comm_hook="bf16", micro_batch_size=4, devices_per_node=2)
    assert "CUDA" in unsupported_reason(hook, wl, cuda=False)
    assert unsupported_reason(hook, wl, cuda=True) is None
    assert unsupported_reason(Plan(pp=2, micro_batch_size=1, num_micro_batches=8, devices_per_node=2), wl,
                              cuda=False) is None


def test_trial_planner_offers_only_runnable_plans():
    cluster = load_preset("cpu-2ranks")
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="fp32")
    planner = DefaultPlanner(cluster, wl)
    plans = [e.plan for e in planner.estimates()] + [e.plan for e in planner.top(5)]
    assert plans
    assert all(unsupported_reason(p, wl, cuda=False) is None for p in plans)
