"""--precision fp8 in the hand-over: which files train FP8 Linears (Megatron-LM via Transformer Engine, torchtitan's
float8 converter, Accelerate's torchao backend), which keep bf16 (ds_config.json, the bundled trainer), and what the
notes say (test_fp8_readback.py reads them back)."""
from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch.megatron import FP8_ARGS, megatron_args, parse_megatron_text
from gpuadvisor.schemas import Cluster, parse_plan
from gpuadvisor.workload.specs import make_workload

from .framework_schemas import TORCHTITAN_JOB_CONFIG, megatron_parser, megatron_validate
from .launch_fixtures import node

H100 = "hgx-h100-8x"  # 8 x H100 SXM: FP8 tensor cores
MODEL = "llama-7b"    # untied: Megatron's FSDP2 path takes it too
PLANS = {"zero3": "dp=8,zero=3,mb=1,m=2", "zero1-tp2": "dp=4,tp=2,zero=1,mb=1,m=2,sequence_parallel=true",
         "ddp": "dp=8,mb=1,m=2", "pp2": "dp=4,pp=2,mb=1,m=4"}
FP8_FILES = ("torchtitan.toml", "megatron_args.txt", "accelerate.yaml")


def _emitted(tmp_path: Path, spec: str, precision: str = "fp8", model: str = MODEL):
    plan = parse_plan(spec, nodes=1, devices_per_node=8)
    wl = make_workload(model, global_batch=plan.global_batch(), seq_len=1024, precision=precision)
    lc = build_launch(plan, load_preset(H100), wl)
    emit(lc, make_job(plan, wl), tmp_path)
    return tmp_path, plan, lc


@pytest.mark.parametrize("name", PLANS)
def test_megatron_args_train_fp8_on_top_of_bf16(tmp_path, name):
    out, plan, _ = _emitted(tmp_path, PLANS[name])
    text = (out / "megatron_args.txt").read_text()
    args = megatron_parser().parse_args(parse_megatron_text(text))  # Megatron's flag names, types and choices
    megatron_validate(args, plan.world_size, {})
    assert args.bf16 and not args.fp16 and args.transformer_impl == "transformer_engine"
    assert (args.fp8_format, args.fp8_recipe) == ("hybrid", "delayed")
    assert (args.fp8_amax_history_len, args.fp8_amax_compute_algo) == (1024, "max")
    assert not args.fp8_param_gather  # FP8 all-gather is half the bytes the prediction assumes: not written
    assert "# fp8: Transformer Engine FP8 Linears" in text


def test_bf16_megatron_args_have_no_fp8():
    plan = parse_plan("dp=8,mb=1,m=2")
    args = megatron_args(plan, make_workload(MODEL, global_batch=16, seq_len=1024), steps=5)
    assert "--bf16" in args and not set(FP8_ARGS) & {a for a in args if a.startswith("--")}


@pytest.mark.parametrize("name", PLANS)
def test_torchtitan_toml_has_the_float8_converter(tmp_path, name):
    out, plan, _ = _emitted(tmp_path, PLANS[name])
    text = (out / "torchtitan.toml").read_text()
    cfg = tomllib.loads(text)
    for section, body in cfg.items():  # every key a JobConfig field of the pinned torchtitan commit
        for key, value in body.items():
            want = TORCHTITAN_JOB_CONFIG[section][key]
            assert value in want if isinstance(want, tuple) else isinstance(value, want), (section, key, value)
    assert cfg["model"]["converters"] == ["float8"]
    assert cfg["training"]["mixed_precision_param"] == "bfloat16" and cfg["training"]["compile"] is True
    assert cfg["float8"] == {"enable_fsdp_float8_all_gather": False, "precompute_float8_dynamic_scale_for_fsdp": False}
    assert "recipe_name" not in cfg["float8"]  # unset: tensorwise dynamic scaling
    assert ("float8 TP plan" in text) == (plan.tp > 1)


def test_bf16_torchtitan_toml_has_no_converter(tmp_path):
    out, _, _ = _emitted(tmp_path, PLANS["zero3"], precision="bf16")
    cfg = tomllib.loads((out / "torchtitan.toml").read_text())
    assert "converters" not in cfg["model"] and "float8" not in cfg and cfg["training"]["compile"] is False


@pytest.mark.parametrize("name", ["zero3", "zero1-tp2", "ddp"])
def test_accelerate_yaml_runs_fp8_through_torchao(tmp_path, name):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils.dataclasses import FP8BackendType

    out, plan, _ = _emitted(tmp_path, PLANS[name])
    cfg = ClusterConfig.from_yaml_file(str(out / "accelerate.yaml"))
    assert cfg.mixed_precision == "fp8"
    assert cfg.fp8_config == {"backend": "AO", "enable_fsdp_float8_all_gather": False, "pad_inner_dim": True}
    FP8BackendType(cfg.fp8_config["backend"])  # the value accelerate reads back from ACCELERATE_FP8_BACKEND
    # `accelerate launch` copies fp8_config.x to its --fp8_x argument and exports ACCELERATE_FP8_X: each key must be one
    known = {a.dest for a in launch_command_parser()._actions}
    for key in cfg.fp8_config:
        assert "fp8_" + key in known, key
    if cfg.distributed_type == "DEEPSPEED":  # the plugin's fp8 -> bf16 engine check against the emitted JSON
        ds = json.loads((out / "ds_config.json").read_text())
        assert ds["bf16"] == {"enabled": True}


