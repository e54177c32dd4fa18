"""Each emitted framework file read back by that framework's own parser (or its documented schema)."""
from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from gpuadvisor.hardware.catalog import network_from_key
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch.megatron import parse_megatron_text
from gpuadvisor.schemas import Cluster, Plan, parse_plan
from gpuadvisor.workload.specs import make_workload

from .framework_schemas import TORCHTITAN_JOB_CONFIG, TORCHTITAN_SCHEDULES, megatron_parser, megatron_validate
from .launch_fixtures import node

PLANS = {
    "dp8": "dp=8,mb=2,m=1",
    "dp4-accum": "dp=4,tp=2,mb=1,m=4",
    "tp2-sp": "dp=4,tp=2,mb=2,m=1,sequence_parallel=true,recompute=true",
    "pp2-1f1b": "dp=4,pp=2,mb=1,m=4",
    "pp2-gpipe": "dp=2,pp=4,mb=2,m=4,schedule=gpipe",
    "pp2-interleaved": "dp=4,pp=2,mb=1,m=4,schedule=interleaved,pp_virtual_stages=2",
    "zero1": "dp=8,zero=1,mb=1,m=2",
    "zero2": "dp=8,zero=2,mb=2,m=1",
    "zero3-offload": "dp=8,zero=3,offload=true,mb=1,m=2",
    "zero3-hpz": "dp=8,zero=3,zero_hpz_partition_size=4,mb=1,m=2",
}
# ZeRO with TP/PP (FSDP2 / distributed optimizer beside TP and PP), on an untied model (Megatron's FSDP2 needs one)
HYBRIDS = {
    "zero1-tp2-pp2": "dp=2,tp=2,pp=2,zero=1,mb=1,m=4,sequence_parallel=true",
    "zero1-pp2": "dp=4,pp=2,zero=1,mb=1,m=4",
    "zero1-tp2": "dp=4,tp=2,zero=1,mb=2,m=1",
    "zero2-tp2": "dp=4,tp=2,zero=2,mb=1,m=2",
    "zero3-tp2": "dp=4,tp=2,zero=3,mb=1,m=2,sequence_parallel=true,recompute=true",
    "zero3-tp2-pp2": "dp=2,tp=2,pp=2,zero=3,mb=1,m=4,schedule=gpipe",
}
ALL = {**PLANS, **HYBRIDS}
UNTIED = "llama-7b"


def _emitted(tmp_path: Path, spec: str, precision: str = "bf16", model: str = "gpt2") -> tuple[Path, Plan]:
    plan = parse_plan(spec, nodes=2, devices_per_node=4)
    cl = Cluster(name="two", source="test", nodes=[node("n0", 4), node("n1", 4)], network=network_from_key("ib-hdr"))
    wl = make_workload(model, global_batch=plan.global_batch(), precision=precision, seq_len=256)
    lc = build_launch(plan, cl, wl)
    emit(lc, make_job(plan, wl), tmp_path)
    return tmp_path, plan


def _env(out: Path) -> dict[str, str]:
    """The variables env.sh exports (values shell-unquoted)."""
    lines = (out / "env.sh").read_text().splitlines()
    pairs = [shlex.split(line[len("export "):])[0].split("=", 1) for line in lines if line.startswith("export ")]
    return dict(pairs)


