"""Activation checkpoints in host RAM (Plan.offload_activations: DeepSpeed's cpu_checkpointing, train_lora.py's
CheckpointHiddenStatesOffload): the plan's rules, the memory and host-link time the engine prices, the hand-over, the
read-back, the public rows that ran it, the trainer's use of DeepSpeed's checkpoint function, and `suggest` trying it
when nothing else fits."""
from __future__ import annotations

import numpy as np
import pytest

from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.engine import ACT_OFFLOAD_RESIDENT, _act, _activation_offload, _host_checkpoints, evaluate
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch.deepspeed import deepspeed_config
from gpuadvisor.launch.readback import read_deepspeed
from gpuadvisor.publicruns.load import load_runs
from gpuadvisor.publicruns.mapping import LIMITS, to_inputs
from gpuadvisor.schemas import Plan, check_plan_for, parse_plan
from gpuadvisor.trainers.support import unsupported_reason
from gpuadvisor.workload.specs import make_workload

PRESET = "dgx-a100-8x"
BASE = "dp=8,zero=3,mb=1,m=32,recompute=true"


def _wl(model="llama-3.1-8b", gb=256, seq=4096, **kw):
    return make_workload(model, global_batch=gb, seq_len=seq, **kw)


def _pair(text=BASE, wl=None, preset=PRESET):
    """(Context, without, with offload_activations) evaluations of the same plan."""
    ctx = Context(load_preset(preset), wl or _wl())
    off = evaluate(parse_plan(text), ctx)
    on = evaluate(parse_plan(text + ",offload_activations=true"), ctx)
    return ctx, off, on


@pytest.mark.parametrize("text, words", [
    ("dp=8,zero=3,mb=4,m=8,offload_activations=true", "needs recompute=true"),
    ("dp=4,tp=2,zero=1,mb=4,m=8,recompute=true,offload_activations=true", "pure data parallelism"),
    ("dp=8,zero=3,zero_impl=fsdp,mb=4,m=8,recompute=true,offload_activations=true", "not zero_impl=fsdp"),
])
def test_the_plan_refuses_what_deepspeed_does_not_run(text, words):
    with pytest.raises(ValueError, match=words):
        parse_plan(text)


def test_without_zero_only_adapter_training_keeps_checkpoints_in_host_ram():
    """Full training without ZeRO gets the bundled DDP trainer, torchtitan and Accelerate, none of which moves
    checkpoints: refused for the workload. LoRA's train_lora.py wraps its steps in CheckpointHiddenStatesOffload."""
    plan = parse_plan("dp=8,mb=1,m=32,recompute=true,offload_activations=true")
    with pytest.raises(ValueError, match="runs in train_lora.py"):
        check_plan_for(plan, _wl())
    check_plan_for(plan, _wl(finetune="lora"))


def test_the_plan_text_round_trips_and_a_cnn_is_refused():
    p = parse_plan(BASE + ",offload_activations=true")
    assert p.offload_activations and parse_plan(p.to_string()) == p
    cnn = make_workload("resnet18", global_batch=256)
    with pytest.raises(ValueError, match="not a transformer"):
        check_plan_for(parse_plan("dp=8,zero=2,mb=4,m=8,recompute=true,offload_activations=true"), cnn)


def test_memory_moves_all_but_three_checkpoints_to_host_ram():
    """Llama 3.1 8B (32 layers) at 4096 tokens: 29 of its 32 checkpoints (h x tokens x 2 bytes each) leave the
    device for pinned host RAM; nothing else in memory moves."""
    ctx, off, on = _pair()
    ckpt = float(_act(ctx, 1.0, 1.0, False, 1.0))
    assert ckpt == pytest.approx(4096 * 4096 * 2, rel=0.05)  # the layer input, bf16
    moved = (32 - ACT_OFFLOAD_RESIDENT) * ckpt
    assert off.mem.activations - on.mem.activations == pytest.approx(moved, rel=1e-9)
    assert on.mem.host - off.mem.host == pytest.approx(moved, rel=1e-9)
    for part in ("weights", "optimizer", "logits", "comm_buffers"):
        assert getattr(on.mem, part) == getattr(off.mem, part)


