"""The parallel plan: one validated object for degrees, placement and every knob a trainer takes.

Modelled on torchtitan's ParallelDims: degrees multiply to the world size, and user input
errors raise ValueError with the fix, never assert.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from ..errors import validation_message
from ._base import Frozen
from .workload import ModelSpec, Workload

Schedule = Literal["gpipe", "1f1b", "interleaved"]
CommHook = Literal["none", "fp16", "bf16", "powersgd"]
MeshOrder = Literal["tp-dp-pp", "tp-pp-dp"]
ZeroImpl = Literal["deepspeed", "fsdp"]


def fsdp_by_default(zero_stage: Any, tp: Any, pp: Any, ep: Any, cp: Any = 1) -> Any:
    """Whether ZeRO without a stated runtime runs on FSDP: ZeRO-2/3 beside TP, PP, EP or CP (FSDP2 + TP/CP as
    torchtitan runs it, FSDP per pipeline stage); else DeepSpeed. Plain ints, or NumPy arrays of the engine's rows."""
    return (zero_stage >= 2) & ((tp > 1) | (pp > 1) | (ep > 1) | (cp > 1))


#: DeepSpeed ZeRO-3's cap on gathered parameter elements (stage3_max_live_parameters: 1e9 by default, DeepSpeed
#: 0.19.8 runtime/zero/config.py). A model above it cannot be prefetched whole, so DeepSpeed gathers it Linear by
#: Linear, one collective per module as the module before it is released (partitioned_param_coordinator.py:
#: fetch_sub_module issues one all_gather_coalesced per prefetch, release_sub_module frees one module's worth);
#: FSDP gathers a whole block in one collective.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1_000_000_000

#: DeepSpeed ZeRO-3 releases a gathered parameter only if its next use lies more than this many parameter elements
#: further along the recorded module trace (stage3_max_reuse_distance: 1e9 by default, runtime/zero/config.py;
#: partitioned_param_coordinator.py __params_to_release). So the last 1e9 elements the forward gathers stay into
#: the backward, and a layer its recompute replays keeps its gather for its backward. Counted on DeepSpeed 0.19.8's
#: engine on a fake process group (benchmarks/deepspeed_zero3_host.py --count): with the default, a model under 1e9
#: elements gathers nothing in its backward; with the distance scaled to 1.5 layers of 8, 6.3 layers re-gather.
DEEPSPEED_MAX_REUSE_DISTANCE = 1_000_000_000


