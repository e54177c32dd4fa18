"""Pre-flight: before anything runs on a cluster, check every node through its access.

Each node must answer (reachable), run the same Python, torch, DeepSpeed, gpuadvisor and NCCL as
node 0, have the interface and address its access names, and (where it has GPUs) no other compute
process on them; the rendezvous port must be free on the master (node 0). Problems come back per
node, each with its fix; `require_ok` turns them into one UserError with one line per failing node:

    node n1 (ip netns exec gpa-n1): torch 2.12.0 != 2.13.0 on n0; install the same version
"""
from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from pydantic import Field

from ..errors import UserError
from ..schemas._base import Frozen
from ..schemas.hardware import Cluster, Node
from .access import NodeTimeout, describe, node_python, run_on_node
from .nodeside import nodeside_argv

FactsProbe = Callable[[Node, Optional[int]], dict]
COMPARED = (("python", "Python"), ("torch", "torch"), ("deepspeed", "deepspeed"), ("gpuadvisor", "gpuadvisor"),
            ("nccl", "NCCL"))

__all__ = ["NodeCheck", "preflight", "require_ok", "node_facts", "NodeUnreachable"]


class NodeUnreachable(UserError):
    """A node did not answer through its access."""


class NodeCheck(Frozen):
    """What pre-flight found on one node."""

    node: str
    access: str = Field(description="How the node was reached, e.g. 'n1 (ip netns exec gpa-n1)'")
    ok: bool
    problems: list[str] = Field(default_factory=list, description="One sentence each, ending with the fix")
    facts: dict[str, Any] = Field(default_factory=dict, description="What the node reported (versions, NICs...)")


def _tail(text: str) -> str:
    """Last non-empty line, one line, at most 200 characters."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:200]


def _unreachable_fix(node: Node) -> str:
    m = node.access.method
    if m == "prefix":
        return "check that the prefix command works by hand (does the namespace/container exist?)"
    if m == "ssh":
        return "check `ssh -o BatchMode=yes` to it works without a password (key, host, port)"
    if m == "slurm":
        return "run inside a Slurm allocation that includes this host"
    return "check the local Python"


def node_facts(node: Node, bind_port: Optional[int] = None, timeout_s: float = 30.0) -> dict:
    """Run the node-side `facts` program on `node`; raise NodeUnreachable with the reason and fix."""
    args = ["facts"] + (["--bind-port", str(bind_port)] if bind_port else [])
    try:
        done = run_on_node(node, nodeside_argv(node_python(node), *args), timeout_s)
    except NodeTimeout as exc:
        raise NodeUnreachable(str(exc)) from None
    if done.returncode != 0:
        raise NodeUnreachable(f"unreachable (exit {done.returncode}: {_tail(done.stderr or done.stdout)}); "
                              f"{_unreachable_fix(node)}")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise NodeUnreachable(f"answered without a facts report ({_tail(done.stdout + done.stderr)}); "
                          f"check that {node_python(node)} is a working Python there")


def _versions(f: dict) -> dict[str, Optional[str]]:
    v = dict(f.get("versions") or {})
    v["python"] = f.get("python")
    v["nccl"] = f.get("nccl")
    return v


def _network_problems(node: Node, f: dict) -> list[str]:
    """The access's ifname must exist; its address must be on it."""
    out = []
    ifaces: dict = f.get("interfaces") or {}
    a = node.access
    if a.ifname and a.ifname not in ifaces:
        have = ", ".join(n for n in ifaces if n != "lo") or "none besides lo"
        out.append(f"interface {a.ifname} does not exist (has {have}); set access.ifname to the interface "
                   "the other nodes are reached through")
    elif a.ifname and a.address and _is_ipv4(a.address):
        got = (ifaces.get(a.ifname) or {}).get("ipv4")
        if got != a.address:
            owner = next((n for n, i in ifaces.items() if (i or {}).get("ipv4") == a.address), None)
            where = f"it is on {owner}" if owner else "no interface has it"
            out.append(f"address {a.address} is not on {a.ifname} ({a.ifname} has {got or 'no IPv4'}, {where}); "
                       "fix access.address or access.ifname")
    elif a.address and _is_ipv4(a.address) and not any((i or {}).get("ipv4") == a.address for i in ifaces.values()):
        out.append(f"no interface has address {a.address}; fix access.address")
    return out


