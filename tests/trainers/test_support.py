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
    assert unsupported_reason(hybrid, wl, cuda=True) is None  # TP inside each pipeline stage
    assert "tp=2 must divide n_heads=3" in unsupported_reason(hybrid, wl.model_copy(
        update={"model": wl.model.model_copy(update={"n_heads": 3, "d_model": 63})}), cuda=True)
    tiny_vocab = wl.model_copy(update={"model": wl.model.model_copy(update={"vocab_size": 1})})
    assert unsupported_reason(hybrid, tiny_vocab, cuda=True) == \
        "tp=2 exceeds vocab_size=1 (each rank keeps a share of the vocabulary); lower tp"
    hook = Plan(dp=2, comm_hook="bf16", micro_batch_size=4, devices_per_node=2)
    assert "CUDA" in unsupported_reason(hook, wl, cuda=False)
    assert unsupported_reason(hook, wl, cuda=True) is None
    assert unsupported_reason(Plan(pp=2, micro_batch_size=1, num_micro_batches=8, devices_per_node=2), wl,
                              cuda=False) is None


def test_zero_with_tp_or_pp():
    """ZeRO-1 with TP and/or PP, ZeRO-2/3 with TP and ZeRO-3 with PP (also beside TP) run; not in fp16 on GPUs."""
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="bf16")
    fp16 = wl.model_copy(update={"training": wl.training.model_copy(update={"precision": "fp16"})})
    runnable = [Plan(dp=2, tp=2, zero_stage=z, micro_batch_size=4, devices_per_node=4) for z in (1, 2, 3)]
    runnable += [Plan(dp=2, pp=2, zero_stage=z, micro_batch_size=2, num_micro_batches=2, devices_per_node=4)
                 for z in (1, 3)]
    runnable += [Plan(dp=2, tp=2, pp=2, zero_stage=z, micro_batch_size=2, num_micro_batches=2, devices_per_node=8)
                 for z in (0, 1, 3)]
    for plan in runnable:
        assert unsupported_reason(plan, wl, cuda=False) is None, plan.to_string()
        assert unsupported_reason(plan, wl, cuda=True) is None, plan.to_string()
        assert unsupported_reason(plan, fp16, cuda=False) is None  # CPU runs fp32 whatever is asked
        assert "fp16" in unsupported_reason(plan, fp16, cuda=True)


def test_trial_planner_offers_only_runnable_plans():
    cluster = load_preset("cpu-2ranks")
    wl = make_workload(model_from_args(layers=4, hidden=64, heads=4, ffn=128, vocab=128, seq=32, name="t"),
                       seq_len=32, global_batch=8, precision="fp32")
    planner = DefaultPlanner(cluster, wl)
    plans = [e.plan for e in planner.estimates()] + [e.plan for e in planner.top(5)]
    assert plans
    assert all(unsupported_reason(p, wl, cuda=False) is None for p in plans)


def _llama_workload(**model):
    from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload

    spec = ModelSpec(name="l", n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=64, mlp="swiglu",
                     **{"n_kv_heads": 2, **model})
    return Workload(model=spec, training=TrainingSettings(seq_len=16, global_batch=4))


def test_tp_must_keep_whole_kv_heads_and_expert_columns():
    tp4 = Plan(tp=4, micro_batch_size=4, devices_per_node=4)
    assert unsupported_reason(tp4, _llama_workload(), cuda=True) == \
        "tp=4 must divide n_kv_heads=2 (each rank keeps whole heads and MLP columns)"
    assert unsupported_reason(tp4, _llama_workload(n_kv_heads=4), cuda=True) is None
    moe = _llama_workload(n_kv_heads=4, n_experts=4, experts_per_token=2, expert_d_ff=6)
    assert "expert_d_ff=6" in unsupported_reason(tp4, moe, cuda=True)
    sp = Plan(tp=2, micro_batch_size=4, devices_per_node=2, sequence_parallel=True)
    odd = _llama_workload().model_copy(update={"training": _llama_workload().training.model_copy(
        update={"seq_len": 15})})
    assert "seq_len 15" in unsupported_reason(sp, odd, cuda=True)


def test_lora_runs_data_parallel_only():
    from gpuadvisor.schemas.workload import FineTune

    from gpuadvisor.trainers.support import bitsandbytes_version

    lora = _llama_workload().model_copy(update={"finetune": FineTune(method="lora")})
    qlora = _llama_workload().model_copy(update={"finetune": FineTune(method="qlora")})
    dp_plans = [Plan(dp=2, zero_stage=z, micro_batch_size=2, devices_per_node=2) for z in (0, 1, 2, 3)]
    assert all(unsupported_reason(p, lora, cuda=c) is None for p in dp_plans for c in (False, True))
    for plan in (Plan(tp=2, micro_batch_size=4, devices_per_node=2),
                 Plan(pp=2, micro_batch_size=1, num_micro_batches=4, devices_per_node=2)):
        for wl in (lora, qlora):
            assert unsupported_reason(plan, wl, cuda=True) == "LoRA/QLoRA trials run data parallel only: DDP, ZeRO or FSDP"
    offload = Plan(dp=2, zero_stage=3, zero_offload=True, micro_batch_size=2, devices_per_node=2)
    assert "offload" in unsupported_reason(offload, lora, cuda=True)
    ddp = dp_plans[0]
    if bitsandbytes_version() is None:
        assert "bitsandbytes" in unsupported_reason(ddp, qlora, cuda=True)
    else:
        assert unsupported_reason(ddp, qlora, cuda=True) is None
        assert "ZeRO" in unsupported_reason(dp_plans[3], qlora, cuda=True)


