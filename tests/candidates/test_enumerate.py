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
    # every offload DeepSpeed runs with pure data parallelism: ZeRO-2's (the optimizer), ZeRO-3's optimizer alone
    # or with the parameters; on one GPU no optimizer-only ZeRO-3 (nothing to shard: ZeRO-2's is the same)
    offloads = {p.strategy for p in plans if p.zero_offload and p.dp == 4}
    assert offloads == {"zero2-offload", "zero3-offload-optim", "zero3-offload"}
    assert {p.strategy for p in plans if p.zero_offload and p.world_size == 1} == {"zero2-offload", "zero3-offload"}
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


def test_rows_array_is_the_rows_as_floats():
    """The float array enumeration assembles (the engine's input) equals its rows built as tuples the plain way
    and converted one value at a time: every run of rows in order, mixed ZeRO choices, schedules, hooks, batches,
    MoE, an eager core, a generic model; one row read off the array before any tuple exists is that tuple and
    the same plan; a slice falls back to converting its tuples."""
    import itertools

    import numpy as np

    from gpuadvisor.candidates import COLUMNS, enumerate_rows, row_plan
    from gpuadvisor.costmodel.combine import make_context
    from gpuadvisor.costmodel.engine import _as_array, evaluate_batch

    cases = [("nano-cluster-2x2-a40-1gbe", "1.5B", {}, {"allow_batch_change": True, "allow_comm_hooks": True}),
             ("a6000-4x-pcie", "gpt3-350m", {"attention_kernel": "eager"}, {}),
             ("hgx-h100-8x", "mixtral-8x7b", {}, {}), ("a6000-4x-pcie", "resnet18", {}, {})]
    for preset, model, settings, kw in cases:
        rows = enumerate_rows(load_preset(preset), make_workload(model, **settings), **kw)
        picks = [0, len(rows) // 3, len(rows) - 1]
        read = [rows[i] for i in picks]  # off the array: no tuple built yet
        assert [rows.tuples()[i] for i in picks] == read, model
        assert [row_plan(r) for r in read] == [row_plan(rows.tuples()[i]) for i in picks], model
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=float, count=len(rows) * len(COLUMNS))
        assert len(rows) > 100 and np.array_equal(rows.array, flat.reshape(len(rows), len(COLUMNS))), model
        assert _as_array(rows) is rows.array
        kept = rows.array.copy()  # the engine reads the array it is handed and must never write to it
        evaluate_batch(rows, make_context(load_preset(preset), make_workload(model, **settings)))
        assert np.array_equal(rows.array, kept)
        part = rows[10:20]
        assert np.array_equal(_as_array(part), rows.array[10:20])


def test_offload_codes_round_trip_between_rows_and_plans():
    from gpuadvisor.candidates import OFFLOADS, enumerate_rows, row_plan
    from gpuadvisor.costmodel.engine import plan_row

    cl = load_preset("a6000-4x-pcie")
    wl = make_workload("gpt2", seq_len=1024, global_batch=16)
    rows = enumerate_rows(cl, wl)
    seen = set()
    for r in rows:
        p = row_plan(r)
        assert [float(x) for x in plan_row(p)] == [float(x) for x in r]
        seen.add((p.zero_stage, OFFLOADS[int(r[4])], p.offloads_params))
    assert {(2, "optimizer", False), (3, "optimizer", False), (3, "optimizer+params", True)} <= seen
    # adapters: their optimizer states are tiny, so no optimizer-only offload is proposed
    lora = enumerate_rows(cl, make_workload("gpt2", seq_len=1024, global_batch=16, finetune="lora"))
    assert lora and not any(int(r[4]) == 1 for r in lora)


def test_offload_words_in_a_plan_text():
    from gpuadvisor.schemas import parse_plan

    opt = parse_plan("dp=4,zero=3,offload=optimizer,mb=1")
    assert opt.zero_offload and not opt.offloads_params and opt.strategy == "zero3-offload-optim"
    assert parse_plan(opt.to_string()) == opt  # to_string writes offload=true,offload_param=false
    both = parse_plan("dp=4,zero=3,offload=all,mb=1")
    assert both == parse_plan("dp=4,zero=3,offload=true,mb=1") and both.strategy == "zero3-offload"
    assert parse_plan("dp=4,zero=2,offload=true").strategy == "zero2-offload"