def test_accelerate_deepspeed_plugin_accepts_fp8_with_the_emitted_json(tmp_path):
    pytest.importorskip("deepspeed")
    from accelerate.utils import DeepSpeedPlugin

    out, _, _ = _emitted(tmp_path, PLANS["zero3"])
    plugin = DeepSpeedPlugin(hf_ds_config=str(out / "ds_config.json"))
    plugin.set_mixed_precision("fp8")  # raises on a bf16/fp16 mismatch between the JSON and mixed_precision
    assert plugin.deepspeed_config["bf16"]["enabled"] is True and not plugin.deepspeed_config["fp16"]["enabled"]
    # not a rubber stamp: an fp16 engine under mixed_precision fp8 is refused
    ds = json.loads((out / "ds_config.json").read_text())
    ds.pop("bf16")
    ds["fp16"] = {"enabled": True}
    (tmp_path / "fp16.json").write_text(json.dumps(ds))
    with pytest.raises(ValueError, match="cannot be set to `fp8` when `fp16` is set"):
        DeepSpeedPlugin(hf_ds_config=str(tmp_path / "fp16.json")).set_mixed_precision("fp8")


def test_ds_config_keeps_bf16_and_the_notes_say_what_runs_fp8(tmp_path):
    out, plan, lc = _emitted(tmp_path, PLANS["zero3"])
    assert lc.deepspeed_config["bf16"] == {"enabled": True} and "fp16" not in lc.deepspeed_config
    fp8 = next(n for n in lc.notes if n.startswith("fp8: "))
    for f in FP8_FILES:
        assert f in fp8.split(";")[0], f
    assert "launch.sh, slurm.sbatch and job.json run the bundled trainer, which has no FP8 kernels" in fp8
    assert "trains bf16 autocast" in fp8
    ds = next(n for n in lc.notes if n.startswith("ds_config.json keeps its bf16 section"))
    assert "DeepSpeed has no FP8 switch" in ds and "Transformer Engine" in ds and "assume FP8 Linears" in ds
    readme = (out / "README.txt").read_text()
    assert fp8 in readme and ds in readme and ", fp8" in readme
    job = json.loads((out / "job.json").read_text())
    assert job["workload"]["training"]["precision"] == "fp8"  # the trainer reports what it used instead


def test_notes_list_only_the_files_written(tmp_path):
    """PP: no accelerate.yaml, no ds_config.json; the note names neither as FP8 nor the DeepSpeed caveat."""
    out, _, lc = _emitted(tmp_path, PLANS["pp2"])
    assert not (out / "accelerate.yaml").exists() and not (out / "ds_config.json").exists()
    fp8 = next(n for n in lc.notes if n.startswith("fp8: "))
    assert "torchtitan.toml" in fp8 and "megatron_args.txt" in fp8 and "accelerate.yaml" not in fp8
    assert not any(n.startswith("ds_config.json keeps") for n in lc.notes)


def test_bf16_plans_have_no_fp8_notes(tmp_path):
    _, _, lc = _emitted(tmp_path, PLANS["zero3"], precision="bf16")
    assert not any("fp8" in n.lower() for n in lc.notes)


def test_generic_models_are_refused_with_fp8():
    """FP8 training swaps a transformer's Linears; a ResNet with fp8 is one line naming the fix, not a bf16 guess."""
    from gpuadvisor.errors import UserError

    with pytest.raises(UserError, match="not a transformer: use --precision bf16"):
        make_workload("resnet18", global_batch=256, precision="fp8")


def test_cpu_ranks_say_fp32(tmp_path):
    plan = parse_plan("dp=2,zero=2,mb=1,m=1")
    wl = make_workload("10M", global_batch=2, seq_len=64, precision="fp8")
    lc = build_launch(plan, load_preset("cpu-2ranks"), wl)
    assert "trains fp32 on CPU ranks" in next(n for n in lc.notes if n.startswith("fp8: "))


def test_fp8_on_gpus_without_fp8_tensor_cores_is_one_line(tmp_path):
    """A40 (Ampere): the cost model refuses fp8 there; so does the hand-over, before writing anything."""
    cl = Cluster(name="a40", source="test", nodes=[node("n0", 4)])
    plan = parse_plan("dp=4,mb=1,m=1")
    wl = make_workload(MODEL, global_batch=4, seq_len=256, precision="fp8")
    with pytest.raises(UserError) as exc:
        build_launch(plan, cl, wl)
    msg = str(exc.value)
    assert "\n" not in msg and "NVIDIA A40 has no FP8 tensor cores" in msg and "--precision bf16" in msg
    build_launch(plan, cl, make_workload(MODEL, global_batch=4, seq_len=256, precision="bf16"))


def test_emit_from_the_cli(tmp_path, capsys):
    """suggest --precision fp8 --emit on H100s: the written files are the FP8 ones the notes name."""
    out = tmp_path / "out"
    rc = main(["suggest", "--model", MODEL, "--preset", H100, "--precision", "fp8", "--seq-len", "1024",
               "--global-batch", "64", "--emit", str(out)])
    assert rc == 0, capsys.readouterr().err
    readme = (out / "README.txt").read_text()
    note = next(line for line in readme.splitlines() if line.strip().startswith("- fp8: "))
    written = {p.name for p in out.iterdir()}
    for f in FP8_FILES:
        assert (f in note) == (f in written), (f, note)
    line = next(x for x in (out / "launch.sh").read_text().splitlines() if x.strip().startswith("exec torchrun"))
    assert "gpuadvisor.trainers" in shlex.split(line)
