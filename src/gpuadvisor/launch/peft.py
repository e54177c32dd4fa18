"""LoRA / QLoRA hand-over for your own data: an Accelerate config and `train_lora.py` (transformers + peft).

The bundled trainer's launch.sh/job.json carry the FineTune as for any plan; these two files are the
`finetune.py`-style alternative for a HuggingFace checkpoint and your own text.

accelerate.yaml (keys of accelerate 1.15's ClusterConfig and launch arguments), by plan:
- ZeRO-3 (no hpZ) -> FSDP (v1), as peft's "FSDP" guide (docs/source/accelerate/fsdp.md, peft 0.21) writes it for
  LoRA and QLoRA: FULL_SHARD, TRANSFORMER_BASED_WRAP (the script swaps in peft's `fsdp_auto_wrap_policy`, which
  wraps trainable and frozen parameters apart), `fsdp_use_orig_params: false` (peft: needed for the memory
  savings), `fsdp_cpu_ram_efficient_loading` and `fsdp_sync_module_states: true`, `fsdp_offload_params` = the
  plan's offload; QLoRA: `mixed_precision: 'no'` with the base loaded in bf16 and the NF4 blocks stored as bf16
  (`bnb_4bit_quant_storage`), so FSDP shards one dtype.
- ZeRO-1/2 (and ZeRO-3 with hpZ, which FSDP has no equivalent of) -> the DeepSpeed plugin reading ds_config.json.
- DDP -> MULTI_GPU; one device -> NO.
No file for TP/PP plans: adapters train on data-parallel plans only (`unsupported`).

train_lora.py: LoraConfig with the plan's r / alpha / targets in the family's module names (Llama, Mistral,
Qwen, Gemma: q_proj ... down_proj; GPT-2: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj; MoE experts in
transformers >= 5 are fused parameters, targeted with `target_parameters`), BitsAndBytesConfig for QLoRA
(nf4, double quant, compute dtype), gradient checkpointing when the plan recomputes, micro-batch and
accumulation from the plan, the HF Trainer (which runs the Accelerate config it is launched with).
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Optional

from ..schemas.launch import LaunchConfig
from ..schemas.plan import Plan
from ..schemas.workload import ModelSpec, Workload
from ..workload.finetune import LABELS
from . import accelerate as _accelerate

SCRIPT = "train_lora.py"

#: peft module names per role: Llama-style families (Llama, Mistral, Qwen2/3, Gemma) and GPT-2 (Conv1D layers).
LLAMA_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
               "down": "down_proj"}
GPT2_NAMES = {"q": "attn.c_attn", "k": "attn.c_attn", "v": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc",
              "down": "mlp.c_proj"}
#: transformers >= 5 stores an MoE layer's routed experts as two fused parameters (MixtralExperts, Qwen3MoeExperts).
EXPERT_PARAMS = {"gate": "experts.gate_up_proj", "up": "experts.gate_up_proj", "down": "experts.down_proj"}


def unsupported(plan: Plan, workload: Workload) -> Optional[str]:
    """Why the adapter hand-over cannot express this plan (None when it can)."""
    if not workload.finetune.adapters:
        return "full fine-tuning: the plan's launch.sh and framework files train every weight"
    if plan.tp > 1 or plan.pp > 1 or plan.cp > 1:
        cp = f", cp={plan.cp}" if plan.cp > 1 else ""
        return ("LoRA/QLoRA hand-over is for data-parallel plans (DDP, ZeRO/FSDP, offload); this plan has "
                f"tp={plan.tp}, pp={plan.pp}{cp}")
    return None


def backend(plan: Plan) -> str:
    """'fsdp' (ZeRO-3 without hpZ), 'deepspeed' (ZeRO-1/2, ZeRO-3 with hpZ or with the optimizer alone offloaded:
    FSDP's CPUOffload moves the parameters too), 'ddp' or 'single'."""
    if plan.zero_stage == 3 and plan.zero_hpz_partition_size == 1 and (plan.offloads_params or not plan.zero_offload):
        return "fsdp"
    if plan.zero_stage:
        return "deepspeed"
    return "ddp" if plan.world_size > 1 else "single"


def accelerate_config(launch: LaunchConfig, workload: Workload, ds_file: str) -> dict[str, Any]:
    """The Accelerate config for train_lora.py (what accelerate.yaml holds)."""
    p, ft = launch.plan, workload.finetune
    precision = workload.training.precision
    cfg = _accelerate.accelerate_config(launch, precision, ds_file)  # shared keys; DeepSpeed/DDP as for full runs
    cfg.pop("fsdp_config", None)
    cfg.pop("parallelism_config", None)
    kind = backend(p)
    if kind == "fsdp":
        cfg.pop("deepspeed_config", None)
        cfg["distributed_type"] = "FSDP"
        cfg["downcast_bf16"] = "no"
        if ft.method == "qlora":
            cfg["mixed_precision"] = "no"  # the base is bf16 end to end (NF4 stored as bf16): nothing to cast
        cfg["fsdp_config"] = {"fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                              "fsdp_backward_prefetch": "BACKWARD_PRE", "fsdp_cpu_ram_efficient_loading": True,
                              "fsdp_forward_prefetch": False, "fsdp_offload_params": p.zero_offload,
                              "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                              "fsdp_sync_module_states": True, "fsdp_use_orig_params": False}
    elif kind == "deepspeed" and ft.method == "qlora" and p.zero_stage == 3:
        cfg["deepspeed_config"]["zero3_init_flag"] = True  # peft "DeepSpeed + QLoRA": ZeRO-3 init, bf16 storage
    return cfg


def accelerate_yaml(launch: LaunchConfig, workload: Workload, *, ds_file: str, marker: str) -> str:
    """The YAML text: comments (plan, start line), then flat keys and one level of mapping."""
    cfg = accelerate_config(launch, workload, ds_file)
    ft = workload.finetune
    what = {"fsdp": "FSDP (peft's FSDP + LoRA/QLoRA settings)", "deepspeed": "DeepSpeed reading " + ds_file,
            "ddp": "DDP", "single": "one device"}[backend(launch.plan)]
    lines = [f"# {marker}: HuggingFace Accelerate config for {LABELS[ft.method]} fine-tuning with {SCRIPT}, "
             f"plan {launch.plan.to_string()}: {what}",
             "# start on node i: " + shlex.join(launch_line(launch, workload, "<i>"))]
    return "\n".join(lines + _accelerate.yaml_lines(cfg)) + "\n"


def hf_model_id(model: ModelSpec) -> Optional[str]:
    """The HuggingFace checkpoint the model's shape came from: a hub id named in its source, or the folder of the
    config.json it was read from; None for shapes without a checkpoint (sizes such as 1.5B)."""
    m = re.search(r"\bHF ([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+) config\.json", model.source)
    if m:
        return m.group(1)
    m = re.match(r"HuggingFace config (.+?)(?: \(.*\))?$", model.source)
    if m:
        path = Path(m.group(1))
        return str(path.parent if path.name.endswith(".json") else path)
    return None


def lora_targets(model: ModelSpec, targets: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(target_modules, target_parameters) in the family's names for the targeted roles, order kept, no repeats."""
    gpt2 = model.mlp == "gelu"
    names = GPT2_NAMES if gpt2 else LLAMA_NAMES
    modules: list[str] = []
    params: list[str] = []
    for role in targets:
        if role not in names:
            continue  # gate on a GeLU MLP: no such layer
        if model.n_experts and role in EXPERT_PARAMS:
            if EXPERT_PARAMS[role] not in params:
                params.append(EXPERT_PARAMS[role])
            if not model.shared_expert_d_ff:
                continue  # the shared expert's own gate/up/down are Linears: keep them
        if names[role] not in modules:
            modules.append(names[role])
    return modules, params


def lora_config_kwargs(workload: Workload) -> dict[str, Any]:
    """Keyword arguments of peft.LoraConfig for the workload's adapters."""
    ft, model = workload.finetune, workload.model
    modules, params = lora_targets(model, ft.target_modules)
    kw: dict[str, Any] = {"r": ft.lora_rank, "lora_alpha": ft.alpha, "lora_dropout": 0.05, "bias": "none",
                          "task_type": "CAUSAL_LM", "target_modules": modules}
    if params:
        kw["target_parameters"] = params
        kw["lora_dropout"] = 0.0  # peft's ParamWrapper (fused experts) refuses dropout
    if model.mlp == "gelu":
        kw["fan_in_fan_out"] = True  # GPT-2's Conv1D stores weights as (in, out)
    return kw


def launch_line(launch: LaunchConfig, workload: Workload, machine_rank: str) -> list[str]:
    """`accelerate launch --config_file accelerate.yaml --machine_rank i ... train_lora.py --data YOUR_DATA`."""
    argv = _accelerate.accelerate_launch(launch, machine_rank, SCRIPT)
    if hf_model_id(workload.model) is None:
        argv += ["--model", "YOUR_CHECKPOINT"]
    return argv + ["--data", "YOUR_DATA.jsonl"]


_SCRIPT_BODY = r'''
import argparse
import json
import os

import torch
from torch.utils.data import Dataset
from transformers import (AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, Trainer, TrainingArguments,
                          default_data_collator)
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

DTYPE, COMPUTE_DTYPE = getattr(torch, DTYPE_NAME), getattr(torch, COMPUTE_DTYPE_NAME)


class TextBlocks(Dataset):
    """Your text as blocks of SEQ_LEN tokens (documents joined by EOS): .txt, .jsonl or .json with a text field."""

    def __init__(self, path, tokenizer, field):
        if path.endswith((".jsonl", ".json")):
            with open(path, encoding="utf-8") as fh:
                rows = [json.loads(line) for line in fh if line.strip()] if path.endswith(".jsonl") else json.load(fh)
            texts = [row[field] for row in rows]
        else:
            with open(path, encoding="utf-8") as fh:
                texts = [fh.read()]
        ids = []
        for text in texts:
            ids += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        self.blocks = [ids[i:i + SEQ_LEN] for i in range(0, len(ids) - SEQ_LEN + 1, SEQ_LEN)]
        if not self.blocks:
            raise SystemExit(f"{path}: fewer than {SEQ_LEN} tokens; give more text or a shorter --seq-len")

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        x = torch.tensor(self.blocks[i])
        return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x.clone()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL, required=MODEL is None, help="HF hub id or local checkpoint folder")
    ap.add_argument("--data", required=True, help="your training text: .txt, or .jsonl/.json rows with --text-field")
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--out", default="lora-out", help="where the adapter is saved")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=-1, help="stop after N optimizer steps (-1: run the epochs)")
    ap.add_argument("--lr", type=float, default=2e-4)
    args = ap.parse_args()

    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    quant = None
    if QLORA:
        extra = {"bnb_4bit_quant_storage": DTYPE} if fsdp else {}  # FSDP shards one dtype: NF4 packed in bf16
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                   bnb_4bit_use_double_quant=DOUBLE_QUANT, bnb_4bit_compute_dtype=COMPUTE_DTYPE,
                                   **extra)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, quantization_config=quant, dtype=DTYPE)
    model.config.use_cache = False
    ckpt = {"use_reentrant": False}
    if QLORA and not fsdp:  # casts norms to fp32, enables input grads (not under FSDP: it shards one dtype)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=RECOMPUTE,
                                                gradient_checkpointing_kwargs=ckpt)
    elif RECOMPUTE:
        model.enable_input_require_grads()  # the frozen embedding's output must carry grads into checkpoints
    model = get_peft_model(model, LoraConfig(**LORA))
    model.print_trainable_parameters()
    print(f"gpuadvisor counted {TRAINABLE:,} trainable parameters for this model and LoraConfig")

    train = TextBlocks(args.data, tokenizer, args.text_field)
    targs = TrainingArguments(
        output_dir=args.out, per_device_train_batch_size=MICRO_BATCH, gradient_accumulation_steps=GRAD_ACCUM,
        gradient_checkpointing=RECOMPUTE, gradient_checkpointing_kwargs=ckpt,
        bf16=PRECISION == "bf16", fp16=PRECISION == "fp16",
        learning_rate=args.lr, num_train_epochs=args.epochs, max_steps=args.max_steps, logging_steps=10,
        save_strategy="no", report_to="none", ddp_find_unused_parameters=False)
    trainer_class = Trainer
    if OFFLOAD_ACTIVATIONS:
        # the checkpointed layers' inputs in pinned host RAM, copied on a side stream: DeepSpeed's
        # CheckpointHiddenStatesOffload marks transformers' GradientCheckpointingLayer inputs for one forward and
        # backward (non-reentrant checkpointing, as above)
        from deepspeed.runtime.activation_checkpointing.offload_activations import (
            get_checkpoint_hidden_states_offloading_ctx_manager)

        class OffloadTrainer(Trainer):
            marked = copied = 0  # checkpoint inputs marked, and copied to host RAM (none on a CPU)

            def training_step(self, *step_args, **step_kwargs):
                offload = get_checkpoint_hidden_states_offloading_ctx_manager()
                with offload:
                    loss = super().training_step(*step_args, **step_kwargs)
                OffloadTrainer.marked += offload.stats.marked_tensors
                OffloadTrainer.copied += offload.stats.offloaded_tensors
                return loss

        trainer_class = OffloadTrainer
    trainer = trainer_class(model=model, args=targs, train_dataset=train, data_collator=default_data_collator)
    if getattr(trainer.accelerator.state, "fsdp_plugin", None):  # wrap trainable and frozen parameters apart (peft)
        from peft.utils.other import fsdp_auto_wrap_policy

        trainer.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(trainer.model)
    trainer.train()
    if OFFLOAD_ACTIVATIONS:
        marked, copied = trainer_class.marked, trainer_class.copied
        print(f"activation checkpoints: {marked} inputs marked, {copied} copied to host RAM")
    if trainer.is_fsdp_enabled:
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(args.out)  # the adapter only (adapter_model.safetensors + adapter_config.json)


if __name__ == "__main__":
    main()
'''


def train_script(launch: LaunchConfig, workload: Workload, *, marker: str) -> str:
    """train_lora.py: the plan's LoRA/QLoRA settings as constants, then a short transformers + peft Trainer run."""
    from ..workload.finetune import adapter_params

    p, ft, t = launch.plan, workload.finetune, workload.training
    model_id = hf_model_id(workload.model)
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(t.precision, "float32")
    compute = "float16" if t.precision == "fp16" else "bfloat16"
    if ft.method == "qlora" and backend(p) == "fsdp":
        dtype = "bfloat16"  # = bnb_4bit_quant_storage (peft "FSDP + QLoRA")
    kw = lora_config_kwargs(workload)
    label = LABELS[ft.method]
    notes = [f"Plan {p.to_string()} ({backend(p)}): {p.dp} data-parallel rank(s), micro-batch {p.micro_batch_size}, "
             f"{p.num_micro_batches} accumulation step(s), global batch {p.global_batch()} sequences of "
             f"{t.seq_len} tokens" + (", activation recompute" if p.recompute else "") + ".",
             *([f"The plan recomputes every {p.recompute_interval}th layer; transformers' gradient checkpointing "
                "below recomputes every layer (less memory, more compute than predicted)."]
               if p.recompute_interval > 1 else []),
             "Start: " + shlex.join(launch_line(launch, workload, "0")) + " (node i: --machine_rank i).",
             "Needs torch, transformers >= 4.56 (the `dtype` argument), peft >= 0.13, accelerate >= 1.0"
             + (", bitsandbytes >= 0.43.3 and a CUDA GPU." if ft.method == "qlora" else "."),
             *(["The plan keeps the checkpointed layers' inputs in host RAM (OFFLOAD_ACTIVATIONS): each training step "
                "runs inside DeepSpeed's CheckpointHiddenStatesOffload, which needs DeepSpeed with "
                "deepspeed.runtime.activation_checkpointing.offload_activations (0.19.8 has it) and transformers' "
                "GradientCheckpointingLayer."] if p.offload_activations else [])]
    if workload.model.mlp == "gelu" and {"q", "k", "v"} & set(ft.target_modules) != {"q", "k", "v"}:
        notes.append("GPT-2 fuses q, k and v in one layer (attn.c_attn): its adapter covers all three.")
    if kw.get("target_parameters"):
        notes.append("transformers >= 5 stores the routed experts as fused parameters (experts.gate_up_proj, "
                     "experts.down_proj): peft adapts them through target_parameters, one adapter for gate and up"
                     + "; bitsandbytes quantises nn.Linear layers only, so under QLoRA the experts stay in "
                       f"{t.precision}" * (ft.method == "qlora") + ".")
    head = ["#!/usr/bin/env python3", f"# {marker}: {label} fine-tuning of {workload.model.name} on your data",
            f'"""{label} fine-tuning of {workload.model.name} with the plan gpuadvisor chose, on your own text.', ""]
    for n in notes:
        head.append(n)
    head.append('"""')
    consts = ["", "# ---- the plan (edit here, not below) ----",
              f"MODEL = {model_id!r}" + ("" if model_id else "  # no checkpoint known for this shape: pass --model"),
              f"SEQ_LEN = {t.seq_len}", f"MICRO_BATCH = {p.micro_batch_size}", f"GRAD_ACCUM = {p.num_micro_batches}",
              f"RECOMPUTE = {p.recompute}", f"OFFLOAD_ACTIVATIONS = {p.offload_activations}",
              f"PRECISION = {t.precision!r}", f"QLORA = {ft.method == 'qlora'}",
              f"DOUBLE_QUANT = {ft.double_quant}", f"TRAINABLE = {adapter_params(workload.model, ft)}",
              "LORA = " + json.dumps(kw).replace("true", "True").replace("false", "False").replace("null", "None")]
    consts += [f"DTYPE_NAME = {dtype!r}  # the frozen base (QLoRA under FSDP: also the NF4 storage dtype)",
               f"COMPUTE_DTYPE_NAME = {compute!r}  # QLoRA: the dtype NF4 weights are dequantised to"]
    return "\n".join(head + consts) + "\n" + _SCRIPT_BODY


__all__ = ["SCRIPT", "accelerate_config", "accelerate_yaml", "backend", "hf_model_id", "launch_line",
           "lora_config_kwargs", "lora_targets", "train_script", "unsupported"]
