"""Op-level selective checkpointing in the bundled trainer (Plan.recompute_ops, torchtitan's selective_ac_option
'op'): the same gradients as no recompute, and what its policy keeps is what the cost model prices per token and
layer (costmodel.analytical.memory.op_checkpoint_bytes)."""
from __future__ import annotations

import collections

import pytest
import torch

from gpuadvisor.costmodel.analytical.memory import op_checkpoint_bytes, op_checkpoint_linears
from gpuadvisor.trainers import blocks
from gpuadvisor.trainers.model import build_gpt
from gpuadvisor.workload.shapes import layer_shape

from ._launch import TINY

GATED = TINY.model_copy(update={"name": "tiny-gqa", "mlp": "swiglu", "n_kv_heads": 2, "max_seq_len": 0})


@pytest.mark.parametrize("spec", [TINY, GATED], ids=["gpt2", "llama"])
def test_op_checkpointing_keeps_the_gradients(spec):
    idx = torch.randint(0, spec.vocab_size, (2, 16))
    plain, ops = build_gpt(spec, 16, seed=5), build_gpt(spec, 16, seed=5, recompute_ops=True)
    plain(idx).sum().backward()
    ops(idx).sum().backward()
    assert all(torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(plain.parameters(), ops.parameters()))


@pytest.mark.parametrize("spec", [TINY, GATED], ids=["gpt2", "llama"])
def test_the_policy_keeps_what_the_cost_model_prices(spec, monkeypatch):
    """Every saving decision of the policy, sized from its operands (a matmul's rows x columns, the core's query
    shape), per token and layer, plus the layer input the checkpoint keeps itself, equals op_checkpoint_bytes."""
    kept: list[int] = []
    real = blocks.op_checkpoint_policy

    def spy(counts: collections.Counter):
        policy = real(counts)

        def recording(ctx, func, *args, **kwargs):
            decision = policy(ctx, func, *args, **kwargs)
            if decision == torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE and not ctx.is_recompute:
                if func in blocks.MATMULS:
                    a, b = args[-2], args[-1]
                    kept.append(a.shape[0] * b.shape[1])
                else:  # the attention core: its output has the query's shape
                    kept.append(args[0].numel())
            return decision
        return recording

    monkeypatch.setattr(blocks, "op_checkpoint_policy", spy)
    b, t = 2, 16
    model = build_gpt(spec, t, seed=5, recompute_ops=True)
    model(torch.randint(0, spec.vocab_size, (b, t))).sum().backward()
    shape = layer_shape(spec)
    per_token = sum(kept) / (b * t * spec.n_layers) + shape.d_model  # + the checkpointed layer input
    assert per_token == pytest.approx(op_checkpoint_bytes(shape, 1))  # fp32 CPU run counted in elements
    saved = [role for role, _, _, _, keep in op_checkpoint_linears(shape) if keep]
    assert saved == (["q", "v", "gate", "down"] if shape.gated else ["q", "v", "fc1"])


def test_dtensor_sequence_parallelism_keeps_the_gathered_linear_inputs(tmp_path):
    """Under SP the bundled trainer's column-parallel Linears (q/k/v, gate/up) save the all-gathered input whole
    (b, s, d), not its sequence shard as Megatron does: what the cost model prices for the flash stack
    (ActivationTerms.gathered, Context.sp_keeps_gathered); the norms keep their shard (b, s/tp, d)."""
    from ._launch import run_probe

    got = run_probe(tmp_path, "_sp_saved_probe.py", {}, 2, timeout=120)
    whole, shard = 2 * 8, 2 * 8 // 2  # b·s rows, and this rank's b·s/tp
    assert got["tp_sp"].count(whole) == 2, got  # the attention's and the MLP's gathered inputs, whole
    assert shard in got["tp_sp"] and shard not in got["tp"], got  # the norms keep their sequence shards
