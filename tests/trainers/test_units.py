"""Data, layout, model splitting, metrics readers and error classification (single process, fast)."""
from __future__ import annotations

import pytest
import torch

from gpuadvisor.schemas import Plan
from gpuadvisor.trainers.data import micro_batches, replica_slice, token_batch
from gpuadvisor.trainers.layout import coords_of, mesh_shape
from gpuadvisor.trainers.metrics import net_delta, read_net_dev, read_proc_status
from gpuadvisor.trainers.model import GPTStage, build_gpt, split_layers
from gpuadvisor.trainers.run import classify
from gpuadvisor.trials.atomic import write_atomic

from ._launch import TINY


def test_batches_are_deterministic_and_shared_by_slices():
    x1, y1 = token_batch(7, 3, 8, 16, 64)
    x2, _ = token_batch(7, 3, 8, 16, 64)
    x3, _ = token_batch(7, 4, 8, 16, 64)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # next-token targets
    halves = [replica_slice(x1, d, 2) for d in range(2)]
    assert torch.equal(torch.cat(halves), x1)
    assert torch.equal(torch.cat(micro_batches(halves[1], 2)), halves[1])
    with pytest.raises(ValueError, match="divisible"):
        replica_slice(x1, 0, 3)


def test_rank_layout_follows_mesh_order():
    p = Plan(tp=2, dp=2, devices_per_node=4)  # tp fastest
    assert [coords_of(r, p)["tp"] for r in range(4)] == [0, 1, 0, 1]
    assert [coords_of(r, p)["dp"] for r in range(4)] == [0, 0, 1, 1]
    assert mesh_shape(p) == ((1, 2, 2), ("pp", "dp", "tp"))
    q = Plan(pp=2, dp=2, devices_per_node=4, num_micro_batches=2, mesh_order="tp-pp-dp")
    assert [coords_of(r, q)["pp"] for r in range(4)] == [0, 1, 0, 1]
    assert mesh_shape(q) == ((2, 2, 1), ("dp", "pp", "tp"))


def test_same_seed_same_weights_and_stages_compose():
    a, b = build_gpt(TINY, 16, seed=1), build_gpt(TINY, 16, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert split_layers(5, 2) == [(0, 3), (3, 5)]
    with pytest.raises(ValueError, match="cannot split"):
        split_layers(2, 4)
    idx = torch.randint(0, 64, (2, 16))
    s0 = GPTStage(a, 0, 2, is_first=True, is_last=False)
    s1 = GPTStage(a, 2, 4, is_first=False, is_last=True)
    assert torch.allclose(s1(s0(idx)), a(idx))


def test_tied_model_refuses_pipeline_split_and_recompute_matches():
    tied = build_gpt(TINY.model_copy(update={"tied_embeddings": True}), 16, seed=1)
    assert tied.head.weight is tied.embed.tok.weight
    with pytest.raises(ValueError, match="tie=False"):
        GPTStage(tied, 0, 2, is_first=True, is_last=False)
    plain, rc = build_gpt(TINY, 16, seed=2), build_gpt(TINY, 16, seed=2, recompute=True)
    idx = torch.randint(0, 64, (2, 16))
    plain(idx).sum().backward()
    rc(idx).sum().backward()
    assert all(torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(plain.parameters(), rc.parameters()))


@pytest.mark.parametrize("spec", [TINY, TINY.model_copy(update={"name": "tiny-gqa-window", "mlp": "swiglu",
                                                                 "n_kv_heads": 2, "max_seq_len": 0,
                                                                 "sliding_window": 8})])
def test_attention_core_recompute_matches_and_replays_the_core(spec, monkeypatch):
    """Plan.recompute_attention: the same gradients, and the core's forward runs again in the backward."""
    import torch.nn.functional as F

    plain = build_gpt(spec, 16, seed=3)
    sel = build_gpt(spec, 16, seed=3, recompute_attention=True)
    idx = torch.randint(0, 64, (2, 16))
    plain(idx).sum().backward()
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    sel(idx).sum().backward()
    assert len(calls) == 2 * spec.n_layers  # forward, and the replay in backward, per layer
    assert all(torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(plain.parameters(), sel.parameters()))


def test_proc_readers(tmp_path):
    st = read_proc_status()
    assert st["VmHWM"] >= st["VmRSS"] > 0
    dev = tmp_path / "dev"
    dev.write_text("Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|"
                   "bytes\n  eth0: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n")
    before = read_net_dev(str(dev))
    assert before == {"eth0": (100, 200), "lo": (5, 5)}
    after = {"eth0": (150, 260), "lo": (4, 5)}  # lo wrapped: skipped
    d = net_delta(before, after)
    assert list(d) == ["eth0"] and (d["eth0"].rx_bytes, d["eth0"].tx_bytes) == (50, 60)


def test_failure_classification():
    assert classify(MemoryError()) == "oom"
    assert classify(torch.cuda.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify(RuntimeError("[gloo/pair.cc] Timed out waiting 120000ms for recv")) == "timeout"
    assert classify(RuntimeError("Watchdog caught collective operation timeout")) == "timeout"
    assert classify(ValueError("bad plan")) == "exception"


def test_atomic_write_leaves_no_temp(tmp_path):
    write_atomic(tmp_path / "sub" / "m.json", "{}")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["m.json"]


def test_hybrid_zero_refuses_a_deepspeed_config():
    """ZeRO next to TP/PP is torch-native, so a --ds-config would be silently ignored: refused before any setup."""
    from gpuadvisor.trainers.parallel import Context
    from gpuadvisor.trainers.strategies import build_strategy

    from ._launch import job

    j = job(tp=2, dp=2, zero_stage=3).model_copy(update={"deepspeed_config": {"zero_optimization": {"stage": 3}}})
    ctx = Context(job=j, rank=0, world_size=4, local_rank=0, device=torch.device("cpu"), backend="gloo",
                  coords=coords_of(0, j.plan))
    with pytest.raises(ValueError, match="drop --ds-config"):
        build_strategy(ctx)


@pytest.mark.parametrize("vocab, tp", [(64, 2), (50257, 2), (50257, 8), (65, 4), (151936, 8)])
def test_vocabulary_shards_are_tensor_splits(vocab, tp):
    """Each TP rank's vocabulary rows are torch.tensor_split's, so they cover [0, V) once, uneven V included."""
    from gpuadvisor.trainers.vocab import vocab_range

    got = [vocab_range(vocab, r, tp) for r in range(tp)]
    want = torch.tensor_split(torch.arange(vocab), tp)
    assert [(int(w[0]), int(w[-1]) + 1) for w in want] == got
