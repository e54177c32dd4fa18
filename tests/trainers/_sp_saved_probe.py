"""Run under torchrun (2 ranks): the tensors one tensor-parallel block saves for its backward, with and without
sequence parallelism (`trainers/strategies/tensor.py` block_plan on PyTorch's DTensor). Rank 0 writes
{case: [rows of each distinct saved activation whose last dim is d_model]} to argv[1] (a Linear saves its input
flattened to (rows, d_model): b·s rows when whole, b·s/tp as a sequence shard)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from gpuadvisor.schemas import ModelSpec
from gpuadvisor.trainers.blocks import Block, BlockConfig
from gpuadvisor.trainers.strategies.tensor import block_plan

from _probe_io import report  # this folder's: torchrun runs a probe from here

SPEC = ModelSpec(name="probe", n_layers=1, d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, vocab_size=32, max_seq_len=0,
                 mlp="swiglu")
B, S = 2, 8


def saved_rows(sequence_parallel: bool) -> list[int]:
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    block = Block(BlockConfig.from_spec(SPEC, 0))
    parallelize_module(block, mesh, block_plan(block, sequence_parallel))
    x = torch.randn(B, S, SPEC.d_model)
    if sequence_parallel:  # this rank's sequence shard, a plain tensor as the previous layer hands it over
        x = x[:, S // 2 * mesh.get_local_rank():][:, :S // 2]
    x = x.contiguous().requires_grad_()
    rows: dict[int, int] = {}
    params = {p.to_local().untyped_storage().data_ptr() if isinstance(p, DTensor) else p.untyped_storage().data_ptr()
              for p in block.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        local = t.to_local() if isinstance(t, DTensor) else t
        ptr = local.untyped_storage().data_ptr()
        if local.dim() >= 2 and local.shape[-1] == SPEC.d_model and ptr not in params:
            rows[ptr] = local.numel() // SPEC.d_model
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(x)
    (out.to_local() if isinstance(out, DTensor) else out).sum().backward()
    return sorted(rows.values())


def main() -> None:
    dist.init_process_group("gloo")
    out = {"tp": saved_rows(False), "tp_sp": saved_rows(True)}
    report(out)


if __name__ == "__main__":
    main()
