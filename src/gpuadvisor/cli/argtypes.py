"""Argument types for the CLI: bounded whole numbers, finite positive numbers, durations, non-empty text.

Each raises argparse.ArgumentTypeError with the fix; `OneLineParser` prints it as one line and exits
with exitcodes.USAGE, like every other bad input.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Callable, NoReturn, Optional

from .. import exitcodes

ATTENTION_HELP = ("attention kernel of the stack you will train with: flash = FlashAttention-2 / PyTorch SDPA "
                  "(bundled trainers, DeepSpeed, torchtitan, HF; default), flash3 = FlashAttention-3 (Hopper) / -4 "
                  "(Blackwell), flash-attn 3/4 (HF attn_implementation='flash_attention_3'), cudnn = Transformer "
                  "Engine's cuDNN "
                  "attention and layers (Megatron-Core, NeMo; their smaller stored activations too), eager = an "
                  "unfused core that stores the s x s scores (HF attn_implementation='eager', Megatron-DeepSpeed "
                  "without --use-flash-attn-v2)")
KERNELS_HELP = ("what the layers and loss store: eager = PyTorch modules, as the bundled trainers (launch.sh), HF and "
                "accelerate run them (autocast norms keep fp32 inputs, SDPA's K/V and output copies, cross-entropy "
                "on fp32 logits, MoE experts looped in Python; default), fused = fused norm and loss kernels and "
                "grouped-GEMM experts (llm-foundry, torch.compile, Megatron, torchtitan), liger = fused, and a fused "
                "linear cross-entropy that never holds the logits whole (Liger-Kernel: long sequences), fused-layers = "
                "compiled layers beside an eager fp32 loss (torch.compile of the model alone), hf = Hugging Face "
                "transformers' modeling code run eagerly (eager, plus the HBM passes of its op-by-op fp32 RMSNorm, "
                "rotary, K/V repeat and gate: your own HF Trainer / peft script)")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`gpuadvisor: error: ...`) and exit with USAGE."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        cmd = self.prog.split()[-1] if " " in self.prog else ""
        hint = f"; see `gpuadvisor {cmd} --help`" if cmd else "; see `gpuadvisor --help`"
        print(f"gpuadvisor: error: {' '.join(message.split())}{hint}", file=sys.stderr)
        sys.exit(exitcodes.USAGE)


def whole(lo: int = 1, hi: Optional[int] = None, what: str = "a whole number") -> Callable[[str], int]:
    """A type: an integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None
        if value < lo or (hi is not None and value > hi):
            span = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: give {what} {span}")
        return value

    parse.__name__ = "whole number"
    return parse


def number(lo: float = 0.0, hi: float = math.inf, *, allow_lo: bool = False) -> Callable[[str], float]:
    """A type: a finite float above lo (or equal when allow_lo) and at most hi."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not math.isfinite(value) or value > hi or value < lo or (value == lo and not allow_lo):
            op = ">=" if allow_lo else ">"
            raise argparse.ArgumentTypeError(f"{text} is out of range: give a finite number {op} {lo:g}"
                                             + (f" and <= {hi:g}" if math.isfinite(hi) else ""))
        return value

    parse.__name__ = "number"
    return parse


def text(what: str) -> Callable[[str], str]:
    """A type: non-blank text."""

    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"{what} is empty")
        return value

    parse.__name__ = what
    return parse


def lora_targets(value: str) -> tuple[str, ...]:
    """A type: LoRA target layers, 'q,k,v,o,gate,up,down' or all-linear / attention / mlp."""
    from ..errors import UserError
    from ..workload.finetune import parse_targets

    try:
        return parse_targets(value, "")
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(": ")) from None


lora_targets.__name__ = "layer list"

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*")
MAX_DURATION_S = 7 * 86400.0


def parse_duration(value: str) -> float:
    """'15m' / '90s' / '1h' / '300' -> seconds (positive, finite, at most a week); UserError otherwise."""
    from ..errors import UserError

    m = _DURATION.fullmatch(value)
    if not m:
        raise UserError(f"cannot read duration '{value}'; write e.g. 90s, 15m or 1h")
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if not 0 < seconds <= MAX_DURATION_S:
        raise UserError(f"duration '{value}' must be more than 0 and at most 7 days; write e.g. 90s, 15m or 1h")
    return seconds


def check_writable(path: str, flag: str, *, folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written: one line naming the flag and the fix.

    The path (a file, or with `folder` a folder) may not exist yet; its nearest existing parent must be a
    writable folder (and for a file, an existing target must not be a folder).
    """
    import os
    from pathlib import Path

    from ..errors import UserError

    p = Path(path).expanduser()
    if p.exists():
        if folder and not p.is_dir():
            raise UserError(f"{flag} {path}: exists and is not a folder; pick a folder")
        if not folder and p.is_dir():
            raise UserError(f"{flag} {path}: is a folder; give a file name")
        if not os.access(p, os.W_OK):
            raise UserError(f"{flag} {path}: not writable (permission denied); pick another path")
        return
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: '{parent}' is not a folder; pick another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot create it in '{parent}' (permission denied); pick another path")


__all__ = ["OneLineParser", "whole", "number", "text", "lora_targets", "parse_duration", "check_writable"]
