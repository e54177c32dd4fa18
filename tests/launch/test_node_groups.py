"""Launch output for many nodes: alike nodes share one command template with $NODE_RANK (launch/render.py), small
clusters keep a section per node, and launch.sh / the placement notes do not grow with the node count."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from gpuadvisor.launch import build_launch, emit, make_job, render_launch
from gpuadvisor.launch.emit import launch_sh
from gpuadvisor.launch.placement import NODE_LINES_MAX, coords, placement_notes
from gpuadvisor.launch.render import node_groups, shell_join
from gpuadvisor.schemas import Cluster, Network, Plan
from gpuadvisor.workload import make_workload

from .launch_fixtures import node

BASH = shutil.which("bash")
NET = Network(bandwidth_gb_per_s=1.17, latency_us=20, protocol="tcp", link_speed_gbit_per_s=10, nic="eno1")


def cluster(n: int, **odd) -> Cluster:
    """n nodes n0..n{n-1} of 2 GPUs; `odd` maps a node index to node() keywords that make it differ."""
    return Cluster(name=f"c{n}", source="test", network=NET,
                   nodes=[node(f"n{i}", **odd.get(f"n{i}", {})) for i in range(n)])


def dp_plan(n: int, **kw) -> Plan:
    return Plan(dp=2 * n, micro_batch_size=1, nodes=n, devices_per_node=2, **kw)


WL = make_workload("gpt2", global_batch=128)


def test_64_alike_nodes_show_one_command_with_the_node_rank_variable():
    lc = build_launch(dp_plan(64), cluster(64), WL)
    assert len(lc.nodes) == 64  # the API keeps one entry per node
    text = render_launch(lc)
    assert text.count("$ torchrun") == 1
    assert "Nodes 0-63 (n0 ... n63): the same command on each of the 64 nodes, with NODE_RANK = 0..63" in text
    assert "--node-rank $NODE_RANK" in text and "--rdzv-conf is_host=$((NODE_RANK==0))" in text
    # the node's own name in a reason reads "each node"; beside the first and last nodes only the placement rule's
    # range (n2 ... n62) is named, and the text has fewer lines than nodes
    assert "NCCL_SOCKET_IFNAME=eno1    # each node reaches the other nodes through the IP interface eno1" in text
    assert not re.search(r"\bn(?:[3-9]|[1-5]\d|6[01])\b", text)
    assert len(text.splitlines()) < 20
    assert "Node 0 (" not in text and "NODE_RANK=0 bash" not in text


def test_two_nodes_still_list_each_node():
    lc = build_launch(dp_plan(2), cluster(2), WL)
    text = render_launch(lc)
    assert text.count("$ torchrun") == 2 and "Nodes " not in text and "$NODE_RANK" not in text
    for i in (0, 1):
        assert f"Node {i} (n{i}): NODE_RANK={i} bash launch.sh" in text
        assert f"# n{i} reaches the other nodes through the IP interface eno1" in text
    assert "--node-rank 1" in text and "is_host=false" in text


def test_the_threshold_lists_each_node_up_to_it_and_groups_past_it():
    at = render_launch(build_launch(dp_plan(NODE_LINES_MAX), cluster(NODE_LINES_MAX), WL))
    assert at.count("$ torchrun") == NODE_LINES_MAX and "Nodes " not in at
    past = render_launch(build_launch(dp_plan(NODE_LINES_MAX + 1), cluster(NODE_LINES_MAX + 1), WL))
    assert past.count("$ torchrun") == 1 and f"each of the {NODE_LINES_MAX + 1} nodes" in past


def test_a_node_that_differs_is_listed_on_its_own():
    lc = build_launch(dp_plan(64), cluster(64, n5={"cores": 8}), WL)  # n5: other OMP_NUM_THREADS
    text = render_launch(lc)
    assert [(g.first.node_rank, g.last.node_rank) for g in node_groups(lc)] == [(0, 4), (5, 5), (6, 63)]
    assert text.count("$ torchrun") == 3
    assert "Nodes 0-4 (n0 ... n4): the same command on each of the 5 nodes, with NODE_RANK = 0..4" in text
    assert "Node 5 (n5): NODE_RANK=5 bash launch.sh" in text and "OMP_NUM_THREADS=4    # 8 physical cores" in text
    assert "Nodes 6-63 (n6 ... n63)" in text and "--node-rank 5 " in text


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_the_template_expands_to_each_nodes_own_command():
    """bash expands the template with NODE_RANK=i to node i's argv (is_host 1/0: torchrun's get_as_bool)."""
    lc = build_launch(dp_plan(16), cluster(16), WL)
    (g,) = node_groups(lc)
    for nl in (lc.nodes[0], lc.nodes[1], lc.nodes[15]):
        out = subprocess.run([BASH, "-c", f"NODE_RANK={nl.node_rank}; printf '%s\\n' {shell_join(g.argv)}"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        want = [a.replace("is_host=true", "is_host=1").replace("is_host=false", "is_host=0") for a in nl.argv]
        assert out == want


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_grouped_launch_sh_runs_each_rank_and_refuses_bad_ones(tmp_path):
    wl = make_workload("gpt2", global_batch=128)
    plan = dp_plan(64, zero_stage=1)
    lc = build_launch(plan, cluster(64, n5={"cores": 8}), wl)
    emit(lc, make_job(plan, wl, steps=20), tmp_path)
    script = (tmp_path / "launch.sh").read_text()
    assert script.count("exec torchrun") == 3 and len(script.splitlines()) < 80
    assert subprocess.run([BASH, "-n", str(tmp_path / "launch.sh")]).returncode == 0
    assert len((tmp_path / "hostfile").read_text().splitlines()) == 65  # marker + one line per node
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/bin/sh\necho "torchrun $* OMP=$OMP_NUM_THREADS"\n')
    (fake / "torchrun").chmod(0o755)
    (fake / "python3").write_text("#!/bin/sh\nexit 0\n")  # the DeepSpeed op prebuild
    (fake / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")

    def run(rank: str) -> subprocess.CompletedProcess:
        return subprocess.run([BASH, str(tmp_path / "launch.sh")], capture_output=True, text=True,
                              env=dict(env, NODE_RANK=rank), cwd="/")

    for rank, host, omp in (("0", "1", "16"), ("5", "false", "4"), ("63", "0", "16")):
        out = run(rank)
        assert out.returncode == 0, out.stderr
        assert f"--node-rank {rank} " in out.stdout and f"is_host={host} " in out.stdout
        assert f"OMP={omp}" in out.stdout and "--nnodes 64" in out.stdout
    for bad in ("64", "-1", "007", "x", "99999999999999999999"):
        r = run(bad)
        assert r.returncode == 2 and "NODE_RANK must be 0..63" in r.stderr, bad
    assert "set NODE_RANK to the index of this node (0=n0 ... 63=n63)" in run("").stderr


def test_small_launch_sh_keeps_a_case_per_node():
    lc = build_launch(dp_plan(2), cluster(2), WL)
    script = launch_sh(lc)
    assert 'case "$NODE_RANK" in' in script and "  0)" in script and "  1)" in script and "$((" not in script


def _holds(rule: str, plan: Plan) -> None:
    """The rule note's formulas ('tp shard r mod 4', 'dp replica (r div 4) mod 8'...) agree with coords()."""
    stated = rule.split("rank r holds ")[1].split(" (mesh order")[0]
    index = {"tp shard": 0, "dp replica": 1, "pp stage": 2}
    for part in stated.split(", "):
        what = next(k for k in index if part.startswith(k))
        expr = part[len(what):].replace("div", "//").replace("mod", "%")
        for r in range(plan.world_size):
            assert eval(expr, {"r": r}) == coords(plan, r)[index[what]], (part, r)  # noqa: S307 (own text)


