"""Recompute every k-th layer (Plan.recompute_interval): validation, the engine's memory and time between no and
full recompute, the enumeration, the launch files and the bundled trainer."""
from __future__ import annotations

import pytest

from gpuadvisor.candidates import enumerate_rows, row_plan
from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan, parse_plan
from gpuadvisor.workload.specs import make_workload


def test_interval_needs_recompute_and_round_trips():
    with pytest.raises(ValueError, match="recompute_interval > 1 needs recompute=true"):
        Plan(recompute_interval=2)
    p = parse_plan("dp=2,mb=2,m=2,recompute=true,recompute_interval=2")
    assert p.recompute_fraction == 0.5 and parse_plan(p.to_string()) == p
    assert parse_plan("dp=2,mb=2,m=2").recompute_fraction == 0.0
    assert parse_plan("dp=2,mb=2,m=2,recompute=true").recompute_fraction == 1.0
    # an interval beyond the model's layers is refused in one line naming the range
    from gpuadvisor.schemas import check_plan_for

    wl = make_workload("gpt2", global_batch=4)
    with pytest.raises(ValueError, match=r"recompute_interval=13 exceeds the 12 layers of 'gpt2.*use 1 to 12"):
        check_plan_for(parse_plan("dp=2,mb=2,m=1,recompute=true,recompute_interval=13"), wl)


def _three(spec: str, preset: str = "dgx-a100-8x", model: str = "llama-7b", global_batch: int = 64):
    ctx = Context(load_preset(preset), make_workload(model, seq_len=2048, global_batch=global_batch))
    return [evaluate(parse_plan(spec + extra), ctx) for extra in ("", ",recompute=true,recompute_interval=2",
                                                                  ",recompute=true")]


def test_every_other_layer_sits_halfway_between_none_and_full():
    none, half, full = _three("dp=8,zero=3,mb=2,m=4")
    # stored activations: the average of a stored and a checkpointed layer (plus the one being recomputed)
    assert full.mem.activations < half.mem.activations < none.mem.activations
    assert half.mem.activations == pytest.approx((none.mem.activations + full.mem.activations) / 2, rel=0.05)
    # compute: half the layers replay their forward
    assert none.compute_s < half.compute_s < full.compute_s
    assert half.compute_s - none.compute_s == pytest.approx((full.compute_s - none.compute_s) / 2, rel=1e-6)


def test_tensor_parallel_collectives_count_the_recomputing_layers():
    none, half, full = _three("dp=1,tp=8,mb=2,m=32")
    t = [e.comm["tp@nvlink"] for e in (none, half, full)]
    # 4 collectives per layer, +2 per recomputing layer (4 / 5 / 6 per layer), and the vocabulary-parallel
    # embedding's and head's one each per micro-batch
    n = make_workload("llama-7b").model.n_layers
    assert t[1] / t[0] == pytest.approx((5 * n + 2) / (4 * n + 2), rel=1e-6)
    assert t[2] / t[0] == pytest.approx((6 * n + 2) / (4 * n + 2), rel=1e-6)


def test_enumerated_for_pure_data_parallel_full_training_only():
    clus = load_preset("dgx-a100-8x")
    plans = [row_plan(r) for r in enumerate_rows(clus, make_workload("llama-7b", seq_len=2048, global_batch=64))]
    halves = [p for p in plans if p.recompute_interval == 2]
    assert halves and all(p.tp == 1 and p.pp == 1 for p in halves)
    assert any(p.tp > 1 or p.pp > 1 for p in plans)
    lora = make_workload("llama-7b", seq_len=2048, global_batch=64, finetune="lora")
    assert not any(row_plan(r).recompute_interval > 1 for r in enumerate_rows(clus, lora))


def test_it_fits_where_no_recompute_does_not_and_runs_faster_than_full():
    # 7B on 8 A100 40 GB at micro-batch 3 (eager layers under autocast, the bundled trainers' FSDP2): the middle
    # setting is the one that fits without paying full recompute
    none, half, full = _three("dp=8,zero=3,mb=3,m=2", model="llama-7b", global_batch=48)
    assert not none.feasible
    assert half.feasible and full.feasible and half.step_s < full.step_s
    assert half.mem.activations < none.mem.activations


def test_launch_files_say_it():
    from gpuadvisor.launch.megatron import megatron_args, recompute_layers_per_chunk
    from gpuadvisor.launch.torchtitan import titan_config

    wl = make_workload("llama-7b", seq_len=2048, global_batch=16)
    p = parse_plan("dp=2,pp=2,mb=1,m=8,recompute=true,recompute_interval=2")
    args = megatron_args(p, wl, steps=10)
    i = args.index("--recompute-method")
    assert args[i + 1] == "block" and args[args.index("--recompute-num-layers") + 1] == "8"  # 16 per stage
    assert recompute_layers_per_chunk(parse_plan("dp=1,pp=4,mb=1,m=4,recompute=true,recompute_interval=3"), 30) == 3
    assert titan_config(p, wl, steps=10)["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert titan_config(parse_plan("dp=4,mb=1,m=4,recompute=true"), wl, steps=10)["activation_checkpoint"] == {"mode": "full"}


def test_bundled_trainer_checkpoints_every_kth_block_with_the_same_loss():
    torch = pytest.importorskip("torch")
    from gpuadvisor.trainers.model import build_gpt

    spec = make_workload("L4-H64-A4", seq_len=32, global_batch=2).model
    full = build_gpt(spec, 32, seed=1)
    part = build_gpt(spec, 32, seed=1, recompute=True, recompute_interval=2)
    assert [b.recompute for b in part.blocks] == [i % 2 == 0 for i in range(spec.n_layers)]
    x = torch.randint(0, spec.vocab_size, (2, 32))
    lf = torch.nn.functional.cross_entropy(full(x).flatten(0, 1), x.flatten())
    lp = torch.nn.functional.cross_entropy(part(x).flatten(0, 1), x.flatten())
    lf.backward()
    lp.backward()
    assert lp.item() == pytest.approx(lf.item(), abs=1e-6)
    for a, b in zip(full.parameters(), part.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
