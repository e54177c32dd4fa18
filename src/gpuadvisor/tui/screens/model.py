"""Step 2, Model and training: model size/preset/config.json, sequence length, batch, precision, the attention
kernel and the kernels (eager or fused) of the stack, Megatron's gradient buffer and FP8 weights, budget, and
fine-tuning (full, LoRA or QLoRA with its rank)."""
from __future__ import annotations

from typing import Iterable, Optional

from rich.text import Text
from textual import on
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static

from ...cli.render import describe_finetune, describe_workload
from ...schemas.workload import PRECISIONS
from ...workload.settings import default_seq_note
from ..widgets import Field
from ..wording import error_line, tui_wording
from .base import StepScreen

#: Attention kernels: (label, TrainingSettings.attention_kernel) — docs/cost-model.md "FP8 training and the
#: attention kernel".
KERNELS = (("FlashAttention-2 (PyTorch, DeepSpeed)", "flash"), ("FlashAttention-3/4 (Hopper, Blackwell)", "flash3"),
           ("cuDNN (Transformer Engine: Megatron)", "cudnn"),
           ("unfused (HF eager, Megatron-DeepSpeed)", "eager"))
#: What the layers and loss store: (label, TrainingSettings.kernels) — docs/workload.md "kernels".
STACKS = (("eager PyTorch (bundled trainers, HF, accelerate)", "eager"),
          ("fused (torch.compile, Megatron, llm-foundry)", "fused"),
          ("fused + Liger chunked loss (HF + Liger-Kernel)", "liger"),
          ("compiled model, eager loss", "fused-layers"),
          ("Hugging Face modeling code, eager", "hf"))
#: Megatron's gradient buffer and FP8 weights (TrainingSettings.grad_reduce_in_bf16, .fp8_param_gather: the CLI's
#: --grad-reduce-in-bf16 and --fp8-param-gather): (label, code) — docs/cost-model.md "Megatron's gradient buffer",
#: "Megatron's FP8 weights".
MEGATRON_BUFFERS = (("fp32 gradients (Megatron's default with bf16)", "default"),
                    ("bf16 gradients (--grad-reduce-in-bf16)", "grad-bf16"),
                    ("bf16 gradients + FP8 weights (NVIDIA's FP8 recipe)", "fp8-recipe"))
#: Fine-tuning choices: (label, FineTune.method).
FINETUNES = (("full (every weight)", "full"), ("LoRA (bf16 base)", "lora"), ("QLoRA (4-bit NF4 base)", "qlora"))


def model_hint() -> str:
    """The model names the workload catalog knows, for the hint line."""
    try:
        from ...workload import catalog

        names = catalog.preset_names()
    except Exception:
        return "a size like 1.5B, a preset name, or a HuggingFace config.json path"
    return "a size (350M, 1.5B, 7B), a config.json path, or: " + ", ".join(compact_names(names))


def compact_names(names: list[str]) -> list[str]:
    """Neighbouring names of one family folded into braces, so the hint fits a small terminal:
    ['gpt3-125m', 'gpt3-350m', 'mistral-7b'] -> ['gpt3-{125m,350m}', 'mistral-7b']."""
    out: list[tuple[str, list[str]]] = []  # (family, sizes); a name without a dash is its own, with no sizes
    for name in names:
        head, _, tail = name.rpartition("-")
        if head and out and out[-1][0] == head and out[-1][1]:
            out[-1][1].append(tail)
        else:
            out.append((head, [tail]) if head else (name, []))
    return [f"{head}-{{{','.join(tails)}}}" if len(tails) > 1 else (f"{head}-{tails[0]}" if tails else head)
            for head, tails in out]


