"""Cluster files: concise form expansion, round trip through the full form, line-and-field errors,
and the JSON Schema (committed file up to date; the docs' examples validate)."""
import json
import re
from pathlib import Path

import pytest
import yaml

from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import ClusterFile, cluster_file_json_schema, load_cluster, save_cluster
from gpuadvisor.hardware.presets import list_presets, preset_path
from gpuadvisor.paths import knowledge_dir
from gpuadvisor.schemas.hardware import LinkClass

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster-file.md"


def _write(tmp_path, text, name="cluster.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def validate_schema(data):
    """Validate against knowledge/cluster.schema.json (jsonschema when installed) and its pydantic source."""
    ClusterFile.model_validate(data)
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(data, json.loads((knowledge_dir() / "cluster.schema.json").read_text()))


def doc_examples():
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)


def test_schema_rejects_typos():
    schema = cluster_file_json_schema()
    for name in ("ClusterFile", "NodeSpec", "Cluster", "Node", "Device"):  # both forms (test_cluster_schema.py)
        assert schema["$defs"][name]["additionalProperties"] is False, name


def test_schema_file_is_current():
    committed = json.loads((knowledge_dir() / "cluster.schema.json").read_text())
    assert committed == cluster_file_json_schema(), "regenerate knowledge/cluster.schema.json (see knowledge/README.md)"


@pytest.mark.parametrize("i", range(len(doc_examples())))
def test_doc_examples_validate_and_load(tmp_path, i):
    text = doc_examples()[i]
    validate_schema(yaml.safe_load(text))
    load_cluster(_write(tmp_path, text))


@pytest.mark.parametrize("name", list_presets())
def test_presets_validate_against_schema(name):
    validate_schema(yaml.safe_load(preset_path(name).read_text()))


@pytest.mark.parametrize("name", list_presets())
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path, name, suffix):
    first = load_cluster(preset_path(name))
    saved = save_cluster(first, tmp_path / f"full{suffix}")
    assert load_cluster(saved) == first


def test_concise_expansion(tmp_path):
    p = _write(tmp_path, """
name: lab
defaults:
  gpus: 2x A40
  cpu: {ram_gib: 256}
nodes:
  - name: a
    access: bob@10.0.0.1:2222
  - name: b
    gpus: [RTX A6000, {gpu: NVIDIA RTX A6000, memory_gib: 46}, A6000]
    topology: {link: PXB, pairs: {"1-2": PIX}}
    access: {prefix: [ip, netns, exec, n1]}
  - {name: c, count: 2, cpu_ranks: 2}
network: {link: 25gbe, nic: eth0}
""")
    c = load_cluster(p)
    assert [n.name for n in c.nodes] == ["a", "b", "c0", "c1"]
    a, b, c0 = c.nodes[0], c.nodes[1], c.nodes[2]
    assert a.access.method == "ssh" and (a.access.user, a.access.host, a.access.port) == ("bob", "10.0.0.1", 2222)
    assert a.link(0, 1).link_class == LinkClass.UNKNOWN and any("node a" in n for n in c.notes)
    assert b.access.method == "prefix" and b.access.prefix == ["ip", "netns", "exec", "n1"]
    assert b.devices[1].memory_bytes == 46 * 1024**3
    assert b.link(1, 2).link_class == LinkClass.PIX and b.link(0, 1).link_class == LinkClass.PXB
    assert [d.kind for d in c0.devices] == ["cpu", "cpu"] and c0.devices[0].memory_bytes == 128 * 1024**3
    assert c0.link(0, 1).link_class == LinkClass.SHM
    assert c.network.nic == "eth0" and c.network.bandwidth_gb_per_s == pytest.approx(1.5)


def test_json_input(tmp_path):
    p = _write(tmp_path, json.dumps({"nodes": [{"gpus": "8x H100 80GB HBM3", "topology": "NV18"}]}), "c.json")
    c = load_cluster(p)
    assert c.name == "c" and c.nodes[0].link(3, 7).nvlink_count == 18


def test_topology_capture_file(tmp_path):
    # Princeton Della node capture (github.com/jdh4/della-gpu-A100 README, lines 95-110)
    cap = Path(__file__).parent / "fixtures" / "08_della-2xa100-pcie-sys-2xmlx5.txt"
    (tmp_path / "topo").mkdir()
    (tmp_path / "topo" / "della.txt").write_text(cap.read_text())
    c = load_cluster(_write(tmp_path, "nodes:\n  - gpus: 2x A100-PCIE-40GB\n    topology: topo/della.txt\n"))
    assert c.nodes[0].link(0, 1).link_class == LinkClass.SYS


