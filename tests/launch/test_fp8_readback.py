"""`predict --from FILE` of FP8 configs: the emitted torchtitan/Megatron/Accelerate files read back as fp8, hand-written
ones too (later torchtitan spelling, finer recipes with a note), bad FP8 settings are one line."""
from __future__ import annotations

import json

import pytest

from gpuadvisor.cli import main
from gpuadvisor.launch.megatron import FP8_ARGS
from gpuadvisor.launch.readback import read_config

from .test_fp8_handover import H100, MODEL, PLANS, _emitted


@pytest.mark.parametrize("name", ["torchtitan.toml", "megatron_args.txt", "accelerate.yaml"])
@pytest.mark.parametrize("plan_name", ["zero3", "zero1-tp2"])
def test_fp8_files_read_back_as_fp8(tmp_path, name, plan_name):
    out, plan, _ = _emitted(tmp_path, PLANS[plan_name])
    rb = read_config(out / name, world=8, global_batch=plan.global_batch())
    assert rb.precision == "fp8" and "[float8]" not in rb.ignored
    assert not any("per-tensor" in n or "FP8 on top of" in n or "backend" in n for n in rb.notes), rb.notes


def test_ds_config_reads_back_as_bf16(tmp_path):
    """A DeepSpeed JSON cannot say FP8 (no such setting): bf16, as its engine runs."""
    out, plan, _ = _emitted(tmp_path, PLANS["zero3"])
    assert read_config(out / "ds_config.json", world=8, global_batch=plan.global_batch()).precision == "bf16"


def test_predict_from_an_fp8_file(tmp_path, capsys):
    out, _, _ = _emitted(tmp_path, PLANS["zero3"])
    assert main(["predict", "--model", MODEL, "--preset", H100, "--seq-len", "1024", "--from",
                 str(out / "megatron_args.txt"), "--json"]) == 0
    est = json.loads(capsys.readouterr().out)["estimate"]
    bf16 = tmp_path / "bf16.txt"
    bf16.write_text((out / "megatron_args.txt").read_text().replace(" ".join(FP8_ARGS[2:]), "")
                    .replace("--fp8-format hybrid\n", "").replace("--fp8-recipe delayed\n", ""))
    assert main(["predict", "--model", MODEL, "--preset", H100, "--seq-len", "1024", "--from", str(bf16),
                 "--json"]) == 0
    est_bf16 = json.loads(capsys.readouterr().out)["estimate"]
    assert est["step_time_s"] < est_bf16["step_time_s"]  # the FP8 Linears were priced
    # on a GPU without FP8 tensor cores the file is refused in one line
    assert main(["predict", "--model", MODEL, "--preset", "dgx-a100-8x", "--seq-len", "1024", "--from",
                 str(out / "megatron_args.txt")]) == 2
    err = capsys.readouterr().err
    assert "no FP8 tensor cores" in err and err.count("\n") == 1


@pytest.mark.parametrize("text,note", [
    ("--bf16 --fp8-format e4m3 --fp8-recipe mxfp8", "--fp8-recipe mxfp8 is not the per-tensor scaling"),
    ("--fp16 --fp8-format=hybrid", "FP8 on top of fp16"),
    ("--bf16 --fp8-format hybrid --fp8-recipe tensorwise", None),
])
def test_hand_written_megatron_fp8(tmp_path, text, note):
    (tmp_path / "m.txt").write_text("--micro-batch-size 1 --global-batch-size 8 " + text)
    rb = read_config(tmp_path / "m.txt", world=8, global_batch=8)
    assert rb.precision == "fp8"
    # the attention kernel's and the gradient sync's notes aside
    fp8 = [n for n in rb.notes if not n.startswith(("Transformer Engine layers", "no --overlap-grad-reduce"))]
    assert (note is None and not fp8) or any(note in n for n in fp8), rb.notes


def test_megatron_fp8_recipe_alone_is_not_fp8(tmp_path):
    (tmp_path / "m.txt").write_text("--bf16 --fp8-recipe delayed")
    rb = read_config(tmp_path / "m.txt", world=8, global_batch=8)
    assert rb.precision == "bf16" and any("--fp8-format" in n for n in rb.notes)


@pytest.mark.parametrize("fname,text,needle", [
    ("m.txt", "--bf16 --fp8-format e5m2", "--fp8-format must be one of e4m3, hybrid"),
    ("r.txt", "--bf16 --fp8-format hybrid --fp8-recipe rowwise", "--fp8-recipe must be one of"),
    ("a.yaml", "distributed_type: MULTI_GPU\nnum_processes: 8\nmixed_precision: fp8\nfp8_config:\n  backend: XLA\n",
     "fp8_config backend 'XLA'"),
])
def test_bad_fp8_settings_are_one_line(tmp_path, capsys, fname, text, needle):
    (tmp_path / fname).write_text(text)
    assert main(["predict", "--model", MODEL, "--preset", H100, "--global-batch", "8", "--from",
                 str(tmp_path / fname)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("body,note", [
    ('[model]\nconverters = ["float8"]\n', None),
    ('[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\n'
     'enable_fsdp_float8_all_gather = true\n', None),  # the later torchtitan spelling
    ('[model]\nconverters = ["float8"]\n[float8]\nrecipe_name = "rowwise"\n', "recipe_name 'rowwise' is finer"),
    ('[model]\nconverters = ["mxfloat8"]\n', "MX block scaling is finer"),
])
def test_hand_written_torchtitan_fp8(tmp_path, body, note):
    (tmp_path / "t.toml").write_text(body + "[parallelism]\ndata_parallel_shard_degree = 8\n")
    rb = read_config(tmp_path / "t.toml", world=8, global_batch=8)
    assert rb.precision == "fp8" and not {"[float8]", "[quantize]"} & set(rb.ignored)
    assert (note is None and not rb.notes) or any(note in n for n in rb.notes), rb.notes


def test_hand_written_accelerate_fp8(tmp_path):
    (tmp_path / "a.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 8\nmixed_precision: fp8\n"
                                     "fp8_config:\n  backend: TE\n  fp8_format: HYBRID\n")
    rb = read_config(tmp_path / "a.yaml", world=8, global_batch=8)
    assert rb.precision == "fp8"
    (tmp_path / "b.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 8\nmixed_precision: fp8\n"
                                     "fp8_config:\n  backend: MSAMP\n  opt_level: O2\n")
    rb = read_config(tmp_path / "b.yaml", world=8, global_batch=8)
    assert rb.precision == "fp8" and any("MS-AMP" in n for n in rb.notes)