def test_qlora_needs_bitsandbytes(monkeypatch):
    from gpuadvisor.schemas.workload import FineTune
    from gpuadvisor.trainers import support

    qlora = _llama_workload().model_copy(update={"finetune": FineTune(method="qlora")})
    ddp = Plan(dp=2, micro_batch_size=2, devices_per_node=2)
    monkeypatch.setattr(support, "bitsandbytes_version", lambda: None)
    assert "need bitsandbytes" in unsupported_reason(ddp, qlora, cuda=True)
    monkeypatch.setattr(support, "bitsandbytes_version", lambda: (0, 45, 0))
    assert unsupported_reason(ddp, qlora, cuda=True) is None
    assert "4-bit kernels on CUDA" in unsupported_reason(ddp, qlora, cuda=False)


def _moe_workload(**update):
    return _llama_workload(n_experts=4, experts_per_token=2, expert_d_ff=32).model_copy(update=update)


def test_expert_parallel_runs_beside_data_parallelism_only():
    """ep > 1 runs with dp (DDP, ZeRO-1/2/3); with tp or pp, LoRA, hooks, hpZ or fp16 it is refused in one line."""
    from gpuadvisor.schemas.workload import FineTune

    moe = _moe_workload()
    for z in (0, 1, 2, 3):
        plan = Plan(dp=2, ep=2, zero_stage=z, micro_batch_size=2, devices_per_node=2)
        assert unsupported_reason(plan, moe, cuda=False) is None and unsupported_reason(plan, moe, cuda=True) is None
    tp = Plan(dp=2, tp=2, ep=2, micro_batch_size=2, devices_per_node=4)
    assert unsupported_reason(tp, moe, cuda=True) == (
        "plan tp2xdp2-ep2 (ep=2, tp=2, pp=1): the bundled trainers run expert parallelism beside data parallelism "
        "only; use tp=1 and pp=1 with ep dividing dp, or ep=1")
    assert unsupported_reason(tp.model_copy(update={"ep": 1}), moe, cuda=True) is None  # ep is what is refused
    pp = Plan(dp=2, pp=2, ep=2, micro_batch_size=1, num_micro_batches=2, devices_per_node=4)
    assert "plan pp2xdp2-ep2 (ep=2, tp=1, pp=2)" in unsupported_reason(pp, moe, cuda=False)
    ddp = Plan(dp=2, ep=2, micro_batch_size=2, devices_per_node=2)
    lora = moe.model_copy(update={"finetune": FineTune(method="lora")})
    assert unsupported_reason(ddp, lora, cuda=True) == \
        "plan dp-ep2: LoRA/QLoRA trials do not run expert parallelism; use ep=1"
    assert "comm hook" in unsupported_reason(ddp.model_copy(update={"comm_hook": "fp16"}), moe, cuda=True)
    hpz = Plan(dp=4, ep=2, zero_stage=3, zero_hpz_partition_size=2, micro_batch_size=1, devices_per_node=4)
    assert "hpZ" in unsupported_reason(hpz, moe, cuda=True)
    fp16 = moe.model_copy(update={"training": moe.training.model_copy(update={"precision": "fp16"})})
    assert "fp16" in unsupported_reason(ddp, fp16, cuda=True)
    assert unsupported_reason(ddp, fp16, cuda=False) is None  # CPU runs fp32 whatever is asked
    assert "no routed experts" in unsupported_reason(ddp, _llama_workload(), cuda=True)
    six = _llama_workload(n_experts=6, experts_per_token=2, expert_d_ff=32)
    assert "does not divide the 6 routed experts" in unsupported_reason(
        Plan(dp=4, ep=4, micro_batch_size=1, devices_per_node=4), six, cuda=True)
    for plan in (tp, pp, ddp.model_copy(update={"comm_hook": "fp16"}), hpz):
        assert "\n" not in unsupported_reason(plan, moe, cuda=True)


def test_trial_planner_skips_ep_plans_the_trainers_refuse():
    cluster = load_preset("cpu-2ranks")
    planner = DefaultPlanner(cluster, _moe_workload())
    assert planner._runnable(Plan(dp=2, ep=2, micro_batch_size=2, devices_per_node=2))
    assert not planner._runnable(Plan(tp=2, ep=2, micro_batch_size=4, devices_per_node=2))
