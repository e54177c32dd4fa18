"""Human-readable text of a LaunchConfig (CLI output and README.txt).

Up to NODE_LINES_MAX nodes each node gets its own lines. Beyond, nodes whose commands differ only by their rank
share one template, as one writes a launch for many alike nodes: `--node-rank $NODE_RANK` and
`--rdzv-conf is_host=$((NODE_RANK==0))` (bash arithmetic: 1 on node 0, 0 elsewhere; torchrun's
RendezvousParameters.get_as_bool reads 1/0 as true/false), the node's own name in an env reason read as "each
node". Consecutive nodes with the same template form one group ("the same command on each of the N nodes, with
NODE_RANK = a..b"); a node that differs in anything else (another env value, NUMA binding, `--local-addr`) is
listed on its own. Output and time then grow with the number of distinct groups, not with the node count.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from ..schemas.launch import EnvVar, LaunchConfig, NodeLaunch
from .placement import NODE_LINES_MAX

RANK_VAR = "NODE_RANK"
#: argv tokens of a node template, given to the shell as written (never quoted)
RANK_TOKEN = f"${RANK_VAR}"
IS_HOST_TOKEN = f"is_host=$(({RANK_VAR}==0))"
EACH_NODE = "each node"


def _ds_summary(cfg: dict) -> str:
    """One line: stage, offload (activation checkpoints too), batch arithmetic, precision."""
    z = cfg.get("zero_optimization", {})
    offload = [k.removeprefix("offload_") for k in ("offload_optimizer", "offload_param") if k in z]
    if (cfg.get("activation_checkpointing") or {}).get("cpu_checkpointing"):
        offload.append("activation checkpoints")
    prec = "bf16" if "bf16" in cfg else "fp16" if "fp16" in cfg else "fp32"
    return (f"ZeRO stage {z.get('stage')}{' offload ' + '+'.join(offload) + ' to cpu' if offload else ''}; "
            f"train_batch_size {cfg['train_batch_size']} = micro {cfg['train_micro_batch_size_per_gpu']} x GAS "
            f"{cfg['gradient_accumulation_steps']} x dp; {prec}; buckets reduce "
            f"{z.get('reduce_bucket_size'):,} / all-gather "
            f"{z.get('allgather_bucket_size', z.get('stage3_prefetch_bucket_size')):,} elements")


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch in "_.-"


def mask_name(text: str, name: str, by: str = EACH_NODE) -> str:
    """`text` with `name` as a whole word ("dgx-1", not the start of "dgx-10" or "ndgx-1") replaced by `by`."""
    if not name or name not in text:
        return text
    out, i = [], 0
    while (j := text.find(name, i)) >= 0:
        k = j + len(name)
        whole = (j == 0 or not _is_word(text[j - 1])) and (k == len(text) or not _is_word(text[k]))
        out.append(text[i:j] + (by if whole else name))
        i = k
    return "".join(out) + text[i:]


def rank_argv(nl: NodeLaunch) -> tuple[str, ...]:
    """The node's launcher argv with what follows from its rank as shell variables: `--node-rank $NODE_RANK`,
    `--rdzv-conf is_host=$((NODE_RANK==0))`. Arguments of the trained module (after -m) stay as they are."""
    argv = list(nl.argv)
    end = argv.index("-m") if "-m" in argv else len(argv)
    host = f"is_host={'true' if nl.node_rank == 0 else 'false'}"
    for i in range(end - 1):
        if argv[i] == "--node-rank" and argv[i + 1] == str(nl.node_rank):
            argv[i + 1] = RANK_TOKEN
        elif argv[i] == "--rdzv-conf" and argv[i + 1] == host:
            argv[i + 1] = IS_HOST_TOKEN
    return tuple(argv)


def shell_join(argv: tuple[str, ...] | list[str]) -> str:
    """shlex.join, except the template tokens, which the shell must expand."""
    return " ".join(a if a in (RANK_TOKEN, IS_HOST_TOKEN) else shlex.quote(a) for a in argv)


@dataclass(frozen=True)
class NodeGroup:
    """Consecutive nodes that run the same command up to their rank: ranks first..last."""

    nodes: tuple[NodeLaunch, ...]
    argv: tuple[str, ...]       # rank_argv of every member
    env: tuple[EnvVar, ...]     # the members' env, each one's own name read as "each node"
    numa_binding: Optional[str]

    @property
    def first(self) -> NodeLaunch:
        return self.nodes[0]

    @property
    def last(self) -> NodeLaunch:
        return self.nodes[-1]

    def names(self) -> str:
        """'n0', 'n0, n1' or 'n0 ... n63'."""
        if len(self.nodes) <= 2:
            return ", ".join(nl.node for nl in self.nodes)
        return f"{self.first.node} ... {self.last.node}"


def node_groups(launch: LaunchConfig) -> list[NodeGroup]:
    """The nodes in rank order as runs of alike nodes (module docstring); one group per node when they differ."""
    groups: list[NodeGroup] = []
    run: list[NodeLaunch] = []
    key: tuple = ()
    env: tuple[EnvVar, ...] = ()
    for nl in launch.nodes:
        k = (rank_argv(nl), tuple((v.name, v.value, mask_name(v.reason, nl.node)) for v in nl.env), nl.numa_binding)
        if run and k != key:
            groups.append(NodeGroup(tuple(run), key[0], env, key[2]))
            run = []
        if not run:
            key, env = k, tuple(EnvVar(name=n, value=v, reason=r) for n, v, r in k[1])
        run.append(nl)
    if run:
        groups.append(NodeGroup(tuple(run), key[0], env, key[2]))
    return groups


def _node_lines(nl: NodeLaunch, single: bool) -> list[str]:
    """One node's lines, as every node was shown before node groups."""
    how = "bash launch.sh" if single else f"NODE_RANK={nl.node_rank} bash launch.sh"
    return [f"Node {nl.node_rank} ({nl.node}): {how}", *_body(nl.env, nl.numa_binding, shlex.join(nl.argv))]


