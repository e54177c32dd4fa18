"""Candidates are valid and include the expected plans."""
from gpuadvisor.candidates import enumerate_plans
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import check_plan_for
from gpuadvisor.workload.specs import make_workload


def test_all_candidates_valid_and_expected_present():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    plans = list(enumerate_plans(cl, wl))
    assert plans
    for p in plans:
        check_plan_for(p, wl)
        assert p.nodes <= 2 and p.devices_per_node <= 2
        assert p.tp <= p.devices_per_node  # TP inside a node by default
    strategies = {(p.dp, p.tp, p.pp, p.zero_stage, p.zero_offload, p.nodes, p.devices_per_node) for p in plans}
    assert (1, 1, 1, 0, False, 1, 1) in strategies        # one GPU
    assert (2, 1, 1, 0, False, 1, 2) in strategies        # DP in a node ("use one node")
    assert (1, 2, 1, 0, False, 1, 2) in strategies        # TP in a node
    assert (1, 1, 2, 0, False, 2, 1) in strategies        # PP across nodes
    assert (4, 1, 1, 3, True, 2, 2) in strategies         # ZeRO-3 offload on everything
    assert any(p.recompute for p in plans) and any(p.pp_schedule == "interleaved" for p in plans)
    assert all(p.comm_hook == "none" for p in plans)


def test_tp_across_nodes_and_hooks_when_asked():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    plans = list(enumerate_plans(cl, wl, allow_tp_across_nodes=True, allow_comm_hooks=True))
    assert any(p.tp > p.devices_per_node for p in plans)
    assert any(p.comm_hook == "powersgd" for p in plans)


def test_all_devices_only():
    cl = load_preset("a6000-4x-pcie")
    wl = make_workload("gpt-300m")
    plans = list(enumerate_plans(cl, wl, allow_fewer_devices=False))
    assert plans and all(p.world_size == 4 for p in plans)


def test_generic_model_only_data_parallel():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    wl = make_workload("resnet18", global_batch=256)
    assert all(p.tp == 1 and p.pp == 1 for p in enumerate_plans(cl, wl))
