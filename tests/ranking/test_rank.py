"""Ranking order, explanations, infeasibility and what-if."""
import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import apply_what_if, rank
from gpuadvisor.workload.specs import make_workload


def test_dp_first_on_a6000_two_gpus_300m():
    cl = apply_what_if(load_preset("a6000-4x-pcie"), "gpus=1x2")
    r = rank(cl, make_workload("gpt-300m"), top=5)
    best = r.top[0].plan
    assert (best.dp, best.tp, best.pp) == (2, 1, 1)
    assert r.top[0].reasons and ("beats" in r.top[0].reasons[0] or "as fast as" in r.top[0].reasons[0])
    assert r.n_feasible <= r.n_candidates


def test_tp_across_nodes_last_on_nano():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    r = rank(cl, make_workload("gpt2", seq_len=1024, global_batch=16), top=1000, allow_tp_across_nodes=True)
    last = r.top[-1].plan
    assert last.tp > 1 and last.nodes > 1 and last.tp > last.devices_per_node
    assert r.top[0].plan.nodes == 1  # crossing 1 GbE never pays for GPT-2 small


def test_fits_nowhere_says_what_to_change():
    cl = load_preset("workstation-2x4090")
    r = rank(cl, make_workload("70B", seq_len=4096, global_batch=8), top=3)
    assert r.n_feasible == 0 and r.fits_nowhere and "GiB" in r.fits_nowhere
    assert sum(r.infeasible_reasons.values()) == r.n_candidates


def test_fits_nowhere_names_the_adapter_method_that_fits():
    """Full training of Llama 3.1 8B fits nowhere on 2 x 4090 (24 GB; 128 GiB of host RAM, 109 usable, too small
    for even the optimizer's 16 B/param: 120 GiB); LoRA does, and the message says so with the plan it ranked. 70B:
    LoRA's bf16 base is still too big, QLoRA's 4-bit base is not."""
    cl = load_preset("workstation-2x4090")
    full = rank(cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64), top=1)
    assert full.n_feasible == 0
    assert "host RAM" in full.fits_nowhere and "LoRA fits: --finetune lora (API: finetune='lora')" in full.fits_nowhere
    lora = rank(cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64, finetune="lora"), top=1)
    assert lora.top and f"{lora.top[0].tokens_per_s:,.0f} tokens/s" in full.fits_nowhere
    # 7B: the optimizer's 16 B/param and the 2 B/param of 16-bit gradients DeepSpeed buffers in host RAM under
    # offload (engine.offload_host_buffers) are 113 GiB, over the 109 usable
    seven = rank(cl, make_workload("7B", seq_len=1024, global_batch=64), top=1)
    assert seven.n_feasible == 0 and "needs 113 GiB of host RAM" in seven.fits_nowhere
    # with 144 GiB (122 usable) it fits with the optimizer alone in host RAM, above HOST_TIGHT of the usable: said
    roomy = cl.model_copy(update={"nodes": [n.model_copy(update={"cpu": n.cpu.model_copy(
        update={"ram_bytes": 144 * 2 ** 30})}) for n in cl.nodes]})
    seven = rank(roomy, make_workload("7B", seq_len=1024, global_batch=64), top=1)
    assert seven.top and seven.top[0].plan.zero_offload and not seven.top[0].plan.offloads_params
    assert any("pins 113 GiB of host RAM" in n and "--finetune lora" in n for n in seven.notes)
    # DeepSpeed's estimator: 1.5x the 16 B/param of states, not of the gradient buffers it does not count
    assert any("estimator asks 151 GiB with its 1.5x margin on the states alone" in n for n in seven.notes)
    big = rank(cl, make_workload("70B", seq_len=1024, global_batch=64), top=1)
    assert "QLoRA fits: --finetune qlora" in big.fits_nowhere and "--finetune lora " not in big.fits_nowhere
    assert rank(cl, make_workload("70B", seq_len=1024, global_batch=64, finetune="lora"), top=1).n_feasible == 0
    # already adapters (or nothing that fits even as QLoRA): no hint
    huge = rank(cl, make_workload("175B", seq_len=1024, global_batch=64, finetune="qlora"), top=1)
    assert huge.n_feasible == 0 and "--finetune" not in huge.fits_nowhere


