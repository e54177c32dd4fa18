"""Reach a node: turn an argument list into the command that runs it there (local, ssh, slurm, prefix).

Every command is an argument list (shell=False). For ssh the remote command is one string built
with `shlex.join`, so the remote shell sees exactly the argument list; ssh runs with BatchMode=yes
(never prompts) and a ConnectTimeout. Environment variables travel as an `env K=V ... argv` prefix,
which works the same through every method. Processes start in sessions of their own so a whole
node-side tree can be signalled at once.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Optional, Union

from ..errors import UserError
from ..schemas.hardware import Node

SSH_CONNECT_TIMEOUT_S = 5
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

__all__ = ["node_command", "run_on_node", "spawn_on_node", "describe", "node_python", "NodeTimeout",
           "stop_session"]


class NodeTimeout(UserError):
    """A command on a node did not finish in time (it was killed with its session)."""


def node_python(node: Node) -> str:
    """The Python interpreter to run on `node`: this one (the same venv path on every node is checked by
    pre-flight), or $GPUADVISOR_NODE_PYTHON when set."""
    return os.environ.get("GPUADVISOR_NODE_PYTHON") or sys.executable


def describe(node: Node) -> str:
    """'n1 (ip netns exec gpa-n1)', 'n1 (ssh alice@host:2222)', 'n1 (srun -w host)' or 'n1 (local)'."""
    a = node.access
    if a.method == "prefix":
        how = shlex.join(a.prefix) if a.prefix else "prefix (empty)"
    elif a.method == "ssh":
        how = "ssh " + (f"{a.user}@" if a.user else "") + (a.host or "?") + (f":{a.port}" if a.port else "")
    elif a.method == "slurm":
        how = f"srun -w {a.host or node.name}"
    else:
        how = "local"
    return f"{node.name} ({how})"


def _with_env(argv: Sequence[str], env: Optional[Mapping[str, str]]) -> list[str]:
    """`env K=V ... argv` when env is given (validated names), else argv."""
    argv = [str(a) for a in argv]
    if not env:
        return argv
    pairs = []
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            raise UserError(f"environment variable name {k!r} is not valid; use letters, digits and _")
        pairs.append(f"{k}={v}")
    return ["env", *pairs, *argv]


def node_command(node: Node, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
    """The argument list that runs `argv` (with extra `env`) on `node` through its access method.

    local: argv itself; prefix: access.prefix + argv (e.g. `ip netns exec gpa-n0 ...`);
    ssh: `ssh -o BatchMode=yes -o ConnectTimeout=5 [-p port] [-i identity] -- [user@]host <quoted>`;
    slurm: `srun --nodes=1 --ntasks=1 --overlap -w host ...` (inside an allocation).
    Raises UserError when the access is incomplete (ssh/slurm without host, prefix without prefix).
    """
    if not argv:
        raise ValueError("node_command needs a command")
    cmd = _with_env(argv, env)
    a = node.access
    if a.method == "local":
        return cmd
    if a.method == "prefix":
        if not a.prefix:
            raise UserError(f"node {node.name}: access method 'prefix' has an empty prefix; "
                            "set access.prefix, e.g. [ip, netns, exec, gpa-n0]")
        return [*a.prefix, *cmd]
    if a.method == "ssh":
        if not a.host or a.host.startswith("-"):
            raise UserError(f"node {node.name}: ssh access needs a host name (got {a.host!r}); "
                            "set access.host or access.ssh: user@host:port")
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"]
        if a.port:
            ssh += ["-p", str(a.port)]
        if a.identity_file:
            ssh += ["-i", os.path.expanduser(a.identity_file)]
        dest = f"{a.user}@{a.host}" if a.user else a.host
        return [*ssh, "--", dest, shlex.join(cmd)]
    if a.method == "slurm":
        host = a.host or node.name
        return ["srun", "--nodes=1", "--ntasks=1", "--overlap", "--kill-on-bad-exit=1", "-w", host, *cmd]
    raise UserError(f"node {node.name}: unknown access method {a.method!r}; use local, ssh, slurm or prefix")


def stop_session(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM the process's session (it leads one), wait up to grace_s, then SIGKILL it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace_s)
            if sig == signal.SIGTERM:
                try:  # the leader exited: make sure the rest of its group is gone too
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        except subprocess.TimeoutExpired:
            continue


def run_on_node(node: Node, argv: Sequence[str], timeout_s: float, *, env: Optional[Mapping[str, str]] = None,
                input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run `argv` on `node` and wait (text output captured); raise NodeTimeout after `timeout_s`.

    The command runs in a session of its own; on timeout the session is killed. A command that
    cannot start (ssh/srun/ip missing) raises UserError naming the node. A non-zero exit is returned,
    not raised: callers turn it into their own message.
    """
    cmd = node_command(node, argv, env)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, shell=False)
    except OSError as exc:
        raise UserError(f"node {describe(node)}: cannot run {cmd[0]!r}: {exc.strerror or exc}; "
                        f"install it or fix the node's access") from None
    try:
        out, err = proc.communicate(input=input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_session(proc, 1.0)
        proc.communicate()
        raise NodeTimeout(f"node {describe(node)}: '{shlex.join(list(map(str, argv)))[:80]}' did not finish "
                          f"within {timeout_s:g} s and was stopped; check that the node is up") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def spawn_on_node(node: Node, argv: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                  stdin: Union[int, IO, None] = subprocess.PIPE, stdout: Union[int, IO, None] = None,
                  stderr: Union[int, IO, None] = None) -> subprocess.Popen:
    """Start `argv` on `node` in a new session and return the (local) Popen: the command itself for
    local/prefix nodes, the ssh/srun client otherwise. stdin defaults to a pipe: closing it tells a
    `gpuadvisor.trials.guard` on the node that the advisor is gone."""
    cmd = node_command(node, argv, env)
    try:
        return subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True,
                                shell=False)
    except OSError as exc:
        raise UserError(f"node {describe(node)}: cannot run {cmd[0]!r}: {exc.strerror or exc}; "
                        f"install it or fix the node's access") from None