def test_the_backward_waits_for_each_restored_checkpoint():
    """At 4k tokens per micro-batch a layer's forward outlasts its 34 MB copy, so the forward's copies hide and
    the backward's 29 restores per micro-batch show: m x 29 x checkpoint / the PCIe gen-4 host rate (24 GB/s),
    halved: a DGX A100 puts two GPUs on each PCIe switch, and all eight ranks copy at once."""
    ctx, off, on = _pair()
    ckpt = float(_act(ctx, 1.0, 1.0, False, 1.0))
    assert ctx.host_bw == pytest.approx(24e9) and ctx.host_sharing[8] == 2
    assert on.compute_s == off.compute_s and on.comm == off.comm
    assert on.offload_s - off.offload_s == pytest.approx(32 * 29 * ckpt / (ctx.host_bw / 2), rel=1e-9)
    assert on.step_s > off.step_s
    # down: all but the newest, up: all but the three resident, per micro-batch
    assert on.link_bytes["host"] - off.link_bytes.get("host", 0.0) == pytest.approx(32 * (31 + 29) * ckpt, rel=1e-9)


def test_the_copies_by_hand():
    """12 recomputing layers, 1 GB checkpoints at 24 GB/s (41.7 ms a copy): a forward copy shows what it outlasts
    a 10 ms layer forward (11 copies down), and the 9 restores show whole; a 100 ms forward hides the copies down.
    Every 2nd layer recomputing: 6 checkpoints, 3 in host RAM."""
    ctx = Context(load_preset(PRESET), _wl())
    copy = 1e9 / ctx.host_bw
    one = np.ones(1)
    sent, t = _activation_offload(12 * one, one, 1e9 * one, 0.010 * one, ctx.host_bw)
    assert t[0] == pytest.approx(11 * (copy - 0.010) + 9 * copy, rel=1e-12)
    assert sent[0] == pytest.approx((11 + 9) * 1e9, rel=1e-12)
    _, hidden = _activation_offload(12 * one, one, 1e9 * one, 0.100 * one, ctx.host_bw)
    assert hidden[0] == pytest.approx(9 * copy, rel=1e-12)
    in_host = _host_checkpoints(12 * one, 0.5 * one)
    assert in_host[0] == 3


def test_checkpoints_beyond_host_ram_are_refused():
    preset = load_preset(PRESET)
    small = preset.model_copy(update={"nodes": [n.model_copy(update={"cpu": n.cpu.model_copy(
        update={"ram_bytes": 8 * 2 ** 30})}) for n in preset.nodes]})
    ctx = Context(small, _wl())
    ev = evaluate(parse_plan(BASE + ",offload_activations=true"), ctx)
    assert not ev.feasible and ev.reason == "out of host memory for offload"
    assert evaluate(parse_plan(BASE), ctx).feasible


def test_the_deepspeed_json_turns_on_cpu_checkpointing_unpartitioned():
    wl = _wl()
    cfg = deepspeed_config(parse_plan(BASE + ",offload_activations=true"), wl)
    assert cfg["train_batch_size"] == 256
    assert cfg["activation_checkpointing"] == {"partition_activations": False, "cpu_checkpointing": True,
                                               "contiguous_memory_optimization": False,
                                               "synchronize_checkpoint_boundary": False}
    assert "activation_checkpointing" not in deepspeed_config(parse_plan(BASE), wl)