def test_an_idle_full_training_plan_says_what_holds_it_and_what_adapters_would_give():
    """Llama 3.1 8B in full on 8 x 4090 (PCIe x8 behind the host bridge, no P2P): only ZeRO-3 fits, and its
    per-micro-batch gathers through host memory take most of each step, so the GPUs compute ~5 % of the time. The
    note names that and, since LoRA on the same box trains over ADAPTER_GAIN times faster, LoRA with its ranked
    plan. FP8 has no adapters: the note says only what holds the plan. A busy plan gets no such note."""
    from gpuadvisor.ranking.rank import ADAPTER_GAIN, IDLE_EFFICIENCY

    cl = apply_what_if(load_preset("workstation-2x4090"), "gpus=1x8")
    full = rank(cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64), top=1)
    best = full.top[0]
    assert best.scaling_efficiency < IDLE_EFFICIENCY
    idle = [n for n in full.notes if "of the devices' compute busy" in n]
    assert len(idle) == 1 and f"keeps {best.scaling_efficiency:.0%} of" in idle[0]
    assert "communication over pcie takes" in idle[0]
    lora = rank(cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64, finetune="lora"), top=1).top[0]
    assert lora.tokens_per_s > ADAPTER_GAIN * best.tokens_per_s
    assert (f"LoRA trains {lora.tokens_per_s / best.tokens_per_s:.1f}x faster on this cluster: --finetune lora"
            in idle[0]) and f"at {lora.tokens_per_s:,.0f} tokens/s" in idle[0]
    fp8 = rank(cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64, precision="fp8"), top=1)
    held = [n for n in fp8.notes if "compute busy" in n]
    assert len(held) == 1 and "--finetune" not in held[0]
    busy = rank(load_preset("nano-cluster-2x2-a40-1gbe"), make_workload("1.5B"), top=1)
    assert busy.top[0].scaling_efficiency >= IDLE_EFFICIENCY and not any("compute busy" in n for n in busy.notes)
    # another objective: no such note
    assert not any("compute busy" in n for n in rank(
        cl, make_workload("llama-3.1-8b", seq_len=1024, global_batch=64), top=1, objective="memory").notes)


def test_memory_and_cost_objectives():
    cl = load_preset("a6000-4x-pcie")
    wl = make_workload("gpt-300m")
    mem = rank(cl, wl, objective="memory", top=3)
    assert mem.top[0].memory.total <= mem.top[-1].memory.total
    cost = rank(cl, wl, objective="cost", top=3, price_per_gpu_hour=1.0)
    assert cost.top[0].plan.world_size <= 4
    with pytest.raises(UserError):
        rank(cl, wl, objective="speed")


def test_what_if():
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    ten = apply_what_if(cl, "nic=10gbe")
    assert ten.network.bandwidth_gb_per_s > cl.network.bandwidth_gb_per_s
    big = apply_what_if(cl, "gpus=2x4")
    assert big.num_devices == 8 and len(big.nodes) == 2
    nv = apply_what_if(cl, "link=nvlink")
    assert nv.nodes[0].links[0].bandwidth_gb_per_s > cl.nodes[0].links[0].bandwidth_gb_per_s
    for bad in ("nic=warp", "gpus=two", "color=red", "nvlink", "gpus=2x\u00b9"):  # '¹' passes str.isdigit()
        with pytest.raises(UserError):
            apply_what_if(cl, bad)


def test_reason_wording_has_no_negative_or_zero_percent():
    from gpuadvisor.ranking.rank import _compare

    assert _compare("A", "B", -44.2, "cost") == "A ranks above B by cost despite 44% fewer tokens/s"
    assert _compare("A", "B", 0.2, "throughput") == "A runs as fast as B (within 0.5% in tokens/s)"
    assert _compare("A", "B", 3.04, "throughput") == "A beats B by 3.0% in tokens/s"
    cl = load_preset("nano-cluster-2x2-a40-1gbe")
    for objective in ("throughput", "memory", "cost"):
        r = rank(cl, make_workload("gpt-300m"), top=5, objective=objective, price_per_gpu_hour=1.0)
        for e in r.top:
            for reason in e.reasons:
                assert "by -" not in reason and "by 0%" not in reason, reason


def test_complexity_orders_zero_stages_then_parallel_dimensions():
    """DDP < ZeRO-1 < ZeRO-2 < ZeRO-3 < offload; a TP or PP dimension costs as much as two ZeRO steps, so PP +
    ZeRO-1 is no simpler than ZeRO-3 and a 2-D hybrid is more complex than any pure data-parallel plan."""
    from gpuadvisor.ranking.rank import complexity
    ddp, z1, z2, z3 = (complexity(8, 1, 1, z, 0) for z in (0, 1, 2, 3))
    assert ddp < z1 < z2 < z3 < complexity(8, 1, 1, 3, 1)
    assert complexity(2, 1, 4, 1, 0) >= z3 and complexity(4, 2, 1, 1, 0) >= z3
    assert complexity(1, 2, 4, 0, 0) > z3 and complexity(2, 2, 2, 1, 0) >= complexity(8, 1, 1, 2, 1)
    assert complexity(1, 1, 8, 0, 0) > z1  # pure PP is not "simpler" than ZeRO-1 either


def test_zero3_above_pipeline_within_the_margin_for_13b_on_one_a100_80gb_node():
    """Llama 13B on 8 A100-80GB: FSDP/ZeRO-3 is what practitioners run (llm-foundry, torchtitan); a pipeline plan
    is predicted close to it (within 1 % before the eager layers were priced, 5.8 % behind since) and must not
    rank first on such a lead."""
    from pathlib import Path

    from gpuadvisor.hardware.cluster_file import load_cluster
    cl = load_cluster(Path(__file__).resolve().parents[2] / "examples" / "clusters" / "dgx-a100-80gb.yaml")
    r = rank(cl, make_workload("llama-13b"), top=5)
    assert r.top[0].plan.strategy == "zero3"
    pp = next(e for e in r.top if e.plan.pp > 1 and e.plan.tp == 1)
    assert abs(pp.tokens_per_s / r.top[0].tokens_per_s - 1) < 0.1  # the case is a close one, not a clear win
