"""Fine-tuning on every interface but the TUI and the hand-over: CLI flags and their errors, the rendered header,
JSON output, the Python API and the study (docs/fine-tuning.md)."""
from __future__ import annotations

import json

import pytest

import gpuadvisor
from gpuadvisor import api, exitcodes
from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.schemas.workload import FineTune

from ._cli import one_line

PRESET = "a6000-4x-pcie"
QLORA_7B = "QLoRA r=16 on q,k,v,o,gate,up,down: 40M trainable of 6.74B (0.59 %)"


def run(argv, capsys):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_suggest_header_states_the_finetune(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, err = run(["suggest", "--model", "llama-2-7b", "--preset", PRESET, "--finetune", "qlora", "--top", "1"],
                       capsys)
    assert rc in (exitcodes.OK, exitcodes.NOTHING_FITS), err
    assert f"Tuning  : {QLORA_7B}, NF4 base with double quantisation" in out
    rc, out, _ = run(["suggest", "--model", "llama-2-7b", "--preset", PRESET, "--top", "1"], capsys)
    assert "Tuning" not in out  # full fine-tuning: the header is as before


def test_predict_header_states_rank_alpha_targets(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, err = run(["predict", "--model", "gpt2", "--preset", PRESET, "--plan", "dp=2,mb=4", "--finetune", "lora",
                        "--lora-rank", "8", "--lora-alpha", "32", "--lora-targets", "attention"], capsys)
    assert rc in (exitcodes.OK, exitcodes.NOTHING_FITS), err
    lines = out.splitlines()
    # gpt2: 12 layers x 4 x 8 x (768 + 768) = 589,824
    assert lines[1] == "  LoRA r=8 alpha=32 on q,k,v,o: 590K trainable of 124M (0.47 %)", lines[:3]


def test_predict_json_carries_finetune(capsys):
    rc, out, _ = run(["predict", "--model", "llama-2-7b", "--preset", PRESET, "--plan", "dp=4,zero=3,mb=1",
                      "--finetune", "lora", "--lora-rank", "8", "--lora-targets", "q,v", "--json"], capsys)
    est = json.loads(out)
    assert est["finetune"]["method"] == "lora" and est["finetune"]["target_modules"] == ["q", "v"]
    assert est["trainable_params"] == 4_194_304


def test_suggest_json_carries_finetune(capsys):
    rc, out, _ = run(["suggest", "--model", "gpt2", "--preset", PRESET, "--finetune", "lora", "--top", "1",
                      "--json"], capsys)
    payload = json.loads(out)
    assert payload["workload"]["finetune"]["method"] == "lora"
    assert payload["trainable_params"] == 12 * 16 * (4 * (768 + 768) + 2 * (768 + 3072))


@pytest.mark.parametrize("argv, needles", [
    (["--lora-rank", "8"], ["--lora-rank only applies to adapters", "--finetune lora"]),
    (["--finetune", "full", "--lora-alpha", "8", "--lora-targets", "q"],
     ["--lora-alpha and --lora-targets only apply to adapters", "--finetune lora"]),
    (["--finetune", "lora", "--lora-rank", "0"], ["argument --lora-rank", "from 1 to 4096"]),
    (["--finetune", "lora", "--lora-rank", "x"], ["argument --lora-rank", "'x' is not a LoRA rank"]),
    (["--finetune", "lora", "--lora-alpha", "-2"], ["argument --lora-alpha", "out of range"]),
    (["--finetune", "lora", "--lora-alpha", "nan"], ["argument --lora-alpha", "finite"]),
    (["--finetune", "lora", "--lora-targets", "q,wq"], ["argument --lora-targets", "'wq' is not a linear layer",
                                                        "all-linear"]),
    (["--finetune", "lora", "--lora-targets", "q,q"], ["argument --lora-targets", "twice"]),
    (["--finetune", "lora", "--lora-targets", "gate"], ["--lora-targets gate", "q,k,v,o,up,down"]),
    (["--finetune", "dora"], ["argument --finetune", "invalid choice"]),
])
@pytest.mark.parametrize("command", ["suggest", "predict"])
def test_bad_finetune_flags_are_one_line_usage_errors(command, argv, needles, capsys):
    plan = ["--plan", "dp=2,mb=4"] if command == "predict" else []
    rc, out, err = run([command, "--model", "gpt2", "--preset", PRESET, *plan, *argv], capsys)
    assert rc == exitcodes.USAGE and out == ""
    one_line(err, *needles)


def test_generic_model_refuses_adapters(capsys):
    rc, _, err = run(["suggest", "--model", "resnet18", "--preset", PRESET, "--finetune", "lora"], capsys)
    assert rc == exitcodes.USAGE
    one_line(err, "generic", "--finetune full")


def test_study_dry_run_is_data_parallel_for_adapters(capsys):
    rc, out, err = run(["study", "--models", "gpt2", "--preset", PRESET, "--gpus", "1,2", "--finetune", "lora",
                        "--dry-run", "--json"], capsys)
    assert rc == 0, err
    strategies = {c["strategy"] for c in json.loads(out)}
    assert strategies and not strategies & {"tp", "pp", "pp-4p"}
    rc, out, err = run(["study", "--models", "gpt2", "--preset", PRESET, "--finetune", "qlora", "--strategies",
                        "dp,pp", "--dry-run"], capsys)
    assert rc == exitcodes.USAGE
    one_line(err, "--strategies pp", "data-parallel", "--finetune full")
    rc, out, err = run(["study", "--models", "gpt2", "--preset", PRESET, "--lora-rank", "4", "--dry-run"], capsys)
    assert rc == exitcodes.USAGE
    one_line(err, "--lora-rank only applies to adapters")


def test_study_folder_fingerprint_tells_lora_from_full():
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.study.spec import StudySpec, parse_gpus
    from gpuadvisor.study.state import fingerprint_parts

    cl = load_preset(PRESET)
    full = StudySpec(models=["gpt2"], strategies=["dp"], gpus=parse_gpus("1,2"))
    lora = full.model_copy(update={"finetune": FineTune(method="lora")})
    rank8 = full.model_copy(update={"finetune": FineTune(method="lora", lora_rank=8)})
    assert "fine-tuning" not in fingerprint_parts(cl, full)  # folders made before LoRA still resume
    assert len({json.dumps(fingerprint_parts(cl, s), sort_keys=True) for s in (full, lora, rank8)}) == 3


# ------------------------------------------------------------------ Python API

def test_api_predict_returns_the_finetune():
    p = gpuadvisor.predict("llama-2-7b", "dp=4,zero=3,mb=2", preset=PRESET, finetune="qlora")
    assert isinstance(p, gpuadvisor.Prediction) and isinstance(p, api.Estimate)
    assert p.finetune.method == "qlora" and p.trainable_params == 39_976_960
    full = gpuadvisor.predict("gpt2", "dp=2,mb=4", preset=PRESET)
    assert full.finetune.method == "full" and full.trainable_params == full_params("gpt2")


def full_params(model: str) -> int:
    return gpuadvisor.make_workload(model).model.params


def test_api_suggest_takes_a_finetune_object_and_overrides_a_workload():
    ft = FineTune(method="lora", lora_rank=8, target_modules=("q", "v"))
    s = gpuadvisor.suggest("llama-2-7b", preset=PRESET, finetune=ft, top=1)
    assert s.workload.finetune == ft and s.trainable_params == 4_194_304
    wl = gpuadvisor.make_workload("llama-2-7b", finetune="lora")
    assert gpuadvisor.suggest(wl, preset=PRESET, top=1).workload.finetune.method == "lora"  # kept
    assert gpuadvisor.suggest(wl, preset=PRESET, top=1, finetune="full").workload.finetune.method == "full"


@pytest.mark.parametrize("call", ["suggest", "predict", "confirm", "make_workload"])
@pytest.mark.parametrize("bad, needle", [(3, "argument 'finetune' must be"), (["lora"], "argument 'finetune' must be"),
                                         ("lorax", "unknown method 'lorax'")])
def test_api_finetune_mistakes_are_user_errors(call, bad, needle):
    fn = getattr(gpuadvisor, call)
    args = ("gpt2", "dp=2,mb=4") if call == "predict" else ("gpt2",)
    kwargs = {} if call == "make_workload" else {"preset": PRESET}
    with pytest.raises(UserError, match=needle):
        fn(*args, finetune=bad, **kwargs)


def test_api_targets_error_names_the_python_field():
    with pytest.raises(UserError, match="finetune target_modules gate"):
        gpuadvisor.make_workload("gpt2", finetune=FineTune(method="lora", target_modules=("gate",)))
    with pytest.raises(UserError, match="generic"):
        gpuadvisor.predict(gpuadvisor.make_workload("resnet18"), "dp=2,mb=4", preset=PRESET, finetune="lora")


def test_confirmation_carries_the_finetune():
    from gpuadvisor.trials.schemas import ConfirmResult

    res = ConfirmResult(study_name="s", storage="sqlite://", fingerprint="f", trials=[], budget_s=1.0)
    c = api.Confirmation.model_validate({**{k: getattr(res, k) for k in ConfirmResult.model_fields},
                                         "finetune": FineTune(method="qlora")})
    assert isinstance(c, ConfirmResult) and c.model_dump()["finetune"]["method"] == "qlora"
