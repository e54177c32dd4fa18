"""Context parallelism (Plan.cp) in the hand-over and the read-back.

A cp > 1 plan is handed to the frameworks that run ring attention: launch.sh and slurm.sbatch start torchtitan on
torchtitan.toml ([parallelism] context_parallel_degree), megatron_args.txt says --context-parallel-size,
accelerate.yaml parallelism_config_cp_size (FSDP2, ZeRO plans); never DeepSpeed, never the bundled trainer. Each
file reads back to the plan's degrees; bad degrees are one-line errors.
"""
from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.catalog import network_from_key
from gpuadvisor.launch import build_launch, emit, launch_steps, make_job
from gpuadvisor.launch.megatron import parse_megatron_text
from gpuadvisor.launch.placement import coords, cp_index, placement_notes
from gpuadvisor.launch.readback import read_config
from gpuadvisor.schemas import Cluster, Plan, parse_plan
from gpuadvisor.workload.specs import make_workload

from .framework_schemas import TORCHTITAN_JOB_CONFIG, megatron_parser, megatron_validate
from .launch_fixtures import node

MODEL = "llama-7b"  # untied embeddings: Megatron's FSDP2 takes ZeRO-3
PLANS = {
    "cp4-zero3": "dp=2,cp=4,zero=3,mb=1,m=2",
    "tp2xcp4-zero1": "dp=1,tp=2,cp=4,zero=1,mb=1,m=4,sequence_parallel=true",
    "cp2-ddp": "dp=4,cp=2,mb=1,m=2",
    "tp2xcp2-zero2": "dp=2,tp=2,cp=2,zero=2,mb=1,m=2",
    "cp4xpp2-zero1": "dp=1,pp=2,cp=4,zero=1,mb=1,m=4",
    "cp2xpp2-zero3": "dp=2,pp=2,cp=2,zero=3,mb=1,m=4",
}
FIELDS = ("dp", "tp", "pp", "cp", "zero_stage", "micro_batch_size", "num_micro_batches")


def _cluster() -> Cluster:
    return Cluster(name="two", source="test", nodes=[node("n0", 4), node("n1", 4)], network=network_from_key("ib-hdr"))


def _emitted(tmp_path: Path, spec: str) -> tuple[Path, Plan]:
    plan = parse_plan(spec, nodes=2, devices_per_node=4)
    wl = make_workload(MODEL, global_batch=plan.global_batch(), seq_len=1024)
    launch = build_launch(plan, _cluster(), wl)
    emit(launch, make_job(plan, wl, steps=launch_steps(launch)), tmp_path)
    return tmp_path, plan


@pytest.mark.parametrize("name", PLANS)
def test_launch_sh_runs_torchtitan_never_deepspeed_or_the_bundled_trainer(tmp_path, name):
    out, plan = _emitted(tmp_path, PLANS[name])
    assert not (out / "ds_config.json").exists() and not (out / "hostfile").exists()
    for script in ("launch.sh", "slurm.sbatch"):
        text = (out / script).read_text()
        assert "-m torchtitan.train --job.config_file torchtitan.toml --training.steps 20" in text, script
        assert "gpuadvisor.trainers" not in text and "ds-config" not in text, script
    readme = (out / "README.txt").read_text()
    assert "context parallel cp=" in readme and "a record (the bundled trainer does not run context parallelism)" \
        in readme


@pytest.mark.parametrize("name", PLANS)
def test_torchtitan_toml_carries_the_degree(tmp_path, name):
    out, plan = _emitted(tmp_path, PLANS[name])
    cfg = tomllib.loads((out / "torchtitan.toml").read_text())
    par = cfg["parallelism"]
    for key, value in par.items():  # every key a torchtitan JobConfig field, choices respected
        want = TORCHTITAN_JOB_CONFIG["parallelism"][key]
        assert value in want if isinstance(want, tuple) else isinstance(value, want), (key, value)
    assert par["context_parallel_degree"] == plan.cp and par["context_parallel_rotate_method"] == "allgather"
    degrees = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * plan.cp
               * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"])
    assert degrees == plan.world_size  # torchtitan's ParallelDims check, cp included
    # the data loader's degree is replicate x shard (cp ranks read the same sequences): the global batch is dp's
    assert cfg["training"]["global_batch_size"] == plan.global_batch()
    assert cfg["training"]["seq_len"] % (plan.tp * 2 * plan.cp) == 0  # ParallelDims.seq_len_divisor


