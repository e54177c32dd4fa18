"""LoRA/QLoRA hand-over (`--emit` of an adapter plan): accelerate.yaml read by accelerate's own classes,
train_lora.py compiled and its LoraConfig applied by peft to a real (tiny, random) transformers model whose
trainable count must equal gpuadvisor's, job.json carrying the FineTune, and one short CPU training run."""
from __future__ import annotations

import ast
import json
import py_compile
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.hardware.catalog import network_from_key
from gpuadvisor.launch import build_launch, emit, make_job
from gpuadvisor.launch import peft as handover
from gpuadvisor.schemas import Cluster, ModelSpec, parse_plan
from gpuadvisor.schemas.job import TrainerJob
from gpuadvisor.schemas.workload import FineTune
from gpuadvisor.workload.finetune import adapter_params
from gpuadvisor.workload.settings import make_workload

from .launch_fixtures import node

PLANS = {  # plan -> the Accelerate backend the hand-over must choose
    "single": ("dp=1,mb=2,m=4", "NO"),
    "ddp": ("dp=8,mb=2,m=1", "MULTI_GPU"),
    "zero1": ("dp=8,zero=1,mb=1,m=2", "DEEPSPEED"),
    "zero2-offload": ("dp=8,zero=2,offload=true,mb=2,m=1", "DEEPSPEED"),
    "zero3": ("dp=8,zero=3,mb=1,m=2,recompute=true", "FSDP"),
    "zero3-offload": ("dp=8,zero=3,offload=true,mb=1,m=2", "FSDP"),
    "zero3-hpz": ("dp=8,zero=3,zero_hpz_partition_size=4,mb=1,m=2", "DEEPSPEED"),
}


def emitted(tmp_path: Path, spec: str, model: str = "llama-7b", finetune="qlora", precision="bf16"):
    one = "dp=1," in spec
    plan = parse_plan(spec, nodes=1 if one else 2, devices_per_node=1 if one else 4)
    nodes = [node("n0", 1)] if one else [node("n0", 4), node("n1", 4)]
    cl = Cluster(name="c", source="test", nodes=nodes, network=None if one else network_from_key("ib-hdr"))
    wl = make_workload(model, global_batch=plan.global_batch(), seq_len=256, finetune=finetune, precision=precision)
    lc = build_launch(plan, cl, wl)
    emit(lc, make_job(plan, wl), tmp_path)
    return tmp_path, plan, wl


