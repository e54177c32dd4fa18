"""A group of commands, one per node, that live and die together (the multi-node probe and trials).

Every command carries `GPUADVISOR_TRIAL_TOKEN=<token>-<node>` in its environment, so whatever it starts on
its node (torchrun, the ranks, in sessions of their own) can be found there by /proc scanning.
Stopping the group: close each node's stdin (a `trials.guard` on the node stops its trial), SIGTERM
then SIGKILL the local session of each node's command (ssh/srun client, or the command itself for
local/prefix nodes), then run the node-side reaper through each node's access, which SIGTERMs and
SIGKILLs every process carrying the token and reports what is left (ideally nothing).
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..schemas.hardware import Node
from .access import describe, node_python, run_on_node, spawn_on_node, stop_session
from .nodeside import TOKEN_VAR, nodeside_argv

__all__ = ["node_token", "NodeProc", "start_group", "wait_group", "stop_group", "reap_on_node", "TOKEN_VAR"]


def node_token(token: str, node: Node) -> str:
    """The token of one node's share of a group run. Per node, because emulated nodes (namespaces) share
    one PID space: a node's watchdog or reaper must not stop another node's processes."""
    return f"{token}-{node.name}"


@dataclass
class NodeProc:
    """One node's command of a group: the local Popen and its log files."""

    node: Node
    popen: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    returncode: Optional[int] = None
    ended_at: Optional[float] = None
    extra: dict = field(default_factory=dict)

    def stderr_tail(self, n: int = 20000) -> str:
        return _tail(self.stderr_path, n)

    def stdout_text(self) -> str:
        return _tail(self.stdout_path, 10_000_000)


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def start_group(commands: Sequence[tuple[Node, Sequence[str], Mapping[str, str]]], log_dir: Path,
                token: str, label: str = "run") -> list[NodeProc]:
    """Start one command per node (env gets the token); logs in log_dir/<label>-<node>.{stdout,stderr}.log.
    If one cannot start, the ones already started are stopped and the UserError is re-raised."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[NodeProc] = []
    try:
        for node, argv, env in commands:
            out = log_dir / f"{label}-{node.name}.stdout.log"
            err = log_dir / f"{label}-{node.name}.stderr.log"
            with open(out, "wb") as so, open(err, "wb") as se:
                p = spawn_on_node(node, argv, env={**env, TOKEN_VAR: node_token(token, node)}, stdout=so, stderr=se)
            procs.append(NodeProc(node, p, out, err))
    except UserError:
        stop_group(procs, token, 1.0)
        raise
    return procs


class Cancelled(Exception):
    """The wait was cancelled from another thread (a UI's cancel button)."""


def wait_group(procs: list[NodeProc], deadline: float, poll_s: float = 0.1,
               cancel: Optional[threading.Event] = None) -> tuple[Optional[NodeProc], bool]:
    """Wait until every command exited 0, one failed, or the monotonic deadline passed.

    Returns (the first node whose command failed or None, timed_out). Raises `Cancelled` once `cancel` is set."""
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        now = time.monotonic()
        for np_ in procs:
            if np_.returncode is None:
                rc = np_.popen.poll()
                if rc is not None:
                    np_.returncode, np_.ended_at = rc, now
        failed = [p for p in procs if p.returncode not in (None, 0)]
        if failed:
            return min(failed, key=lambda p: p.ended_at or 0.0), False
        if all(p.returncode == 0 for p in procs):
            return None, False
        if now >= deadline:
            return None, True
        time.sleep(poll_s)


def reap_on_node(node: Node, token: str, grace_s: float = 3.0, timeout_s: float = 30.0) -> list[int]:
    """Run the node-side reaper: stop every process carrying the token there; return the pids left.

    A node that cannot be reached returns [-1] (unknown: it may still run processes)."""
    try:
        done = run_on_node(node, nodeside_argv(node_python(node), "reap", "--token", token, "--grace",
                                               str(grace_s)), timeout_s)
        for line in reversed(done.stdout.splitlines()):
            if line.startswith("{"):
                return list(json.loads(line).get("left", []))
    except (UserError, ValueError):
        pass
    return [-1]


def stop_group(procs: list[NodeProc], token: str, grace_s: float = 5.0) -> dict[str, list[int]]:
    """Stop every node's command and everything it started; {node description: pids left} for nodes
    where something survived (empty when all is gone)."""
    for p in procs:
        try:
            if p.popen.stdin:
                p.popen.stdin.close()
        except OSError:
            pass
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(p.popen.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        stop_session(p.popen, 1.0)
        if p.returncode is None:
            p.returncode = p.popen.returncode
    nodes = {p.node.name: p.node for p in procs}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        reaped = pool.map(lambda n: reap_on_node(n, node_token(token, n), min(grace_s, 3.0)), nodes.values())
        left = dict(zip(nodes, reaped))
    return {describe(nodes[name]): pids for name, pids in left.items() if pids}


def finish_group(procs: list[NodeProc], token: str) -> dict[str, list[int]]:
    """After a normal exit of every command: close pipes and reap stragglers on each node."""
    return stop_group(procs, token, grace_s=0.5)
