"""Turn a PublicRun into the cost model's inputs (Cluster, Workload, Plan), or say why it cannot.

One function per mapping concern (GPU, intra-node topology, network, model shape, precision, sharding,
recompute, batch, placement), so each can be extended when the cost model learns more. What today's
schemas cannot express raises Unsupported with a short reason; LIMITS lists those that have a stated
approximation, which `to_inputs(run, approximate=[...])` applies instead of refusing (and records in
RunInputs.assumptions).
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Collection, NamedTuple, Optional

from ..errors import UserError, validation_message
from ..hardware.cluster_file import cluster_from_dict
from ..knowledge import GpuSpec, gpu_spec, load_links
from ..schemas import Cluster, Plan, Workload
from ..schemas.plan import DEEPSPEED_PREFETCH_BUCKET
from ..schemas.workload import ModelSpec, TrainingSettings
from .load import PublicRun
from .metrics import GPT2_VOCAB


class Unsupported(ValueError):
    """The run needs something the cost model or its schemas cannot represent today.

    `reasons` lists every blocker found (to_inputs checks each concern), the message joins them.
    """

    def __init__(self, *reasons: str):
        super().__init__("; ".join(reasons))
        self.reasons: tuple[str, ...] = reasons


#: Limits that have a stated approximation: name -> what `approximate=[name]` does instead of refusing.
LIMITS: dict[str, str] = {
    "micro-batch": "micro-batch not stated -> 1 sequence per micro-step",
    "recompute-unstated": "activation checkpointing not stated -> none",
    "selective-recompute": "selective recompute of an unstated fraction of blocks (fms-fsdp) -> that fraction from "
                           "the row's HFU/MFU (1 + fraction/3), every k-th block, else none",
    "hsdp": "HSDP / sharding group smaller than DP -> ZeRO-3 over all of DP",
    "offload-activations": "activation checkpoints in host RAM (DeepSpeed's cpu_checkpointing) by a DeepSpeed "
                           "before its side-stream copies (PR #8282; the rows' 0.6.2 copied them blocking) -> "
                           "priced as today's (Plan.offload_activations)",
    "network-unstated": "inter-node network not stated -> the GPU generation's DGX SuperPOD compute fabric, one "
                        "rail per GPU: 200 Gb/s HDR InfiniBand for A100, 400 Gb/s NDR for H100, H200 and B200",
    "pp-schedule": "pipeline schedule not stated where the source overlaps pipeline communication, which Megatron "
                   "does only in its interleaved schedule -> interleaved with the fewest virtual stages the layers "
                   "allow",
    "cpu-unstated": "host CPU of a ZeRO-Offload row not stated -> the GPU generation's DGX CPU (SYSTEM_CPU), whose "
                    "cores run DeepSpeed's CPU Adam",
    "fp8-recipe": "FP8 with finer scaling than per tensor (torchao rowwise, blockwise 32x32/128x128, MX block "
                  "scaling on Hopper) -> per-tensor FP8 (their extra scale traffic and slower GEMMs are not priced)",
}

#: Precision words the cost model cannot price (4- and 6-bit training).
LOW_PRECISION = re.compile(r"fp4|nvfp4|mxfp4|fp6", re.IGNORECASE)
#: FP8 training in any of its scaling recipes (delayed, current "CS", blockwise "32x32"/"128x128", MX block
#: scaling "MXFP8" on Blackwell): the Linears at the FP8 tensor rate (Workload precision "fp8").
FP8 = re.compile(r"fp8|float8", re.IGNORECASE)

#: Published GPU names -> catalog key and what the choice assumes. Names not here go to gpu_spec() as is.
GPU_ALIASES: tuple[tuple[str, str, str], ...] = (
    (r"^A100 40GB", "a100-sxm-40gb", "A100 40GB form factor not stated: SXM assumed (8-GPU nodes)"),
    (r"^A100 80GB", "a100-sxm-80gb", "A100 80GB form factor not stated: SXM assumed (8-GPU nodes)"),
    (r"^H100 9\d(/9\d)?GB HBM2e", "h100-sxm", "H100 94-96GB HBM2e (Grand Teton, lower TDP): closest catalog "
                                             "entry H100 SXM (989 TFLOP/s, 3.35 TB/s); memory from the row"),
    (r"^H100( 80GB)?( SXM)?( \(inferred\))?$", "h100-sxm", "H100 form factor not stated: SXM assumed"),
    (r"^H200$", "h200", ""),
    (r"^B200$", "b200", ""),
    (r"^B300$", "b300", ""),
    (r"^V100 32GB", "v100-sxm2-32gb", ""),
    (r"^V100$", "v100-sxm2-32gb", "V100 memory not stated: SXM2 32GB assumed"),
)

#: Inter-node network per source where the row leaves it empty: (interconnect text, why).
DEFAULT_INTERCONNECT: dict[str, tuple[str, str]] = {
    "llmfoundry_mpt_benchmarks": ("1600 Gbps node-node RoCE",
                                  "H100 network not stated: the A100 sections' 1600 Gbps RoCE assumed"),
    "megatron_h100_weak_scaling_table": ("8x 400 Gb/s InfiniBand", "network not stated: DGX H100-class assumed"),
    "megatron_h100_strong_scaling_plot": ("8x 400 Gb/s InfiniBand", "network not stated: DGX H100-class assumed"),
    "megatron_llama3_fp8_example": ("8x 400 Gb/s InfiniBand", "network not stated: DGX H100-class assumed"),
}

#: DGX/HGX system names -> their compute fabric (datasheets; see knowledge/presets/hgx-h100-8x.yaml).
#: DGX B200: 8x single-port ConnectX-7 at up to 400 Gb/s InfiniBand (DGX B200 datasheet). DGX B300's ConnectX-8
#: (800 Gb/s) has no links.yaml class, so its rows stay "network not stated".
SYSTEM_FABRIC: dict[str, str] = {"DGX-H100": "8x 400 Gb/s InfiniBand", "DGX-A100": "8x 200 Gb/s InfiniBand",
                                 "DGX-B200": "8x 400 Gb/s InfiniBand"}
#: Catalog keys -> the DGX system of that GPU generation, whose fabric the `network-unstated` approximation assumes
#: (the H200 is the HGX H100 board's successor with the same ConnectX-7 rails: HGX H200 datasheet).
GENERATION_SYSTEM: tuple[tuple[str, str], ...] = (("a100-sxm", "DGX-A100"), ("h100-sxm", "DGX-H100"),
                                                  ("h200", "DGX-H100"), ("b200", "DGX-B200"))

#: Cloud instance names in the `gpu` column -> the node's CPU (physical cores, sockets, host RAM GiB, source), which
#: prices ZeRO-Offload's CPU Adam and host copies. Rows of other machines get the cluster-file default (one core).
INSTANCE_CPU: tuple[tuple[str, tuple[int, int, int, str]], ...] = (
    (r"NDm A100 v4", (96, 2, 1900, "Azure NDm A100 v4-series documentation: 96 vCPU (AMD EPYC 7V12, SMT off), "
                                   "1900 GiB RAM per VM")),
)

#: DGX systems -> their CPU (physical cores, sockets, host RAM GiB, source): what the `cpu-unstated` approximation
#: gives an offload row whose CPU the source does not state (GENERATION_SYSTEM picks the system).
SYSTEM_CPU: dict[str, tuple[int, int, int, str]] = {
    "DGX-A100": (128, 2, 2048, "DGX A100 datasheet: 2x AMD EPYC 7742, 128 cores, 2 TB (640 GB system)"),
    "DGX-H100": (112, 2, 2048, "DGX H100 datasheet: 2x Intel Xeon Platinum 8480C, 112 cores, 2 TB"),
    "DGX-B200": (112, 2, 2048, "DGX B200 datasheet: 2x Intel Xeon Platinum 8570, 112 cores, 2 TB"),
}

#: torchtitan rows (their unstated pipeline split and micro-batch count are torchtitan's defaults).
TORCHTITAN = re.compile(r"torchtitan", re.IGNORECASE)
#: A torchtitan row that says only "selective" ran the train config's choice: per-op (train_configs/llama3_8b.toml,
#: [activation_checkpoint] mode = 'selective', selective_ac_option = 'op', pytorch/torchtitan 0011fb90; the larger
#: models' configs checkpoint fully, so only 8B rows say "selective").
TORCHTITAN_SELECTIVE = ("torchtitan 'selective' with no option: the train config's per-op selective checkpointing "
                        "(train_configs/llama3_8b.toml selective_ac_option 'op')")
#: Frameworks whose tensor parallelism runs with sequence parallelism.
SEQUENCE_PARALLEL_FRAMEWORKS = re.compile(r"megatron|torchtitan|nemo", re.IGNORECASE)
#: NeMo / Megatron-Bridge performance recipes that overlap TP communication with the GEMMs (Transformer Engine
#: userbuffers) without the row saying so: Llama 3. llama3_70b_pretrain_config sets CommOverlapConfig(
#: tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192) and the per-GPU perf
#: configs keep it (fp8 too: userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192); the 8B configs set tp_comm_overlap =
#: tp > 1 (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py). Not the Qwen3 MoE
#: recipes: Qwen3 235B on H100 sets tp_comm_overlap=False (scripts/performance/configs/qwen/qwen3_llm_pretrain.py).
NEMO_RECIPES = re.compile(r"megatron-bridge|nemo", re.IGNORECASE)
RECIPE_TP_OVERLAP_MODELS = re.compile(r"llama[ _]?3", re.IGNORECASE)
#: Megatron-Bridge performance recipes that hide the expert all-to-alls behind compute (Plan.ep_overlap: Megatron-Core
#: --overlap-moe-expert-parallel-comm) without the row saying so: Qwen3 235B-A22B on H100, whose presets set
#: moe_a2a_overlap=True with the alltoall dispatcher (QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_BF16_V1 / _FP8_CS_V1, the
#: V2 presets inherit it; NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py
#: @01b2977e). The other Qwen3 presets set it False (B200, B300, Qwen3 30B-A3B on H100); GPT-OSS 120B's B200 and
#: H100 presets leave it off (gpt_oss_workload_base_configs.py sets it on GB200/GB300 only, whose rows are not
#: mapped: GPUs per node not stated).
RECIPE_EP_OVERLAP = re.compile(r"qwen3[ _-]?235b", re.IGNORECASE)
RECIPE_EP_OVERLAP_GPUS = ("H100",)
#: Frameworks whose transformer layers are Transformer Engine's (Megatron-Core's default transformer_impl; NeMo and
#: Megatron-Bridge build on it): cuDNN fused attention (TrainingSettings.attention_kernel "cudnn"). The PyTorch stacks
#: run FlashAttention-2 / SDPA; Megatron-DeepSpeed below.
TE_FRAMEWORKS = re.compile(r"megatron-core|megatron-bridge|nemo", re.IGNORECASE)
#: NVIDIA's Megatron-Bridge performance recipes reduce gradients in bf16 (TrainingSettings.grad_reduce_in_bf16): each
#: family's common perf config sets cfg.mixed_precision.grad_reduce_in_fp32 = False and cfg.ddp.grad_reduce_in_fp32
#: = False (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py
#: set_llama3_common_configs; the DeepSeek and Qwen3 configs alike), as NeMo 2's FP8 perf scripts did
#: (recipe.trainer.plugins.grad_reduce_in_fp32 = False). Megatron-LM's own scripts keep its fp32 default for bf16.
BF16_REDUCE_RECIPES = re.compile(r"megatron-bridge", re.IGNORECASE)
#: Rows whose configs follow NeMo's performance scripts without being Megatron-Bridge's: the Megatron-LM Llama 3 FP8
#: examples ("This configuration follows those defined in NeMo Framework's performance scripts", NVIDIA/Megatron-LM
#: examples/llama/README.md). NeMo's set_precision_configs reduces FP8 runs' gradients in bf16
#: (recipe.trainer.plugins.grad_reduce_in_fp32 = False: NVIDIA/NeMo scripts/performance/helpers.py), and the
#: example's own script states --grad-reduce-in-bf16 and --fp8-param-gather (examples/llama/
#: train_llama3_8b_h100_fp8.sh).
NEMO_PERF_SCRIPTS = re.compile(r"follow\w* nemo performance scripts", re.IGNORECASE)
#: Per-tensor FP8 as these recipes label it (delayed "FP8", current scaling "FP8-CS", Megatron-LM's "hybrid format"):
#: their mixed-precision configs keep the Linears' weights in FP8 (TrainingSettings.fp8_param_gather): Megatron-
#: Bridge's bf16_with_fp8_mixed and bf16_with_fp8_current_scaling_mixed set fp8_param_gather = True, its MXFP8 and
#: blockwise recipes False (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/mixed_precision.py), as NeMo 2's
#: bf16_with_fp8_mixed did (fp8_param_gather = True). Labels the table only infers ("FP8, default granularity
#: (inferred)", "not stated (FP8 likely)") are left with bf16 weights.
PER_TENSOR_FP8 = re.compile(r"^\s*(fp8(-cs)?|fp8 \(hybrid format\).*)\s*$", re.IGNORECASE)
#: Sources that overlap Megatron's pipeline communication with computation without stating the schedule: the
#: Megatron-LM README's H100 scaling runs ("We perform fine-grained overlapping of data-parallel (...),
#: tensor-parallel (`--tp-comm-overlap`) and pipeline-parallel communication (enabled by default) with computation",
#: NVIDIA/Megatron-LM README.md, Training Speed and Scalability; the table and the strong-scaling plot are the same
#: runs). Megatron overlaps pipeline P2P only in its interleaved schedule: without virtual stages
#: megatron/training/arguments.py switches overlap_p2p_comm off ("non-interleaved schedule does not support
#: overlapping p2p communication") and forward_backward_pipelining_without_interleaving raises on it.
P2P_OVERLAP_SOURCES = frozenset({"megatron_h100_weak_scaling_table", "megatron_h100_strong_scaling_plot"})
#: Megatron-DeepSpeed builds Megatron's own layers, whose attention core is unfused (materialised scores) unless the
#: run switches FlashAttention on (--use-flash-attn-v2; the software column then names it): attention_kernel "eager"
UNFUSED_FRAMEWORKS = re.compile(r"megatron-deepspeed", re.IGNORECASE)
FLASH_SOFTWARE = re.compile(r"flash", re.IGNORECASE)
#: Rows whose stack ran FlashAttention-3 (Hopper) or -4 (Blackwell): flash-attn 3/4 in the software or FA3/FA4 in the
#: options (TrainingSettings.attention_kernel "flash3")
FLASH3_SOFTWARE = re.compile(r"flash-attn-[34]|\bFA[34]\b|flash_attention_[34]", re.IGNORECASE)
#: Rows whose loss is Liger-Kernel's fused linear cross-entropy (TrainingSettings.kernels "liger")
LIGER = re.compile(r"liger", re.IGNORECASE)
#: What a source's benchmark script runs where its rows do not say: source_id -> (attention kernel, kernels, where).
SOURCE_STACK: dict[str, tuple[str, str, str]] = {
    "mleng_h200_vs_b200_llama8b": ("flash3", "liger", "stas00/ml-engineering insights/when-to-upgrade-gpus/"
                                   "benchmark.py: attn_implementation by GPU (Hopper flash_attention_3, Blackwell "
                                   "flash_attention_4), USE_LIGER 1 (AutoLigerKernelForCausalLM)"),
}
#: torchtitan releases of 2024 compiled the model's blocks with `[training] compile` and left the loss eager
#: (train.py: "TODO: compiling loss function causes CUDA errors, turning off for now"); 2025's
#: components/loss.py build_cross_entropy_loss compiles it too. Dated by the row's software column.
TORCHTITAN_EAGER_LOSS = re.compile(r"\b2024\b")


class RunInputs(NamedTuple):
    """What `gpuadvisor.api.predict` needs for one run, plus the assumptions made to build it."""

    cluster: Cluster
    workload: Workload
    plan: Plan
    assumptions: tuple[str, ...]


def _limit(name: str, reason: str, approximate: Collection[str], notes: list[str]) -> bool:
    """True (and a note) if `name` may be approximated; else raise Unsupported(reason)."""
    if name in approximate:
        notes.append(f"approximation {name}: {LIMITS[name]}")
        return True
    raise Unsupported(reason)


# ---------------------------------------------------------------- hardware


def gpu_of(run: PublicRun, notes: list[str]) -> GpuSpec:
    """The catalog entry for the run's GPU (GPU_ALIASES first, then the catalog's own names)."""
    for pattern, key, why in GPU_ALIASES:
        if re.search(pattern, run.gpu):
            if why:
                notes.append(why)
            return gpu_spec(key)
    try:
        return gpu_spec(run.gpu)
    except UserError:
        raise Unsupported(f"GPU {run.gpu.split(' (')[0]} not in knowledge/gpus.yaml") from None


def topology_of(spec: GpuSpec, gpus_per_node: int) -> Optional[str]:
    """Link class between the GPUs of a node: NVSwitch boards bond every pair with all NVLinks."""
    if gpus_per_node <= 1:
        return None
    return f"NV{spec.nvlink_links}" if spec.nvlink_links else "PXB"


_RAILS = re.compile(r"(\d+)\s*x\s*(?:[A-Za-z]+\s+)*?(\d+)\s*Gb", re.IGNORECASE)
_PER_GPU = re.compile(r"(\d+)\s*Gb(?:ps|/s)?\s+(?:RDMA\s+)?(?:\([^)]*\)\s+)?per GPU", re.IGNORECASE)
_TOTAL = re.compile(r"(\d+)\s*Gb(?:ps|/s)", re.IGNORECASE)


def _protocol(text: str) -> str:
    if re.search(r"roce", text, re.IGNORECASE):
        return "roce"
    return "ib"


@functools.lru_cache(maxsize=None)
def _rdma_keys() -> tuple[tuple[str, str, float], ...]:
    """(key, protocol, Gbit/s) of the RDMA network classes in knowledge/links.yaml."""
    return tuple((n.key, n.protocol, float(n.link_speed_gbit_per_s)) for n in load_links().network
                 if n.protocol in ("ib", "roce") and n.link_speed_gbit_per_s)


def network_key(protocol: str, gbit: float, notes: list[str]) -> str:
    """The links.yaml class for one rail: same protocol and speed, else the same speed of the other RDMA kind."""
    same = [k for k, p, s in _rdma_keys() if s == gbit and p == protocol]
    if same:
        return same[0]
    other = [k for k, _, s in _rdma_keys() if s == gbit]
    if other:
        notes.append(f"no {protocol} {gbit:g} Gb/s class in knowledge/links.yaml: {other[0]} used (same rate)")
        return other[0]
    raise Unsupported(f"no {gbit:g} Gb/s RDMA class in knowledge/links.yaml")


def rails_of(text: str, gpus_per_node: int, notes: list[str]) -> tuple[int, float]:
    """(NICs per node, Gbit/s each) from an interconnect description; Unsupported if none is stated."""
    for system, fabric in SYSTEM_FABRIC.items():
        if system in text:
            notes.append(f"{system} compute fabric: {fabric} (datasheet)")
            text = fabric
    m = _RAILS.search(text)
    if m:
        return int(m.group(1)), float(m.group(2))
    m = _PER_GPU.search(text)
    if m:
        return gpus_per_node, float(m.group(1))
    m = _TOTAL.search(text)
    if m:
        total = float(m.group(1))
        speeds = {s for _, _, s in _rdma_keys() if total % s == 0}
        if speeds:
            each = max(speeds)  # the fewest rails of a catalog rate: rails are not stated, the total is
            notes.append(f"only the node total ({total:g} Gb/s) is stated: {int(total // each)} x "
                         f"{each:g} Gb/s rails assumed")
            return int(total // each), each
    raise Unsupported("inter-node network not stated")


Rails = tuple[tuple[str, float], ...]


def network_of(run: PublicRun, gpus_per_node: int, notes: list[str], spec: Optional[GpuSpec] = None,
               approximate: Collection[str] = ()) -> tuple[str, Rails]:
    """The links.yaml network class for `network:` and the node's rails as (NIC kind, Gbit/s) pairs.

    Unstated: the source's DEFAULT_INTERCONNECT, else (`network-unstated` approximation) the fabric of the DGX
    system of the run's GPU generation (`spec`)."""
    text = run.interconnect
    if not _TOTAL.search(text) and not any(s in text for s in SYSTEM_FABRIC):
        default = DEFAULT_INTERCONNECT.get(run.source_id)
        system = next((sy for prefix, sy in GENERATION_SYSTEM if spec and spec.key.startswith(prefix)), None)
        if default is not None:
            text, why = default
            notes.append(why)
        elif system and _limit("network-unstated", "inter-node network not stated", approximate, notes):
            text = system
        else:
            raise Unsupported("inter-node network not stated")
    rails, gbit = rails_of(text, gpus_per_node, notes)
    proto = _protocol(text)
    key = network_key(proto, gbit, notes)
    kind = "roce" if proto == "roce" else "infiniband"
    return key, ((kind, gbit),) * rails