@pytest.mark.parametrize("name", ALL)
def test_torchtitan_toml_against_job_config(tmp_path, name):
    out, plan = _emitted(tmp_path, ALL[name], model=UNTIED if name in HYBRIDS else "gpt2")
    cfg = tomllib.loads((out / "torchtitan.toml").read_text())
    for section, body in cfg.items():
        assert section in TORCHTITAN_JOB_CONFIG, section
        for key, value in body.items():
            want = TORCHTITAN_JOB_CONFIG[section].get(key)
            assert want is not None, f"[{section}] {key} is not a torchtitan JobConfig field"
            if isinstance(want, tuple):
                assert value in want, (section, key, value)
            else:
                assert isinstance(value, want) or (want is float and isinstance(value, int)), (section, key)
    par, tr = cfg["parallelism"], cfg["training"]
    degrees = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
               * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"])
    assert degrees == plan.world_size  # torchtitan's ParallelDims check
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert tr["global_batch_size"] % (tr["local_batch_size"] * dp) == 0
    assert tr["global_batch_size"] == plan.global_batch()
    if plan.pp > 1:
        from torch.distributed.pipelining.schedules import get_schedule_class

        assert par["pipeline_parallel_schedule"] in TORCHTITAN_SCHEDULES
        get_schedule_class(par["pipeline_parallel_schedule"])  # the name torch's pipelining knows
        assert tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == plan.num_micro_batches
    assert cfg["activation_checkpoint"]["mode"] == ("full" if plan.recompute else "none")
    assert tr["enable_cpu_offload"] == plan.zero_offload
    if plan.zero_stage and plan.zero_hpz_partition_size == 1:  # FSDP over dp, beside TP and PP
        assert par["data_parallel_shard_degree"] == plan.dp and par["data_parallel_replicate_degree"] == 1
        want = ("default" if plan.pp > 1 else "always") if plan.zero_stage == 3 else "never"
        assert par["fsdp_reshard_after_forward"] == want
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (plan.tp, plan.pp)


MEGATRON_PLANS = [n for n, spec in ALL.items() if not ("zero=3" in spec and "pp=" in spec)]


@pytest.mark.parametrize("name", MEGATRON_PLANS)
def test_megatron_args_parse(tmp_path, name):
    fsdp2 = "zero=3" in ALL[name]  # Megatron's FSDP2 refuses fp16 and tied embeddings
    precision = "bf16" if fsdp2 else "fp16"
    out, plan = _emitted(tmp_path, ALL[name], precision=precision, model=UNTIED if fsdp2 or name in HYBRIDS else "gpt2")
    args = megatron_parser().parse_args(parse_megatron_text((out / "megatron_args.txt").read_text()))
    megatron_validate(args, plan.world_size, _env(out))
    assert args.tensor_model_parallel_size == plan.tp and args.pipeline_model_parallel_size == plan.pp
    world = plan.world_size
    dp = world // (plan.tp * plan.pp)  # Megatron's validate_args
    assert args.global_batch_size % (args.micro_batch_size * dp) == 0
    assert args.global_batch_size // (args.micro_batch_size * dp) == plan.num_micro_batches
    assert getattr(args, precision) and not getattr(args, "bf16" if precision == "fp16" else "fp16")
    assert args.sequence_parallel == plan.sequence_parallel
    assert args.use_distributed_optimizer == (plan.zero_stage in (1, 2))
    assert args.use_torch_fsdp2 == (plan.zero_stage == 3)
    if plan.pp_virtual_stages > 1:
        assert args.num_layers % (args.num_layers_per_virtual_pipeline_stage * plan.pp) == 0


@pytest.mark.parametrize("spec,model,precision,why", [
    (HYBRIDS["zero3-tp2-pp2"], UNTIED, "bf16", "pipeline parallelism"),
    (PLANS["zero3-hpz"], "gpt2", "bf16", "tied embeddings"),
    (HYBRIDS["zero3-tp2"], UNTIED, "fp16", "fp16"),
])
def test_no_megatron_args_where_fsdp2_is_refused(tmp_path, spec, model, precision, why):
    out, _ = _emitted(tmp_path, spec, precision=precision, model=model)
    assert not (out / "megatron_args.txt").exists()
    readme = (out / "README.txt").read_text()
    assert "(no megatron_args.txt: Megatron-LM runs ZeRO-3 as --use-torch-fsdp2" in readme and why in readme


def test_megatron_validate_catches_what_it_should():
    """The validate_args copy is not a rubber stamp: FSDP2 with PP, or with the 1-connection setting, fails."""
    args = megatron_parser().parse_args(["--use-torch-fsdp2", "--pipeline-model-parallel-size", "2",
                                         "--tensor-model-parallel-size", "1",
                                         "--micro-batch-size", "1", "--global-batch-size", "8",
                                         "--no-gradient-accumulation-fusion", "--untie-embeddings-and-output-weights"])
    with pytest.raises(AssertionError, match="pipeline parallel"):
        megatron_validate(args, 8, {})
    args.pipeline_model_parallel_size = 1
    megatron_validate(args, 8, {})
    with pytest.raises(AssertionError, match="CUDA_DEVICE_MAX_CONNECTIONS"):
        megatron_validate(args, 8, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})