def script_constants(path: Path) -> dict:
    """The constants block of train_lora.py (plain literals), evaluated without importing torch."""
    tree = ast.parse(path.read_text())
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id.isupper():
            try:
                out[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
    return out


@pytest.mark.parametrize("method", ["lora", "qlora"])
@pytest.mark.parametrize("name", PLANS)
def test_accelerate_yaml_and_launch_line_with_accelerate(tmp_path, name, method):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    spec, kind = PLANS[name]
    out, plan, wl = emitted(tmp_path, spec, finetune=method)
    cfg = ClusterConfig.from_yaml_file(str(out / "accelerate.yaml"))  # refuses unknown top-level keys
    assert cfg.distributed_type == kind and cfg.num_processes == plan.world_size and cfg.num_machines == plan.nodes
    assert isinstance(cfg.mixed_precision, str)  # 'no' quoted: YAML 1.1 would read a bare no as False
    parser = launch_command_parser()
    known = {a.dest for a in parser._actions}
    for section in ("deepspeed_config", "fsdp_config"):
        for key in (getattr(cfg, section) or {}):
            assert key in known, f"{section}.{key} is not an accelerate launch argument"
    line = shlex.split((out / "accelerate.yaml").read_text().splitlines()[1].split(":", 1)[1])
    args = parser.parse_args([a.replace("<i>", "0").replace("accelerate.yaml", str(out / "accelerate.yaml"))
                              for a in line[2:]])
    assert args.training_script == "train_lora.py" and args.training_script_args[:2] == ["--data", "YOUR_DATA.jsonl"]
    if kind == "FSDP":  # peft's FSDP guide: use_orig_params false, RAM-efficient loading, offload as the plan says
        fs = cfg.fsdp_config
        assert fs["fsdp_use_orig_params"] is False and fs["fsdp_cpu_ram_efficient_loading"] is True
        assert fs["fsdp_sharding_strategy"] == "FULL_SHARD" and fs["fsdp_offload_params"] == plan.zero_offload
        assert cfg.mixed_precision == ("no" if method == "qlora" else "bf16")
        assert not (out / "accelerate.yaml").read_text().count("deepspeed")
    if kind == "DEEPSPEED":
        ds = json.loads((out / cfg.deepspeed_config["deepspeed_config_file"]).read_text())
        assert ds["zero_optimization"]["stage"] == plan.zero_stage
        assert ds["train_micro_batch_size_per_gpu"] == plan.micro_batch_size
        assert ds["gradient_accumulation_steps"] == plan.num_micro_batches


@pytest.mark.parametrize("method", ["lora", "qlora"])
@pytest.mark.parametrize("name", ["single", "ddp", "zero3"])
def test_train_script_states_the_plan_and_compiles(tmp_path, name, method):
    out, plan, wl = emitted(tmp_path, PLANS[name][0], finetune=method)
    script = out / "train_lora.py"
    py_compile.compile(str(script), doraise=True)
    c = script_constants(script)
    assert c["MODEL"] == "meta-llama/Llama-2-7b-hf" and c["SEQ_LEN"] == 256
    assert (c["MICRO_BATCH"], c["GRAD_ACCUM"], c["RECOMPUTE"]) == (plan.micro_batch_size, plan.num_micro_batches,
                                                                 plan.recompute)
    assert c["QLORA"] == (method == "qlora") and c["TRAINABLE"] == 39_976_960
    assert c["LORA"]["r"] == 16 and c["LORA"]["lora_alpha"] == 32.0
    assert c["LORA"]["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                           "down_proj"]
    text = script.read_text()
    if method == "qlora":
        for needle in ('bnb_4bit_quant_type="nf4"', "bnb_4bit_use_double_quant=DOUBLE_QUANT",
                       "bnb_4bit_compute_dtype=COMPUTE_DTYPE", '"bnb_4bit_quant_storage": DTYPE',
                       "prepare_model_for_kbit_training("):
            assert needle in text
        assert c["DTYPE_NAME"] == "bfloat16" and c["COMPUTE_DTYPE_NAME"] == "bfloat16"
    assert "gradient_checkpointing=RECOMPUTE" in text and "fsdp_auto_wrap_policy(trainer.model)" in text
    assert oct((out / "train_lora.py").stat().st_mode & 0o777) == "0o755"


def test_job_json_carries_the_finetune_and_readme_lists_the_files(tmp_path):
    out, plan, wl = emitted(tmp_path, PLANS["zero3"][0], finetune=FineTune(method="lora", lora_rank=8,
                                                                           target_modules=("q", "v")))
    job = TrainerJob.model_validate_json((out / "job.json").read_text())
    assert job.workload.finetune == FineTune(method="lora", lora_rank=8, target_modules=("q", "v"))
    readme = (out / "README.txt").read_text()
    assert "Tuning  : LoRA r=8 on q,v: 4.19M trainable of 6.74B (0.06 %)" in readme
    assert "train_lora.py      LoRA on your own data" in readme
    assert "(no torchtitan.toml: torchtitan has no LoRA adapters" in readme
    assert "(no megatron_args.txt: Megatron-LM's pretrain_gpt.py has no LoRA adapters" in readme
    assert not (out / "torchtitan.toml").exists() and not (out / "megatron_args.txt").exists()


def test_full_finetune_folder_is_unchanged_and_switching_drops_the_script(tmp_path):
    emitted(tmp_path, PLANS["zero3"][0], finetune="lora")
    assert (tmp_path / "train_lora.py").exists()
    emitted(tmp_path, PLANS["zero3"][0], model="gpt2", finetune="full")  # an unedited earlier file is removed
    assert not (tmp_path / "train_lora.py").exists() and (tmp_path / "torchtitan.toml").exists()
    assert "deepspeed_config_file" in (tmp_path / "accelerate.yaml").read_text()  # full ZeRO-3: DeepSpeed as before


def test_no_handover_for_tp_or_pp(tmp_path):
    plan = parse_plan("dp=4,tp=2,mb=1,m=2", nodes=2, devices_per_node=4)
    cl = Cluster(name="c", source="test", nodes=[node("n0", 4), node("n1", 4)], network=network_from_key("ib-hdr"))
    wl = make_workload("llama-7b", global_batch=plan.global_batch(), seq_len=256, finetune="lora")
    emit(build_launch(plan, cl, wl), make_job(plan, wl), tmp_path)
    assert not (tmp_path / "train_lora.py").exists() and not (tmp_path / "accelerate.yaml").exists()
    assert "(no train_lora.py: LoRA/QLoRA hand-over is for data-parallel plans" in (tmp_path / "README.txt").read_text()


# ---------------------------------------------------------------- peft applies the emitted LoraConfig

def tiny(kind: str) -> tuple[ModelSpec, object]:
    """A small ModelSpec and the transformers model of the same shape (random weights, nothing downloaded)."""
    import transformers as tf

    if kind == "llama":
        spec = ModelSpec(name="tiny-llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=160,
                         vocab_size=128, mlp="swiglu", tied_embeddings=False)
        cfg = tf.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=160,
                             num_hidden_layers=2, vocab_size=128)
        return spec, tf.LlamaForCausalLM(cfg)
    if kind == "gpt2":
        spec = ModelSpec(name="tiny-gpt2", n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=128,
                         max_seq_len=64)
        return spec, tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=64))
    spec = ModelSpec(name="tiny-mixtral", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=128,
                     mlp="swiglu", tied_embeddings=False, n_experts=4, experts_per_token=2)
    cfg = tf.MixtralConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                           num_hidden_layers=2, vocab_size=128, num_local_experts=4, num_experts_per_tok=2)
    return spec, tf.MixtralForCausalLM(cfg)


