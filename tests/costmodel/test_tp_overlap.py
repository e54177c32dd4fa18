"""Plan.tp_comm_overlap: TP communication hidden behind the layer's GEMMs (Megatron --tp-comm-overlap,
torchtitan async TP), its validation, launch files, read-back and the trainers' refusal."""
from __future__ import annotations

import pytest

from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import Plan, parse_plan
from gpuadvisor.workload.specs import make_workload


def _ctx(kernel: str = "flash"):
    return Context(load_preset("hgx-h100-8x"), make_workload("llama-3.1-8b", global_batch=64, seq_len=4096,
                                                             attention_kernel=kernel))


@pytest.mark.parametrize("kernel, hidden", [("cudnn", 1.0), ("flash", 0.5)])
def test_overlap_hides_tp_comm_behind_gemms_and_charges_contention(kernel, hidden):
    """Transformer Engine's userbuffers (the cudnn stack: Megatron-Core, NeMo) hide all of it; torch's async TP
    (the PyTorch stacks, torchtitan) half (calibration overlap.tp_overlap_hidden, fitted on torchtitan's measured
    pairs with and without async TP)."""
    ctx = _ctx(kernel)
    assert ctx.tp_overlap_hidden == hidden
    base = "dp=4,tp=2,pp=1,zero=0,mb=1,m=16,recompute=true,sequence_parallel=true"
    plain = evaluate(parse_plan(base), ctx)
    over = evaluate(parse_plan(base + ",tp_comm_overlap=true"), ctx)
    t_plain, t_over = plain.comm["tp@nvlink"], over.comm["tp@nvlink"]
    # the GEMMs are far longer than the collectives here: of the hidden share only its contention shows
    assert t_plain > 0 and t_over == pytest.approx((1 - hidden + hidden * ctx.contention) * t_plain, rel=1e-9)
    assert over.compute_s == plain.compute_s
    assert over.step_s < plain.step_s


def test_overlap_needs_sequence_parallelism():
    with pytest.raises(ValueError, match="tp_comm_overlap needs sequence_parallel"):
        Plan(tp=2, tp_comm_overlap=True, devices_per_node=2)


def test_enumeration_leaves_it_out():
    from gpuadvisor.candidates import enumerate_rows, row_plan
    wl = make_workload("llama-7b", global_batch=64, seq_len=2048)
    assert not any(row_plan(r).tp_comm_overlap for r in enumerate_rows(load_preset("hgx-h100-8x"), wl))


def test_launch_files_and_read_back(tmp_path):
    from gpuadvisor.launch import build_launch, emit, make_job
    from gpuadvisor.launch.readback import read_config
    from gpuadvisor.trainers.support import unsupported_reason

    plan = parse_plan("dp=2,tp=4,zero=1,mb=1,m=8,sequence_parallel=true,tp_comm_overlap=true")
    wl = make_workload("llama-7b", global_batch=plan.global_batch(), seq_len=2048)
    emit(build_launch(plan, load_preset("hgx-h100-8x"), wl), make_job(plan, wl), tmp_path)
    assert "--tp-comm-overlap" in (tmp_path / "megatron_args.txt").read_text()
    toml = (tmp_path / "torchtitan.toml").read_text()
    assert "enable_async_tensor_parallel = true" in toml and "compile = true" in toml
    for name in ("megatron_args.txt", "torchtitan.toml"):
        rb = read_config(tmp_path / name, world=8, global_batch=plan.global_batch())
        assert rb.plan.get("tp_comm_overlap") is True, name
    why = unsupported_reason(plan, wl, cuda=True)
    assert why is not None and "tp_comm_overlap" in why and "\n" not in why


def test_vocabulary_parallel_ends_add_two_collectives_per_micro_batch():
    """TP collectives per micro-batch: 4 per layer, 2 more per recomputing layer, and the vocabulary-parallel
    embedding's forward all-reduce and head's backward one (Megatron §3, trainers/vocab.py): with L layers the
    recomputing plan costs (6L + 2) / (4L + 2) of the plain one, not 6/4."""
    ctx = _ctx()
    layers = ctx.model.n_layers
    base = "dp=4,tp=2,pp=1,zero=0,mb=1,m=16"
    plain = evaluate(parse_plan(base), ctx).comm["tp@nvlink"]
    replay = evaluate(parse_plan(base + ",recompute=true"), ctx).comm["tp@nvlink"]
    assert replay / plain == pytest.approx((6 * layers + 2) / (4 * layers + 2), rel=1e-9)
    assert replay / plain != pytest.approx(1.5, rel=1e-3)