def test_megatron_flags_unknown_to_megatron_are_refused():
    with pytest.raises(SystemExit):
        megatron_parser().parse_args(["--tensor-model-parallel", "2"])  # no abbreviations in Megatron


ACCELERATE_PLANS = [n for n, spec in ALL.items() if "pp=" not in spec and ("tp=" not in spec or "zero=" in spec)]


@pytest.mark.parametrize("name", ACCELERATE_PLANS)
def test_accelerate_yaml_with_accelerate(tmp_path, name):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    from accelerate.parallelism_config import ParallelismConfig

    out, plan = _emitted(tmp_path, ALL[name])
    cfg = ClusterConfig.from_yaml_file(str(out / "accelerate.yaml"))  # refuses unknown top-level keys
    assert cfg.num_processes == plan.world_size and cfg.num_machines == plan.nodes
    line = shlex.split((out / "accelerate.yaml").read_text().splitlines()[1].split(":", 1)[1])
    assert line[:2] == ["accelerate", "launch"]
    parser = launch_command_parser()
    args = parser.parse_args([a.replace("<i>", "1").replace("accelerate.yaml", str(out / "accelerate.yaml"))
                              for a in line[2:]])
    assert args.machine_rank == 1
    known = {a.dest for a in parser._actions}
    for section, prefix in (("deepspeed_config", ""), ("fsdp_config", ""), ("parallelism_config", "")):
        for key in (getattr(cfg, section) or {}):
            assert prefix + key in known, f"{section}.{key} is not an accelerate launch argument"
    if plan.zero_stage and plan.tp == 1:
        assert cfg.distributed_type == "DEEPSPEED"
        ds = json.loads((out / cfg.deepspeed_config["deepspeed_config_file"]).read_text())
        assert ds["zero_optimization"]["stage"] == plan.zero_stage
    elif plan.tp > 1:  # FSDP2 + TP: accelerate's own ParallelismConfig checks (__post_init__, _validate_accelerator)
        sizes = {k.removeprefix("parallelism_config_"): v for k, v in cfg.parallelism_config.items()}
        # tp_handler given: accelerate's default TP handler needs transformers >= 4.52 (its TP shards an HF model)
        par = ParallelismConfig(**sizes, tp_handler=object())
        assert cfg.distributed_type == "FSDP" and cfg.fsdp_config["fsdp_version"] == 2
        assert par.total_size == cfg.num_processes and par.dp_shard_enabled and par.tp_size == plan.tp
        assert cfg.fsdp_config["fsdp_reshard_after_forward"] == (plan.zero_stage == 3)


@pytest.mark.parametrize("name", ["pp2-1f1b", "zero1-pp2", "zero3-tp2-pp2"])
def test_no_accelerate_yaml_for_pipeline_plans(tmp_path, name):
    out, _ = _emitted(tmp_path, ALL[name], model=UNTIED)
    assert not (out / "accelerate.yaml").exists()
    assert "Accelerate has no training pipeline parallelism" in (out / "README.txt").read_text()


@pytest.mark.parametrize("name", ["dp4-accum", "tp2-sp"])
def test_no_accelerate_yaml_for_tp_without_sharding(tmp_path, name):
    """TP x DDP: accelerate 1.15's ParallelismConfig refuses the config that would express it; 1.16 accepts it, but
    its prepare_model wraps a tensor-parallel model in no DDP, so the replicas would not sync gradients."""
    accelerate = pytest.importorskip("accelerate")
    from accelerate.parallelism_config import ParallelismConfig

    out, plan = _emitted(tmp_path, PLANS[name])
    assert not (out / "accelerate.yaml").exists()
    assert "Accelerate runs TP only beside FSDP2 sharding" in (out / "README.txt").read_text()
    if tuple(int(x) for x in accelerate.__version__.split(".")[:2]) < (1, 16):
        with pytest.raises(ValueError, match="cannot be used with pure data parallelism"):
            ParallelismConfig(dp_replicate_size=plan.dp, dp_shard_size=1, tp_size=plan.tp, tp_handler=object())
    else:
        import inspect

        ParallelismConfig(dp_replicate_size=plan.dp, dp_shard_size=1, tp_size=plan.tp, tp_handler=object())
        source = inspect.getsource(accelerate.Accelerator.prepare_model)
        assert "self.multi_device and not (self.parallelism_config and self.parallelism_config.tp_enabled)" in source