def _is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdecimal() and 0 <= int(p) <= 255 for p in parts)


def _check_node(i: int, node: Node, f: dict, ref: Optional[dict], ref_name: str, port: Optional[int]) -> list[str]:
    """Problems of one node given its facts and node 0's."""
    problems = []
    mine = _versions(f)
    if not mine.get("torch"):
        problems.append(f"torch is not installed for {f.get('executable', 'its Python')}; "
                        "install the same torch as on the other nodes")
    if ref is not None and i > 0:
        theirs = _versions(ref)
        for key, label in COMPARED:
            a, b = mine.get(key), theirs.get(key)
            if a != b and not (key == "nccl" and (a is None or b is None)) and not (key == "torch" and not a):
                problems.append(f"{label} {a or 'missing'} != {b or 'missing'} on {ref_name}; install the same version")
    problems += _network_problems(node, f)
    if i == 0 and port:
        p = f.get("port") or {}
        if p and not p.get("free"):
            problems.append(f"rendezvous port {port} is in use on the master ({p.get('error') or 'cannot bind'}); "
                            "pick another --port or stop the process that holds it")
    users = f.get("gpu_users")
    if any(d.kind == "gpu" for d in node.devices):
        if users is None:
            problems.append("nvidia-smi failed, so GPU users are unknown; check the driver (nvidia-smi)")
        elif users:
            shown = ", ".join(f"pid {u['pid']} {u['name']} ({u['used_mib']} MiB)" for u in users[:3])
            problems.append(f"GPUs are busy: {shown}; wait for it or stop it before measuring")
    return problems


def preflight(cluster: Cluster, *, port: Optional[int] = 29500, timeout_s: float = 30.0,
              facts_probe: Optional[FactsProbe] = None) -> list[NodeCheck]:
    """Check every node of `cluster` before probing, measuring or launching on it.

    Args:
        cluster: nodes with their `access` (local, ssh, slurm, prefix).
        port: the rendezvous port, checked free on node 0 (the master); None skips that check.
        timeout_s: per-node limit for the answer.
        facts_probe: `(node, bind_port) -> facts dict` replacing the node-side program (tests inject
            mismatched versions this way).

    Returns:
        One NodeCheck per node, in cluster order; `ok` is False with problems (each with its fix).
    """
    probe = facts_probe or (lambda node, bind_port: node_facts(node, bind_port, timeout_s))

    def ask(i_node: tuple[int, Node]) -> tuple[Optional[dict], Optional[str]]:
        i, node = i_node
        try:
            return probe(node, port if i == 0 else None), None
        except UserError as exc:
            msg = str(exc)
            prefix = f"node {describe(node)}: "
            return None, msg[len(prefix):] if msg.startswith(prefix) else msg

    with ThreadPoolExecutor(max_workers=min(8, len(cluster.nodes))) as pool:
        answers = list(pool.map(ask, enumerate(cluster.nodes)))
    ref = answers[0][0]
    checks = []
    for i, (node, (facts, err)) in enumerate(zip(cluster.nodes, answers)):
        problems = [err] if err else _check_node(i, node, facts or {}, ref, cluster.nodes[0].name, port)
        checks.append(NodeCheck(node=node.name, access=describe(node), ok=not problems, problems=problems,
                                facts=facts or {}))
    return checks


def require_ok(checks: list[NodeCheck]) -> None:
    """Raise one UserError with one line per failing node (`node <access>: <problem>; <problem>`)."""
    bad = [c for c in checks if not c.ok]
    if bad:
        raise UserError("\n".join(f"node {c.access}: {'; '.join(c.problems)}" for c in bad))
