"""Pipeline parallelism with torch.distributed.pipelining.

The GPT's layers are split into pp * v contiguous chunks (`split_layers`); the first chunk also
holds the embeddings, the last the final LayerNorm and LM head (head untied, see model.py).
Rank with pipeline coordinate r runs chunks r, r + pp, ... (the looped placement interleaved
1F1B needs; v = plan.pp_virtual_stages). Each replica's batch (mb * m sequences) is cut into
m = plan.num_micro_batches micro-batches by the schedule:
- GPipe (Huang et al. 2019): all forwards, then all backwards; m micro-batches of activations live.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021): warm-up forwards then one-forward-one-backward;
  at most pp micro-batches in flight on stage 0. Bubble (p - 1)/(m + p - 1) for both.
- Interleaved 1F1B (Narayanan et al. 2021, §2.2): v chunks per rank shrink the bubble by v at the
  price of v times more point-to-point messages.
The loss function returns each micro-batch's mean cross-entropy and the schedule divides the
gradients by m (scale_grads), so gradients are those of the replica's mean loss.

PP x DP: each stage module is replicated over the "dp" mesh dimension with FSDP2's `replicate`
(per-block gradient all-reduce; `ddp_bucket_mb` does not apply), which PipelineStage drives so
gradients are all-reduced once per step, after the last micro-batch. Not DDP: wrapped in DDP,
the first stage crashes in DDP's bucket rebuild, and with static_graph=True it trains but its
losses drift from the single-device run (torch 2.13, gloo; reproduced), while `replicate` matches.
ZeRO x PP: zero_stage 3 `fully_shard`s each stage over "dp" instead (`fsdp.shard_gpt`; torchtitan's 3D
layout without TP); zero_stage 1 keeps plain stages, averages their gradients over "dp" in one all-reduce
after the flush (Megatron's default, no overlap) and steps a distributed optimizer (`zero1.py`).
`ZeroRedundancyOptimizer` cannot broadcast `replicate`'s DTensor parameters ("c10d.broadcast_ has no
sharding strategy"), hence the plain stages.
TP x PP (x DP): every stage's blocks are cut over the "tp" mesh dimension with `tensor.py`'s plan before the
stage is wrapped (torchtitan's order: TP inside each stage, then FSDP/replicate over "dp", then the schedule).
The stages of one TP rank exchange plain tensors over their "pp" group, b·s·h/tp each as Megatron sends them:
this rank's sequence shard with sequence parallel, and without it this rank's slice of the hidden dimension,
all-gathered over "tp" by the next stage (Megatron's scatter-gather, `GPTStage.exchange_tp_slices`). Every TP
rank of the last stage computes the same loss; TP rank 0 owns it. Tied embeddings are synced per (dp, tp) between
the first and the last stage (each TP rank keeps whole, equal copies). ZeRO-1 x TP x PP (Megatron's distributed
optimizer in 3D) turns each stage's DTensor parameters into local tensors first (`_pre_dp_module_transform`, as
`tensor.py` does before DDP), so the flat gradient average and `ZeroRedundancyOptimizer` see plain tensors.
Token accounting (Appendix F): only the last stage counts tokens; the others report 0 (with TP, each TP rank of
the last stage counts its replica's tokens, and the TP rule takes their maximum).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union, cast

from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from ..model import GPT, GPTStage, split_layers
from ..parallel import Context

if TYPE_CHECKING:
    from torch.distributed.pipelining.stage import _PipelineStageBase
from .base import Strategy, make_optimizer


def replicate_stage(mod, dp_mesh):
    """Data-parallel replication of one stage with PyTorch's FSDP2-based `replicate`: one gradient
    all-reduce per transformer block (overlapped with backward) plus one for the rest."""
    from torch.distributed._composable.replicate_with_fsdp import replicate

    for block in mod.blocks:
        replicate(block, mesh=dp_mesh)
    return replicate(mod, mesh=dp_mesh)


class Pipeline(Strategy):
    """PP over the "pp" mesh dimension, optionally tensor-parallel over "tp" inside each stage and data-parallel
    over "dp" (PP x DP, TP x PP, TP x PP x DP; ZeRO-1 or ZeRO-3 over "dp")."""

    name = "pp"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        plan = ctx.plan
        v, pp, m = plan.pp_virtual_stages, plan.pp, plan.num_micro_batches
        if v > 1 and plan.pp_schedule != "interleaved":
            raise ValueError("pp_virtual_stages > 1 needs pp_schedule 'interleaved'")
        if self.scaler is not None:
            raise ValueError("fp16 with loss scaling is not supported with pipeline parallelism; use bf16")
        if plan.tp > 1:
            from .tensor import check_tp, vocab_loss

            check_tp(ctx, self.seq_len)
            self.loss_fn = vocab_loss(ctx)
        n_chunks = pp * v
        ranges = split_layers(ctx.job.workload.model.n_layers, n_chunks)
        # head starts as a copy of the embedding; tied grads synced per step
        gpt = cast(GPT, self.build_model(tie=False))
        r = ctx.coords["pp"]
        self.stage_ids = [r + i * pp for i in range(v)]
        self.is_first, self.is_last = 0 in self.stage_ids, n_chunks - 1 in self.stage_ids
        pp_group = ctx.group("pp")
        self.modules: list[GPTStage] = []
        stages: list[_PipelineStageBase] = []
        for s in self.stage_ids:
            mod = GPTStage(gpt, *ranges[s], is_first=s == 0, is_last=s == n_chunks - 1).to(ctx.device)
            if plan.tp > 1:  # TP inside the stage (tensor.py's plan), before any data-parallel wrapper
                from .tensor import parallelize_gpt

                tp_mesh = ctx.mesh_dim("tp")
                mod = parallelize_gpt(mod, tp_mesh, plan.sequence_parallel)
                if not plan.sequence_parallel:  # SP already hands on this rank's sequence shard
                    mod.exchange_tp_slices(tp_mesh)
                if plan.zero_stage == 1:  # plain tensors for the flat dp average and ZeroRedundancyOptimizer
                    from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform

                    _pre_dp_module_transform(mod)
            self.modules.append(mod)
            if plan.zero_stage == 3:  # torchtitan 3D: FSDP per stage
                from .fsdp import shard_gpt

                mod = shard_gpt(mod, ctx.mesh_dim("dp"), ctx, reshard_after_forward=True)
            elif plan.dp > 1 and plan.zero_stage != 1:  # ZeRO-1: plain stages, grads averaged in step()
                mod = replicate_stage(mod, ctx.mesh_dim("dp"))
            stages.append(PipelineStage(mod, s, n_chunks, ctx.device, group=pp_group))
        del gpt
        self.schedule: Union[ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B]
        if plan.pp_schedule == "gpipe" or m < plan.pp:
            # 1F1B with fewer micro-batches than stages is all forwards then all backwards (its warm-up never
            # ends), i.e. GPipe; Megatron runs it that way, torch's Schedule1F1B refuses it
            self.schedule = ScheduleGPipe(stages[0], m, loss_fn=self.loss_fn)
        elif plan.pp_schedule == "1f1b":
            self.schedule = Schedule1F1B(stages[0], m, loss_fn=self.loss_fn)
        else:
            self.schedule = ScheduleInterleaved1F1B(stages, m, loss_fn=self.loss_fn)
        # taken before the first forward: `_pre_dp_module_transform`'s hooks swap the TP parameters for DTensor
        # attributes during forward, after which mod.parameters() no longer lists them (their gradients still land
        # on these objects)
        self.params = params = [p for mod in self.modules for p in mod.parameters()]
        if plan.zero_stage == 1:  # Megatron's distributed optimizer: states sharded over "dp"
            from .zero1 import zero1_optimizer

            self.optimizer: Any = zero1_optimizer(params, ctx, ctx.group("dp"))
        else:
            self.optimizer = make_optimizer(params, ctx)
        self.owns_loss = self.is_last and ctx.coords["tp"] == 0  # TP ranks of the last stage share one loss
        self.tied_group, self.tied_params = self._tied_embedding_group(ctx)

    def _tied_embedding_group(self, ctx: Context):
        """Megatron-style tied embeddings across stages: the first stage's embedding and the last stage's head
        start equal, and their gradients are summed over a {first, last} group after every step, so both
        copies stay identical and the update equals the tied single-device model's (Megatron-LM
        `_allreduce_word_embedding_grads`). Returns (group or None, this rank's tied parameters)."""
        if not ctx.job.workload.model.tied_embeddings:
            return None, []
        import torch.distributed as dist

        pp, r = ctx.plan.pp, ctx.coords["pp"]
        here = (ctx.coords.get("dp", 0), ctx.coords.get("tp", 0))  # one group per replica and TP rank
        coords: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(coords, (here, r, ctx.rank))
        mine = None
        for d in sorted({c[0] for c in coords}):  # every rank creates every group, in the same order
            ends = sorted((c[1], c[2]) for c in coords if c[0] == d and c[1] in (0, pp - 1))
            group = dist.new_group([rank for _, rank in ends])
            if d == here:
                mine = group
        params = []
        for mod in self.modules:
            if mod.embed is not None:
                params.append(mod.embed.tok.weight)
            if mod.head is not None:
                params.append(mod.head.weight)
        return (mine if r in (0, pp - 1) else None), params

    def _sync_tied_embeddings(self) -> None:
        """Sum the tied embedding/head gradients between the first and last stage (exposed, after the flush)."""
        import torch.distributed as dist

        if self.tied_group is None:
            return
        for p in self.tied_params:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            dist.all_reduce(g, group=self.tied_group)

    def _average_dp_grads(self) -> None:
        """ZeRO-1 x PP: average this rank's stage gradients over "dp" in one flat all-reduce after the flush
        (Megatron's default, overlap_grad_reduce off); the distributed optimizer then updates its shard."""
        import torch
        import torch.distributed as dist

        if self.plan.dp == 1:
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=self.ctx.group("dp"))  # SUM: gloo has no AVG
        flat /= self.plan.dp
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def tokens_counted_per_step(self) -> int:
        """Appendix F: the last stage counts the replica's tokens, the other stages 0."""
        return self.tokens_seen_per_step() if self.is_last else 0

    def step(self, step: int) -> Optional[float]:
        x, y = self.replica_batch(step)
        self.optimizer.zero_grad(set_to_none=True)
        losses: list = []
        args = (x,) if self.is_first else ()
        kwargs: dict[str, Any] = {"target": y, "losses": losses} if self.is_last else {}
        with self.autocast():
            self.schedule.step(*args, **kwargs)
        if self.plan.zero_stage == 1:
            self._average_dp_grads()
        self._sync_tied_embeddings()
        self.optimizer.step()
        if not self.owns_loss:
            return None
        return float(sum(l.detach().float() for l in losses)) / len(losses)
