"""Where this rank sits: process group, device, and its (dp, tp, pp) coordinates from the plan.

Like torchtitan's ParallelDims: the plan's degrees must multiply to the world size, and the rank
layout follows `plan.mesh_order` ("tp-dp-pp": tp varies fastest, then dp, then pp; so with tp=2,
dp=2 ranks 0,1 form a TP group and ranks 0,2 a DP group). Multi-dimensional plans get a
`DeviceMesh` whose named dims ("dp", "tp", "pp") give the sub-groups the strategies use.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Optional

import torch
import torch.distributed as dist

from ..schemas.job import TrainerJob
from ..schemas.plan import Plan

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
from .layout import coords_of, mesh_shape


@dataclass
class Context:
    """Everything a strategy needs about this process."""

    job: TrainerJob
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    coords: dict[str, int]
    mesh: Optional[DeviceMesh] = None  # when the plan is multi-dimensional
    amp_dtype: Optional[torch.dtype] = None  # None = fp32

    @property
    def plan(self) -> Plan:
        return self.job.plan

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def group(self, dim: str):
        """Process group of mesh dimension `dim` (the default group when the plan has no mesh)."""
        if self.mesh is None:
            return dist.group.WORLD
        return self.mesh_dim(dim).get_group()

    def mesh_dim(self, dim: str) -> DeviceMesh:
        """The 1-D sub-mesh of dimension `dim` ("dp", "tp", "pp"); multi-dimensional plans have a mesh."""
        if self.mesh is None:
            raise ValueError(f"plan {self.plan.to_string()} has no device mesh, so no '{dim}' dimension")
        return self.mesh[dim]

    @property
    def precision(self) -> str:
        """Precision actually used, e.g. 'bf16', or 'fp32 (bf16 requested)' on CPU; fp8 on CUDA runs bf16 and says
        why: 'bf16 (fp8 requested: the bundled trainers have no FP8 kernels)'."""
        asked = self.job.workload.training.precision
        used = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype]
        if used == asked:
            return used
        if asked == "fp8" and used == "bf16":
            return f"bf16 (fp8 requested: {NO_FP8})"
        return f"{used} ({asked} requested)"


#: Why an fp8 job trains bf16 here: FP8 training needs Transformer Engine or torchao float8 Linears, which the
#: bundled models (trainers/blocks.py: torch.nn.Linear under torch.autocast) do not use
NO_FP8 = "the bundled trainers have no FP8 kernels"


def amp_dtype_for(precision: str, device_type: str) -> Optional[torch.dtype]:
    """The autocast dtype of a job's precision on a device: None (fp32) on CPU or for fp32; bf16 for bf16 and for
    fp8 (FP8 Linears are not built here: the bf16 rest of an FP8 run, reported by `Context.precision`); fp16."""
    if device_type != "cuda" or precision == "fp32":
        return None
    return torch.float16 if precision == "fp16" else torch.bfloat16


def pick_device(job: TrainerJob, local_rank: int) -> torch.device:
    """cuda:<local_rank> when CUDA is there and allowed, else cpu; ValueError if cuda is demanded but absent."""
    has_cuda = torch.cuda.is_available()
    if job.device == "cuda" and not has_cuda:
        raise ValueError("job.device is 'cuda' but torch sees no CUDA device; use device 'auto' or 'cpu'")
    if job.device == "cpu" or not has_cuda:
        return torch.device("cpu")
    if local_rank >= torch.cuda.device_count():
        raise ValueError(f"local rank {local_rank} has no GPU (only {torch.cuda.device_count()} visible)")
    return torch.device("cuda", local_rank)


def pick_backend(job: TrainerJob, device: torch.device) -> str:
    if job.backend == "nccl" and device.type != "cuda":
        raise ValueError("backend 'nccl' needs CUDA devices; use backend 'gloo' or 'auto' on CPU")
    if job.backend != "auto":
        return job.backend
    return "nccl" if device.type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(job: TrainerJob) -> Context:
    """Init the process group (torchrun env, or a 1-rank group without torchrun) and build the context."""
    plan = job.plan
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world != plan.world_size:
        raise ValueError(
            f"the plan needs {plan.world_size} ranks (dp*tp*pp = {plan.dp}*{plan.tp}*{plan.pp}) but the launcher "
            f"started {world}; run `torchrun --nproc-per-node {plan.world_size} -m gpuadvisor.trainers ...`"
        )
    if "MASTER_ADDR" not in os.environ:  # single process without torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1",
                          LOCAL_RANK="0")
    device = pick_device(job, local_rank)
    backend = pick_backend(job, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():  # several jobs in one launch (run_jobs): reuse the group
        if dist.get_world_size() != world or dist.get_backend() != backend:
            raise ValueError("an existing process group does not match this job's world size/backend")
    else:
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=job.init_timeout_s))
    amp = amp_dtype_for(job.workload.training.precision, device.type)
    ctx = Context(job=job, rank=rank, world_size=world, local_rank=local_rank, device=device, backend=backend,
                  coords=coords_of(rank, plan), amp_dtype=amp)
    if plan.tp > 1 or plan.pp > 1:  # pure DP/ZeRO use the default group
        from torch.distributed.device_mesh import init_device_mesh

        shape, names = mesh_shape(plan)
        ctx.mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    return ctx


def teardown(clean: bool = False) -> None:
    """Destroy the process group if one exists (called in `finally`).

    After a clean run the ranks first meet at a barrier: a gloo rank that destroys its group while a
    peer is still sending can abort (SIGABRT) after the metrics were written.
    """
    if dist.is_available() and dist.is_initialized():
        if clean:
            try:
                dist.barrier()
            except Exception:  # a peer already failed: tear down anyway
                pass
        dist.destroy_process_group()
