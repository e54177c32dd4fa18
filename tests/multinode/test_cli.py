"""A user's path through the CLI on the emulated 2-node cluster: probe --cluster --measure --save, then
suggest on the saved cluster with --emit, and the emitted launch script names both nodes' rendezvous."""
from __future__ import annotations

import json

from gpuadvisor.cli import main
from gpuadvisor.hardware.cluster_file import load_cluster

PORT = 29631


def test_probe_cluster_then_suggest_and_emit(emu, no_leftovers, tmp_path, capsys):
    hosts = emu.write_cluster_file(tmp_path / "hosts.yaml")
    saved = tmp_path / "cluster.yaml"
    assert main(["probe", "--cluster", str(hosts), "--measure", "--quick", "--port", str(PORT),
                 "--save", str(saved)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "n0:" in out and "n1:" in out and "network" in out
    for step in ("pre-flight checks on 2 node(s)", "probing 2 node(s) and measuring GEMM on each",
                 "measuring collectives between 2 nodes"):  # long steps are not silent
        assert f"gpuadvisor probe: {step}  0s" in captured.err, captured.err
    cluster = load_cluster(saved)
    assert [n.name for n in cluster.nodes] == ["n0", "n1"]
    assert cluster.network is not None and cluster.network.rate_source == "measured"
    # --measure also ran the matmul probe on each node (one thread per CPU rank)
    assert all(d.rate_source == "measured" and 0.001 < d.achieved_tflops < 2.0
               for n in cluster.nodes for d in n.devices), [n.devices for n in cluster.nodes]
    assert 0.01 < cluster.network.bandwidth_gb_per_s < 0.5  # shaped to 1 Gbit/s: about 0.12 GB/s

    config = tmp_path / "config.json"  # a tiny GPT-2 config (the HF config path of --model)
    config.write_text(json.dumps({"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 64}))
    emit = tmp_path / "emit"
    assert main(["suggest", "--model", str(config), "--cluster", str(saved), "--seq-len", "32",
                 "--global-batch", "8", "--top", "20", "--json", "--emit", str(emit)]) == 0
    result = json.loads(capsys.readouterr().out)
    plans = [e["plan"] for e in result["ranking"]["top"]]
    assert any(p["nodes"] == 2 for p in plans), "a 2-node plan must be among the candidates shown"
    script = (emit / "launch.sh").read_text()
    top = plans[0]
    if top["nodes"] == 2:
        assert "--rdzv-endpoint" in script and "is_host=true" in script and "is_host=false" in script
    else:
        assert "--standalone" in script
