"""knowledge/cluster.schema.json describes both cluster-file forms: the concise one people write and the full one
`save_cluster` / `gpuadvisor probe --save` writes (YAML and JSON), and saved files carry the editors' schema hint."""
from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
import yaml

from gpuadvisor.cli import main
from gpuadvisor.hardware.cluster_file import load_cluster, save_cluster, schema_uri
from gpuadvisor.hardware.presets import list_presets, preset_path
from gpuadvisor.paths import knowledge_dir
from gpuadvisor.probe import nvml as nvml_mod

from ..probe.fake_host import typical_host
from ..probe.fake_nvml import FakeNVML

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((knowledge_dir() / "cluster.schema.json").read_text(encoding="utf-8"))


def branch(name: str) -> dict:
    """The schema of one form only (to check the forms are told apart)."""
    return {"$ref": f"#/$defs/{name}", "$defs": SCHEMA["$defs"]}


def is_valid(data, schema) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(data)


def read_saved(path: Path) -> dict:
    """The saved file's data, after checking it carries the schema hint editors read."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        assert data["$schema"] == schema_uri()
        return data
    assert text.splitlines()[0] == f"# yaml-language-server: $schema={schema_uri()}"
    return yaml.safe_load(text)


def test_hint_points_at_the_shipped_schema():
    uri = schema_uri()
    assert uri.startswith("file:///") and uri.endswith("/cluster.schema.json")
    assert Path(uri[len("file://"):]).read_text(encoding="utf-8") == json.dumps(SCHEMA, indent=2) + "\n"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
@pytest.mark.parametrize("name", list_presets())
def test_saved_full_form_validates(tmp_path, name, suffix):
    cluster = load_cluster(preset_path(name))
    data = read_saved(save_cluster(cluster, tmp_path / f"saved{suffix}"))
    jsonschema.validate(data, SCHEMA)
    assert is_valid(data, branch("Cluster")) and not is_valid(data, branch("ClusterFile"))
    assert load_cluster(tmp_path / f"saved{suffix}") == cluster  # the hint does not get in the way of loading


@pytest.mark.parametrize("name", list_presets())
def test_concise_form_is_the_other_branch(name):
    data = yaml.safe_load(preset_path(name).read_text(encoding="utf-8"))
    assert is_valid(data, branch("ClusterFile")) and not is_valid(data, branch("Cluster"))


def test_typos_fail_in_both_forms(tmp_path):
    concise = yaml.safe_load(preset_path("a6000-4x-pcie").read_text(encoding="utf-8"))
    concise["nodes"][0]["gpu"] = concise["nodes"][0].pop("gpus")
    assert not is_valid(concise, SCHEMA)
    full = read_saved(save_cluster(load_cluster(preset_path("a6000-4x-pcie")), tmp_path / "f.yaml"))
    full["nodes"][0]["devices"][0]["memory_bites"] = full["nodes"][0]["devices"][0].pop("memory_bytes")
    assert not is_valid(full, SCHEMA)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_probe_save_writes_a_valid_file(tmp_path, monkeypatch, capsys, suffix):
    """`gpuadvisor probe --save` on a (fake) GPU-less host with CPU ranks: the file validates and loads."""
    fake = FakeNVML(raises={("nvmlInit", None): pynvml.NVMLError_LibraryNotFound()})
    monkeypatch.setattr(nvml_mod, "load_pynvml", lambda: fake)
    root = typical_host(tmp_path / "root")
    target = tmp_path / f"host{suffix}"
    assert main(["probe", "--sysfs-root", str(root), "--save", str(target), "--cpu-ranks", "2"]) == 0
    assert f"saved cluster to {target}" in capsys.readouterr().err
    data = read_saved(target)
    jsonschema.validate(data, SCHEMA)
    assert is_valid(data, branch("Cluster"))
    assert load_cluster(target).num_devices == 2