class Plan(Frozen):
    """A complete parallel configuration. Rank r's coordinates follow `mesh_order`, fastest first."""

    dp: int = Field(1, ge=1, description="Data-parallel degree (replicas, or ZeRO shards)")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree (Megatron column/row split)")
    pp: int = Field(1, ge=1, description="Pipeline stages")
    cp: int = Field(1, ge=1, description="Context-parallel degree: each sequence split over cp ranks, attention "
                    "exchanging keys and values around them (ring attention: Megatron-Core --context-parallel-size, "
                    "torchtitan context_parallel_degree). The cp ranks sit between tp and dp (tp-cp-dp-pp), hold "
                    "the same weights and reduce (or shard, with ZeRO) gradients with the dp ranks")
    ep: int = Field(1, ge=1, description="Expert-parallel degree (MoE): each rank holds 1/ep of the routed experts; "
                                         "the ep ranks are drawn from a stage's tp*dp ranks (Megatron-Core's MoE "
                                         "parallel folding, expert tensor parallelism 1)")
    ep_overlap: bool = Field(False, description="Hide expert parallelism's token all-to-alls behind another "
                             "micro-batch's compute (Megatron-Core --overlap-moe-expert-parallel-comm with "
                             "--delay-wgrad-compute: the combined 1F1B schedule pairs one micro-batch's forward with "
                             "another's backward, layer by layer). Needs ep > 1, a distributed optimizer or DDP "
                             "(zero_stage <= 1), no full recompute, and the interleaved schedule when pp > 1")
    zero_stage: int = Field(0, ge=0, le=3, description="0 = plain DDP; 1/2/3 = DeepSpeed ZeRO stage")
    zero_offload: bool = Field(False, description="ZeRO-Offload: the optimizer states (and fp32 gradient partition) "
                               "in host RAM, Adam on the CPU; at stage 3 the parameters too unless "
                               "zero_offload_param is false")
    zero_offload_param: bool = Field(True, description="With zero_offload at stage 3: the parameter partition in host "
                                     "RAM too (DeepSpeed offload_param), fetched every micro-batch; false keeps it on "
                                     "the device and offloads the optimizer only (offload_optimizer alone). Stages "
                                     "1/2 offload the optimizer only")
    micro_batch_size: int = Field(1, ge=1, description="Sequences per micro-batch per rank")
    num_micro_batches: int = Field(
        1, ge=1, description="Micro-batches per step per replica: gradient accumulation, or pipeline micro-batches"
    )
    pp_schedule: Schedule = "1f1b"
    pp_virtual_stages: int = Field(1, ge=1, description="Model chunks per pipeline rank (interleaved 1F1B)")
    ddp_bucket_mb: float = Field(25.0, gt=0, description="DDP bucket_cap_mb")
    comm_hook: CommHook = Field("none", description="DDP gradient compression hook (changes numerics)")
    zero_reduce_bucket_size: int = Field(500_000_000, gt=0, description="DeepSpeed reduce_bucket_size (elements)")
    zero_allgather_bucket_size: int = Field(500_000_000, gt=0, description="DeepSpeed allgather_bucket_size (elements)")
    zero_max_live_parameters: int = Field(
        DEEPSPEED_MAX_LIVE_PARAMETERS, gt=0, description="DeepSpeed ZeRO-3 stage3_max_live_parameters (elements): "
        "its cap on gathered parameters; a model above it is gathered Linear by Linear, and a module as large as "
        "what the cap leaves prefetches nothing")
    zero_max_reuse_distance: int = Field(
        DEEPSPEED_MAX_REUSE_DISTANCE, ge=0, description="DeepSpeed ZeRO-3 stage3_max_reuse_distance (elements): a "
        "gathered parameter is kept if its next use is within this many elements, so the forward's last layers "
        "stay gathered into the backward; smaller holds less memory and gathers again")
    zero_overlap_comm: bool = Field(
        True, description="Gradient reduction overlapped with the backward: DeepSpeed overlap_comm (its default: "
        "stage 3 only), Megatron --overlap-grad-reduce (with the distributed optimizer also --overlap-param-gather); "
        "PyTorch DDP and FSDP always overlap. Off: DDP, ZeRO-1/2 and the distributed optimizer sync after the "
        "backward")
    zero_hpz_partition_size: int = Field(1, ge=1, description="ZeRO++ hpZ: secondary param shard group size (node)")
    zero_impl: Optional[ZeroImpl] = Field(
        None, description="Which runtime shards ZeRO-2/3: 'deepspeed' (DeepSpeed's ZeRO, whose Python walks every "
        "rank's shard of every parameter at each gather and gradient bucket) or 'fsdp' (PyTorch FSDP/FSDP2, one "
        "flat buffer per block). None: FSDP with TP, PP or EP (FSDP2 + TP, FSDP per stage), else DeepSpeed "
        "(`zero_runtime`). ZeRO-1 beside TP/PP is Megatron's distributed optimizer unless this says 'deepspeed' "
        "(Megatron-DeepSpeed: DeepSpeed's stage 1, which all-reduces the gradient buckets)")
    recompute: bool = Field(False, description="Activation recompute (checkpointing): a checkpointed layer stores "
                            "its input only and replays its forward in the backward")
    offload_activations: bool = Field(False, description="Activation checkpoints in host RAM: each recomputing "
                                      "layer's stored input goes to pinned host memory on a side stream in the "
                                      "forward and comes back in the backward (DeepSpeed's activation_checkpointing "
                                      "cpu_checkpointing; for Hugging Face models its CheckpointHiddenStatesOffload). "
                                      "Needs recompute and pure data parallelism, not on FSDP; without ZeRO, adapter "
                                      "training (check_plan_for)")
    recompute_interval: int = Field(1, ge=1, description="With recompute, checkpoint every k-th layer: 1 = every "
                                    "layer (full), 2 = every other layer (torchtitan selective_ac_option '2', "
                                    "Megatron --recompute-method block over half of each stage's layers)")
    recompute_attention: bool = Field(False, description="Selective recompute of the attention core (Megatron "
                                      "--recompute-granularity selective): Q·Kᵀ, softmax, dropout and ·V replay in "
                                      "the backward instead of storing the s x s scores. Saves memory where the core "
                                      "stores them (attention_kernel eager); costs one core forward either way")
    recompute_ops: bool = Field(False, description="Op-level selective checkpointing (torchtitan's "
                                "selective_ac_option 'op'): each layer keeps every other matmul's output and the "
                                "attention core's, and replays the rest (norms, activations, the other matmuls) in "
                                "the backward. Dense layers")
    sequence_parallel: bool = Field(False, description="Megatron sequence parallel with TP")
    tp_comm_overlap: bool = Field(False, description="Overlap TP communication with the GEMMs that use it "
                                  "(Megatron-Core --tp-comm-overlap with Transformer Engine; torchtitan async TP); "
                                  "needs sequence parallelism and NVLink between the TP ranks")
    nodes: int = Field(1, ge=1, description="Nodes used")
    devices_per_node: int = Field(1, ge=1, description="Devices used on each node")
    mesh_order: MeshOrder = Field("tp-dp-pp", description="Rank layout, fastest-varying first")

    @model_validator(mode="after")
    def _check(self) -> "Plan":
        world = self.dp * self.cp * self.tp * self.pp
        if world != self.nodes * self.devices_per_node:
            names, values = ("dp*tp*pp*cp", f"{self.dp}*{self.tp}*{self.pp}*{self.cp}") if self.cp > 1 else (
                "dp*tp*pp", f"{self.dp}*{self.tp}*{self.pp}")
            raise ValueError(
                f"plan degrees {names} = {values} = {world} do not match the devices used "
                f"nodes*devices_per_node = {self.nodes}*{self.devices_per_node}; make them equal"
            )
        if self.cp > 1:
            # context parallelism as Megatron-Core and torchtitan run it: ZeRO over dp*cp by their distributed
            # optimizer or FSDP2 (DeepSpeed has no ring attention: its Ulysses splits heads, not modelled), the cp
            # ranks inside the tp-cp-dp-pp order, no MoE folding or offload beside it
            if self.mesh_order != "tp-dp-pp":
                raise ValueError("cp > 1 needs mesh_order tp-dp-pp (the context-parallel ranks sit between tp and "
                                 "dp, as Megatron-Core orders tp-cp-dp-pp)")
            if self.zero_impl == "deepspeed" or self.zero_offload or self.zero_hpz_partition_size > 1:
                raise ValueError("context parallelism (cp > 1) runs on Megatron-Core or torchtitan, not DeepSpeed: "
                                 "drop zero_impl=deepspeed, offload and hpZ, or use cp=1")
            if self.ep > 1:
                raise ValueError("expert parallelism beside context parallelism is not modelled; use ep=1 or cp=1")
            if self.comm_hook != "none":
                raise ValueError("DDP comm hooks are not run beside context parallelism; use comm_hook=none or cp=1")
        # ZeRO with TP/PP as the frameworks run it: ZeRO-1 = Megatron's distributed optimizer (with TP and PP);
        # ZeRO-2/3 with TP = FSDP2 + TP (torchtitan); ZeRO-3 with PP = FSDP per pipeline stage (torchtitan 3D).
        # DeepSpeed's pipeline engine refuses ZeRO-2/3 with PP, and offload is DeepSpeed's alone.
        # Expert parallelism as Megatron-Core folds it (--expert-model-parallel-size with
        # --expert-tensor-parallel-size 1): the routed experts of a stage are split over ep of its tp*dp ranks,
        # the expert data-parallel group is the other tp*dp/ep. DeepSpeed-MoE and torchtitan draw ep from dp alone,
        # a special case (tp = 1).
        if (self.dp * self.tp) % self.ep:
            raise ValueError(f"ep={self.ep} must divide dp*tp = {self.dp}*{self.tp} = {self.dp * self.tp} "
                             "(expert-parallel ranks are drawn from a pipeline stage's data- and tensor-parallel ranks)")
        if self.ep > 1 and self.mesh_order != "tp-dp-pp":
            raise ValueError("ep > 1 needs mesh_order tp-dp-pp (expert-parallel ranks are consecutive, inside a "
                             "pipeline stage, as Megatron-Core orders tp-ep-dp-pp)")
        if self.ep > 1 and self.zero_offload:
            raise ValueError("ZeRO-Offload with expert parallelism is not run by the frameworks gpuadvisor launches; "
                             "use ep=1 with offload, or ep > 1 without it")
        if self.zero_stage == 2 and self.pp > 1:
            raise ValueError("ZeRO-2 does not combine with pipeline parallelism (DeepSpeed refuses it); "
                             "use zero=1 (distributed optimizer) or zero=3 (FSDP per stage) with pp > 1")
        if self.zero_offload and (self.tp > 1 or self.pp > 1):
            raise ValueError("ZeRO-Offload is DeepSpeed's and needs pure data parallelism (tp=1, pp=1)")
        if self.zero_hpz_partition_size > 1 and (self.tp > 1 or self.pp > 1):
            raise ValueError("hpZ (zero_hpz_partition_size > 1) needs pure data parallelism (tp=1, pp=1)")
        if self.zero_offload and not self.zero_stage:
            raise ValueError("zero_offload needs zero_stage >= 1")
        if not self.zero_offload_param and not (self.zero_offload and self.zero_stage == 3):
            raise ValueError("zero_offload_param=false (optimizer-only offload) is a choice of ZeRO-3 with "
                             "zero_offload; at zero=1/2 write offload=true, which offloads the optimizer only")
        if self.zero_impl == "fsdp":
            if self.zero_stage < 2:
                raise ValueError("zero_impl fsdp shards like ZeRO-2/3 (SHARD_GRAD_OP, FULL_SHARD); use zero_stage 2 "
                                 "or 3, or drop zero_impl")
            if self.zero_offload:
                raise ValueError("ZeRO-Offload is DeepSpeed's: use zero_impl=deepspeed with zero_offload")
        if self.zero_impl == "deepspeed" and self.zero_stage >= 2 and (self.pp > 1 or self.ep > 1):
            raise ValueError("DeepSpeed runs ZeRO-2/3 with pure data parallelism (it refuses them with pipeline "
                             "parallelism; its MoE sets ep in the model code): use zero_impl=fsdp")
        if self.zero_impl is not None and not self.zero_stage:
            raise ValueError("zero_impl needs zero_stage >= 1 (plain DDP has no ZeRO runtime)")
        if self.pp == 1 and (self.pp_virtual_stages != 1):
            raise ValueError("pp_virtual_stages > 1 needs pp > 1")
        if self.pp_schedule == "interleaved" and self.pp_virtual_stages < 2:
            raise ValueError("the interleaved schedule needs pp_virtual_stages >= 2")
        # 1F1B with m < pp runs as Megatron and DeepSpeed run it: the warm-up is min(pp - rank - 1, m), so it
        # degenerates to all-forward-then-all-backward (the bubble is the schedule's cost, not an error).
        # Megatron's interleaved schedule needs m to be a multiple of pp (schedules.py).
        if self.pp_schedule == "interleaved" and self.num_micro_batches % self.pp:
            raise ValueError("interleaved 1F1B needs num_micro_batches divisible by pp")
        if self.recompute_interval > 1 and not self.recompute:
            raise ValueError("recompute_interval > 1 needs recompute=true (it picks which layers recompute)")
        if self.recompute_attention and self.recompute:
            raise ValueError("recompute=true (full) and recompute_attention (selective) are one choice, as Megatron's "
                             "--recompute-granularity full or selective: keep one")
        if self.recompute_ops and (self.recompute or self.recompute_attention):
            raise ValueError("recompute_ops (op-level selective) is one recompute choice beside full and the attention "
                             "core's: keep one")
        if self.offload_activations:
            # DeepSpeed's cpu_checkpointing moves what its checkpoint function stores (runtime/activation_checkpointing/
            # checkpointing.py), its CheckpointHiddenStatesOffload what transformers' checkpointed layers take: only
            # recomputing layers have such inputs, and the hand-overs that run it are data parallel (the bundled
            # DeepSpeed trainer, train_lora.py); FSDP's runs (torchtitan, the bundled FSDP2 path) have no such switch
            if not self.recompute:
                raise ValueError("offload_activations moves the checkpoints of recomputing layers to host RAM and "
                                 "needs recompute=true (full, or every k-th layer); add it or drop offload_activations")
            if not (self.tp == self.pp == self.cp == self.ep == 1 and self.zero_impl != "fsdp"):
                raise ValueError("offload_activations (DeepSpeed's checkpoints in host RAM) needs pure data "
                                 "parallelism (tp = pp = cp = ep = 1), not zero_impl=fsdp; change the plan or drop "
                                 "offload_activations")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel needs tp > 1")
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise ValueError("tp_comm_overlap needs sequence_parallel (Megatron's --tp-comm-overlap and torchtitan's "
                             "async TP split the sequence-parallel all-gathers and reduce-scatters)")
        if self.ep_overlap:
            # Megatron-Core's TransformerConfig checks for --overlap-moe-expert-parallel-comm: expert parallelism, no
            # full recompute, and with pipeline parallelism the virtual-pipeline (interleaved) schedule; it runs
            # Megatron's DDP or distributed optimizer (FSDP2 and DeepSpeed have no combined 1F1B schedule)
            if self.ep == 1:
                raise ValueError("ep_overlap hides expert parallelism's all-to-alls and needs ep > 1; drop ep_overlap")
            if self.recompute:
                raise ValueError("ep_overlap does not run with full recompute (Megatron refuses "
                                 "--overlap-moe-expert-parallel-comm with --recompute-granularity full): drop one")
            if self.pp > 1 and self.pp_schedule != "interleaved":
                raise ValueError("ep_overlap with pp > 1 needs the interleaved schedule (Megatron pairs virtual "
                                 "stages): set schedule=interleaved and pp_virtual_stages >= 2, or drop ep_overlap")
            if self.zero_stage > 1 or self.zero_impl == "deepspeed":
                raise ValueError("ep_overlap is Megatron-Core's schedule: use zero=0 (DDP) or zero=1 (its distributed "
                                 "optimizer), not ZeRO-2/3 or DeepSpeed")
        if self.comm_hook != "none" and (self.zero_stage or self.dp == 1):
            raise ValueError("DDP comm hooks apply to plain data parallelism (dp > 1, zero_stage = 0)")
        if self.zero_hpz_partition_size > 1:
            if self.zero_stage != 3:
                raise ValueError("hpZ (zero_hpz_partition_size > 1) needs zero_stage 3")
            if self.dp % self.zero_hpz_partition_size:
                raise ValueError("zero_hpz_partition_size must divide dp")
        return self

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def gradient_ranks(self) -> int:
        """Ranks one weight's gradient is reduced (or its ZeRO state sharded) over: dp*cp (the context-parallel ranks
        hold the same weights; Megatron-Core's data-parallel group with CP, torchtitan's dp_shard_cp mesh)."""
        return self.dp * self.cp

    @property
    def strategy(self) -> str:
        """Short human label: single, dp, tp, pp, zero1..3, zero2-offload, zero3-offload (optimizer and parameters),
        zero3-offload-optim (optimizer only), or a hybrid like tp2xdp2."""
        ep = f"-ep{self.ep}" if self.ep > 1 else ""
        off = ("-offload" + ("-optim" if self.zero_stage == 3 and not self.offloads_params else "")
               if self.zero_offload else "")
        if self.world_size == 1:
            return "single" if not self.zero_stage else f"zero{self.zero_stage}" + off
        zero = f"zero{self.zero_stage}" + off if self.zero_stage else ""
        if zero and self.tp == 1 and self.pp == 1 and self.cp == 1:
            return zero + ep
        parts = [(n, d) for n, d in (("tp", self.tp), ("cp", self.cp), ("pp", self.pp), ("dp", self.dp)) if d > 1]
        if zero:  # ZeRO beside TP/PP (distributed optimizer, FSDP2 + TP): the hybrid with its ZeRO stage
            parts = [(n, d) for n, d in parts if n != "dp"]
            return "x".join(f"{n}{d}" for n, d in parts) + f"-{zero}" + ep
        if len(parts) == 1:
            return parts[0][0] + ep
        return "x".join(f"{n}{d}" for n, d in parts) + ep

    @property
    def offloads_params(self) -> bool:
        """Whether the parameter partition lives in host RAM (ZeRO-3 offload with zero_offload_param)."""
        return self.zero_offload and self.zero_stage == 3 and self.zero_offload_param

    @property
    def offload_code(self) -> int:
        """The enumeration rows' offload column (candidates.OFFLOADS): 0 none, 1 the optimizer, 2 the optimizer and
        the parameters."""
        return int(self.zero_offload) + int(self.offloads_params)

    @property
    def zero_runtime(self) -> ZeroImpl:
        """The runtime that shards this plan's ZeRO-2/3: `zero_impl` when given, else `fsdp_by_default`'s."""
        if self.zero_impl is not None:
            return self.zero_impl
        return "fsdp" if fsdp_by_default(self.zero_stage, self.tp, self.pp, self.ep, self.cp) else "deepspeed"

    @property
    def zero_framework(self) -> Optional[str]:
        """Who runs this plan's ZeRO: "distributed-optimizer" for ZeRO-1 beside TP/PP/EP (Megatron-Core's, or the
        bundled trainers' over dp: gradients reduce-scattered) unless zero_impl says "deepspeed" (Megatron-DeepSpeed,
        whose stage 1 all-reduces them), else `zero_runtime` ("deepspeed" or "fsdp"); None without ZeRO. The
        engine prices the same split over its rows (engine.evaluate_batch `dist_opt`)."""
        if not self.zero_stage:
            return None
        if (self.zero_stage == 1 and (self.tp > 1 or self.pp > 1 or self.ep > 1 or self.cp > 1)
                and self.zero_impl != "deepspeed"):
            return "distributed-optimizer"
        return self.zero_runtime

    @property
    def recompute_fraction(self) -> float:
        """Share of the layers that recompute: 0 without recompute, 1/recompute_interval with it."""
        return 1.0 / self.recompute_interval if self.recompute else 0.0

    @staticmethod
    def recompute_fields(share: float) -> dict[str, Any]:
        """The recompute fields for a share of recomputing layers (the inverse of recompute_fraction):
        0 -> none, 1 -> every layer, 1/k -> every k-th layer."""
        return {"recompute": share > 0, "recompute_interval": int(round(1.0 / share)) if share > 0 else 1}

    @staticmethod
    def offload_fields(code: int, zero_stage: int) -> dict[str, Any]:
        """The offload fields for an offload code (the inverse of offload_code): 0 none, 1 the optimizer (at stage 3
        without the parameters), 2 the optimizer and the parameters."""
        return {"zero_offload": code > 0, "zero_offload_param": not (code == 1 and zero_stage == 3)}

    def per_replica_batch(self) -> int:
        """Sequences one data-parallel replica handles per optimizer step."""
        return self.micro_batch_size * self.num_micro_batches

    def global_batch(self) -> int:
        return self.dp * self.per_replica_batch()

    def to_string(self) -> str:
        """Compact form accepted by `parse_plan` and `gpuadvisor predict --plan`."""
        d = self.model_dump()
        default = Plan().model_dump()
        keys = ["dp", "tp", "pp", "zero_stage", "micro_batch_size", "num_micro_batches", "nodes", "devices_per_node"]
        out = [f"{_SHORT.get(k, k)}={d[k]}" for k in keys]
        for k, v in d.items():
            if k not in keys and v != default[k]:
                out.append(f"{_SHORT.get(k, k)}={_fmt(v)}")
        return ",".join(out)