@pytest.mark.parametrize("name", HYBRIDS)
def test_hybrid_zero_is_not_handed_to_deepspeed(tmp_path, name):
    """No ds_config.json, no --ds-config, no DeepSpeed op pre-build, no DS launcher line: DeepSpeed does not run it."""
    out, plan = _emitted(tmp_path, HYBRIDS[name], model=UNTIED)
    assert not (out / "ds_config.json").exists() and not (out / "hostfile").exists()
    for name_ in ("launch.sh", "slurm.sbatch"):
        text = (out / name_).read_text()
        assert "--ds-config" not in text and "ensure_deepspeed_ops" not in text
    readme = (out / "README.txt").read_text()
    assert "no ds_config.json: ZeRO-" in readme and "deepspeed launcher equivalent" not in readme
    from gpuadvisor.trainers.support import unsupported_reason
    from gpuadvisor.workload.specs import make_workload
    refused = unsupported_reason(plan, make_workload(UNTIED), cuda=True)
    assert ("the bundled trainer refuses this plan" in readme) == bool(refused), refused
    assert "DS_ACCELERATOR" not in (out / "env.sh").read_text()
    assert ("CUDA_DEVICE_MAX_CONNECTIONS" in _env(out)) == (plan.sequence_parallel and plan.zero_stage != 3)


@pytest.mark.parametrize("name", ["dp8", "zero3-offload", "pp2-interleaved", "zero1-tp2-pp2"])
def test_slurm_script_and_torchrun_args(tmp_path, name):
    from torch.distributed.run import get_args_parser

    out, plan = _emitted(tmp_path, ALL[name])
    script = (out / "slurm.sbatch").read_text()
    subprocess.run(["bash", "-n", str(out / "slurm.sbatch")], check=True)
    assert f"#SBATCH --nodes={plan.nodes}" in script and "#SBATCH --ntasks-per-node=1" in script
    assert ("ensure_deepspeed_ops" in script) == (plan.zero_stage > 0 and plan.tp == plan.pp == 1)
    assert f"#SBATCH --gpus-per-node={plan.devices_per_node}" in script
    srun = next(l for l in script.splitlines() if l.startswith("srun") and "torchrun" in l)
    argv = shlex.split(srun.replace("$head_node", "10.0.0.1").replace("$SLURM_JOB_ID", "42"))
    targs = get_args_parser().parse_args(argv[argv.index("torchrun") + 1:])  # torchrun's own parser
    assert targs.nnodes == str(plan.nodes) and targs.nproc_per_node == str(plan.devices_per_node)
    assert targs.rdzv_backend == "c10d" and targs.rdzv_id == "42" and targs.module
    for line in (out / "launch.sh").read_text().splitlines():
        if line.strip().startswith("exec torchrun"):
            get_args_parser().parse_args(shlex.split(line)[2:])


@pytest.mark.parametrize("model,plan_text,want", [
    ("llama-3.1-8b", "dp=4,tp=2,mb=1,m=2,sequence_parallel=true,tp_comm_overlap=true",
     {"normalization": "RMSNorm", "position_embedding_type": "rope", "disable_bias_linear": True,
      "tp_comm_overlap": True, "num_query_groups": 8}),
    ("qwen3-30b-a3b", "dp=8,zero=1,ep=8,mb=1,m=2",
     {"num_experts": 128, "moe_router_topk": 8, "moe_ffn_hidden_size": 768, "expert_model_parallel_size": 8,
      "expert_tensor_parallel_size": 1, "kv_channels": 128, "qk_layernorm": True}),
    ("gpt2", "dp=8,mb=1,m=2", {"normalization": None, "position_embedding_type": None, "num_experts": None}),
])
def test_megatron_args_carry_the_model_family_and_experts(tmp_path, model, plan_text, want):
    """Llama-family and MoE shapes reach Megatron as its own flags (a Llama written as GPT-2 flags would train
    LayerNorm, learned positions and biases); every flag parses with Megatron's argument types."""
    from gpuadvisor.launch.megatron import megatron_args
    from gpuadvisor.workload.specs import make_workload

    plan = parse_plan(plan_text)
    wl = make_workload(model, global_batch=plan.global_batch(), seq_len=1024)
    args = megatron_parser().parse_args(megatron_args(plan, wl, steps=5))
    for k, v in want.items():
        assert getattr(args, k) == v, k


