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


def test_zero_with_tp_or_pp():
    """ZeRO-1 with TP or PP, ZeRO-2/3 with TP and ZeRO-3 with PP run; ZeRO with TP and PP together does not."""
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="bf16")
    fp16 = wl.model_copy(update={"training": wl.training.model_copy(update={"precision": "fp16"})})
    runnable = [Plan(dp=2, tp=2, zero_stage=z, micro_batch_size=4, devices_per_node=4) for z in (1, 2, 3)]
    runnable += [Plan(dp=2, pp=2, zero_stage=z, micro_batch_size=2, num_micro_batches=2, devices_per_node=4)
                 for z in (1, 3)]
    for plan in runnable:
        assert unsupported_reason(plan, wl, cuda=False) is None, plan.to_string()
        assert unsupported_reason(plan, wl, cuda=True) is None, plan.to_string()
        assert unsupported_reason(plan, fp16, cuda=False) is None  # CPU runs fp32 whatever is asked
        assert "fp16" in unsupported_reason(plan, fp16, cuda=True)
    three_d = Plan(dp=2, tp=2, pp=2, zero_stage=1, micro_batch_size=2, num_micro_batches=2, devices_per_node=8)
    assert "tp > 1 with pp > 1" in unsupported_reason(three_d, wl, cuda=True)


def test_trial_planner_offers_only_runnable_plans():
    cluster = load_preset("cpu-2ranks")
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="fp32")
    planner = DefaultPlanner(cluster, wl)
    plans = [e.plan for e in planner.estimates()] + [e.plan for e in planner.top(5)]
    assert plans
    assert all(unsupported_reason(p, wl, cuda=False) is None for p in plans)
