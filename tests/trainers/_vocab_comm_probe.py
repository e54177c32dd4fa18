"""Run under torchrun (2 ranks): the collectives of one forward and backward of the vocabulary-parallel embedding and
LM head (`trainers/vocab.py`), counted by DTensor's CommDebugMode; rank 0 writes {case: {collective: count}} to
argv[1]."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.debug import CommDebugMode

from gpuadvisor.trainers.vocab import VocabParallelEmbedding, VocabParallelHead

from _probe_io import report  # this folder's: torchrun runs a probe from here


def counts(fn) -> dict[str, int]:
    with CommDebugMode() as mode:
        fn()
    return {str(k).rsplit(".", 1)[-1]: v for k, v in mode.get_comm_counts().items()}


def main() -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,))
    weight = torch.nn.Parameter(torch.randn(5, 8))  # 10 vocabulary rows, 5 per rank
    head, embed = VocabParallelHead(weight, mesh), VocabParallelEmbedding(weight, 5 * mesh.get_local_rank(), mesh)
    whole = torch.randn(2, 4, 8, requires_grad=True)
    shard = DTensor.from_local(torch.randn(2, 2, 8, requires_grad=True), mesh, [Shard(1)], run_check=False)
    ids = torch.randint(0, 10, (2, 4))
    out = {"head": counts(lambda: head(whole).sum().backward()),
           "head_sp": counts(lambda: head(shard).sum().backward()),
           "embedding": counts(lambda: embed(ids).sum().backward())}
    report(out)


if __name__ == "__main__":
    main()