@pytest.mark.parametrize("spec, hook", [("dp=8,mb=2,m=1", "NO"),
                                        ("dp=8,mb=2,m=1,ddp_bucket_mb=100,comm_hook=bf16", "BF16"),
                                        ("dp=8,mb=2,m=1,comm_hook=powersgd", "POWER_SGD")])
def test_accelerate_yaml_names_the_ddp_kwargs_the_prediction_assumes(tmp_path, spec, hook):
    """Accelerate's YAML has no DDP keys, so the file says which DistributedDataParallelKwargs the script passes;
    the text builds accelerate's own dataclass with the plan's bucket, one gradient copy and hook."""
    pytest.importorskip("accelerate")
    from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs

    out, plan = _emitted(tmp_path, spec)
    text = (out / "accelerate.yaml").read_text()
    call = text.split("kwargs_handlers=[", 1)[1].split("] (accelerate.utils)", 1)[0]
    kw = eval(call, {"DistributedDataParallelKwargs": DistributedDataParallelKwargs,  # noqa: S307 (our own text)
                     "DDPCommunicationHookType": DDPCommunicationHookType})
    assert kw.bucket_cap_mb == plan.ddp_bucket_mb and kw.gradient_as_bucket_view is True
    assert kw.comm_hook == DDPCommunicationHookType[hook]


def test_accelerate_yaml_names_no_ddp_kwargs_beside_zero(tmp_path):
    out, _ = _emitted(tmp_path, "dp=8,zero=2,mb=2,m=1")
    assert "DistributedDataParallelKwargs" not in (out / "accelerate.yaml").read_text()


@pytest.mark.parametrize("plan_text", ["dp=16,zero=1,ep=16,ep_overlap=true,mb=1,m=4",
                                       "dp=8,pp=2,zero=1,ep=8,ep_overlap=true,mb=1,m=4,schedule=interleaved,"
                                       "pp_virtual_stages=2"])
def test_megatron_expert_overlap_passes_megatrons_checks(plan_text):
    """ep_overlap's flags parse with Megatron's argument types and pass the TransformerConfig checks Megatron runs
    for --overlap-moe-expert-parallel-comm (expert parallelism, alltoall dispatcher, no full recompute, virtual
    stages under PP, 16-bit), with launch.sh's CUDA_DEVICE_MAX_CONNECTIONS."""
    from gpuadvisor.hardware.presets import load_preset
    from gpuadvisor.launch.environment import common_env
    from gpuadvisor.launch.megatron import megatron_args
    from gpuadvisor.workload.specs import make_workload

    plan = parse_plan(plan_text, nodes=2, devices_per_node=8)
    wl = make_workload("qwen3-30b-a3b", global_batch=plan.global_batch(), seq_len=1024)
    args = megatron_parser().parse_args(megatron_args(plan, wl, steps=5))
    assert args.overlap_moe_expert_parallel_comm and args.delay_wgrad_compute
    cluster = load_preset("hgx-h100-8x-8nodes-ib-ndr")
    env = {e.name: e.value for e in common_env(plan, cluster.nodes[:2], [n.devices for n in cluster.nodes[:2]],
                                               True, cluster)}
    megatron_validate(args, world=16, env=env)
    with pytest.raises(AssertionError, match="full recomputation"):
        megatron_validate(megatron_parser().parse_args(megatron_args(plan, wl, steps=5)
                                                       + ["--recompute-granularity", "full"]), world=16, env=env)
