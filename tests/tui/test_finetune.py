"""The Model step's Fine-tuning choice and LoRA rank (and its precision, attention and kernels choices): the workload
the later steps rank carries them."""
from __future__ import annotations

from textual.widgets import Input, Select, Static

from gpuadvisor.schemas.workload import FineTune

from .conftest import goto, make_app, needs_pipeline, run_async, text_of

SIZE = (80, 24)


@run_async
async def test_choose_qlora_and_rank():
    app = make_app(model="llama-2-7b")
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        status = app.screen.query_one("#workload-status", Static)
        assert app.workload.finetune == FineTune() and "trainable" not in text_of(status)
        # an empty Seq length is the 1024 default, shorter than Llama 2 takes: said in the TUI's words
        shown = " ".join(text_of(status).split())
        assert "seq 1024 is the default" in shown and "4,096 tokens" in shown and "pass Seq length N" in shown, shown
        assert "--seq-len" not in shown and "API:" not in shown
        app.screen.query_one("#finetune", Select).value = "qlora"
        app.screen.query_one("#lora-rank", Input).value = "8"
        app.screen.query_one("#seq-len", Input).value = "1024"  # given: no longer a default
        await pilot.pause()
        assert "is the default, not your run's" not in " ".join(text_of(status).split())
        assert app.workload is not None and app.workload.finetune == FineTune(method="qlora", lora_rank=8)
        shown = " ".join(text_of(status).split())
        assert "QLoRA r=8 on q,k,v,o,gate,up,down: 20M trainable of 6.74B (0.30 %)" in shown, shown
        assert not status.has_class("error")
        # fp8 with QLoRA is the workload's one-line error; full fine-tuning in fp8 with cuDNN attention is a workload
        app.screen.query_one("#precision", Select).value = "fp8"
        app.screen.query_one("#attention", Select).value = "cudnn"
        await pilot.pause()
        msg = " ".join(text_of(status).split())
        assert status.has_class("error") and app.workload is None and "QLoRA with" in msg, msg
        app.screen.query_one("#finetune", Select).value = "full"
        app.screen.query_one("#lora-rank", Input).value = ""
        await pilot.pause()
        t = app.workload.training
        assert (t.precision, t.attention_kernel) == ("fp8", "cudnn")
        assert "fp8, cuDNN attention" in " ".join(text_of(status).split())
        # the stack's kernels reach the workload (and with it the memory the ranking prices), and are said
        app.screen.query_one("#attention", Select).value = "flash"
        app.screen.query_one("#kernels", Select).value = "fused-layers"
        await pilot.pause()
        assert app.workload.training.kernels == "fused-layers"
        assert "fp8, compiled layers, eager loss" in " ".join(text_of(status).split())


@run_async
async def test_rank_errors_are_inline_in_the_tuis_words():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        status = app.screen.query_one("#workload-status", Static)
        rank = app.screen.query_one("#lora-rank", Input)
        rank.value = "8"  # with full fine-tuning: refused, naming the fields
        await pilot.pause()
        msg = " ".join(text_of(status).split())
        assert status.has_class("error") and app.workload is None
        assert "LoRA rank only applies to adapters; add Fine-tuning lora" in msg and "--" not in msg, msg
        app.screen.query_one("#finetune", Select).value = "lora"
        rank.value = "0"
        await pilot.pause()
        msg = " ".join(text_of(status).split())
        assert status.has_class("error") and "LoRA rank must be a whole number from 1 to 4096" in msg, msg
        rank.value = ""
        await pilot.pause()
        assert not status.has_class("error") and app.workload.finetune == FineTune(method="lora")


@needs_pipeline
@run_async
async def test_results_rank_the_lora_workload():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        app.screen.query_one("#finetune", Select).value = "lora"
        await pilot.pause()
        await goto(pilot, "results")
        assert app.suggestion is not None and app.suggestion.workload.finetune.method == "lora"




@run_async
async def test_megatron_buffers_reach_the_workload_and_refuse_in_the_tuis_words():
    """The Megatron buffers choice is the CLI's --grad-reduce-in-bf16 / --fp8-param-gather: it reaches the workload
    (said on the status line); NVIDIA's FP8 recipe without fp8 and cuDNN attention is refused naming the fields."""
    app = make_app(model="llama-3.1-8b")
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        status = app.screen.query_one("#workload-status", Static)
        buffers = app.screen.query_one("#megatron-buffers", Select)
        assert buffers.value == "default"
        t = app.workload.training
        assert not t.grad_reduce_in_bf16 and not t.fp8_param_gather
        buffers.value = "fp8-recipe"  # bf16 precision and FlashAttention: not Transformer Engine's FP8
        await pilot.pause()
        msg = " ".join(text_of(status).split())
        assert status.has_class("error") and app.workload is None, msg
        assert "Megatron buffers" in msg and "Precision fp8" in msg and "--" not in msg, msg
        app.screen.query_one("#precision", Select).value = "fp8"
        app.screen.query_one("#attention", Select).value = "cudnn"
        await pilot.pause()
        assert not status.has_class("error"), " ".join(text_of(status).split())
        t = app.workload.training
        assert t.grad_reduce_in_bf16 and t.fp8_param_gather
        shown = " ".join(text_of(status).split())
        assert "bf16 gradients on Megatron, FP8 weights on Megatron's distributed optimizer" in shown, shown
        buffers.value = "grad-bf16"
        await pilot.pause()
        t = app.workload.training
        assert t.grad_reduce_in_bf16 and not t.fp8_param_gather
        assert "FP8 weights" not in " ".join(text_of(status).split())


@run_async
async def test_precision_defaults_to_fp16_on_gpus_without_bf16(tmp_path):
    """A cluster of T4s (no bf16 tensor cores) opens the Model step at fp16, as `suggest` chooses; a bf16 choice
    there is the cost model's one-line refusal at ranking time."""
    path = tmp_path / "t4.yaml"
    path.write_text("name: two-t4\nnodes:\n  - name: n0\n    gpus: 2x T4\n    topology: PHB\n")
    app = make_app(preset=None, cluster_file=str(path), model="124M")
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, "model")
        assert app.screen.query_one("#precision", Select).value == "fp16"
        assert app.workload is not None and app.workload.training.precision == "fp16"