def placement_of(run: PublicRun) -> tuple[int, int]:
    """(nodes, GPUs per node) the run used."""
    if not run.gpus:
        raise Unsupported("GPU count not stated")
    gpn = run.gpus_per_node or (run.gpus if run.nodes == 1 else None)
    if not gpn:
        raise Unsupported("GPUs per node not stated")
    if run.gpus < gpn:
        return 1, run.gpus
    if run.gpus % gpn:
        raise Unsupported("GPU count not a multiple of GPUs per node")
    return run.gpus // gpn, gpn


@functools.lru_cache(maxsize=256)
def _cluster(gpu_key: str, memory_gib: Optional[float], nodes: int, gpn: int, topology: Optional[str],
             network: Optional[str], nics: Rails, cpu: Optional[tuple[int, int, int]] = None) -> Cluster:
    """A cluster-file document of `nodes` identical nodes, expanded by the cluster-file loader (cached).
    `cpu`: (cores, sockets, RAM GiB) of each node, else the cluster file's default."""
    gpu: dict = {"gpu": gpu_key} if memory_gib is None else {"gpu": gpu_key, "memory_gib": memory_gib}
    node: dict = {"name": "node", "count": nodes, "gpus": [gpu] * gpn}
    if cpu:
        node["cpu"] = {"cores": cpu[0], "sockets": cpu[1], "ram_gib": cpu[2]}
    if topology:
        node["topology"] = topology
    if nics:
        node["nics"] = [{"name": f"rail{i}", "kind": k, "speed_gbit_per_s": s} for i, (k, s) in enumerate(nics)]
    doc: dict = {"name": f"{nodes}x{gpn}-{gpu_key}", "nodes": [node]}
    if network:
        doc["network"] = {"link": network}
    return cluster_from_dict(doc, name=doc["name"], source="public measurement (gpuadvisor.publicruns)")


