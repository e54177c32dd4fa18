"""Expert parallelism (EP) for the MoE layers of the bundled decoder: routed experts split over `plan.ep` ranks.

What a rank holds: the routed experts of every MoE layer are cut into ep contiguous blocks; the rank with
ep-index j keeps experts [j*E/ep, (j+1)*E/ep) (`ExpertParallel.local`). The router, the shared expert and
every dense parameter stay replicated, as in DeepSpeed-MoE's expert + data parallelism (Rajbhandari et al.
2022) and Megatron-Core's MoE. Only data-parallel plans run it (tp = pp = 1, ep divides dp): the ep
group is ep neighbouring ranks (rank r has ep-index r mod ep, Megatron-Core's "tp-ep-dp-pp" rank order with
tp = 1), the expert-data-parallel (edp) group the dp/ep ranks with the same ep-index (r, r + ep, r + 2 ep, ...),
which hold the same experts.

Forward of one MoE layer (GShard, Lepikhin et al. 2020, §2.2 dispatch/combine; Switch Transformer, Fedus et
al. 2021, §2.2; Megatron-Core's `MoEAlltoAllTokenDispatcher`, token_dispatcher="alltoall"):
1. route this rank's tokens exactly as the single-device MoE does (top-k logits, softmax over the k; no
   capacity, no dropping, so the result equals the single-device layer);
2. sort the (token, slot) pairs by expert (stable: per expert in token order, the single-device order), so
   they are grouped by the owning rank; exchange the per-expert counts with one all-to-all;
3. all-to-all the token rows to the owners (`all_to_all_single` with uneven splits; empty splits allowed);
4. each local expert runs once on the rows every source sent it (Megatron's sort by local expert), always,
   even on zero rows, so every expert parameter takes part in every step;
5. all-to-all the results back (the reverse splits), weight them by the routing weights and add them into
   the token rows (`index_add`, expert order as the single-device layer).
The all-to-all is an autograd Function whose backward is the reverse all-to-all, so gradients reach the
experts from every rank's tokens and the token gradients return to their rank.

Gradients: dense, router and shared-expert gradients are averaged over all dp ranks as without EP. An expert's
gradient on its owner already sums the contributions of the ep group's tokens (the backward all-to-all brings
them), each the gradient of its own replica's mean loss; summing that over the edp group (the ranks holding the
same expert, each serving other replicas) gives the sum over all dp replicas, so the mean-loss gradient is that
sum divided by dp, not by the edp size (Megatron-Core's DDP scales expert gradients by edp/dp on top of its
edp average for the same reason). Under DDP and ZeRO-1 `reduce_expert_grads` does that after the last
micro-batch; under ZeRO-2/3 FSDP2 does it with the experts' gradient divide factor (`strategies/expert.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from .blocks import MoE


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` with uneven splits; backward sends the gradients back with the splits swapped."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:
        ctx.out_splits, ctx.in_splits, ctx.group = out_splits, in_splits, group
        return all_to_all(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # type: ignore[override]
        return all_to_all(grad, ctx.in_splits, ctx.out_splits, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:
    """Rows `in_splits[j]` of x go to rank j of `group`; returns the rows received, `out_splits[j]` from rank j."""
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


@dataclass
class ExpertParallel:
    """This rank's place in expert parallelism: its ep group, its edp group and the experts it holds."""

    ep: int
    ep_rank: int  # j: this rank holds experts [j*E/ep, (j+1)*E/ep)
    dp: int
    ep_group: Any
    edp_group: Any
    edp_size: int
    mesh: Any = None  # the ("edp", "ep") DeviceMesh; FSDP2 shards experts over its "edp" dim

    def local(self, n_experts: int) -> range:
        """The global indices of the routed experts this rank holds (a contiguous block)."""
        if n_experts % self.ep:
            raise ValueError(f"ep={self.ep} does not divide the {n_experts} routed experts")
        per = n_experts // self.ep
        return range(self.ep_rank * per, (self.ep_rank + 1) * per)

    def combine(self, flat: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor, experts: nn.ModuleList,
                n_experts: int) -> torch.Tensor:
        """sum_k w_k E_k(x) for this rank's tokens `flat` (tokens, d), routed to global experts `idx` (tokens, k)
        with `weights`, the experts living on the ep group's ranks (`experts`: this rank's block)."""
        ep, per = self.ep, n_experts // self.ep
        k = idx.shape[1]
        pairs = idx.reshape(-1)  # pair p = token * k + slot
        order = torch.argsort(pairs, stable=True)  # by expert, then token: the single-device order
        token = order // k
        per_expert = torch.bincount(pairs, minlength=n_experts)  # rows this rank sends to each global expert
        got = all_to_all(per_expert, [per] * ep, [per] * ep, self.ep_group).view(ep, per)  # [source, local expert]
        send = per_expert.view(ep, per).sum(1).tolist()
        recv = got.sum(1).tolist()
        rows = _AllToAll.apply(flat.index_select(0, token), recv, send, self.ep_group)  # by source, then expert
        # regroup the received rows by local expert (each expert once over all sources), run, and undo
        counts = got.tolist()
        starts, at = [[0] * per for _ in range(ep)], 0
        for s in range(ep):
            for e in range(per):
                starts[s][e], at = at, at + counts[s][e]
        by_expert = [torch.arange(starts[s][e], starts[s][e] + counts[s][e], device=flat.device)
                     for e in range(per) for s in range(ep)]
        perm = torch.cat(by_expert) if by_expert else torch.zeros(0, dtype=torch.long, device=flat.device)
        x_local = rows.index_select(0, perm)
        outs, at = [], 0
        for e, expert in enumerate(experts):
            n = sum(counts[s][e] for s in range(ep))
            outs.append(expert(x_local[at:at + n]))
            at += n
        y_local = torch.cat(outs)
        y_rows = torch.empty_like(y_local).index_copy(0, perm, y_local)  # back to the received order
        y = _AllToAll.apply(y_rows, send, recv, self.ep_group)  # back to this rank, in `order`
        y = y * weights.reshape(-1).index_select(0, order).unsqueeze(-1)
        return torch.zeros_like(flat).index_add(0, token, y)