@pytest.mark.parametrize("text,pattern", [
    ("nodes:\n  - gpus: 2x A40\n  - gpus: 2x A7000\nnetwork: 1gbe\n",
     r"^cluster\.yaml line 3: nodes\[1\]\.gpus: unknown GPU 'A7000': add it to knowledge/gpus\.yaml"),
    ("nodes:\n  - gpus: 2x A40\n    gpu: A40\n",
     r"^cluster\.yaml line 3: nodes\[0\]\.gpu: unknown field"),
    ("name: x\nnodes:\n  - gpus: 2x A40\n  - gpus: 2x A40\n",
     r"^cluster\.yaml line 1: network: 2 nodes need 'network"),
    ("nodes:\n  - gpus: 2x A40\n    topology: PQR\n",
     r"^cluster\.yaml line 3: nodes\[0\]\.topology: pair 0-1: unknown link class 'PQR'"),
    ("nodes:\n  - gpus: 2x A40\n    topology: [[X, PIX], [PXB, X]]\n",
     r"^cluster\.yaml line 3: nodes\[0\]\.topology\.matrix\[0\]: not symmetric"),
    ("nodes:\n  - gpus: 2x A40\nnetwork: {link: warp}\n",
     r"^cluster\.yaml line 3: network\.link: unknown link 'warp'"),
    ("nodes:\n  - cpu_ranks: 2\n",
     r"^cluster\.yaml line 2: nodes\[0\]\.cpu_ranks: CPU ranks share host RAM: set cpu\.ram_gib"),
    ("nodes:\n  - gpus: 2x A40\n    pcie: {gen: four}\n",
     r"^cluster\.yaml line 3: nodes\[0\]\.pcie\.gen: "),
    ("nodes: [\n", r"^cluster\.yaml line \d+: not valid YAML/JSON"),
    ("nodes:\n  - gpus: 2x A100\n", r"^cluster\.yaml line 2: nodes\[0\]\.gpus: ambiguous GPU 'A100'"),
])
def test_errors_name_line_and_field(tmp_path, text, pattern):
    with pytest.raises(UserError) as exc:
        load_cluster(_write(tmp_path, text))
    msg = str(exc.value)
    assert "\n" not in msg
    assert re.search(pattern, msg), msg


def test_full_form_errors_name_line(tmp_path):
    c = load_cluster(preset_path("a6000-4x-pcie"))
    p = save_cluster(c, tmp_path / "full.yaml")
    text = p.read_text().replace("memory_bytes:", "memory_bites:", 1)
    with pytest.raises(UserError, match=r"full\.yaml line \d+: nodes\[0\]\.devices\[0\]\.memory_bites: unknown field"):
        load_cluster(_write(tmp_path, text, "full.yaml"))


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="cannot read cluster file"):
        load_cluster(tmp_path / "nope.yaml")


def test_devices_per_switch_and_a_capture_say_which_gpus_share_a_pcie_uplink(tmp_path):
    """`pcie.devices_per_switch` groups GPUs in index order (the DGX A100 preset: 2); a saved `nvidia-smi topo -m`
    capture shows it through its NIC columns; a bad count is a one-line error."""
    import shutil

    from gpuadvisor.costmodel.analytical.comm import host_uplink_sharing
    from gpuadvisor.hardware.presets import load_preset

    assert [d.pcie_switch for d in load_preset("dgx-a100-8x").nodes[0].devices] == [0, 0, 2, 2, 4, 4, 6, 6]
    four = tmp_path / "four.yaml"
    four.write_text("name: four\nnodes:\n  - gpus: 8x A100-SXM4-80GB\n    topology: NV12\n"
                    "    pcie: {gen: 4, width: 16, devices_per_switch: 4}\n")
    assert host_uplink_sharing(load_cluster(four)) == [1, 1, 2, 3, 4, 4, 4, 4, 4]
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "topo" / "06_dgx-a100-nv12-12xmlx5-named-cols.txt",
                tmp_path / "dgx.txt")
    cap = tmp_path / "cap.yaml"
    cap.write_text("name: cap\nnodes:\n  - gpus: 8x A100-SXM4-40GB\n    topology: dgx.txt\n")
    assert [d.pcie_switch for d in load_cluster(cap).nodes[0].devices] == [0, 0, 2, 2, 4, 4, 6, 6]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  - gpus: 2x A100-SXM4-80GB\n    pcie: {devices_per_switch: 0}\n")
    with pytest.raises(UserError, match="devices_per_switch"):
        load_cluster(bad)


def test_device_rates_take_a_measured_host_copy_rate(tmp_path):
    from gpuadvisor.costmodel.analytical import Context
    from gpuadvisor.workload.specs import make_workload

    f = tmp_path / "c.yaml"
    f.write_text("name: c\nnodes:\n  - gpus: 2x RTX 4090\n    device_rates: {host_copy_gb_per_s: 13.1, "
                 "rate_source: measured}\n")
    c = load_cluster(f)
    assert [d.host_copy_gb_per_s for d in c.nodes[0].devices] == [13.1, 13.1]
    assert Context(c, make_workload("1.3B")).host_bw == pytest.approx(13.1e9)


def test_a_binary_topology_capture_is_a_one_line_error(tmp_path):
    (tmp_path / "topo.bin").write_bytes(bytes(range(128, 256)) * 8)
    f = tmp_path / "c.yaml"
    f.write_text("name: c\nnodes:\n  - gpus: 2x A100-SXM4-40GB\n    topology: {file: topo.bin}\n")
    with pytest.raises(UserError, match=r"topology capture 'topo.bin' is not text: save `nvidia-smi topo -m") as e:
        load_cluster(f)
    assert "\n" not in str(e.value)