class ModelScreen(StepScreen):
    """Form for the workload; every change re-validates through api.make_workload_explained (the Workload, and
    where a default global batch comes from)."""

    STEP = "model"
    AUTO_FOCUS = "#model"

    def body(self) -> Iterable[Widget]:
        form = VerticalScroll(id="model-form")
        form.can_focus = False  # Tab goes field to field; the form itself needs no focus
        with form:
            with Horizontal(classes="row"):
                yield Label("Model", classes="formlabel")
                yield Field(self.wizard.start_model, placeholder="1.5B", id="model", compact=True)
            with Horizontal(classes="row"):
                yield Label("Seq length", classes="formlabel")
                yield Field(placeholder="default (model's)", id="seq-len", compact=True, type="integer",
                            valid_empty=True)
            with Horizontal(classes="row"):
                yield Label("Global batch", classes="formlabel")
                yield Field(placeholder="default (sequences per step)", id="global-batch", compact=True,
                            type="integer", valid_empty=True)
            with Horizontal(classes="row"):
                yield Label("Precision", classes="formlabel")
                yield Select([(p, p) for p in PRECISIONS], value=self._default_precision(), allow_blank=False,
                             id="precision", compact=True)
            with Horizontal(classes="row"):
                yield Label("Attention", classes="formlabel")
                yield Select(KERNELS, value="flash", allow_blank=False, id="attention", compact=True)
            with Horizontal(classes="row"):
                yield Label("Kernels", classes="formlabel")
                yield Select(STACKS, value="eager", allow_blank=False, id="kernels", compact=True)
            with Horizontal(classes="row"):
                yield Label("Megatron buffers", classes="formlabel")
                yield Select(MEGATRON_BUFFERS, value="default", allow_blank=False, id="megatron-buffers",
                             compact=True)
            with Horizontal(classes="row"):
                yield Label("Token budget", classes="formlabel")
                yield Field(placeholder="optional, e.g. 10B or 2e9 tokens", id="token-budget", compact=True)
            with Horizontal(classes="row"):
                yield Label("Fine-tuning", classes="formlabel")
                yield Select(FINETUNES, value="full", allow_blank=False, id="finetune", compact=True)
            with Horizontal(classes="row"):
                yield Label("LoRA rank", classes="formlabel")
                yield Field(placeholder="default 16 (LoRA/QLoRA)", id="lora-rank", compact=True, type="integer",
                            valid_empty=True)
            yield Static(id="workload-status", classes="panel")
            yield Static(Text(model_hint(), style="dim"), id="model-hint")

    def _default_precision(self) -> str:
        """bf16, or fp16 when the chosen cluster has a GPU without bf16 tensor cores (V100, T4), as `suggest` does."""
        from ... import api

        cluster = self.wizard.cluster
        return api.training_precision(None, cluster) if cluster is not None else "bf16"

    def on_mount(self) -> None:
        self.validate_form()

    @on(Input.Changed)
    @on(Select.Changed, "#precision")
    @on(Select.Changed, "#attention")
    @on(Select.Changed, "#kernels")
    @on(Select.Changed, "#megatron-buffers")
    @on(Select.Changed, "#finetune")
    def _changed(self) -> None:
        self.validate_form()

    def _int(self, widget_id: str) -> Optional[int]:
        text = self.query_one(widget_id, Input).value.strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{widget_id[1:].replace('-', ' ')} must be a whole number, got '{text}'") from None

    def token_budget(self) -> Optional[float]:
        """The token budget field: a plain number (2e9) or a size (10B); None when empty."""
        text = self.query_one("#token-budget", Input).value.strip()
        if not text:
            return None
        from ...workload.catalog import parse_size

        value = parse_size(text)
        if value is None:
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"token budget must be a number like 2e9 or 10B, got '{text}'") from None
        if value <= 0:
            raise ValueError(f"token budget must be positive, got '{text}'")
        return value

    def finetune(self):  # noqa: ANN201 - a FineTune
        """The Fine-tuning choice and LoRA rank as a FineTune (a rank with full fine-tuning is refused)."""
        from ...workload.finetune import make_finetune

        method = str(self.query_one("#finetune", Select).value)
        return make_finetune(method, lora_rank=self._int("#lora-rank"), flags=True)

    def megatron_buffers(self) -> dict[str, bool]:
        """The Megatron buffers choice as make_workload's grad_reduce_in_bf16 and fp8_param_gather."""
        code = str(self.query_one("#megatron-buffers", Select).value)
        return {"grad_reduce_in_bf16": code in ("grad-bf16", "fp8-recipe"), "fp8_param_gather": code == "fp8-recipe"}

    def validate_form(self) -> None:
        """Build the Workload with the API; show it, or the API's error message inline."""
        from ... import api

        status = self.query_one("#workload-status", Static)
        w = self.wizard
        try:
            model = self.query_one("#model", Input).value.strip()
            if not model:
                raise ValueError("type a model: a size like 1.5B, a preset name or a config.json path")
            wl, chosen = api.make_workload_explained(
                model, seq_len=self._int("#seq-len"), global_batch=self._int("#global-batch"),
                precision=str(self.query_one("#precision", Select).value), token_budget=self.token_budget(),
                finetune=self.finetune(), attention_kernel=str(self.query_one("#attention", Select).value),
                kernels=str(self.query_one("#kernels", Select).value), **self.megatron_buffers())
        except Exception as exc:
            w.workload = None
            status.set_class(True, "error")
            status.update(Text("✗ " + error_line(exc)))
            return
        status.set_class(False, "error")
        w.workload = wl
        t = wl.training
        budget = f", token budget {t.token_budget:.3g}" if t.token_budget else ""
        tuning = describe_finetune(wl)
        tuning = f"\n  {tuning}" if tuning else ""
        default = (f"\n  global batch {t.global_batch} is the default ({chosen.why}); set Global batch to change it"
                   if chosen is not None else "")
        seq_note = default_seq_note(model, t.seq_len) if self._int("#seq-len") is None else None
        if seq_note:  # the sequence length is a default shorter than the model takes (as suggest notes it)
            default += "\n  " + tui_wording(seq_note)
        status.update(Text(f"✓ {describe_workload(wl)}{budget}{tuning}{default}\n  {wl.tokens_per_step:,} tokens per "
                           f"step; {wl.model.source or ''}".rstrip()))