def expert_parallel(ctx) -> Optional[ExpertParallel]:
    """The ep and edp process groups of this data-parallel plan (None when ep = 1), created once per strategy.

    A ("edp", "ep") DeviceMesh over the dp ranks, ep fastest: rank r has ep-index r % ep and edp-index r // ep.
    The mesh itself is kept as `.mesh` for FSDP2 (experts shard over its "edp" dim).
    """
    plan = ctx.plan
    if plan.ep == 1:
        return None
    if plan.tp != 1 or plan.pp != 1 or plan.dp != ctx.world_size or plan.dp % plan.ep:
        raise ValueError(f"expert parallelism runs over data-parallel ranks only (tp = pp = 1, ep divides dp), "
                         f"not {plan.to_string()}")
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(ctx.device.type, (plan.dp // plan.ep, plan.ep), mesh_dim_names=("edp", "ep"))
    return ExpertParallel(ep=plan.ep, ep_rank=mesh.get_local_rank("ep"), dp=plan.dp, ep_group=mesh.get_group("ep"),
                          edp_group=mesh.get_group("edp"), edp_size=plan.dp // plan.ep, mesh=mesh)


def shard_experts(model: nn.Module, ep: ExpertParallel) -> list[str]:
    """Keep only this rank's block of routed experts in every MoE layer of `model` (built whole from the seed, so
    every rank starts from the single-device weights) and switch those layers to all-to-all dispatch.

    Local experts are renumbered from 0 in the module tree (`mlp.experts.<i>` is global expert
    `ep_rank * E/ep + i`, Megatron's `local_experts` naming). Returns the names of the expert parameters.
    """
    for m in model.modules():
        if isinstance(m, MoE):
            keep = ep.local(m.n_routed)
            m.experts = nn.ModuleList(m.experts[i] for i in keep)
            m.expert_parallel = ep
    return expert_param_names(model)


def expert_param_names(model: nn.Module) -> list[str]:
    """Fully qualified names of the routed experts' parameters (what EP shards; the rest is replicated)."""
    names = []
    for mod_name, m in model.named_modules():
        if isinstance(m, MoE):
            prefix = f"{mod_name}.experts." if mod_name else "experts."
            names += [prefix + n for n, _ in m.experts.named_parameters()]
    return names


def reduce_expert_grads(params: list[nn.Parameter], ep: ExpertParallel) -> None:
    """Sum the expert gradients over the edp group (one flat all-reduce) and divide by dp (see the module doc)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.flatten() for g in grads])
    if ep.edp_size > 1:
        dist.all_reduce(flat, group=ep.edp_group)  # SUM: gloo has no AVG
    flat /= ep.dp
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
