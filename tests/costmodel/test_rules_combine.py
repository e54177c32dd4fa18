"""Rule condition language and the combine step."""
import pytest

from gpuadvisor.costmodel.combine import estimate
from gpuadvisor.costmodel.rules import compile_condition, load_rules
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload, model_from_args


def test_condition_language():
    c = compile_condition({"all": [["tp", ">=", 2], {"any": [["tp_link", "==", "pcie"], ["nodes", ">", 1]]}]})
    assert c({"tp": 2, "tp_link": "pcie", "nodes": 1})
    assert not c({"tp": 1, "tp_link": "pcie", "nodes": 1})
    assert compile_condition({"not": ["zero", "in", [1, 2]]})({"zero": 3})


def test_bad_condition_is_user_error():
    with pytest.raises(UserError):
        compile_condition(["nosuchfeature", "==", 1])
    with pytest.raises(UserError):
        compile_condition("tp > 1")


def test_rules_load_and_have_sources():
    rules = load_rules()
    assert rules and all(r.source and r.message for r in rules)


def test_tp_across_1gbe_fires_rule():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    est = estimate(parse_plan("tp=2,mb=16,m=1,nodes=2,gpn=1"), cl, wl)
    assert "tp-across-slow-network" in {r.id for r in est.rules}
    assert est.scaling_efficiency is not None and est.scaling_efficiency < 0.05


@pytest.mark.parametrize("preset,fires", [("workstation-2x4090", True), ("cpu-2ranks", False)])
def test_small_model_penalty_is_for_gpus_only(preset, fires):
    """A 0.3M model leaves a GPU idle between kernels (seed 001), but saturates a CPU rank."""
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=256, vocab=512, seq=64, name="t"),
                       seq_len=64, global_batch=8, precision="fp32")
    est = estimate(parse_plan("dp=2,mb=4,m=1"), load_preset(preset), wl)
    assert ("small-model-distributed" in {r.id for r in est.rules}) is fires
    assert (est.tokens_per_s < est.analytical_tokens_per_s) is fires


def test_estimate_rejects_plan_bigger_than_cluster():
    cl = load_preset("workstation-2x4090")
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    with pytest.raises(ValueError):
        estimate(parse_plan("dp=4,mb=4,m=1"), cl, wl)