@pytest.mark.parametrize("kw", [dict(tp=2, dp=16, pp=2), dict(tp=2, dp=16, pp=2, mesh_order="tp-pp-dp"),
                                dict(dp=32, pp=2), dict(dp=32, pp=2, mesh_order="tp-pp-dp"), dict(dp=64),
                                dict(tp=4, dp=16), dict(tp=4, pp=16)])
def test_placement_notes_past_the_threshold_give_a_rule_that_holds(kw):
    plan = Plan(micro_batch_size=1, num_micro_batches=32 if kw.get("pp") else 1, nodes=16, devices_per_node=4,
                **kw)
    names = [f"n{i}" for i in range(16)]
    notes = placement_notes(plan, names)
    per_node = [n for n in notes if n.startswith("placement: node ")]
    assert [n.split(" (")[0] for n in per_node] == ["placement: node 0", "placement: node 1", "placement: node 15"]
    (rule,) = [n for n in notes if n.startswith("placement: nodes 2-14 (n2 ... n14) likewise: node i runs global "
                                                "ranks 4i to 4i+3")]
    _holds(rule, plan)
    assert len(placement_notes(plan, names[:NODE_LINES_MAX])) >= NODE_LINES_MAX  # small: a note per node


def test_deepspeed_hostfile_note_is_summarised_past_the_threshold():
    wl = make_workload("gpt2", global_batch=128)
    lc = build_launch(dp_plan(64, zero_stage=2), cluster(64), wl)
    (note,) = [n for n in lc.notes if n.startswith("deepspeed launcher equivalent")]
    assert "(n0 slots=2; ... 62 more; n63 slots=2)" in note and "--num_nodes 64" in note
    small = build_launch(dp_plan(2, zero_stage=2), cluster(2), wl)
    assert any("(n0 slots=2; n1 slots=2)" in n for n in small.notes)
