"""A cluster file without `cpu:` leaves ZeRO-Offload priced on one core: the ranking says so, in the CLI too."""
from gpuadvisor.cli.render import render_ranking
from gpuadvisor.hardware.cluster_file import cluster_from_dict
from gpuadvisor.ranking import rank
from gpuadvisor.workload.specs import make_workload

NOTE = "host CPU not described for node box"


def _cluster(cpu=None):
    node = {"name": "box", "gpus": "1x RTX 4090"}
    if cpu:
        node["cpu"] = cpu
    return cluster_from_dict({"name": "one-4090", "nodes": [node]}, name="one-4090", source="test")


def test_offload_candidates_on_an_undescribed_host_get_a_note():
    wl = make_workload("llama-7b", global_batch=64)
    bare = rank(_cluster(), wl, top=3)
    assert any(n.startswith(NOTE) and "cpu: {cores: N, ram_gib: M}" in n for n in bare.notes)
    assert NOTE in render_ranking(bare, _cluster(), wl, width=400)
    described = rank(_cluster({"cores": 16, "ram_gib": 512}), wl, top=3)
    assert not any(n.startswith("host CPU") for n in described.notes)
    # CPU Adam on 16 cores instead of 1: the offload plan the bare host ranks first is much faster
    off = [e for e in described.top if e.plan.zero_offload]
    assert off and bare.top[0].plan.zero_offload
    assert off[0].step.offload_s < bare.top[0].step.offload_s / 8


def test_described_hosts_get_no_note():
    wl = make_workload("gpt2", global_batch=64)
    cpu_ranks = cluster_from_dict({"name": "c", "nodes": [{"name": "h", "cpu_ranks": 2,
                                                           "cpu": {"cores": 2, "ram_gib": 8}}]}, name="c",
                                  source="test")
    assert not any(n.startswith("host CPU") for n in rank(cpu_ranks, wl, top=3).notes)