@pytest.mark.parametrize("kind, targets", [("llama", ("q", "k", "v", "o", "gate", "up", "down")),
                                           ("llama", ("q", "v")), ("gpt2", ("q", "k", "v", "o", "up", "down")),
                                           ("gpt2", ("o", "down")),
                                           ("mixtral", ("q", "k", "v", "o", "gate", "up", "down"))])
def test_peft_counts_what_gpuadvisor_counts(kind, targets):
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    spec, model = tiny(kind)
    ft = FineTune(method="lora", lora_rank=4, target_modules=targets)
    from gpuadvisor.schemas.workload import Workload

    kwargs = handover.lora_config_kwargs(Workload(model=spec, finetune=ft))
    peft_model = get_peft_model(model, LoraConfig(**kwargs))
    trainable, _ = peft_model.get_nb_trainable_parameters()
    ours = adapter_params(spec, ft)
    d, r, L = spec.d_model, 4, spec.n_layers
    if kind == "gpt2" and "q" in targets:  # one fused c_attn (d -> 3d) instead of q, k, v (3 x (d + d))
        ours -= L * r * 2 * d
    if kind == "mixtral":  # experts' gate and up fused in gate_up_proj: per expert r(d + 2f), not 2r(d + f)
        ours -= L * spec.n_experts * r * d
    assert trainable == ours


# ---------------------------------------------------------------- the emitted script trains

@pytest.mark.parametrize("offload", [False, True])
def test_train_lora_runs_two_steps_on_cpu(tmp_path, offload):
    """Two optimizer steps of the emitted script on CPU; with offload_activations each step runs inside DeepSpeed's
    CheckpointHiddenStatesOffload, which marks the checkpointed decoder layers' inputs (2 layers x 2 micro-steps x 2
    steps; a CPU has no side stream, so none is copied)."""
    pytest.importorskip("peft")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    spec, model = tiny("llama")
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    words = [f"w{i}" for i in range(100)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(["<unk>", "</s>", *words])},
                                                           unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>").save_pretrained(ckpt)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": " ".join(words[(7 * i) % 90:][:40])}) + "\n" for i in range(8)))

    plan = parse_plan("dp=1,mb=2,m=2,recompute=true" + (",offload_activations=true" if offload else ""), nodes=1,
                      devices_per_node=1)
    cl = Cluster(name="c", source="test", nodes=[node("n0", 1)])
    from gpuadvisor.schemas.workload import TrainingSettings, Workload

    wl = Workload(model=spec.model_copy(update={"source": f"HuggingFace config {ckpt / 'config.json'}"}),
                  training=TrainingSettings(seq_len=16, global_batch=4, precision="fp32"),
                  finetune=FineTune(method="lora", lora_rank=4))
    out = tmp_path / "emit"
    emit(build_launch(plan, cl, wl), make_job(plan, wl), out)
    assert script_constants(out / "train_lora.py")["MODEL"] == str(ckpt)
    run = subprocess.run([sys.executable, str(out / "train_lora.py"), "--data", str(data), "--max-steps", "2",
                          "--out", str(tmp_path / "adapter")], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
                              "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"trainable params: {adapter_params(spec, wl.finetune):,}" in run.stdout
    assert ("activation checkpoints: 8 inputs marked, 0 copied to host RAM" in run.stdout) == offload, run.stdout[-800:]
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 8
