"""`predict --from FILE` prices the kernels the file's stack runs (TrainingSettings.kernels): Megatron's fused norms
and vocab-parallel cross entropy, a torchtitan model and loss compiled by `[compile]`, the model alone (or the older
`[training] compile`, whose loss ran eager until 2025) as fused-layers, and `--kernels` for the rest; bad
`[compile]` values are one line."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.cli import main
from gpuadvisor.launch.readback import read_config

PRESET = "a6000-4x-pcie"
TITAN = "[parallelism]\ndata_parallel_shard_degree = 4\n[training]\nlocal_batch_size = 4\nseq_len = 1024\n"


@pytest.mark.parametrize("extra, kernels, note", [
    ("", None, None),
    ("[compile]\nenable = false\n", None, None),
    ("[compile]\nenable = true\n", "fused", "fused norms and loss"),
    ('[compile]\nenable = true\ncomponents = ["model", "loss"]\nbackend = "inductor"\n', "fused", "fused"),
    ('[compile]\nenable = true\ncomponents = "loss,model"\n', "fused", "fused"),
    ('[compile]\nenable = true\ncomponents = ["model"]\n', "fused-layers", "fused layers beside the eager loss"),
    ('[compile]\nenable = true\ncomponents = ["loss"]\n', None, "the eager norms set the bound"),
])
def test_torchtitan_compile_sets_the_kernels(tmp_path, extra, kernels, note):
    (tmp_path / "t.toml").write_text(TITAN + extra)
    rb = read_config(tmp_path / "t.toml", world=4, global_batch=16)
    assert rb.kernels == kernels and "[compile]" not in rb.ignored
    assert (note is None and not rb.notes) or any(note in n for n in rb.notes), rb.notes


def test_older_training_compile_keeps_the_eager_loss(tmp_path):
    """torchtitan's `[training] compile` compiled the loss only from 2025 (train.py of December 2024: "TODO:
    compiling loss function causes CUDA errors"): priced with the eager loss, the upper bound, and said so."""
    (tmp_path / "t.toml").write_text(TITAN.replace("seq_len = 1024\n", "seq_len = 1024\ncompile = true\n"))
    rb = read_config(tmp_path / "t.toml", world=4, global_batch=16)
    assert rb.kernels == "fused-layers" and any("the loss too only in torchtitan releases from 2025" in n
                                                 for n in rb.notes), rb.notes


def test_megatron_runs_fused_and_deepspeed_eager(tmp_path):
    (tmp_path / "m.txt").write_text("--tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 8 "
                                    "--seq-length 1024 --bf16")
    assert read_config(tmp_path / "m.txt", world=4, global_batch=8).kernels == "fused"
    (tmp_path / "ds.json").write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, '
                                      '"zero_optimization": {"stage": 1}, "bf16": {"enabled": true}}')
    assert read_config(tmp_path / "ds.json", world=4, global_batch=16).kernels is None


@pytest.mark.parametrize("extra, needle", [
    ('[compile]\nenable = "yes"\n', "[compile] enable must be true or false, got 'yes'"),
    ('[compile]\nenable = true\ncomponents = ["optimizer"]\n', "[compile] components must be a list of 'model' and"),
    ('[compile]\nenable = true\ncomponents = 3\n', "got 3"),
    ('[compile]\nenabled = true\n', "did you mean 'enable'?"),
])
def test_bad_compile_values_are_one_line(tmp_path, capsys, extra, needle):
    (tmp_path / "t.toml").write_text(TITAN + extra)
    rc = main(["predict", "--model", "gpt2", "--preset", PRESET, "--from", str(tmp_path / "t.toml")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1, err


def _logits(capsys, *argv: str) -> float:
    assert main(["predict", "--model", "gpt2-xl", "--preset", PRESET, *argv, "--json"]) in (0, 3)
    return json.loads(capsys.readouterr().out)["estimate"]["memory"]["logits"]


def test_the_kernels_change_the_prediction(tmp_path, capsys):
    """A compiled run's memory is priced fused (the loss's 4 bytes per logit, not 12), and --kernels reaches a
    file's prediction (it used to be dropped on the --from path)."""
    (tmp_path / "eager.toml").write_text(TITAN)
    (tmp_path / "compiled.toml").write_text(TITAN + "[compile]\nenable = true\n")
    (tmp_path / "model.toml").write_text(TITAN + '[compile]\nenable = true\ncomponents = ["model"]\n')
    eager = _logits(capsys, "--from", str(tmp_path / "eager.toml"))
    compiled = _logits(capsys, "--from", str(tmp_path / "compiled.toml"))
    forced = _logits(capsys, "--from", str(tmp_path / "eager.toml"), "--kernels", "fused")
    model_only = _logits(capsys, "--from", str(tmp_path / "model.toml"))
    # 4 sequences x 1024 tokens x 50,257 entries x 12 bytes eager, x 4 fused (memory.LOGIT_BYTES_*)
    assert eager == pytest.approx(4 * 1024 * 50257 * 12, rel=1e-6)
    assert compiled == forced == pytest.approx(eager / 3, rel=1e-6)
    assert model_only == pytest.approx(eager, rel=1e-6)  # the compiled model's loss is still eager


@pytest.mark.parametrize("text, kernels, note", [
    ("distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\n", "hf",
     "priced as Hugging Face transformers' modeling code (--kernels hf"),
    ("distributed_type: MULTI_GPU\nnum_processes: 4\ndynamo_config:\n  dynamo_backend: INDUCTOR\n", "fused",
     "dynamo_backend INDUCTOR: torch.compile of the model"),
    ("distributed_type: MULTI_GPU\nnum_processes: 4\ndynamo_config:\n  dynamo_backend: 'NO'\n", "hf", None),
    ("distributed_type: MEGATRON_LM\nnum_processes: 4\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n", "fused",
     None),
])
def test_accelerate_runs_the_scripts_hf_model_unless_compiled(tmp_path, text, kernels, note):
    """Accelerate launches the user's script, a Hugging Face model by assumption: its eager modeling code ("hf",
    said), fused when a dynamo backend compiles it or Megatron-LM runs the layers."""
    (tmp_path / "acc.yaml").write_text(text)
    rb = read_config(tmp_path / "acc.yaml", world=4, global_batch=16)
    assert rb.kernels == kernels
    assert note is None or any(note in n for n in rb.notes), rb.notes