def cpu_of(run: PublicRun, spec: GpuSpec, offload: bool, approximate: Collection[str],
           notes: list[str]) -> Optional[tuple[int, int, int]]:
    """(cores, sockets, RAM GiB) of the run's nodes: its cloud instance's (INSTANCE_CPU), else None (the cluster
    file's default, one core). A ZeRO-Offload row needs it (its CPU Adam runs on those cores): without it, refused
    unless `cpu-unstated` gives it the GPU generation's DGX CPU (SYSTEM_CPU)."""
    for pattern, (cores, sockets, ram, why) in INSTANCE_CPU:
        if re.search(pattern, run.gpu):
            notes.append(f"node CPU: {why}")
            return cores, sockets, ram
    if not offload:
        return None
    system = next((name for key, name in GENERATION_SYSTEM if key == spec.key), None)
    if system is None or system not in SYSTEM_CPU:
        raise Unsupported("host CPU of an offload run not stated")
    _limit("cpu-unstated", "host CPU of an offload run not stated", approximate, notes)
    cores, sockets, ram, why = SYSTEM_CPU[system]
    notes.append(f"node CPU not stated: {why}")
    return cores, sockets, ram


def cluster_of(run: PublicRun, spec: GpuSpec, nodes: int, gpn: int, notes: list[str],
               approximate: Collection[str] = (), offload: bool = False) -> Cluster:
    """The cluster the run was measured on, built through the cluster-file format (`offload`: the run keeps its
    optimizer in host RAM, so its CPU matters: cpu_of)."""
    memory = run.gpu_mem_gb if run.gpu_mem_gb and abs(run.gpu_mem_gb - spec.memory_gib) > 1 else None
    network, nics = network_of(run, gpn, notes, spec, approximate) if nodes > 1 else (None, ())
    cpu = cpu_of(run, spec, offload, approximate, notes)
    return _cluster(spec.key, memory, nodes, gpn, topology_of(spec, gpn), network, nics, cpu)