def test_the_read_back_takes_cpu_checkpointing_as_the_plan():
    data = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 32,
            "zero_optimization": {"stage": 3}, "activation_checkpointing": {"cpu_checkpointing": True}}
    rb = read_deepspeed(data)
    assert rb.plan["recompute"] is True and rb.plan["offload_activations"] is True
    assert Plan(**{k: v for k, v in parse_plan(",".join(f"{k}={v}" for k, v in rb.plan.items())).model_dump().items()
                   }).offload_activations
    blocking = read_deepspeed({**data, "activation_checkpointing": {"cpu_checkpointing": True,
                                                                    "partition_activations": True}})
    assert any("blocking" in n for n in blocking.notes)
    plain = read_deepspeed({**data, "activation_checkpointing": {"partition_activations": False}})
    assert "offload_activations" not in plain.plan and any("predicted without recompute" in n for n in plain.notes)
    with pytest.raises(UserError, match="ZeRO stage"):
        read_deepspeed({**data, "zero_optimization": {"stage": 0}})
    with pytest.raises(UserError, match="unknown key 'cpu_checkpoint'"):
        read_deepspeed({**data, "activation_checkpointing": {"cpu_checkpoint": True}})
    # DeepSpeed reads the switch as Python truth, so the string "false" would turn it on: only booleans are taken
    with pytest.raises(UserError, match="cpu_checkpointing must be true or false, got 'false'"):
        read_deepspeed({**data, "activation_checkpointing": {"cpu_checkpointing": "false"}})


def test_deepspeeds_azure_rows_keep_their_checkpoints_in_host_ram():
    """The 1T and 2T rows ('activation and optimizer states are allocated in the main memory') were called out of
    memory with their checkpoints on the device; in host RAM they fit."""
    rows = [r for r in load_runs() if r.source_id == "deepspeed_azure_2022"]
    assert len(rows) == 54
    big = [r for r in rows if r.model_name in ("GPT 1T", "GPT 2T") and (r.micro_batch or 0) >= 8]
    assert len(big) == 3
    for r in big:
        inp = to_inputs(r, list(LIMITS))
        assert inp.plan.offload_activations and inp.plan.recompute
        ev = evaluate(inp.plan, Context(inp.cluster, inp.workload))
        assert ev.feasible, r.row
    with pytest.raises(Exception, match="activation checkpoints offloaded to host RAM"):
        to_inputs(big[0], [k for k in LIMITS if k != "offload-activations"])


def test_lora_trials_refuse_it_in_one_line():
    wl = make_workload("gpt2", global_batch=64, seq_len=1024, finetune="lora")
    why = unsupported_reason(parse_plan("dp=8,zero=2,mb=1,m=8,recompute=true,offload_activations=true"), wl,
                             cuda=True)
    assert why and "offload_activations" in why and "\n" not in why


def test_a_block_checkpoints_through_the_function_it_is_given():
    """The DeepSpeed strategy hands the recomputing blocks deepspeed.checkpointing.checkpoint; a block calls whatever
    it is given, with its forward and its input."""
    torch = pytest.importorskip("torch")
    from gpuadvisor.trainers.model import build_gpt
    from gpuadvisor.workload.specs import make_workload as mk

    spec = mk("gpt2").model.model_copy(update={"n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64,
                                               "vocab_size": 64, "max_seq_len": 16})
    model = build_gpt(spec, 16, seed=0, recompute=True)
    calls = []

    def spy(fn, x):
        calls.append(x.shape)
        return fn(x)
    for block in model.blocks:
        block.checkpoint_fn = spy
    out = model(torch.randint(0, 64, (2, 16)))
    out.float().sum().backward()
    assert len(calls) == 2 and calls[0] == (2, 16, 32)


def _ram(preset: str, gib: int):
    c = load_preset(preset)
    return c.model_copy(update={"nodes": [n.model_copy(update={"cpu": n.cpu.model_copy(
        update={"ram_bytes": gib * 2 ** 30})}) for n in c.nodes]})


