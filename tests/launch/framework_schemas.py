"""Schemas of the frameworks that do not install on this CPU machine, written down as test data.

torchtitan (not on PyPI for this environment): the JobConfig dataclasses of torchtitan/config/job_config.py,
pytorch/torchtitan commit 000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 — section -> key -> type or allowed values,
for the sections gpuadvisor writes.
Megatron-LM (megatron-core 0.16.1 installs, but its wheel holds megatron/core only, not the training argument
parser): the flags of megatron/training/arguments.py, NVIDIA/Megatron-LM commit
000c4ac24f61159c138b0975def722c65245983c — flag -> (type, choices) where type None is a store_true switch.
"""
from __future__ import annotations

TORCHTITAN_JOB_CONFIG = {
    "job": {"config_file": str, "dump_folder": str, "description": str, "use_for_integration_test": bool,
            "print_args": bool},
    "model": {"name": str, "flavor": str, "tokenizer_path": str, "converters": list, "print_after_conversion": bool},
    "metrics": {"log_freq": int, "enable_tensorboard": bool, "disable_color_printing": bool, "save_tb_folder": str,
                "save_for_all_ranks": bool, "enable_wandb": bool},
    "training": {"dataset": str, "dataset_path": str, "local_batch_size": int, "global_batch_size": int,
                 "seq_len": int, "max_norm": float, "steps": int, "enable_cpu_offload": bool,
                 "mixed_precision_param": ("bfloat16", "float32"), "mixed_precision_reduce": ("float32",),
                 "compile": bool, "gc_freq": int, "gc_debug": bool, "seed": int, "deterministic": bool},
    "parallelism": {"data_parallel_replicate_degree": int, "enable_compiled_autograd": bool,
                    "data_parallel_shard_degree": int,
                    "fsdp_reshard_after_forward": ("default", "always", "never"),
                    "tensor_parallel_degree": int, "disable_loss_parallel": bool,
                    "enable_async_tensor_parallel": bool, "pipeline_parallel_degree": int,
                    "pipeline_parallel_split_points": list, "pipeline_parallel_layers_per_stage": int,
                    "pipeline_parallel_schedule": str, "pipeline_parallel_schedule_csv": str,
                    "pipeline_parallel_microbatch_size": int, "context_parallel_degree": int,
                    "context_parallel_rotate_method": ("allgather", "alltoall"), "expert_parallel_degree": int},
    "activation_checkpoint": {"mode": ("selective", "full", "none"), "selective_ac_option": str},
}
# schedule names torch.distributed.pipelining's get_schedule_class accepts (torch 2.13; checked in the test)
TORCHTITAN_SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B")

MEGATRON_FLAGS: dict[str, tuple] = {
    "--tensor-model-parallel-size": (int, None), "--pipeline-model-parallel-size": (int, None),
    "--num-layers-per-virtual-pipeline-stage": (int, None), "--sequence-parallel": (None, None),
    "--use-distributed-optimizer": (None, None), "--overlap-grad-reduce": (None, None),
    "--overlap-param-gather": (None, None), "--use-torch-fsdp2": (None, None),
    "--recompute-granularity": (str, ("full", "selective")), "--recompute-method": (str, ("uniform", "block")),
    "--recompute-num-layers": (int, None), "--micro-batch-size": (int, None), "--global-batch-size": (int, None),
    "--seq-length": (int, None), "--max-position-embeddings": (int, None), "--num-layers": (int, None),
    "--hidden-size": (int, None), "--ffn-hidden-size": (int, None), "--num-attention-heads": (int, None),
    "--group-query-attention": (None, None), "--num-query-groups": (int, None), "--swiglu": (None, None),
    "--untie-embeddings-and-output-weights": (None, None), "--train-iters": (int, None), "--bf16": (None, None),
    "--fp16": (None, None), "--optimizer-cpu-offload": (None, None),
    "--use-precision-aware-optimizer": (None, None), "--lr": (float, None),
}


def megatron_parser():
    """An argparse parser with the Megatron flags above (allow_abbrev=False, as Megatron's own)."""
    import argparse

    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for flag, (typ, choices) in MEGATRON_FLAGS.items():
        if typ is None:
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=typ, choices=choices)
    return p