# ---------------------------------------------------------------- workload


def precision_of(run: PublicRun, spec: Optional[GpuSpec], approximate: Collection[str], notes: list[str]) -> str:
    """bf16 / fp16 / fp32 / fp8 (every FP8 scaling recipe); fp4 and fp6 are beyond today's cost model."""
    text = run.precision.lower()
    if LOW_PRECISION.search(text):
        raise Unsupported("fp4/fp6 precision")
    if FP8.search(text):
        if spec is not None and not spec.tflops_fp8:
            raise Unsupported(f"fp8 on {spec.key}, which has no FP8 tensor cores")
        # per-tensor recipes are what the cost model prices; MX block scaling is native to Blackwell's tensor cores
        native_mx = spec is not None and float(spec.compute_capability or 0) >= 10.0  # Blackwell (sm_100+)
        finer = re.search(r"rowwise|block|32x32|128x128", text) or (re.search(r"mx", text) and not native_mx)
        if finer:
            _limit("fp8-recipe", "FP8 with finer than per-tensor scaling", approximate, notes)
        return "fp8"
    for word in ("bf16", "fp16", "fp32"):
        if word in text:
            return word
    guess = "fp16" if spec is not None and not spec.bf16_supported else "bf16"
    notes.append(f"precision not stated: {guess} mixed precision assumed")
    return guess


