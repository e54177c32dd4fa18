"""End to end on the emulated 2-node cluster (1 Gbit/s): probe, measure, rank, 2 trials, launch commands."""
from __future__ import annotations

from gpuadvisor.launch.build import build_launch, make_job
from gpuadvisor.ranking import rank
from gpuadvisor.remote.cluster_probe import internode_measurement, probe_cluster, with_network
from gpuadvisor.remote.preflight import preflight, require_ok
from gpuadvisor.schemas import ModelSpec, TrainingSettings, Workload
from gpuadvisor.trials.multinode import run_trial_multinode

PORT = 29621
TINY = Workload(model=ModelSpec(name="tiny", n_layers=4, d_model=64, n_heads=4, d_ff=256, vocab_size=128),
                training=TrainingSettings(seq_len=32, global_batch=8, precision="fp32"))


def test_probe_rank_trials_launch(emu, hosts, no_leftovers, tmp_path):
    require_ok(preflight(hosts, port=PORT))
    cluster = probe_cluster(hosts)
    assert [n.name for n in cluster.nodes] == ["n0", "n1"]
    assert all(n.access.method == "prefix" and n.devices[0].kind == "cpu" for n in cluster.nodes)
    assert any(n.name == emu.ifname for n in cluster.nodes[1].nics)

    m = internode_measurement(cluster, port=PORT, max_bytes=1 << 20, log_dir=tmp_path / "net")
    assert m.network.rate_source == "measured" and m.network.nic == emu.ifname
    assert 0.01 < m.network.bandwidth_gb_per_s < 0.5, m  # 1 Gbit/s shaped: about 0.12 GB/s
    cluster = with_network(cluster, m)
    assert not emu.leftover_pids()

    ranking = rank(cluster, TINY, top=10)
    two_node = [e.plan for e in ranking.top if e.plan.nodes == 2 and not e.plan.zero_stage][:2]
    assert len(two_node) == 2, [e.plan.strategy for e in ranking.top]
    for plan in two_node:
        job = make_job(plan, TINY, steps=3, warmup=1).model_copy(update={"device": "cpu"})
        rec = run_trial_multinode(job, cluster, tmp_path / plan.strategy, timeout_s=150, port=PORT,
                                  env={"OMP_NUM_THREADS": "1"})
        assert rec.status == "ok", rec.error
        assert rec.measured_tokens_per_s and rec.measured_tokens_per_s > 0
        assert rec.metrics is not None and len(rec.metrics.ranks) == 2
        assert not emu.leftover_pids()

    launch = build_launch(ranking.top[0].plan if ranking.top[0].plan.nodes == 2 else two_node[0], cluster, TINY,
                          port=PORT)
    assert len(launch.nodes) == 2
    for nl, addr in zip(launch.nodes, emu.addresses):
        assert f"{emu.addresses[0]}:{PORT}" in nl.argv
        assert any(e.name == "GLOO_SOCKET_IFNAME" and e.value == emu.ifname for e in nl.env)