@pytest.mark.parametrize("name", [n for n, s in PLANS.items() if not ("zero=3" in s and "pp=" in s)])
def test_megatron_args_carry_the_degree(tmp_path, name):
    out, plan = _emitted(tmp_path, PLANS[name])
    text = (out / "megatron_args.txt").read_text()
    args = megatron_parser().parse_args(parse_megatron_text(text))
    megatron_validate(args, plan.world_size, {})
    assert args.context_parallel_size == plan.cp
    dp = plan.world_size // (plan.tp * plan.pp * plan.cp)  # Megatron's data-parallel size
    assert dp == plan.dp and args.global_batch_size // (args.micro_batch_size * dp) == plan.num_micro_batches
    assert args.use_distributed_optimizer == (plan.zero_stage in (1, 2))
    assert "# CP: --context-parallel-size" in text and "CUDA_DEVICE_MAX_CONNECTIONS" in text


def test_megatron_refuses_fsdp2_with_pipeline_beside_cp_too(tmp_path):
    out, _ = _emitted(tmp_path, PLANS["cp2xpp2-zero3"])
    assert not (out / "megatron_args.txt").exists()
    assert "(no megatron_args.txt: Megatron-LM runs ZeRO-3 as --use-torch-fsdp2" in (out / "README.txt").read_text()


@pytest.mark.parametrize("name", ["cp4-zero3", "tp2xcp4-zero1", "tp2xcp2-zero2"])
def test_accelerate_yaml_carries_cp_size_on_fsdp2(tmp_path, name):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.parallelism_config import ParallelismConfig

    out, plan = _emitted(tmp_path, PLANS[name])
    cfg = ClusterConfig.from_yaml_file(str(out / "accelerate.yaml"))
    assert cfg.distributed_type == "FSDP" and cfg.fsdp_config["fsdp_version"] == 2
    sizes = {k.removeprefix("parallelism_config_"): v for k, v in cfg.parallelism_config.items()}
    par = ParallelismConfig(**sizes, tp_handler=object() if plan.tp > 1 else None)  # accelerate's own checks
    assert par.cp_size == plan.cp and par.total_size == plan.world_size == cfg.num_processes
    assert "maybe_context_parallel" in (out / "accelerate.yaml").read_text()


@pytest.mark.parametrize("name", ["cp2-ddp", "cp4xpp2-zero1"])
def test_no_accelerate_yaml_where_accelerate_cannot_run_cp(tmp_path, name):
    out, plan = _emitted(tmp_path, PLANS[name])
    assert not (out / "accelerate.yaml").exists()
    why = "no training pipeline parallelism" if plan.pp > 1 else "context parallelism only beside FSDP2"
    assert why in (out / "README.txt").read_text()


def _read_back_zero(name: str, plan: Plan) -> int:
    """The ZeRO stage each file runs the plan with: torchtitan applies FSDP whenever cp > 1 and writes ZeRO-1/2 (and
    a plan without ZeRO) as FSDP without resharding, read as ZeRO-2 (ZeRO-1 under PP); Megatron's distributed
    optimizer is ZeRO-1; Accelerate's FSDP2 without resharding is ZeRO-2."""
    z = plan.zero_stage
    if name == "torchtitan.toml" and z < 3:
        return 1 if plan.pp > 1 else 2
    if name == "megatron_args.txt" and z == 2:
        return 1
    if name == "accelerate.yaml" and z == 1:
        return 2
    return z