def model_of(run: PublicRun, notes: list[str]) -> ModelSpec:
    """The transformer shape: GELU MLP for GPT/MPT, SwiGLU (+ grouped KV heads) for Llama/Qwen."""
    text = f"{run.arch} {run.model_name}"
    if re.search(r"\bMoE\b|mixture|expert", text, re.IGNORECASE) or (run.ep or 1) > 1:
        return moe_model_of(run, notes)
    swiglu = bool(re.search(r"swiglu|llama|qwen", text, re.IGNORECASE))
    ffn, vocab = run.ffn_hidden, run.vocab
    if re.search(r"\bGPT\b", text) and not swiglu and run.hidden:
        # GPT-3's shape rule (Brown et al. 2020 §2.1: d_ff = 4 x d_model) and the GPT-2 BPE vocabulary
        if not ffn:
            ffn = 4 * run.hidden
            notes.append("MLP width not stated: 4 x hidden (GPT)")
        if not vocab:
            vocab = GPT2_VOCAB
            notes.append(f"vocabulary not stated: GPT-2 BPE {GPT2_VOCAB}")
    if vocab == GPT2_VOCAB and LLMC.search(run.framework):
        # llm.c pads GPT-2's vocabulary for its GEMMs (train_gpt2.cu: padded_vocab_size = 50304, "padded to 128")
        vocab = LLMC_PADDED_VOCAB
        notes.append(f"llm.c pads the vocabulary to {LLMC_PADDED_VOCAB:,} (its padded_vocab_size)")
    need = {"layers": run.layers, "hidden": run.hidden, "heads": run.heads, "ffn_hidden": ffn,
            "vocab": vocab, "seq_len": run.seq_len}
    missing = [k for k, v in need.items() if not v]
    if missing:
        raise Unsupported("model shape not stated")
    kv = run.kv_heads if run.kv_heads and run.kv_heads != run.heads else 0
    untied = swiglu or "untied" in f"{run.arch} {run.notes}".lower()
    learned_pos = bool(re.search(r"learned pos|gpt-2", text, re.IGNORECASE))
    spec = ModelSpec(name=run.model_name, n_layers=run.layers, d_model=run.hidden, n_heads=run.heads,
                     d_ff=ffn, vocab_size=vocab, max_seq_len=run.seq_len if learned_pos else 0,
                     tied_embeddings=not untied, n_kv_heads=kv, mlp="swiglu" if swiglu else "gelu",
                     dropout=dropout_of(run), source=run.source_ref)
    if run.params and abs(spec.params / run.params - 1) > 0.02:
        notes.append(f"shape gives {spec.params / 1e9:.3g}B params, the row says {run.params / 1e9:.3g}B")
    return spec


#: Stacks that train without dropout whatever the model family's habit: llm-foundry's MPT (MPTConfig resid_pdrop
#: and emb_pdrop 0.0, attn_config_defaults attn_pdrop 0.0; the pretrain yamls set none), llm.c (train_gpt2.cu has no
#: dropout layer) and nanoGPT (train.py: dropout = 0.0 "for pretraining 0 is good"). Megatron's GPT keeps its
#: 0.1 defaults (--hidden-dropout, --attention-dropout), so its rows keep the family default.
NO_DROPOUT = re.compile(r"llm-foundry|llm\.c|nanoGPT", re.IGNORECASE)
#: llm.c (Karpathy; train_gpt2.cu) and the vocabulary its GEMMs run: GPT-2's 50,257 padded to a multiple of 128
LLMC = re.compile(r"llm\.c", re.IGNORECASE)
LLMC_PADDED_VOCAB = 50304


def kernels_of(run: PublicRun, notes: list[str]) -> str:
    """TrainingSettings.kernels of the row's stack: "liger" where the row or its source's script (SOURCE_STACK) runs
    Liger-Kernel (its chunked linear cross-entropy holds no whole logits). The public stacks fuse their norms and
    loss (llm-foundry's low-precision LayerNorm and fused cross-entropy, torch.compile in torchtitan and nanoGPT,
    llm.c's kernels, Transformer Engine): their largest micro-batches ran where eager modules' storage would not
    fit. torchtitan
    says whether it compiled: a row that did not ran eager modules; one of 2024 compiled the blocks beside an eager
    loss (TORCHTITAN_EAGER_LOSS)."""
    if LIGER.search(f"{run.software} {run.other_opts}") or SOURCE_STACK.get(run.source_id, ("", ""))[1] == "liger":
        notes.append("Liger-Kernel: fused norms, rotary and SwiGLU, and its chunked linear cross-entropy (kernels "
                     "liger)")
        return "liger"
    if not TORCHTITAN.search(run.framework):
        return "fused"
    if run.compile.strip().lower().startswith("no"):
        if TORCHTITAN_EAGER_LOSS.search(run.software):
            # torchtitan's modules of 2024 (models/norms.py RMSNorm, complex rotary, repeat_kv) are HF's op by op
            notes.append("torchtitan of 2024 without torch.compile: its modules op by op as Hugging Face's (fp32 "
                         "RMSNorm, rotary, repeat_kv; kernels hf)")
            return "hf"
        notes.append("torchtitan without torch.compile: eager norms, K/V copies and loss (kernels eager)")
        return "eager"
    if TORCHTITAN_EAGER_LOSS.search(run.software):
        # compiled or not (an empty compile cell), a 2024 torchtitan ran its loss eager: the compiled case is the
        # one the row's fused neighbours price
        notes.append("torchtitan of 2024: compiled blocks beside the eager loss's fp32 logits (kernels fused-layers"
                     + ("; compile not stated" if not run.compile else "") + ")")
        return "fused-layers"
    return "fused"


def dropout_of(run: PublicRun) -> Optional[bool]:
    """False where the row's stack trains without dropout (NO_DROPOUT), else None: the family's default (dropout
    masks for GELU GPTs, none for gated MLPs). Only activation memory depends on it: 2 one-byte masks per token
    and d_model per layer, 2 of GPT's 34 bytes (Korthikanti et al. 2022 §4.1's count)."""
    return False if NO_DROPOUT.search(run.framework) else None