def _body(env, numa: Optional[str], command: str) -> list[str]:
    """A node's or node group's env lines, NUMA binding and command."""
    out = [f"  {v.name}={v.value}    # {v.reason}" for v in env]
    if numa:
        out.append(f"  NUMA: {numa}")
    out.append(f"  $ {command}")
    return out


def _group_lines(g: NodeGroup) -> list[str]:
    """A group of alike nodes: one template with $NODE_RANK."""
    a, b, n = g.first.node_rank, g.last.node_rank, len(g.nodes)
    return [f"Nodes {a}-{b} ({g.names()}): the same command on each of the {n} nodes, with {RANK_VAR} = {a}..{b} "
            f"({RANK_VAR}=<i> bash launch.sh on node i)", *_body(g.env, g.numa_binding, shell_join(g.argv))]


def node_lines(launch: LaunchConfig) -> list[str]:
    """The per-node part of render_launch: every node up to NODE_LINES_MAX nodes, else node groups."""
    if len(launch.nodes) <= NODE_LINES_MAX:
        return [line for nl in launch.nodes for line in _node_lines(nl, len(launch.nodes) == 1)]
    return [line for g in node_groups(launch)
            for line in (_node_lines(g.first, False) if len(g.nodes) == 1 else _group_lines(g))]


def runs_deepspeed(launch: LaunchConfig) -> bool:
    """The torchrun line runs DeepSpeed (the trainer gets --ds-config). A plan whose ZeRO runs on FSDP
    (Plan.zero_runtime, build.fsdp_zero3) runs FSDP2 and writes ds_config.json for the deepspeed launcher
    alternative only."""
    return launch.deepspeed_config is not None and "--ds-config" in launch.trainer_args


def render_launch(launch: LaunchConfig) -> str:
    """The plan, per-node commands (node groups past NODE_LINES_MAX nodes) with their env, DeepSpeed summary and
    notes, as plain text."""
    p = launch.plan
    out = [f"Plan    : {p.strategy} ({p.to_string()}) on {p.nodes} node(s) x {p.devices_per_node} device(s)",
           f"Launcher: {launch.launcher}"]
    if launch.deepspeed_config is not None:
        alt = "" if runs_deepspeed(launch) else " (ds_config.json, for the deepspeed launcher alternative in the " \
            "notes; the torchrun lines run FSDP2)"
        out.append(f"DeepSpeed{alt}: {_ds_summary(launch.deepspeed_config)}")
    if launch.env:
        out.append("Environment (all nodes):")
        out += [f"  {v.name}={v.value}    # {v.reason}" for v in launch.env]
    out += node_lines(launch)
    if launch.notes:
        out.append("Notes:")
        out += [f"  - {n}" for n in launch.notes]
    return "\n".join(out) + "\n"