@pytest.mark.parametrize("spec", PLANS.values(), ids=list(PLANS))
@pytest.mark.parametrize("name", ["torchtitan.toml", "megatron_args.txt", "accelerate.yaml"])
def test_round_trip_keeps_the_degrees(tmp_path, spec, name):
    out, plan = _emitted(tmp_path, spec)
    if not (out / name).exists():
        pytest.skip(f"no {name} for this plan")
    rb = read_config(out / name, world=8, global_batch=plan.global_batch())
    got = parse_plan(rb.spec(), nodes=2, devices_per_node=4)
    want = {f: getattr(plan, f) for f in FIELDS}
    have = {f: getattr(got, f) for f in FIELDS}
    want["zero_stage"] = _read_back_zero(name, plan)
    if name == "accelerate.yaml":  # the script, not the YAML, holds mb and accumulation
        for d in (want, have):
            d["micro_batch_size"] *= d.pop("num_micro_batches")
    assert have == want
    assert got.gradient_ranks == plan.gradient_ranks and got.world_size == plan.world_size


def test_torchtitan_cp4_on_8_gpus_shards_the_rest(tmp_path):
    """data_parallel_shard_degree -1 is the rest of the world: 8 / (replicate 1 x cp 4) = 2."""
    (tmp_path / "t.toml").write_text("[parallelism]\ncontext_parallel_degree = 4\n"
                                     "context_parallel_rotate_method = \"alltoall\"\n"
                                     "[training]\nlocal_batch_size = 1\nglobal_batch_size = 4\nseq_len = 8192\n")
    rb = read_config(tmp_path / "t.toml", world=8, global_batch=4)
    got = parse_plan(rb.spec(), nodes=1, devices_per_node=8)
    assert (got.dp, got.cp, got.tp, got.zero_stage, got.num_micro_batches) == (2, 4, 1, 3, 2)
    assert rb.world_size == 8 and any("alltoall" in n for n in rb.notes)
    # the shard degree stated: the file gives its own world (2 x 4), whatever the cluster has
    (tmp_path / "s.toml").write_text("[parallelism]\ndata_parallel_shard_degree = 2\ncontext_parallel_degree = 4\n")
    rb = read_config(tmp_path / "s.toml", world=16, global_batch=4)
    assert (rb.plan["dp"], rb.plan["cp"], rb.world_size) == (2, 4, 8)


def test_megatron_cp2_tp2_on_8_gpus_leaves_dp_2(tmp_path):
    (tmp_path / "a.txt").write_text("--context-parallel-size 2 --tensor-model-parallel-size 2 --micro-batch-size 1 "
                                    "--global-batch-size 8 --use-distributed-optimizer --overlap-grad-reduce "
                                    "--overlap-param-gather --bf16 --cp-comm-type p2p")
    rb = read_config(tmp_path / "a.txt", world=8, global_batch=8)
    got = parse_plan(rb.spec(), nodes=1, devices_per_node=8)
    assert (got.dp, got.tp, got.cp, got.pp, got.zero_stage, got.num_micro_batches) == (2, 2, 2, 1, 1, 4)
    assert got.strategy == "tp2xcp2-zero1" and any("--cp-comm-type" in n for n in rb.notes)


def test_accelerate_parallelism_config_cp_size_reads_back(tmp_path):
    (tmp_path / "a.yaml").write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_version: 2\n"
                                     "parallelism_config:\n  parallelism_config_dp_shard_size: 2\n"
                                     "  parallelism_config_cp_size: 4\n")
    got = parse_plan(read_config(tmp_path / "a.yaml", world=8, global_batch=8).spec(), nodes=1, devices_per_node=8)
    assert (got.dp, got.cp, got.zero_stage, got.micro_batch_size) == (2, 4, 3, 4)