def moe_model_of(run: PublicRun, notes: list[str]) -> ModelSpec:
    """A mixture-of-experts run's shape from the bundled preset of its model name (the MoE tables name the model
    and omit the shape): 'GPT OSS 120B' -> gpt-oss-120b, 'Qwen3_30B_a3B' -> qwen3-30b-a3b."""
    from ..workload import catalog
    if re.search(r"tokendrop|token.drop|capacity", f"{run.model_name} {run.other_opts}", re.IGNORECASE):
        raise Unsupported("MoE with token dropping (capacity factor)")
    key = re.sub(r"[\s_]+", "-", re.sub(r"\(.*?\)", "", run.model_name).strip().lower())
    presets = catalog.presets()
    if key not in presets:
        raise Unsupported("MoE model without a bundled preset")
    spec = presets[key].spec
    notes.append(f"MoE shape from the bundled preset {key}")
    return spec


# ---------------------------------------------------------------- plan


def degrees_of(run: PublicRun) -> tuple[int, int, int]:
    """(dp, tp, pp); the row's context-parallel degree (run.cp, Plan.cp) is the fourth factor of its GPUs, and its
    dp column counts the data-parallel replicas without it (torchtitan's and Megatron's logs: dp*tp*pp*cp = GPUs)."""
    tp, pp, cp = run.tp or 1, run.pp or 1, run.cp or 1
    gpus = run.gpus
    if not gpus:
        raise Unsupported("GPU count not stated")
    dp = run.dp or (gpus // (tp * pp * cp) if gpus % (tp * pp * cp) == 0 else 0)
    if not dp or dp * tp * pp * cp != gpus:
        raise Unsupported("dp*tp*pp*cp does not match the GPU count")
    return dp, tp, pp


def offloads_activations(run: PublicRun) -> bool:
    """Whether the row keeps its activation checkpoints in host RAM (Plan.offload_activations): ZeRO offload of
    "optimizer states, activations" (DeepSpeed's Azure rows: "activation and optimizer states are allocated in the
    main memory")."""
    opts = f"{run.zero_stage} {run.other_opts}".lower()
    return bool(re.search(r"offload \(optimizer states, activations\)", opts)) and not re.search(r"no offload", opts)


def sharding_of(run: PublicRun, dp: int, tp: int, pp: int, approximate: Collection[str],
                notes: list[str]) -> tuple[int, int]:
    """(ZeRO stage, offload code: candidates.OFFLOADS): FSDP FULL_SHARD/FSDP2 = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, DDP
    = 0; offload of the optimizer states alone (1) or, at stage 3 unless the row says optimizer states only, of the
    parameters too (2)."""
    fsdp = run.fsdp_mode
    stage = 0
    m = re.match(r"\s*(\d)", run.zero_stage)
    if m:
        stage = int(m.group(1))
    elif re.search(r"HSDP|sharding group|degree", fsdp):
        group = re.search(r"(?:group|degree)\s*(\d+)", fsdp)
        if group and int(group.group(1)) == dp:
            stage = 3
        elif _limit("hsdp", "HSDP / sharding group smaller than DP", approximate, notes):
            stage = 3
    elif re.search(r"SHARD_GRAD_OP", fsdp):
        stage = 2
    elif re.search(r"FULL_SHARD|FSDP2|full shard", fsdp, re.IGNORECASE):
        stage = 3
    if stage == 0 and dp > 1 and re.search(r"Megatron-Bridge|NeMo", run.framework) and not re.search(
            r"FULL_SHARD|FSDP2|SHARD_GRAD_OP|HSDP", fsdp):
        # NeMo / Megatron-Bridge recipes run Megatron-Core's distributed optimizer (ZeRO-1): their optimizer
        # factory sets use_distributed_optimizer=True (NVIDIA/NeMo nemo/collections/llm/recipes/optim/adam.py,
        # distributed_fused_adam_with_cosine_annealing)
        stage = 1
        notes.append("distributed optimizer (ZeRO-1): the NeMo / Megatron-Bridge recipes' default")
    opts = f"{run.zero_stage} {run.other_opts}".lower()
    offload = bool(re.search(r"offload", opts)) and not re.search(r"no offload", opts)
    only = re.search(r"offload \(optimizer states(, activations)?\)|optimizer (states )?(offload|offloaded)", opts)
    if offloads_activations(run):
        _limit("offload-activations", "activation checkpoints offloaded to host RAM", approximate, notes)
    # ZeRO / FSDP / distributed optimizer with TP or PP is a Plan of its own (schemas.plan); offload is pure DP
    if not (offload and stage > 0 and tp == 1 and pp == 1):
        return stage, 0
    return stage, 2 if stage == 3 and not only else 1


def zero_impl_of(run: PublicRun, stage: int) -> Optional[str]:
    """The runtime that sharded a ZeRO-2/3 run (Plan.zero_impl): 'fsdp' for PyTorch FSDP / FSDP2 / Megatron-FSDP
    (an fsdp_mode other than plain DDP, or FSDP in the framework), 'deepspeed' for DeepSpeed's ZeRO, else None."""
    if stage < 2:
        return None
    if (run.fsdp_mode and not re.search(r"FSDP=0", run.fsdp_mode)) or re.search(r"FSDP", run.framework):
        return "fsdp"
    return "deepspeed" if re.search(r"DeepSpeed", run.framework) else None


def recompute_of(run: PublicRun, approximate: Collection[str], notes: list[str]) -> float:
    """Share of the layers that recompute (Plan.recompute_fraction): 1 full, 0 none, 1/2 for torchtitan's
    layer-level selective checkpointing (selective_ac_option default "2": every other block); OP_LEVEL for
    torchtitan's per-op selective (Plan.recompute_ops); unstated selective (fms-fsdp's fraction of blocks, from the
    row's HFU/MFU: _share_from_hfu) is the LIMITS approximation `selective-recompute`."""
    text = run.activation_checkpointing.lower()
    if not text:
        _limit("recompute-unstated", "activation checkpointing not stated", approximate, notes)
        return 0.0
    if "selective (layer)" in text:
        return 0.5
    if "selective" in text:
        per_op = bool(re.search(r"\bop\b|per-op", text))
        if not per_op and text.strip() == "selective" and TORCHTITAN.search(run.framework):
            per_op = True  # torchtitan's own train configs: the 8B's is per-op (see TORCHTITAN_SELECTIVE)
            notes.append(TORCHTITAN_SELECTIVE)
        if per_op:
            return OP_LEVEL
        _limit("selective-recompute", "selective recompute", approximate, notes)
        return _share_from_hfu(run, notes)
    if re.match(r"(true|yes|full|on)\b", text):
        return 1.0
    if re.match(r"(false|no|none)\b", text):
        return 0.0
    raise Unsupported("activation checkpointing not understood")


#: recompute_of's value for op-level selective checkpointing (Plan.recompute_ops), beside the shares 0..1
OP_LEVEL = -1.0


def _share_from_hfu(run: PublicRun, notes: list[str]) -> float:
    """Share of blocks a selective-by-fraction run recomputes (fms-fsdp's selective_checkpointing p:
    fms_fsdp/policies/ac_handler.py checkpoints p of the blocks, evenly spaced), from the row's own HFU and MFU:
    HFU counts the replayed forwards, a third of a block's training FLOPs, so HFU/MFU = 1 + p/3. Read as every
    k-th block (k = round(1/p)); 0 when the row states neither."""
    if not (run.mfu_pct and run.hfu_pct) or run.hfu_pct < run.mfu_pct:
        return 0.0
    p = min(1.0, 3.0 * (run.hfu_pct / run.mfu_pct - 1.0))
    if p < 0.1:
        return 0.0
    k = max(1, round(1.0 / p))
    notes.append(f"selective checkpointing of {p:.2f} of the blocks (HFU {run.hfu_pct:g} / MFU {run.mfu_pct:g} = "
                 f"1 + p/3): every {k} block(s) recomputes")
    return 1.0 / k


def titan_stages_per_rank(run: PublicRun) -> int:
    """Pipeline stages per rank of a torchtitan row that leaves `vpp` empty: torchtitan's default split, 1 for the
    single-stage schedules (1F1B, GPipe) and 2 for the looped ones (Interleaved 1F1B, ...) (generate_split_points,
    torchtitan/parallelisms/pipelining_utils.py)."""
    if run.vpp:
        return run.vpp
    if (run.pp or 1) > 1 and TORCHTITAN.search(run.framework) and re.search(r"interleaved|looped", run.other_opts,
                                                                            re.IGNORECASE):
        return 2
    return 1


def megatron_stages_per_rank(run: PublicRun, layers: int, pp: int, m: int, approximate: Collection[str],
                             notes: list[str]) -> int:
    """Virtual pipeline stages per rank of a row whose source overlaps pipeline communication (P2P_OVERLAP_SOURCES)
    but leaves the schedule unstated: the `pp-schedule` approximation, the fewest the layers allow (the smallest
    divisor above 1 of the layers per stage; Megatron's --num-layers-per-virtual-pipeline-stage splits a stage's
    layers evenly, and r0.8's interleaved schedule needs the micro-batch count a multiple of pp). 0 for every
    other row (the schedule is the row's, or torchtitan's default: titan_stages_per_rank)."""
    if run.vpp or pp <= 1 or run.source_id not in P2P_OVERLAP_SOURCES:
        return 0
    _limit("pp-schedule", "pipeline schedule not stated", approximate, notes)
    per = layers // pp
    v = next((d for d in range(2, per + 1) if per % d == 0), 1) if layers % pp == 0 and m % pp == 0 else 1
    if v > 1:
        notes.append(f"interleaved pipeline, {v} virtual stages of {per // v} layer(s) per rank (the fewest "
                     f"{per} layers per stage allow)")
    return v


def batch_of(run: PublicRun, dp: int, approximate: Collection[str], notes: list[str],
             pp: int = 1) -> tuple[int, int]:
    """(micro-batch, micro-batches per step) with dp * mb * m = global batch.

    A torchtitan pipeline row without its micro-batch runs torchtitan's default count, pipeline_parallel_microbatches
    = pp x stages per rank (build_pipeline_schedule: "if n_microbatches is None: n_microbatches = num_total_stages"),
    each of local batch / count sequences."""
    gb = run.global_batch
    if not gb:
        raise Unsupported("global batch not stated")
    mb = run.micro_batch
    count = pp * titan_stages_per_rank(run)
    if not mb and pp > 1 and TORCHTITAN.search(run.framework) and gb % (dp * count) == 0:
        mb = gb // (dp * count)
        notes.append(f"pipeline micro-batches not stated: torchtitan's default pp x stages per rank = {count}, "
                     f"{mb} sequence(s) each")
    if not mb:
        _limit("micro-batch", "micro-batch not stated", approximate, notes)
        mb = 1
    m = run.grad_accum or (gb // (dp * mb) if gb % (dp * mb) == 0 else 0)
    if not m or dp * mb * m != gb:
        raise Unsupported("global batch != dp * micro-batch * accumulation")
    return mb, m


def plan_of(run: PublicRun, degrees: tuple[int, int, int], placement: tuple[int, int],
            sharding: tuple[int, int], batch: tuple[int, int], recompute: float, notes: list[str],
            vpp: int = 0) -> Plan:
    """The Plan from the mapped pieces; Unsupported if Plan refuses the combination. `vpp`: virtual stages per
    rank already chosen (megatron_stages_per_rank), else the row's or torchtitan's default."""
    (dp, tp, pp), (nodes, gpn), (zero, offload), (mb, m) = degrees, placement, sharding, batch
    if not vpp:
        vpp = titan_stages_per_rank(run)
        if vpp > 1 and not run.vpp:
            notes.append(f"looped pipeline schedule: torchtitan's default {vpp} stages per rank")
    sp = tp > 1 and bool(SEQUENCE_PARALLEL_FRAMEWORKS.search(run.framework))
    if sp:
        notes.append("tensor parallelism with sequence parallelism (framework default)")
    overlap = sp and bool(re.search(r"tp-comm-overlap|async[- ]?TP|enable_async_tensor_parallel",
                                    f"{run.other_opts} {run.notes}", re.IGNORECASE))
    if overlap:
        notes.append("TP communication overlapped with GEMMs (--tp-comm-overlap / async TP)")
    elif sp and NEMO_RECIPES.search(run.framework) and RECIPE_TP_OVERLAP_MODELS.search(run.model_name):
        overlap = True
        notes.append("TP communication overlapped with GEMMs: the NeMo / Megatron-Bridge Llama 3 recipes' "
                     "CommOverlapConfig(tp_comm_overlap=True)")
    ep_overlap = ((run.ep or 1) > 1 and bool(NEMO_RECIPES.search(run.framework))
                  and bool(RECIPE_EP_OVERLAP.search(run.model_name)) and run.gpu in RECIPE_EP_OVERLAP_GPUS)
    if ep_overlap:
        notes.append("expert all-to-alls hidden behind compute: the Megatron-Bridge recipe's moe_a2a_overlap=True "
                     "(--overlap-moe-expert-parallel-comm)")
    impl = zero_impl_of(run, zero)
    prefetch = {}
    if impl == "deepspeed" and zero == 3:  # the row states no stage3_prefetch_bucket_size: DeepSpeed's default
        prefetch = {"zero_allgather_bucket_size": DEEPSPEED_PREFETCH_BUCKET}
        notes.append(f"DeepSpeed's default stage3_prefetch_bucket_size ({DEEPSPEED_PREFETCH_BUCKET:,} elements)")
    aoff = offloads_activations(run)
    if aoff:
        notes.append("activation checkpoints in host RAM (DeepSpeed's cpu_checkpointing)")
    try:
        return Plan(dp=dp, tp=tp, pp=pp, cp=run.cp or 1, ep=run.ep or 1, tp_comm_overlap=overlap,
                    ep_overlap=ep_overlap, offload_activations=aoff, zero_stage=zero,
                    **Plan.offload_fields(offload, zero), micro_batch_size=mb, num_micro_batches=m,
                    pp_schedule="interleaved" if vpp > 1 else "1f1b",
                    pp_virtual_stages=vpp, **({"recompute_ops": True} if recompute == OP_LEVEL else
                                              Plan.recompute_fields(recompute)),
                    sequence_parallel=sp, nodes=nodes, devices_per_node=gpn, zero_impl=impl, **prefetch)
    except ValueError as exc:
        raise Unsupported(f"Plan refuses: {validation_message(exc)}") from None


def plausible_rate(run: PublicRun, spec: GpuSpec, model: ModelSpec, precision: str) -> None:
    """Unsupported when the row's measured tokens/s per GPU needs more model FLOP/s than the GPU's peak.

    6N + attention FLOPs per token (compute.flops_per_token, no recompute: the least any trainer does) times the
    measured tokens/s per GPU above the datasheet peak is not a measurement the model can be held to: the step
    time or the batch is not the run's (llm.c's run_gpt3_125M.sh quotes "~150ms/iter" in a comment, which would
    be 137 % of an A100's bf16 peak)."""
    from ..costmodel.analytical.compute import flops_per_token

    tps = run.tokens_per_s_per_gpu
    if not tps or not run.seq_len or model.kind != "transformer":
        return
    peak = {"fp32": spec.tflops_fp32, "fp8": spec.tflops_fp8}.get(precision, spec.tflops_bf16)
    need = flops_per_token(model, run.seq_len) * tps / 1e12
    if peak and need > peak:
        raise Unsupported(f"measured rate implausible ({need:.0f} model TFLOP/s per GPU > {peak:.0f} peak)")


def to_inputs(run: PublicRun, approximate: Collection[str] = ()) -> RunInputs:
    """Cluster, workload and plan of a measured run; Unsupported listing every blocker if they cannot be built.

    `approximate` names LIMITS to replace by their stated approximation instead of refusing.
    """
    unknown = set(approximate) - set(LIMITS)
    if unknown:
        raise UserError(f"unknown approximation {', '.join(sorted(unknown))}; use {', '.join(LIMITS)}")
    notes: list[str] = []
    reasons: list[str] = []

    def attempt(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Unsupported as exc:
            reasons.extend(r for r in exc.reasons if r not in reasons)
            return None

    if not run.measured_iter_time_s:
        reasons.append("no measured time or throughput")
    spec = attempt(gpu_of, run, notes)
    precision = attempt(precision_of, run, spec, approximate, notes)
    if re.search(r"phase=LoRA", run.other_opts):
        reasons.append("LoRA fine-tuning (adapter rank and targets not stated)")
    model = attempt(model_of, run, notes)
    degrees = attempt(degrees_of, run)
    placement = attempt(placement_of, run)
    recompute = attempt(recompute_of, run, approximate, notes)
    sharding: Any = None  # set below whenever the degrees are known (else a reason was recorded)
    batch: Any = None
    if degrees:
        sharding = attempt(sharding_of, run, *degrees, approximate, notes)
        batch = attempt(batch_of, run, degrees[0], approximate, notes, degrees[2])
    vpp = 0
    if model and degrees and batch:
        vpp = attempt(megatron_stages_per_rank, run, model.n_layers, degrees[2], batch[1], approximate, notes) or 0
    if placement and placement[0] > 1 and (reasons or not spec):
        attempt(network_of, run, placement[1], [], spec, approximate)  # only for its reason: no cluster is built
    offload = bool(sharding and sharding[1])
    if spec and offload and (reasons or not placement):
        attempt(cpu_of, run, spec, True, approximate, [])  # only for its reason: no cluster is built
    cluster = (attempt(cluster_of, run, spec, *placement, notes, approximate, offload)
               if spec and placement and not reasons else None)
    if spec and model and precision and not reasons:
        attempt(plausible_rate, run, spec, model, precision)
    if reasons:
        raise Unsupported(*reasons)
    assert cluster is not None  # built whenever no reason was recorded
    plan = plan_of(run, degrees, placement, sharding, batch, recompute, notes, vpp)
    kernel = ("cudnn" if TE_FRAMEWORKS.search(run.framework) else
              "flash3" if FLASH3_SOFTWARE.search(f"{run.software} {run.other_opts}")
              or SOURCE_STACK.get(run.source_id, ("",))[0] == "flash3" else
              "eager" if UNFUSED_FRAMEWORKS.search(run.framework) and not FLASH_SOFTWARE.search(run.software or "")
              else "flash")
    if kernel == "cudnn":
        notes.append("attention: cuDNN fused attention (Transformer Engine, the framework's default)")
    elif kernel == "flash3":
        notes.append("attention: FlashAttention-3/4 (flash-attn 3/4: "
                     + (SOURCE_STACK[run.source_id][2] if run.source_id in SOURCE_STACK else "the row's software")
                     + ")")
    elif kernel == "eager":
        notes.append("attention: Megatron's unfused core (Megatron-DeepSpeed without --use-flash-attn)")
    nemo_fp8 = precision == "fp8" and bool(NEMO_PERF_SCRIPTS.search(run.framework))
    bf16_reduce = bool(BF16_REDUCE_RECIPES.search(run.framework)) or nemo_fp8  # every NVIDIA recipe row
    if bf16_reduce:
        notes.append("gradients reduced in bf16 (NVIDIA's performance recipes: grad_reduce_in_fp32 = False)")
    fp8_params = (bf16_reduce and kernel == "cudnn" and precision == "fp8"
                  and bool(PER_TENSOR_FP8.match(run.precision)))
    if fp8_params:
        notes.append("FP8 weights (the recipe's fp8_param_gather = True: --fp8-param-gather)")
    training = TrainingSettings(seq_len=run.seq_len, global_batch=run.global_batch, precision=precision,
                                attention_kernel=kernel, kernels=kernels_of(run, notes),
                                grad_reduce_in_bf16=bf16_reduce, fp8_param_gather=fp8_params)
    return RunInputs(cluster, Workload(model=model, training=training), plan, tuple(notes))