def test_suggest_keeps_checkpoints_in_host_ram_only_when_nothing_else_fits():
    """Llama 7B at 32k tokens on two 24 GB cards: even ZeRO-3 offload with recompute needs 28.7 GiB a card with
    its checkpoints on the device. With 1 TiB of host RAM the ranking keeps them there and says so; with the
    preset's 128 GiB the offloaded states and the checkpoints do not fit the host either, and nothing is proposed.
    At 4k tokens plans fit on the device and none keeps its checkpoints in host RAM."""
    from gpuadvisor.ranking.rank import rank

    wl = make_workload("llama-7b", seq_len=32768, global_batch=64)
    r = rank(_ram("workstation-2x4090", 1024), wl, top=3)
    assert r.n_feasible > 0 and r.fits_nowhere is None
    assert all(e.plan.offload_activations and e.plan.recompute for e in r.top)
    assert any("host RAM (offload_activations" in n for n in r.notes)
    assert max(e.memory.total for e in r.top) <= 24 * 2 ** 30
    small = rank(_ram("workstation-2x4090", 128), wl, top=3)
    assert small.n_feasible == 0 and small.fits_nowhere
    short = rank(_ram("workstation-2x4090", 1024), make_workload("llama-7b", seq_len=4096, global_batch=64), top=5)
    assert short.n_feasible > 0 and not any(e.plan.offload_activations for e in short.top)
    assert not any("offload_activations" in n for n in short.notes)


def test_accelerate_reads_the_json_but_keeps_the_checkpoints_on_the_device(tmp_path):
    """Accelerate's DeepSpeed plugin runs a Hugging Face model, which checkpoints with torch: the named JSON's
    cpu_checkpointing does not move its checkpoints, and the read-back says so."""
    import json

    from gpuadvisor.launch.readback import read_accelerate

    (tmp_path / "ds.json").write_text(json.dumps({
        "train_batch_size": 256, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 32,
        "zero_optimization": {"stage": 3}, "activation_checkpointing": {"cpu_checkpointing": True}}))
    rb = read_accelerate({"distributed_type": "DEEPSPEED", "num_processes": 8,
                          "deepspeed_config": {"deepspeed_config_file": "ds.json"}}, tmp_path, 256)
    assert rb.plan["zero"] == 3 and "offload_activations" not in rb.plan and "recompute" not in rb.plan
    assert any("checkpoints with torch" in n for n in rb.notes)


def test_liger_is_offered_where_it_spares_the_host_ram_checkpoints():
    """The 32k-token 7B above fits only with its checkpoints in host RAM; Liger-Kernel's chunked loss frees the
    11.7 GiB of logits instead, at about the same speed, so the loss note is given although the gain is under
    MIN_GAIN, and it says the checkpoints stay on the device."""
    from gpuadvisor.ranking.loss import MIN_GAIN, chunked_loss_note
    from gpuadvisor.ranking.rank import rank

    cluster = _ram("workstation-2x4090", 1024)
    wl = make_workload("llama-7b", seq_len=32768, global_batch=64)
    ranking = rank(cluster, wl, top=3)
    assert ranking.top[0].plan.offload_activations
    note = chunked_loss_note(wl, cluster, ranking)
    assert note is not None and note.endswith("its activation checkpoints on the device)")
    gain = float(note.rsplit("(", 1)[1].split("%")[0]) / 100
    assert abs(gain) < MIN_GAIN


def test_lora_keeps_its_checkpoints_in_host_ram_through_train_lora():
    """Llama 7B LoRA at 64k tokens with Liger's loss on two 24 GB cards and 1 TiB of RAM: nothing fits with the
    checkpoints on the device; the ranking keeps them in host RAM, its note and the launch note name train_lora.py."""
    from gpuadvisor.launch.build import activation_offload_notes
    from gpuadvisor.ranking.rank import rank

    wl = make_workload("llama-7b", seq_len=65536, global_batch=16, finetune="lora", kernels="liger")
    r = rank(_ram("workstation-2x4090", 1024), wl, top=2)
    assert r.top and all(e.plan.offload_activations for e in r.top)
    assert any("train_lora.py runs each step inside DeepSpeed's CheckpointHiddenStatesOffload" in n for n in r.notes)
    note = activation_offload_notes(r.top[0].plan, wl)
    assert len(note) == 1 and "train_lora.py" in note[0] and "refuses adapters" in note[0]
