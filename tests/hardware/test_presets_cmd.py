"""`gpuadvisor presets` prints every preset as a table row or JSON."""
import json

from gpuadvisor.cli import main
from gpuadvisor.hardware.presets import list_presets


def test_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NAME", "NODESxDEV", "DEVICE"]
    for name in list_presets():
        assert name in out
    assert "1G tcp 0.113 GB/s" in out


def test_json(capsys):
    assert main(["presets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(list_presets())
    nano = next(r for r in rows if r["name"] == "nano-cluster-2x2-a40-1gbe")
    assert nano["devices_per_node"] == [2, 2] and "seed 000" in nano["source"]


def test_narrow_console_gets_a_block_per_preset(capsys, monkeypatch):
    """At 80 columns the table's cells would fold word by word ('Distribut / ed'); each preset becomes a block:
    name, shape and device on one line, links/network and the source indented below."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = list(list_presets())
    heads = [line for line in lines if not line.startswith(" ")]
    assert [h.split()[0] for h in heads] == names
    assert sum(line.startswith("  source: ") for line in lines) == len(names)
    assert "workstation-2x4090  1x2 RTX 4090" in heads
    assert all(len(line) <= 80 for line in lines)
