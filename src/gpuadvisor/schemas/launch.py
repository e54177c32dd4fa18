"""The hand-over: how to launch the winning plan on every node."""
from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from ._base import Frozen
from .estimate import Estimate
from .plan import Plan


class EnvVar(Frozen):
    """One recommended environment variable, with why."""

    name: str
    value: str
    reason: str


class NodeLaunch(Frozen):
    """What to run on one node."""

    node: str
    node_rank: int
    argv: list[str] = Field(description="Launcher command line as an argument list (no shell)")
    env: list[EnvVar] = Field(default_factory=list)
    numa_binding: Optional[str] = Field(None, description="How ranks are bound to their device's NUMA node")


class LaunchConfig(Frozen):
    """Everything needed to start training with the chosen plan."""

    plan: Plan
    estimate: Optional[Estimate] = None
    launcher: str = Field(description="torchrun or deepspeed")
    nodes: list[NodeLaunch]
    trainer_args: list[str] = Field(description="Arguments of the bundled trainer (python -m gpuadvisor.trainers ...)")
    deepspeed_config: Optional[dict[str, Any]] = None
    env: list[EnvVar] = Field(default_factory=list, description="Environment common to all nodes")
    notes: list[str] = Field(default_factory=list, description="LR scaling, placement and other advice")
