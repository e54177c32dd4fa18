"""The study grid: plans built the papers' way, skips with reasons, parsing, --dry-run (nothing runs)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.study.execute import resolve_workloads
from gpuadvisor.study.grid import LAUNCH_OVERHEAD_S, build_grid, study_wall_s
from gpuadvisor.study.spec import (StudySpec, parse_gpus, parse_models, parse_pp_microbatches, parse_strategies,
                                   shape_model)

TINY = "L2-H32-A4-V256-S16"


def _grid(models, strategies="all", gpus="1,2", preset="cpu-2ranks", pp="p,4p", batch=8, steps=5):
    spec = StudySpec(models=parse_models(models), strategies=parse_strategies(strategies), gpus=parse_gpus(gpus),
                     steps=steps, warmup=2, pp_microbatches=parse_pp_microbatches(pp), global_batch=batch)
    cluster = load_preset(preset)
    return spec, cluster, build_grid(spec, cluster, resolve_workloads(spec))


def test_plans_follow_the_paper_batch_rules():
    """DP/ZeRO split the fixed global batch, TP sees all of it, PP uses m=p and m=4p; a 1-GPU baseline first."""
    _, _, cells = _grid(TINY)
    by = {c.strategy: c for c in cells}
    assert [c.strategy for c in cells] == ["single", "dp", "tp", "pp", "pp-4p", "zero1", "zero2", "zero3",
                                           "zero3-offload"]
    assert all(c.runnable for c in cells), [c.skip_reason for c in cells]
    assert by["single"].plan.world_size == 1 and by["single"].plan.micro_batch_size == 8
    assert (by["dp"].plan.dp, by["dp"].plan.micro_batch_size, by["dp"].plan.num_micro_batches) == (2, 4, 1)
    assert (by["tp"].plan.tp, by["tp"].plan.micro_batch_size) == (2, 8)
    assert (by["pp"].plan.pp, by["pp"].plan.num_micro_batches, by["pp"].plan.micro_batch_size) == (2, 2, 4)
    assert (by["pp-4p"].plan.num_micro_batches, by["pp-4p"].plan.micro_batch_size) == (8, 1)
    for k in (1, 2, 3):
        z = by[f"zero{k}"].plan
        assert (z.dp, z.zero_stage, z.zero_offload, z.micro_batch_size) == (2, k, False, 4)
    assert by["zero3-offload"].plan.zero_offload
    # fixed total tokens per model: every plan has the same global batch
    assert {c.plan.global_batch() if c.plan.pp == 1 else c.plan.micro_batch_size * c.plan.num_micro_batches
            for c in cells} == {8}
    assert all(c.predicted is not None and c.predicted.tokens_per_s > 0 for c in cells)
    assert len({c.key for c in cells}) == len(cells) and len({c.id for c in cells}) == len(cells)


def test_partial_offloads_run_when_named():
    """ZeRO-2 + optimizer offload and ZeRO-3 with only the optimizer in host RAM (what `suggest` picks for a model
    that fits once the optimizer leaves the device): not in 'all', planned like the other ZeRO cells when named."""
    _, _, cells = _grid(TINY, strategies="zero3-offload,zero2-offload,zero3-offload-optim", pp="p")
    assert [c.strategy for c in cells] == ["single", "zero2-offload", "zero3-offload-optim", "zero3-offload"]
    by = {c.strategy: c.plan for c in cells}
    assert (by["zero2-offload"].zero_stage, by["zero2-offload"].zero_offload) == (2, True)
    optim = by["zero3-offload-optim"]
    assert (optim.zero_stage, optim.zero_offload, optim.zero_offload_param) == (3, True, False)
    assert (by["zero3-offload"].zero_offload, by["zero3-offload"].zero_offload_param) == (True, True)
    assert all(c.runnable and c.predicted is not None for c in cells), [c.skip_reason for c in cells]
    # the plan's own label agrees with the cell's name
    assert [by[s].strategy for s in ("zero2-offload", "zero3-offload-optim", "zero3-offload")] == \
        ["zero2-offload", "zero3-offload-optim", "zero3-offload"]
    assert "zero2-offload" not in parse_strategies("all") and "zero3-offload-optim" not in parse_strategies("all")
    assert parse_strategies("all,zero2-offload") == ["dp", "tp", "pp", "zero1", "zero2", "zero2-offload", "zero3",
                                                     "zero3-offload"]
    with pytest.raises(UserError, match="data-parallel plans only"):
        parse_strategies("tp,zero2", adapters=True)
    with pytest.raises(UserError, match="without ZeRO offload") as e:
        parse_strategies("zero1,zero2-offload", adapters=True)
    assert "--strategies zero2-offload:" in str(e.value)


def test_adapter_cells_the_trainers_cannot_run_are_skipped_with_the_reason():
    """LoRA's 'all' is what the trainers run for adapters (no offload); a QLoRA cell under ZeRO would crash in the
    trial (bundled ZeRO does not shard 4-bit weights), so the grid skips it and says why."""
    from gpuadvisor.schemas.workload import FineTune
    from gpuadvisor.trainers.support import unsupported_reason

    assert parse_strategies("all", adapters=True) == ["dp", "zero1", "zero2", "zero3"]
    for method in ("lora", "qlora"):
        spec = StudySpec(models=parse_models(TINY), strategies=parse_strategies("dp,zero2", adapters=True),
                         gpus=parse_gpus("1,2"), steps=5, warmup=2, pp_microbatches=parse_pp_microbatches("p"),
                         global_batch=8, finetune=FineTune(method=method))
        workloads = resolve_workloads(spec)
        cells = build_grid(spec, load_preset("cpu-2ranks"), workloads)
        zero2 = next(c for c in cells if c.strategy == "zero2")
        why = unsupported_reason(zero2.plan, workloads[TINY], cuda=False)
        if method == "lora":  # the trainers run LoRA under ZeRO-2: planned and predicted
            assert why is None and zero2.runnable and zero2.predicted is not None
        else:  # QLoRA under ZeRO (or without bitsandbytes at all): skipped before any launch, with the reason
            assert why and zero2.skip_reason == f"the bundled trainers cannot run it: {why}"
            assert not zero2.runnable and zero2.predicted is None


def test_skips_say_why():
    """More GPUs than the cluster, heads not divisible by tp, indivisible batch, predicted out of memory."""
    _, _, cells = _grid(f"{TINY},L2-H30-A3-V256-S16", gpus="1,2,4", batch=6)
    reasons = {(c.model, c.strategy, c.gpus): c.skip_reason for c in cells}
    assert "needs 4 devices" in reasons[(TINY, "dp", 4)]
    assert "does not divide the 3 attention heads" in reasons[("L2-H30-A3-V256-S16", "tp", 2)]
    assert "m=8" in reasons[(TINY, "pp-4p", 2)] and "--global-batch" in reasons[(TINY, "pp-4p", 2)]
    _, _, big = _grid("70B", strategies="dp", gpus="1,2", batch=8)
    assert all(c.skip_reason and "predicted not to fit" in c.skip_reason for c in big)
    # a multi-node cell is planned and predicted but not run on this host
    _, _, multi = _grid(TINY, strategies="dp", gpus="1,2x1", preset="nano-cluster-2x2-a40-1gbe")
    m = next(c for c in multi if c.nodes == 2)
    assert m.plan.nodes == 2 and m.predicted is not None and "multi-node" in m.skip_reason


def test_wall_time_estimate():
    spec, _, cells = _grid(TINY, strategies="dp", pp="p")
    total = study_wall_s(cells, spec.steps, spec.warmup)
    expect = sum(LAUNCH_OVERHEAD_S + c.predicted.step_time_s * 7 for c in cells)
    assert total == pytest.approx(expect)


@pytest.mark.parametrize("fn,text,needle", [
    (parse_strategies, "dp,fsdp", "unknown strategy 'fsdp'"),
    (parse_gpus, "1,two", "cannot read GPU count 'two'"),
    (parse_pp_microbatches, "8p", "unknown micro-batch count '8p'"),
    (parse_models, " , ", "--models is empty"),
])
def test_bad_input_is_one_line(fn, text, needle):
    with pytest.raises(UserError) as e:
        fn(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_parsing():
    assert parse_strategies("zero3,dp") == ["dp", "zero3"]
    assert [g.label for g in parse_gpus("4,1,2x2,2")] == ["1", "2", "4", "2x2"]
    spec = shape_model("L3-H64-A8-F128-V100-S32")
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.d_ff, spec.vocab_size, spec.max_seq_len) == \
           (3, 64, 8, 128, 100, 32)
    assert shape_model("100M") is None


def test_dry_run_cli_writes_nothing(tmp_path):
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "gpuadvisor", "study", "--models", f"{TINY},100M", "--gpus", "1,2,4",
                        "--preset", "cpu-2ranks", "--steps", "5", "--warmup", "1", "--pp-microbatches", "p,4p",
                        "--out", str(out), "--dry-run"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "estimated wall time" in r.stdout and "tok/s" in r.stdout
    assert "needs 4 devices, cluster 'cpu-2ranks' has 2" in r.stdout
    assert not out.exists()
    bad = subprocess.run([sys.executable, "-m", "gpuadvisor", "study", "--models", TINY, "--strategies", "fsdp",
                          "--preset", "cpu-2ranks", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown strategy" in bad.stderr


def test_gpu_preset_on_a_cpu_host_is_refused_unless_dry_run(tmp_path):
    """Trials run on this host: a GPU cluster description would give measurements that cannot match."""
    import shutil
    from pathlib import Path

    if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi"):
        pytest.skip("this host has a GPU")
    r = subprocess.run([sys.executable, "-m", "gpuadvisor", "study", "--models", TINY, "--preset", "a6000-4x-pcie",
                        "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--dry-run" in r.stderr
    assert not (tmp_path / "s").exists()
