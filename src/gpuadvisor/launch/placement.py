"""Where each rank runs: choosing nodes/devices for a plan and describing the rank layout."""
from __future__ import annotations

from ..errors import UserError
from ..schemas.hardware import Cluster, Device, Node
from ..schemas.plan import Plan

#: Up to this many nodes the launch output shows each node (its command, its placement note); beyond, alike nodes
#: share one command template with $NODE_RANK (launch/render.py) and the placement notes give the first two
#: nodes, the rule for the middle ones and the last node, so output grows with distinct nodes, not the count.
NODE_LINES_MAX = 8


def choose_nodes(plan: Plan, cluster: Cluster) -> list[tuple[Node, list[Device]]]:
    """The first `plan.nodes` nodes with enough devices, each with its first `devices_per_node` devices."""
    fit = [n for n in cluster.nodes if len(n.devices) >= plan.devices_per_node]
    if len(fit) < plan.nodes:
        raise UserError(
            f"plan needs {plan.nodes} node(s) x {plan.devices_per_node} device(s) but cluster '{cluster.name}' has "
            f"{cluster.devices_per_node} devices per node; pick a plan that fits or another cluster")
    return [(n, sorted(n.devices, key=lambda d: d.index)[:plan.devices_per_node]) for n in fit[:plan.nodes]]


def coords(plan: Plan, rank: int) -> tuple[int, int, int]:
    """(tp, dp, pp) index of global `rank`, following `plan.mesh_order` (fastest-varying first); the context-parallel
    index (`cp_index`) sits between tp and dp (Megatron-Core's tp-cp-dp-pp order)."""
    tp = rank % plan.tp
    rest = rank // (plan.tp * plan.cp)
    if plan.mesh_order == "tp-dp-pp":
        return tp, rest % plan.dp, rest // plan.dp
    return tp, rest // plan.pp, rest % plan.pp


def cp_index(plan: Plan, rank: int) -> int:
    """The context-parallel index of global `rank`: which share of each sequence it holds (0 without cp)."""
    return (rank // plan.tp) % plan.cp


def _span(xs: list[int]) -> str:
    """[0,1,2] -> '0-2', [3] -> '3', [0,2] -> '0,2'."""
    xs = sorted(set(xs))
    if len(xs) > 1 and xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}-{xs[-1]}"
    return ",".join(map(str, xs))


def _node_note(plan: Plan, i: int, name: str) -> str:
    """Node i's global ranks and their TP/DP/PP coordinates."""
    g = plan.devices_per_node
    ranks = list(range(i * g, (i + 1) * g))
    cs = [coords(plan, r) for r in ranks]
    parts = []
    if plan.pp > 1:
        parts.append(f"pp stage {_span([c[2] for c in cs])}")
    if plan.dp > 1:
        parts.append(f"dp replica {_span([c[1] for c in cs])}")
    if plan.cp > 1:
        parts.append(f"cp rank {_span([cp_index(plan, r) for r in ranks])}")
    if plan.tp > 1:
        parts.append(f"tp shard {_span([c[0] for c in cs])}")
    detail = f": {', '.join(parts)}" if parts else ""
    return f"placement: node {i} ({name}) runs global ranks {_span(ranks)}{detail}"


def _rule_note(plan: Plan, names: list[str]) -> str:
    """Nodes 2..n-2 of many, as a rule: node i's ranks and rank r's coordinates (`coords`)."""
    g, n = plan.devices_per_node, len(names)
    ranks = f"rank {g}i" if g == 1 else f"ranks {g}i to {g}i+{g - 1}"
    parts = _rule_parts(plan)
    where = f"; rank r holds {', '.join(parts)} (mesh order {plan.mesh_order})" if parts else ""
    return (f"placement: nodes 2-{n - 2} ({names[2]} ... {names[n - 2]}) likewise: node i runs global {ranks}"
            f"{where}")


def _rule_parts(plan: Plan) -> list[str]:
    """Rank r's coordinates as formulas, fastest dimension first (tp, cp, then dp and pp in mesh order): 'tp shard
    r mod 4', 'dp replica (r div 4) mod 8', 'pp stage r div 32' (`coords`, `cp_index`)."""
    slow = [("dp replica", plan.dp), ("pp stage", plan.pp)]
    dims = [("tp shard", plan.tp), ("cp rank", plan.cp)] + (slow if plan.mesh_order == "tp-dp-pp" else slow[::-1])
    parts, stride = [], 1
    for i, (what, size) in enumerate(dims):
        if size > 1:
            base = "r" if stride == 1 else f"r div {stride}"
            if i == 0 or any(s > 1 for _, s in dims[i + 1:]):  # a slower dimension follows: modulo this one
                parts.append(f"{what} {base if stride == 1 else f'({base})'} mod {size}")
            else:
                parts.append(f"{what} {base}")
        stride *= size
    return parts


def placement_notes(plan: Plan, names: list[str]) -> list[str]:
    """One note per node (its ranks and their TP/DP/PP coordinates), past NODE_LINES_MAX nodes the first two, a
    rule for the middle ones and the last; plus warnings about groups spanning nodes."""
    g = plan.devices_per_node
    n = len(names)
    if n <= NODE_LINES_MAX:
        notes = [_node_note(plan, i, name) for i, name in enumerate(names)]
    else:
        notes = [_node_note(plan, 0, names[0]), _node_note(plan, 1, names[1]), _rule_note(plan, names),
                 _node_note(plan, n - 1, names[-1])]
    if plan.tp > 1:
        if g % plan.tp == 0:
            notes.append(f"placement: each TP group of {plan.tp} consecutive ranks lies inside one node "
                         "(TP all-reduces every layer and needs the fastest link)")
        else:
            notes.append(f"placement warning: TP groups of {plan.tp} cross node boundaries ({g} GPUs per node): "
                         "every layer all-reduces over the network")
    if plan.cp > 1:
        span = plan.tp * plan.cp
        notes.append(f"placement: each CP group of {plan.cp} ranks (stride {plan.tp}) lies inside one node (the ring "
                     "passes keys and values every layer)" if g % span == 0 else
                     f"placement warning: CP groups of {plan.cp} ranks (tp x cp = {span}) cross node boundaries "
                     f"({g} GPUs per node): the ring passes keys and values over the network every layer")
    if len(names) > 1:
        notes.append("placement: torchrun's c10d rendezvous may number nodes in join order; global ranks "
                     "stay consecutive within a node, so the layout above holds up to a node permutation")
    return notes