_SHORT = {"zero_stage": "zero", "micro_batch_size": "mb", "num_micro_batches": "m", "devices_per_node": "gpn",
          "pp_schedule": "schedule", "zero_offload": "offload", "zero_offload_param": "offload_param",
          "ddp_bucket_mb": "bucket_mb", "zero_max_live_parameters": "max_live",
          "zero_max_reuse_distance": "reuse_distance"}
_LONG = {v: k for k, v in _SHORT.items()}


#: recompute=<word> in a plan text (Megatron's --recompute-granularity words): the field it sets
RECOMPUTE_WORDS = {"full": ("recompute", "true"), "selective": ("recompute_attention", "true"),
                   "op": ("recompute_ops", "true"), "none": ("recompute", "false")}


#: offload=<word> in a plan text: what it sets zero_offload_param to (zero_offload true)
OFFLOAD_WORDS = {"optimizer": "false", "all": "true"}


#: what pydantic reads as a boolean from text (its lax bool parsing)
_BOOL_WORDS = ("0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes")


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def parse_plan(text: str, **defaults: object) -> Plan:
    """Parse 'dp=2,tp=1,pp=2,zero=1,mb=4,m=8' (short or long field names) into a validated Plan.

    `defaults` fill fields the text leaves out (e.g. nodes/devices_per_node from the cluster).
    """
    if not isinstance(text, str):
        raise ValueError(f"a plan is a string like 'dp=2,tp=1,pp=1,mb=4' or a Plan, not {type(text).__name__}")
    if not text.strip():
        raise ValueError("empty plan; write e.g. 'dp=2,tp=1,pp=1,mb=4'")
    if len(text) > 2000:
        raise ValueError(f"plan text of {len(text)} characters is too long; write e.g. 'dp=2,tp=1,pp=1,mb=4'")
    fields: dict[str, Any] = dict(defaults)
    given: set[str] = set()
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise ValueError(f"plan item '{item}' is not key=value; write e.g. 'dp=2,tp=1,pp=1,mb=4'")
        k, v = (s.strip() for s in item.split("=", 1))
        k = _LONG.get(k, k)
        if k == "recompute" and v.lower() in RECOMPUTE_WORDS:
            # Megatron's words: full = every layer, selective = the attention core, none
            k, v = RECOMPUTE_WORDS[v.lower()]
        elif k == "recompute" and v.lower() not in _BOOL_WORDS:
            raise ValueError(f"invalid plan '{text}': recompute={v} is not a recompute mode; write recompute=full, "
                             "selective, op or none (or true/false)")
        if k == "zero_offload" and v.lower() not in OFFLOAD_WORDS and v.lower() not in _BOOL_WORDS:
            raise ValueError(f"invalid plan '{text}': offload={v[:80]} is not an offload mode; write offload=optimizer "
                             "(ZeRO-3: the optimizer only), all (the parameters too) or true/false")
        if k == "zero_offload" and v.lower() in OFFLOAD_WORDS:
            # DeepSpeed's words: offload_optimizer alone, or offload_optimizer + offload_param (stage 3)
            if "zero_offload_param" in given:
                raise ValueError(f"plan key 'offload_param' is given twice in '{text}' (offload={v} sets it); keep "
                                 "one")
            given.add("zero_offload_param")
            fields["zero_offload_param"] = OFFLOAD_WORDS[v.lower()]
            v = "true"
        if k not in Plan.model_fields:
            known = ", ".join(sorted(set(_SHORT.values()) | set(Plan.model_fields)))
            raise ValueError(f"unknown plan key '{k}'; known keys: {known}")
        if k in given:
            raise ValueError(f"plan key '{_SHORT.get(k, k)}' is given twice in '{text}'; keep one")
        given.add(k)
        fields[k] = v
    if "nodes" not in fields and "devices_per_node" not in fields:
        try:
            fields["devices_per_node"] = (int(fields.get("dp", 1)) * int(fields.get("tp", 1)) * int(fields.get("pp", 1))
                                          * int(fields.get("cp", 1)))
        except (TypeError, ValueError):
            raise ValueError(f"invalid plan '{text}': dp, tp, pp and cp must be whole numbers") from None
    try:
        plan = Plan.model_validate({k: v for k, v in fields.items()}, strict=False)
    except Exception as exc:  # pydantic ValidationError -> one line
        raise ValueError(f"invalid plan '{text}': {validation_message(exc, with_field=True, every_error=True)}") from None
    from .bounds import MAX_DEVICES
    from .workload import MAX_GLOBAL_BATCH

    if plan.world_size > MAX_DEVICES or plan.nodes * plan.devices_per_node > MAX_DEVICES:
        raise ValueError(f"invalid plan '{text}': {plan.world_size} ranks is above the {MAX_DEVICES} gpuadvisor models")
    if plan.global_batch() > MAX_GLOBAL_BATCH:
        raise ValueError(f"invalid plan '{text}': batch dp*mb*m = {plan.global_batch()} is above {MAX_GLOBAL_BATCH}")
    return plan


