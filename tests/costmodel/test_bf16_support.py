"""GPUs before Ampere (V100, T4) have no bf16 tensor cores: with no precision given the advisor trains them in fp16
mixed precision and says so; an explicit bf16 there is a one-line error naming --precision fp16."""
from __future__ import annotations

import pytest

from gpuadvisor import api
from gpuadvisor.cli import main
from gpuadvisor.costmodel.analytical import Context, lacks_bf16
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import cluster_from_dict
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.workload.specs import make_workload
from tests._cli import one_line


def _t4(tmp_path=None):
    data = {"name": "kaggle-2x-t4", "nodes": [{"name": "n0", "gpus": "2x T4", "topology": "PHB"}]}
    if tmp_path is None:
        return cluster_from_dict(data)
    import yaml

    path = tmp_path / "t4.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_only_gpus_before_ampere_lack_bf16():
    t4 = _t4().nodes[0].devices[0]
    a40 = load_preset("nano-cluster-2x2-a40-1gbe").nodes[0].devices[0]
    cpu = load_preset("cpu-2ranks").nodes[0].devices[0]
    assert lacks_bf16(t4) and not lacks_bf16(a40) and not lacks_bf16(cpu)
    assert not lacks_bf16(t4.model_copy(update={"compute_capability": None}))  # unknown: taken to have it


def test_suggest_without_a_precision_trains_fp16_there_and_says_so():
    s = api.suggest("124M", cluster=_t4(), global_batch=64)
    assert s.workload.training.precision == "fp16" and s.ranking.top
    (note,) = [n for n in s.notes if n.startswith("precision fp16")]
    assert "Tesla T4 has no bf16 tensor cores (compute capability 7.5)" in note and "--precision" in note
    # the hand-over trains what was priced: no bf16 switch in the launch files
    files = " ".join(str(v) for v in s.launch.model_dump().values())
    assert "bf16" not in files.replace("grad_reduce_in_bf16", "")
    # an Ampere cluster keeps bf16 and no note
    a40 = api.suggest("124M", preset="nano-cluster-2x2-a40-1gbe", global_batch=64)
    assert a40.workload.training.precision == "bf16" and not [n for n in a40.notes if n.startswith("precision")]
    # a Workload brings its own precision: no note
    wl = make_workload("124M", global_batch=64, precision="fp16")
    assert not [n for n in api.suggest(wl, cluster=_t4()).notes if n.startswith("precision")]
    assert api.predict("124M", "dp=2,mb=4,m=8", cluster=_t4()).feasible


def test_explicit_bf16_before_ampere_is_a_one_line_error(capsys, tmp_path):
    with pytest.raises(UserError, match=r"Tesla T4 has no bf16 tensor cores .* 7\.5\); use --precision fp16"):
        Context(_t4(), make_workload("124M", precision="bf16"))
    path = _t4(tmp_path)
    assert main(["suggest", "--model", "124M", "--cluster", str(path), "--precision", "bf16"]) == 2
    one_line(capsys.readouterr().err, "has no bf16 tensor cores", "--precision fp16")
    assert main(["predict", "--model", "124M", "--cluster", str(path), "--plan", "dp=2,mb=4,m=8"]) == 0
    assert "fp16" in capsys.readouterr().out


def test_study_trains_fp16_there_by_itself(capsys, tmp_path):
    """`study` on such GPUs: no precision given, its cells train in fp16 (one note), where they stopped at the bf16
    error before; an explicit --precision stays the user's; an Ampere cluster keeps the models' bf16."""
    from gpuadvisor.study.execute import plan_study, resolve_workloads
    from gpuadvisor.study.spec import StudySpec, parse_gpus, parse_models, parse_strategies

    spec = StudySpec(models=parse_models("124M"), strategies=parse_strategies("dp,zero1"), gpus=parse_gpus("1,2"),
                     steps=5, warmup=2, global_batch=16)
    notes: list[str] = []
    (wl,) = resolve_workloads(spec, _t4(), notes).values()
    assert wl.training.precision == "fp16"
    assert len(notes) == 1 and notes[0].startswith("precision fp16") and "Tesla T4" in notes[0]
    cells = plan_study(spec, _t4())
    assert cells and all(c.predicted is not None and c.predicted.feasible for c in cells), [c.skip_reason
                                                                                           for c in cells]
    a40 = load_preset("nano-cluster-2x2-a40-1gbe")
    assert resolve_workloads(spec, a40)["124M"].training.precision == "bf16"
    chosen = spec.model_copy(update={"precision": "bf16"})
    with pytest.raises(UserError, match="has no bf16 tensor cores"):
        plan_study(chosen, _t4())
    assert main(["study", "--models", "124M", "--strategies", "dp", "--gpus", "1,2", "--global-batch", "16",
                 "--cluster", str(_t4(tmp_path)), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "precision fp16" in captured.out + captured.err and "has no bf16" not in captured.err
    assert main(["study", "--models", "124M", "--strategies", "dp", "--gpus", "1,2", "--global-batch", "16",
                 "--cluster", str(_t4(tmp_path)), "--precision", "bf16", "--dry-run"]) == 2
    one_line(capsys.readouterr().err, "has no bf16 tensor cores", "--precision fp16")
