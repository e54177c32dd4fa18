"""confirm and study with --precision fp8 are refused up front: the bundled trainers have no FP8 kernels, so their
runs would be bf16 measurements set against FP8 predictions (and stored as fp8 rows)."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.study.execute import resolve_workloads
from gpuadvisor.study.grid import build_grid
from gpuadvisor.study.spec import StudySpec, parse_gpus, parse_strategies
from gpuadvisor.trials.hostcheck import refuse_fp8
from gpuadvisor.trials.study import confirm
from gpuadvisor.workload.specs import make_workload

H100 = "hgx-h100-8x"


def _one_line(exc: pytest.ExceptionInfo, command: str, fix: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.exit_code == 2
    assert msg.startswith(f"{command}: --precision fp8 cannot be measured by the bundled trainers")
    assert "no FP8 kernels" in msg and fix in msg and "torchtitan.toml / megatron_args.txt" in msg
    return msg


def test_refuse_fp8_names_the_fix_per_command():
    for p in ("bf16", "fp16", "fp32", ""):
        refuse_fp8(p, "confirm")
        refuse_fp8(p, "study")
    with pytest.raises(UserError) as exc:
        refuse_fp8("fp8", "confirm")
    assert "every trial would time bf16 steps" in _one_line(exc, "confirm", "confirm with --precision bf16")
    with pytest.raises(UserError) as exc:
        refuse_fp8("fp8", "study")
    assert "every cell" in _one_line(exc, "study", "run the study with --precision bf16")


def test_api_confirm_refuses_fp8_before_the_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    # a missing cluster file would be the first error if the cluster were resolved first
    with pytest.raises(UserError) as exc:
        api.confirm("gpt2", cluster=str(tmp_path / "missing.yaml"), precision="fp8", budget_s=10.0)
    _one_line(exc, "confirm", "confirm with --precision bf16")
    wl = make_workload("llama-7b", precision="fp8")
    with pytest.raises(UserError) as exc:  # a Workload carries its own precision
        api.confirm(wl, preset=H100, budget_s=10.0)
    _one_line(exc, "confirm", "--emit")
    assert not (tmp_path / "home").exists()  # no study storage was opened
    # the same API with bf16 goes on to the cluster (and fails there: the file is missing)
    with pytest.raises(UserError, match="not found"):
        api.confirm("gpt2", cluster=str(tmp_path / "missing.yaml"), precision="bf16", budget_s=10.0)


def test_trials_confirm_refuses_fp8_with_the_bundled_trainers(tmp_path, monkeypatch):
    """The study function itself (what the TUI reaches through api.confirm): refused before the host check, which
    on this GPU-less machine would otherwise be the error."""
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    with pytest.raises(UserError) as exc:
        confirm(load_preset(H100), make_workload("llama-7b", precision="fp8"), budget_s=10.0)
    _one_line(exc, "confirm", "confirm with --precision bf16")


def test_cli_suggest_confirm_refuses_fp8_before_ranking(capsys, monkeypatch):
    import gpuadvisor.api as api_mod

    def no_ranking(*a, **k):  # the refusal comes first: ranking is never reached
        raise AssertionError("ranked before refusing fp8")

    monkeypatch.setattr(api_mod, "suggest", no_ranking)
    rc = main(["suggest", "--model", "llama-7b", "--preset", H100, "--precision", "fp8", "--confirm", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "confirm: --precision fp8 cannot be measured by the bundled trainers" in err[0]
    assert "confirm with --precision bf16" in err[0]


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_cli_study_refuses_fp8(capsys, tmp_path, extra):
    rc = main(["study", "--models", "L2-H32-A4-V256-S16", "--precision", "fp8", "--preset", H100, "--gpus", "1,2",
               "--out", str(tmp_path / "s"), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "study: --precision fp8 cannot be measured" in err[0] and "run the study with --precision bf16" in err[0]
    assert not (tmp_path / "s").exists()


def test_study_grid_refuses_fp8_workloads():
    """The library path (run_study, plan_study and the CLI's --dry-run all build the grid)."""
    spec = StudySpec(models=["L2-H32-A4-V256-S16"], strategies=parse_strategies("dp"), gpus=parse_gpus("1,2"),
                     steps=2, warmup=0, global_batch=8, precision="fp8")
    cluster = load_preset(H100)
    with pytest.raises(UserError, match="^study: --precision fp8"):
        build_grid(spec, cluster, resolve_workloads(spec))
    bf16 = spec.model_copy(update={"precision": "bf16"})
    assert build_grid(bf16, cluster, resolve_workloads(bf16))


def test_confirm_refuses_cudnn_attention_the_bundled_trainers_do_not_run(capsys):
    from gpuadvisor.api import confirm
    from gpuadvisor.cli import main
    from gpuadvisor.errors import UserError

    with pytest.raises(UserError, match="--attention-kernel cudnn cannot be measured by the bundled trainers"):
        confirm("10M", preset="cpu-2ranks", seq_len=64, global_batch=2, attention_kernel="cudnn")
    rc = main(["suggest", "--model", "10M", "--preset", "cpu-2ranks", "--attention-kernel", "cudnn", "--confirm", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--attention-kernel flash" in err


def test_confirm_refuses_hf_kernels_the_bundled_trainers_do_not_run(capsys, tmp_path):
    """--kernels hf prices Hugging Face's op-by-op modules; the bundled trainers run PyTorch's nn.RMSNorm: a trial would
    time the wrong stack. Refused before ranking (CLI) and in the study (a Workload through the API)."""
    from gpuadvisor.api import confirm, make_workload
    from gpuadvisor.cli import main
    from gpuadvisor.errors import UserError

    rc = main(["suggest", "--model", "10M", "--preset", "cpu-2ranks", "--kernels", "hf", "--confirm", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--kernels hf prices Hugging Face's modeling code" in err
    assert "confirm with --kernels eager" in err
    wl = make_workload("10M", seq_len=64, global_batch=2, kernels="hf")
    with pytest.raises(UserError, match="--kernels hf prices Hugging Face's modeling code"):
        confirm(wl, preset="cpu-2ranks", storage=str(tmp_path / "s.db"))