def fsdp_trainer_runs(workload: Workload, zero_offload: bool, hpz: int) -> bool:
    """Whether the bundled trainer's FSDP2 path (trainers/strategies/fsdp.py) can run a pure data-parallel ZeRO-2/3
    plan of `workload`: full training of the bundled GPT in bf16/fp32, without offload or hpZ (DeepSpeed's).
    Adapter training moves the adapters' gradients only and stays on DeepSpeed."""
    return (workload.model.kind == "transformer" and not workload.finetune.adapters
            and workload.training.precision != "fp16" and not zero_offload and hpz == 1)


#: DeepSpeed ZeRO-3's default prefetch bucket (stage3_prefetch_bucket_size: 5e7 elements, DeepSpeed
#: runtime/zero/config.py `prefetch_bucket_size`): how many elements each module's hook may pop ahead
#: (partitioned_param_coordinator.fetch_sub_module; costmodel.engine._ds_module_chain). A DeepSpeed JSON or a
#: measured run that does not set it runs with this; the hand-over writes the plan's zero_allgather_bucket_size
#: (500M) there instead.
DEEPSPEED_PREFETCH_BUCKET = 50_000_000


def deepspeed_gathers_by_module(model: ModelSpec, cap: Any = DEEPSPEED_MAX_LIVE_PARAMETERS) -> Any:
    """Whether DeepSpeed ZeRO-3 gathers `model` one Linear at a time: a transformer above the live-parameter `cap`
    (Plan.zero_max_live_parameters; DEEPSPEED_MAX_LIVE_PARAMETERS by default). `cap` a number, or a NumPy array of
    them (the engine's rows): then an array."""
    return (model.kind == "transformer") & (model.params > cap)


