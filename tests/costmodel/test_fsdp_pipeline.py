"""ZeRO-3 with pipeline parallelism as torch.distributed.pipelining runs FSDP per stage (torchtitan 3D).

Every backward leaves the stage's parameters unsharded and accumulates unsharded fp32 gradients until the last
micro-batch (PipelineStage.backward_maybe_with_nosync; FSDP2 upcasts them to its reduce dtype), and torchtitan
does not reshard after forward under PP: the stage holds ZeRO-1's memory and syncs once per step, whatever the
micro-batch count.
"""
import pytest

from gpuadvisor.costmodel.analytical import Context
from gpuadvisor.costmodel.engine import evaluate
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.specs import make_workload

GIB = 2 ** 30


@pytest.fixture(scope="module")
def ctx():
    wl = make_workload("llama-2-13b", global_batch=256, seq_len=4096)
    return Context(load_preset("dgx-a100-8x-4nodes-ib-hdr"), wl)


def _plan(zero, pp, m, mb=1):
    dp = 32 // (2 * pp)
    return parse_plan(f"dp={dp},tp=2,pp={pp},zero={zero},mb={mb},m={m},nodes=4,gpn=8,recompute=true,"
                      "sequence_parallel=true")


def test_fsdp_per_stage_holds_zero1_memory(ctx):
    z3, z1 = evaluate(_plan(3, 2, 16), ctx), evaluate(_plan(1, 2, 16), ctx)
    assert z3.mem.weights == z1.mem.weights  # the stage's whole weights (unsharded after each backward)
    # unsharded gradients accumulate until the last micro-batch, in fp32 for both: FSDP2 upcasts them to its fp32
    # reduce dtype to accumulate (FSDPParam.to_accumulated_grad_if_needed), the distributed optimizer's are fp32
    # (torch.autocast over fp32 parameters)
    assert z3.mem.gradients == z1.mem.gradients
    assert z3.mem.optimizer == z1.mem.optimizer  # only the optimizer states stay sharded over dp
    # without PP, ZeRO-3 shards weights and gradients too
    flat3 = evaluate(parse_plan("dp=16,tp=2,pp=1,zero=3,mb=1,m=8,nodes=4,gpn=8,recompute=true,"
                                "sequence_parallel=true"), ctx)
    flat1 = evaluate(parse_plan("dp=16,tp=2,pp=1,zero=1,mb=1,m=8,nodes=4,gpn=8,recompute=true,"
                                "sequence_parallel=true"), ctx)
    assert flat3.mem.weights < flat1.mem.weights / 8


def test_fsdp_per_stage_syncs_once_per_step(ctx):
    """The data-parallel bytes of a pipeline stage do not grow with the micro-batch count; without PP they do."""
    few, many = evaluate(_plan(3, 2, 8, mb=2), ctx), evaluate(_plan(3, 2, 16), ctx)
    assert many.link_bytes["network"] == pytest.approx(few.link_bytes["network"], rel=0.01)
    f3 = [evaluate(parse_plan(f"dp=16,tp=2,pp=1,zero=3,mb={mb},m={m},nodes=4,gpn=8,recompute=true,"
                              "sequence_parallel=true"), ctx) for mb, m in ((2, 8), (1, 16))]
    assert f3[1].link_bytes["network"] > 1.8 * f3[0].link_bytes["network"]
    # the reduce-scatter after the stage's last backward has nothing to hide behind: it shows in the step
    assert many.comm["zero@network"] > 0