@pytest.mark.parametrize("fname,text,words", [
    ("zero.toml", "[parallelism]\ncontext_parallel_degree = 0\n",
     "'context_parallel_degree' must be a whole number >= 1 (1: no context parallelism), got 0"),
    ("neg.toml", "[parallelism]\ncontext_parallel_degree = -2\n", "got -2"),
    ("float.toml", "[parallelism]\ncontext_parallel_degree = 2.5\n", "got 2.5"),
    ("text.toml", "[parallelism]\ncontext_parallel_degree = \"four\"\n", "got 'four'"),
    ("odd.toml", "[parallelism]\ncontext_parallel_degree = 3\n",
     "'context_parallel_degree' 3 does not divide the world size 8; use a 'context_parallel_degree' that divides 8"),
    ("tp.toml", "[parallelism]\ntensor_parallel_degree = 2\ncontext_parallel_degree = 8\n",
     "'context_parallel_degree' 8 beside replicate x tensor x pipeline degrees = 2 does not divide the world size 8; "
     "use a 'context_parallel_degree' that divides 4"),
    ("rot.toml", "[parallelism]\ncontext_parallel_degree = 2\ncontext_parallel_rotate_method = \"ring\"\n",
     "context_parallel_rotate_method must be one of allgather, alltoall (torchtitan's choices), got 'ring'"),
    ("zero.txt", "--context-parallel-size 0", "'--context-parallel-size' must be a whole number >= 1"),
    ("odd.txt", "--context-parallel-size 3 --tensor-model-parallel-size 2",
     "'--context-parallel-size' 3 beside tp x pp = 2 does not divide the world size 8; use a "
     "'--context-parallel-size' that divides 4"),
    ("word.txt", "--context-parallel-size two", "got 'two'"),
    ("ds.txt", "--context-parallel-size 2 --deepspeed --zero-stage 1",
     "--context-parallel-size 2 with --deepspeed: DeepSpeed's engine runs no ring attention"),
    ("odd.yaml", "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_version: 2\nparallelism_config:\n"
     "  parallelism_config_cp_size: 3\n", "'parallelism_config_cp_size' 3 does not divide the world size 8"),
])
def test_bad_degrees_are_one_line_errors(tmp_path, fname, text, words):
    (tmp_path / fname).write_text(text)
    with pytest.raises(UserError) as err:
        read_config(tmp_path / fname, world=8, global_batch=8)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_cli_predicts_an_emitted_cp_config(tmp_path, capsys):
    """`predict --from torchtitan.toml` of a cp plan prices the plan it came from (one line per error otherwise)."""
    out, plan = _emitted(tmp_path, PLANS["cp4-zero3"])
    for name in ("torchtitan.toml", "megatron_args.txt"):
        rc = main(["predict", "--model", MODEL, "--preset", "hgx-h200-8x", "--from", str(out / name), "--json"])
        assert rc == 0, capsys.readouterr().err
        got = json.loads(capsys.readouterr().out)["estimate"]["plan"]
        assert (got["dp"], got["cp"], got["zero_stage"]) == (plan.dp, plan.cp, plan.zero_stage), name
    (tmp_path / "bad.toml").write_text("[parallelism]\ncontext_parallel_degree = 3\n")
    assert main(["predict", "--model", MODEL, "--preset", "hgx-h200-8x", "--from", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err
    assert "'context_parallel_degree' 3 does not divide the world size 8" in err and err.count("\n") == 1


def test_adapter_training_with_cp_has_no_hand_over():
    plan = parse_plan("dp=2,cp=4,zero=3,mb=1,m=2", nodes=2, devices_per_node=4)
    wl = make_workload(MODEL, global_batch=plan.global_batch(), seq_len=1024, finetune="lora")
    with pytest.raises(UserError, match=r"cp=4 with LORA adapters: no hand-over runs context parallelism .*use cp=1"):
        build_launch(plan, _cluster(), wl)


def test_placement_places_the_cp_ranks_between_tp_and_dp():
    """Megatron-Core's tp-cp-dp-pp order: the per-node notes and the rule for the middle nodes agree with it."""
    plan = Plan(tp=2, cp=2, dp=8, pp=2, micro_batch_size=1, num_micro_batches=2, nodes=16, devices_per_node=4)
    seen = {(coords(plan, r), cp_index(plan, r)) for r in range(plan.world_size)}
    assert len(seen) == plan.world_size  # every rank its own (tp, dp, pp, cp)
    assert (coords(plan, 2), cp_index(plan, 2)) == ((0, 0, 0), 1) and coords(plan, 4) == (0, 1, 0)
    notes = placement_notes(plan, [f"n{i}" for i in range(16)])
    assert "placement: node 1 (n1) runs global ranks 4-7: pp stage 0, dp replica 1, cp rank 0-1, tp shard 0-1" in notes
    (rule,) = [n for n in notes if "likewise" in n]
    stated = rule.split("rank r holds ")[1].split(" (mesh order")[0]
    assert stated == "tp shard r mod 2, cp rank (r div 2) mod 2, dp replica (r div 4) mod 8, pp stage r div 32"
    index = {"tp shard": lambda r: coords(plan, r)[0], "cp rank": lambda r: cp_index(plan, r),
             "dp replica": lambda r: coords(plan, r)[1], "pp stage": lambda r: coords(plan, r)[2]}
    for part in stated.split(", "):
        what = next(k for k in index if part.startswith(k))
        expr = part[len(what):].replace("div", "//").replace("mod", "%")
        assert all(eval(expr, {"r": r}) == index[what](r) for r in range(plan.world_size)), part  # noqa: S307
    assert any(n.startswith("placement: each CP group of 2 ranks (stride 2) lies inside one node") for n in notes)


def test_launch_line_is_one_torchrun_per_node_with_the_rendezvous(tmp_path):
    out, plan = _emitted(tmp_path, PLANS["cp4-zero3"])
    line = next(x for x in (out / "launch.sh").read_text().splitlines() if "exec torchrun" in x)
    argv = shlex.split(line.split("exec ", 1)[1])
    assert argv[argv.index("--nproc-per-node") + 1] == "4" and argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("-m") + 1:] == ["torchtitan.train", "--job.config_file", "torchtitan.toml",
                                           "--training.steps", "20", "--job.dump_folder", "runs/gpuadvisor"]


def test_accelerate_megatron_plugin_runs_cp2_unless_told(tmp_path, monkeypatch):
    """Accelerate's MegatronLMPlugin defaults context_parallel_size to 2 when the YAML has no
    megatron_lm_context_parallel_size (checked against the installed accelerate, whose plugin reads the launcher's
    environment variable with that default); the read-back prices it so and says how to turn it off, and a world the
    default does not divide is one line naming the key."""
    import os

    from accelerate.utils import MegatronLMPlugin

    for key in [k for k in os.environ if k.startswith("MEGATRON_LM_")]:
        monkeypatch.delenv(key)
    assert MegatronLMPlugin().context_parallel_size == 2
    base = "distributed_type: MEGATRON_LM\nnum_processes: 8\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n"
    (tmp_path / "a.yaml").write_text(base)
    rb = read_config(tmp_path / "a.yaml", world=8, global_batch=8)
    got = parse_plan(rb.spec(), nodes=1, devices_per_node=8)
    assert (got.dp, got.tp, got.cp) == (2, 2, 2)
    assert any("megatron_lm_context_parallel_size: 1" in n for n in rb.notes)
    (tmp_path / "b.yaml").write_text(base + "  megatron_lm_context_parallel_size: 1\n")
    got = parse_plan(read_config(tmp_path / "b.yaml", world=8, global_batch=8).spec(), nodes=1, devices_per_node=8)
    assert (got.dp, got.tp, got.cp) == (4, 2, 1)
    (tmp_path / "c.yaml").write_text(base.replace("num_processes: 8", "num_processes: 6"))
    with pytest.raises(UserError, match="set megatron_lm_context_parallel_size: 1") as err:
        read_config(tmp_path / "c.yaml", world=6, global_batch=6)
    assert "\n" not in str(err.value)