def handover_zero_impl(workload: Workload, *, zero_stage: int, tp: int, pp: int, ep: int, zero_offload: bool,
                       hpz: int, nodes: int, gpu: bool) -> Optional[ZeroImpl]:
    """The runtime `suggest` gives a candidate's ZeRO (Plan.zero_impl): FSDP2 for pure data-parallel ZeRO-3 on GPUs
    where the bundled trainer runs it, across nodes and for models DeepSpeed gathers Linear by Linear
    (deepspeed_gathers_by_module), else None (Plan.zero_runtime's default). DeepSpeed's ZeRO-3 host work grows with
    ranks x parameters (Plan.zero_impl; docs/cost-model.md), which across nodes makes it markedly slower than FSDP,
    and above its live-parameter cap each layer costs it one collective per Linear where FSDP takes one; inside a
    node and for smaller models it costs little, and DeepSpeed keeps offload, hpZ and LoRA."""
    if (zero_stage == 3 and tp == 1 and pp == 1 and ep == 1 and gpu
            and (nodes > 1 or deepspeed_gathers_by_module(workload.model))
            and fsdp_trainer_runs(workload, zero_offload, hpz)):
        return "fsdp"
    return None


def check_plan_for(plan: Plan, workload: Workload) -> None:
    """Raise ValueError if `plan` cannot run `workload` (divisibility of batch, heads, layers)."""
    t = workload.training
    if plan.global_batch() != t.global_batch:
        raise ValueError(
            f"plan batch dp*mb*m = {plan.dp}*{plan.micro_batch_size}*{plan.num_micro_batches} = "
            f"{plan.global_batch()} != global batch {t.global_batch}; pick mb and m with dp*mb*m = {t.global_batch}"
        )
    m = workload.model
    if plan.offload_activations and m.kind != "transformer":
        raise ValueError(f"offload_activations moves transformer layers' checkpoints; '{m.name}' is not a transformer: "
                         "drop offload_activations")
    if plan.offload_activations and not plan.zero_stage and not workload.finetune.adapters:
        # full training without ZeRO gets the bundled DDP trainer, torchtitan and Accelerate's files, none of which
        # moves checkpoints; train_lora.py (adapters) wraps its steps in DeepSpeed's CheckpointHiddenStatesOffload
        raise ValueError("offload_activations without ZeRO runs in train_lora.py (LoRA/QLoRA) only; for full "
                         "training use zero >= 1 (DeepSpeed's cpu_checkpointing) or drop offload_activations")
    if plan.ep > 1:
        if m.kind != "transformer" or not m.n_experts:
            raise ValueError(f"ep={plan.ep} needs a mixture-of-experts model; '{m.name}' has no routed experts: use ep=1")
        if m.n_experts % plan.ep:
            raise ValueError(f"ep={plan.ep} does not divide the {m.n_experts} routed experts of '{m.name}'")
    if plan.ep_overlap and t.precision == "fp32":
        raise ValueError("ep_overlap needs 16-bit training (Megatron-Core asserts bf16 or fp16 for "
                         "--overlap-moe-expert-parallel-comm): use --precision bf16, or drop ep_overlap")
    if plan.cp > 1:
        if m.kind != "transformer":
            raise ValueError(f"cp={plan.cp} splits sequences; model '{m.name}' is generic (params + FLOPs): use cp=1")
        if t.seq_len % (2 * plan.cp):
            raise ValueError(f"cp={plan.cp} needs seq_len {t.seq_len} divisible by 2*cp = {2 * plan.cp} (each rank "
                             "takes a chunk from each end of the sequence to balance causal attention)")
        if workload.core_kernel == "eager":
            raise ValueError(f"cp={plan.cp} needs a fused attention kernel (ring attention runs FlashAttention, cuDNN "
                             "or SDPA's flash); this workload's attention core is unfused: use --attention-kernel "
                             "flash or cp=1")
    if m.kind != "transformer":
        if plan.recompute_attention or plan.recompute_ops:
            raise ValueError(f"model '{m.name}' is generic (params + FLOPs) and has no attention core to recompute: "
                             "drop recompute_attention / recompute_ops")
        if plan.tp > 1 or plan.pp > 1:
            raise ValueError(f"model '{m.name}' is generic (params + FLOPs): only DP/ZeRO plans apply, not tp/pp")
        return
    if m.n_heads % plan.tp:
        raise ValueError(f"tp={plan.tp} does not divide the {m.n_heads} attention heads of '{m.name}'")
    if m.d_ff % plan.tp:
        raise ValueError(f"tp={plan.tp} does not divide d_ff={m.d_ff} of '{m.name}'")
    chunks = plan.pp * plan.pp_virtual_stages
    if m.n_layers < chunks:
        raise ValueError(f"pp*virtual={chunks} exceeds the {m.n_layers} layers of '{m.name}'")
    if plan.recompute_interval > m.n_layers:
        raise ValueError(f"recompute_interval={plan.recompute_interval} exceeds the {m.n_layers} layers of "
                         f"'{m.name}'; use 1 to {m.n_layers}")
    if plan.recompute_ops and (m.n_experts or workload.finetune.adapters):
        what = "a mixture-of-experts layer's expert loop" if m.n_experts else "an adapter (LoRA) run"
        raise ValueError(f"recompute_ops (op-level selective checkpointing) is priced for dense full training, not "
                         f"{what}; use recompute=full or recompute_interval")
    if plan.sequence_parallel and (t.seq_len // plan.cp) % plan.tp:
        what = f"seq_len/cp = {t.seq_len // plan.cp}" if plan.cp > 1 else f"seq_len {t.seq_len}"
        raise ValueError(f"sequence parallel needs {what} divisible by tp={plan.tp}")
