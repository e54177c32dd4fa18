"""`predict --from` a Megatron argument file predicts the model the file trains (launch/megatron_shape.py): its shape
flags read back to the shape they were written from, --model becomes optional, and a --model that describes another
model is named in a note instead of silently replacing the file's."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.cli import main
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch.megatron_shape import padded_vocab
from gpuadvisor.launch.readback import read_config, read_megatron
from gpuadvisor.schemas import parse_plan
from gpuadvisor.workload.shapes import shape_differences
from gpuadvisor.workload.specs import make_workload

PRESET = "hgx-h100-8x"
# the GPT-3 1.3B example of Megatron-DeepSpeed (examples_deepspeed/rebase/ds_pretrain_gpt_1.3B.sh), trimmed
MDS = ("deepspeed pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 "
       "--micro-batch-size 2 --global-batch-size 64 --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
       "--seq-length 2048 --max-position-embeddings 2048 --fp16 --checkpoint-activations --deepspeed "
       "--zero-stage 1 --no-pipeline-parallel")


@pytest.mark.parametrize("name", ["gpt2", "gpt3-1.3b", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b",
                                  "qwen3-30b-a3b", "gpt-oss-20b"])
def test_emitted_shape_reads_back(tmp_path, name):
    """Every shape flag megatron.megatron_args writes reads back to the same layers, widths, heads, gating, tied
    embeddings and experts (the vocabulary is the tokenizer's, which the file does not carry)."""
    moe = name in ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b")
    plan = parse_plan("dp=4,tp=2,mb=1,m=2" + (",ep=2" if moe else ""), nodes=1, devices_per_node=8)
    wl = make_workload(name, global_batch=plan.global_batch(), seq_len=1024)
    emit(build_launch(plan, load_preset(PRESET), wl), make_job(plan, wl), tmp_path)
    rb = read_config(tmp_path / "megatron_args.txt", world=8, global_batch=plan.global_batch())
    assert rb.model is not None and shape_differences(rb.model, wl.model) == []
    assert rb.model.n_experts == wl.model.n_experts and rb.model.params > 0
    # no tokenizer in the file: GPT-2's vocabulary, padded to 128 x tp, and said
    assert rb.model.vocab_size == 50432 and any("GPT-2's 50,257 assumed" in n for n in rb.model_notes)


def test_megatron_defaults_fill_the_shape():
    """Megatron's own defaults: the FFN 4h (with --swiglu int(8h/3 / 64)·64), tied embeddings, biases, a learned
    table of --max-position-embeddings, dropout 0.1, the vocabulary padded to make-vocab-size-divisible-by x tp."""
    rb = read_megatron(["--num-layers", "2", "--hidden-size", "4096", "--num-attention-heads", "32", "--swiglu",
                        "--tokenizer-type", "GPT2BPETokenizer", "--tensor-model-parallel-size", "4",
                        "--max-position-embeddings", "4096"], world=8)
    m = rb.model
    assert m.d_ff == 10880 and m.mlp == "swiglu"             # int(4 * 4096 * 2 / 3 / 64) * 64
    assert m.tied_embeddings and m.bias and m.dropout and m.max_seq_len == 4096
    assert m.vocab_size == padded_vocab(50257, 128, 4) == 50688 and rb.model_notes == []
    rb = read_megatron(["--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16",
                        "--group-query-attention", "--num-query-groups", "4", "--position-embedding-type", "rope",
                        "--normalization", "RMSNorm", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
                        "--attention-dropout", "0", "--hidden-dropout", "0.0", "--vocab-size", "32000"], world=1)
    m = rb.model
    assert (m.n_kv_heads, m.d_ff, m.max_seq_len, m.norm, m.bias, m.tied_embeddings, m.dropout) == \
        (4, 4096, 0, "rmsnorm", False, False, False)
    assert m.vocab_size == 32000
    # Megatron-DeepSpeed spells GQA --num-key-value-heads and rotary --use-rotary-position-embeddings
    rb = read_megatron(["--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16",
                        "--num-key-value-heads", "8", "--use-rotary-position-embeddings", "--deepspeed"], world=1)
    assert rb.model.n_kv_heads == 8 and rb.model.max_seq_len == 0
    # only part of the shape: no model (--model gives it)
    assert read_megatron(["--num-layers", "24", "--micro-batch-size", "1"], world=1).model is None


def test_predict_from_needs_no_model_when_the_file_states_it(tmp_path, capsys):
    (tmp_path / "args.txt").write_text(MDS)
    assert main(["predict", "--preset", PRESET, "--from", str(tmp_path / "args.txt"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "Megatron arguments: L24 h2048 a16 ffn 8192 (1.316B)"
    assert data["plan"] == "dp=4,tp=2,pp=1,mb=2,m=8,recompute=true,zero=1,zero_impl=deepspeed,zero_overlap_comm=false"
    # the same shape as --model 1.3B (gpt3-1.3b): --model is kept, nothing said; the vocabulary is its own
    assert main(["predict", "--model", "1.3B", "--preset", PRESET, "--from", str(tmp_path / "args.txt"),
                 "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["model"] == "gpt3-1.3b (1.3B)" and not any("--model" in n for n in same["notes"])
    assert same["estimate"]["tokens_per_s"] == pytest.approx(data["estimate"]["tokens_per_s"], rel=0.02)


def test_a_model_that_is_not_the_files_is_named_and_the_file_wins(tmp_path, capsys):
    (tmp_path / "args.txt").write_text(MDS)
    assert main(["predict", "--model", "llama-7b", "--preset", PRESET, "--from", str(tmp_path / "args.txt")]) == 0
    out = capsys.readouterr().out
    assert "--model llama-7b is llama-7b (6.738B), which is not the model args.txt trains (layers 24 vs 32;" in out
    assert "gated MLP no vs yes" in out and "drop --model or make it match" in out
    assert "Megatron arguments: L24 h2048 a16 ffn 8192 (1.316B) on hgx-h100-8x" in out


def test_a_tokenizer_the_file_does_not_size_takes_the_vocabulary_of_model(tmp_path, capsys):
    """A HuggingFace tokenizer's vocabulary is not in the arguments: without --model GPT-2's is assumed and said;
    with a --model of another shape its vocabulary is taken, and said."""
    (tmp_path / "args.txt").write_text(MDS + " --tokenizer-type HFTokenizer --num-layers 12")
    assert main(["predict", "--preset", PRESET, "--from", str(tmp_path / "args.txt")]) == 0
    assert "the vocabulary of --tokenizer-type HFTokenizer is not in the arguments: GPT-2's 50,257 assumed" in \
        capsys.readouterr().out
    assert main(["predict", "--model", "llama-7b", "--preset", PRESET, "--from", str(tmp_path / "args.txt"),
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any("the vocabulary of --model llama-7b taken (32,000)" in n for n in data["notes"])
    assert data["estimate"]["memory"]["weights"] > 0


@pytest.mark.parametrize("name,text,says", [
    ("ds.json", '{"train_batch_size": 8}', "ds.json is a DeepSpeed JSON, which does not say the model; pass --model"),
    ("t.toml", "[training]\nlocal_batch_size = 1\n", "t.toml has no [model] name and flavor, which would say the "
                                                      "model; pass --model"),
    ("a.txt", "--micro-batch-size 1 --num-layers 24", "a.txt does not state the model (Megatron's --num-layers, "
                                                      "--hidden-size and --num-attention-heads); pass --model"),
    ("b.txt", MDS + " --normalization BatchNorm", "--normalization must be LayerNorm or RMSNorm"),
    ("c.txt", MDS + " --num-experts 8", "DeepSpeed-MoE layers (--num-experts with --deepspeed) are not read"),
    ("d.txt", MDS + " --hidden-size 2050", "the model shape flags do not make a model"),
    ("e.txt", MDS + " --hidden-dropout 1.5", "--hidden-dropout must be a probability in [0, 1)"),
    # a launch script's line with its shell variables unexpanded
    ("g.txt", MDS + " --hidden-size ${HIDDEN}", "'--hidden-size' must be a positive integer, got '${HIDDEN}'; it is a "
                                                 "shell variable: give the arguments with their values"),
    ("f.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4", "learned absolute positions (Megatron's "
                                                                        "default) need --max-position-embeddings"),
])
def test_without_a_model_bad_or_missing_shapes_are_one_line(tmp_path, capsys, name, text, says):
    (tmp_path / name).write_text(text)
    assert main(["predict", "--preset", PRESET, "--from", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_predict_plan_still_needs_model(capsys):
    assert main(["predict", "--preset", PRESET, "--plan", "dp=2"]) == 2
    assert "predict needs --model" in capsys.readouterr().err
