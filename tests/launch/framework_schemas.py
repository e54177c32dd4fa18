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
    # dataclass Float8 (read by Float8Converter, registered as the "float8" [model] converter)
    "float8": {"enable_fsdp_float8_all_gather": bool, "precompute_float8_dynamic_scale_for_fsdp": bool,
               "force_recompute_fp8_weight_in_bwd": bool,
               "recipe_name": ("tensorwise", "rowwise", "rowwise_with_gw_hp"), "filter_fqns": list, "emulate": bool,
               "moe_fqns_prototype": list},
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
    "--no-gradient-accumulation-fusion": (None, None), "--torch-fsdp2-no-reshard-after-forward": (None, None),
    "--ckpt-format": (str, ("torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor")),
    # model shape (_add_network_size_args, _add_regularization_args) and MoE (_add_moe_args)
    "--normalization": (str, ("LayerNorm", "RMSNorm")),
    "--position-embedding-type": (str, ("learned_absolute", "rope", "mrope", "relative", "none")),
    "--disable-bias-linear": (None, None), "--add-qkv-bias": (None, None), "--kv-channels": (int, None),
    "--qk-layernorm": (None, None), "--attention-dropout": (float, None), "--hidden-dropout": (float, None),
    "--num-experts": (int, None), "--moe-router-topk": (int, None), "--moe-ffn-hidden-size": (int, None),
    "--moe-shared-expert-intermediate-size": (int, None), "--moe-grouped-gemm": (None, None),
    "--moe-token-dispatcher-type": (str, ("allgather", "alltoall", "flex")),
    "--expert-model-parallel-size": (int, None), "--expert-tensor-parallel-size": (int, None),
    "--tp-comm-overlap": (None, None), "--context-parallel-size": (int, None),
    # the expert all-to-all overlap (_add_moe_args / _add_training_args, Megatron-Core 0.14 and later)
    "--overlap-moe-expert-parallel-comm": (None, None), "--delay-wgrad-compute": (None, None),
    # Transformer Engine FP8 (_add_transformer_engine_args)
    "--transformer-impl": (str, ("local", "transformer_engine")), "--fp8-format": (str, ("e4m3", "hybrid")),
    "--fp8-recipe": (str, ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")),
    "--fp8-amax-history-len": (int, None), "--fp8-amax-compute-algo": (str, ("most_recent", "max")),
    "--fp8-param-gather": (None, None),
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


def megatron_validate(args, world: int, env: dict) -> None:
    """The checks of Megatron's validate_args (commit above) that concern the flags gpuadvisor writes.

    Raises AssertionError with Megatron's own message, as validate_args does.
    """
    cp = args.context_parallel_size or 1
    model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * cp
    assert world % model_parallel == 0, "world size"
    dp = world // model_parallel  # data-parallel size = world / (tp x pp x cp)
    assert args.global_batch_size % (args.micro_batch_size * dp) == 0, "global batch size"
    if args.num_layers_per_virtual_pipeline_stage is not None:
        # p2p overlap is on by default (--no-overlap-p2p-communication turns it off): then pp > 1 suffices
        assert args.pipeline_model_parallel_size > 1, "interleaved schedule needs pipeline-model-parallel size > 1"
    if args.overlap_param_gather:
        assert args.use_distributed_optimizer, "--overlap-param-gather only supported with distributed optimizer"
        assert args.overlap_grad_reduce, "Must use --overlap-param-gather with --overlap-grad-reduce"
    if args.use_torch_fsdp2:
        assert args.pipeline_model_parallel_size == 1, "--use-torch-fsdp2 is not supported with pipeline parallel"
        assert not args.use_distributed_optimizer, "--use-torch-fsdp2 is not supported with distributed optimizer"
        assert args.no_gradient_accumulation_fusion, "--use-torch-fsdp2 is not supported with grad accumulation fusion"
        assert (args.ckpt_format or "torch_dist") in ("torch_dist", "torch_dcp"), "--use-torch-fsdp2 needs torch_dist"
        assert args.untie_embeddings_and_output_weights, "--use-torch-fsdp2 needs --untie-embeddings-and-output-weights"
        assert not args.fp16, "--use-torch-fsdp2 not supported with fp16 yet"
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1", "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS > 1"
    if args.optimizer_cpu_offload:
        assert args.use_precision_aware_optimizer, "optimizer cpu offload needs --use-precision-aware-optimizer"
    if args.overlap_moe_expert_parallel_comm:
        # TransformerConfig.__post_init__ (megatron/core/transformer/transformer_config.py)
        if args.pipeline_model_parallel_size > 1:
            assert args.num_layers_per_virtual_pipeline_stage is not None, (
                "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
                "pipeline_model_parallel_size > 1")
        assert (args.expert_model_parallel_size or 1) > 1, (
            "overlap_moe_expert_parallel_comm is only supported with expert model parallelism")
        assert args.moe_token_dispatcher_type in ("alltoall", "flex"), (
            "overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher")
        assert args.recompute_granularity != "full", (
            "disable full recomputation when enabling overlap_moe_expert_parallel_comm")
        assert args.bf16 or args.fp16, "overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 models"
    if args.delay_wgrad_compute:
        assert (args.transformer_impl or "transformer_engine") == "transformer_engine", (
            "Delaying wgrad compute is only supported with transformer_engine implementation")
