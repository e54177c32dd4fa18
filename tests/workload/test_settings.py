"""Training settings validation and make_workload defaults."""
from __future__ import annotations

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.workload import make_workload, resolve_model, training_settings


def test_defaults_without_model():
    t = training_settings()
    assert (t.seq_len, t.global_batch, t.precision) == (1024, 8, "bf16")


def test_tokens_per_step_becomes_batch():
    t = training_settings(seq_len=512, tokens_per_step=4096)
    assert t.global_batch == 8


def test_tokens_per_step_must_be_multiple_of_seq_len():
    with pytest.raises(UserError, match="not a multiple of seq_len 1024; use 2048 or 3072"):
        training_settings(seq_len=1024, tokens_per_step=3000)


def test_batch_and_tokens_must_agree():
    with pytest.raises(UserError, match="give only one of"):
        training_settings(seq_len=1024, global_batch=4, tokens_per_step=8192)
    assert training_settings(seq_len=1024, global_batch=8, tokens_per_step=8192).global_batch == 8


@pytest.mark.parametrize("kwargs,match", [
    ({"seq_len": 0}, "seq_len must be a positive integer"),
    ({"global_batch": -2}, "global_batch must be a positive integer"),
    ({"precision": "fp4"}, "unknown precision 'fp4'"),
    ({"optimizer": "lion"}, "unknown optimizer"),
    ({"token_budget": 0}, "token_budget must be positive"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(UserError, match=match):
        training_settings(**kwargs)


def test_seq_len_limited_by_learned_positions():
    with pytest.raises(UserError, match="exceeds the 1024 learned positions"):
        training_settings(seq_len=2048, model=resolve_model("gpt2"))
    # rotary models have no learned table
    assert training_settings(seq_len=4096, model=resolve_model("llama-7b")).seq_len == 4096


def test_generic_model_rejects_tokens_per_step():
    with pytest.raises(UserError, match="not a token model"):
        training_settings(tokens_per_step=1024, model=resolve_model("resnet18"))


def test_make_workload_paper_defaults():
    w = make_workload("10M")
    assert (w.training.seq_len, w.training.global_batch, w.training.precision) == (128, 16, "fp32")
    w = make_workload("100M")
    assert (w.training.seq_len, w.training.global_batch, w.training.precision) == (512, 16, "bf16")
    w = make_workload("1B")
    assert (w.training.seq_len, w.training.global_batch) == (1024, 4)
    assert make_workload("10M", precision="bf16").training.precision == "bf16"


def test_make_workload_generic_defaults():
    w = make_workload("gpt2-xl")  # GPT-3's 1M tokens per batch at 1.3B-2.7B (workload/batch_defaults.py)
    assert (w.training.seq_len, w.training.global_batch) == (1024, 1024)
    assert w.tokens_per_step == 1_048_576
    assert make_workload("llama-7b").training.seq_len == 1024
    assert make_workload("resnet18").tokens_per_step == 256
    assert make_workload(resolve_model("gpt2"), global_batch=32).training.global_batch == 32


def test_make_workload_rejects_unknown_setting():
    with pytest.raises(UserError, match="unknown training setting"):
        make_workload("gpt2", batch=4)


def test_default_seq_note_only_when_shorter_than_the_models_context():
    from gpuadvisor import api
    from gpuadvisor.workload.settings import default_seq_note

    # a rotary model at the 1024-token default, built for 4096: one note naming both and the flag
    note = default_seq_note("llama-7b", 1024)
    assert note is not None and "seq 1024 is the default" in note and "4,096 tokens" in note
    assert "--seq-len N" in note
    assert default_seq_note("7B", 1024) == note.replace("'llama-7b (6.738B)'", "'llama-7b (7B)'")
    # GPT-2 XL's default is its whole learned table; a longer given seq, a shape or a config path: no note
    assert default_seq_note("1.5B", 1024) is None
    assert default_seq_note("llama-7b", 4096) is None
    assert default_seq_note("L2-H64-A2", 1024) is None
    assert default_seq_note("no-such-model", 1024) is None
    s = api.suggest("llama-7b", preset="hgx-h100-8x", top=1, finetune="lora")
    assert sum("--seq-len N" in n for n in s.notes) == 1
    s = api.suggest("llama-7b", preset="hgx-h100-8x", top=1, finetune="lora", seq_len=1024)
    assert not any("--seq-len N" in n for n in s.notes)  # a seq the user gave is not a default
