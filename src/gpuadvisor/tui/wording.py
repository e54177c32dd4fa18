"""Hints in the TUI's words: the shared API's messages name CLI flags (--seq-len 1024), the TUI names fields.

Only for messages (errors, notes, hints); never for launch commands, whose flags are real.
"""
from __future__ import annotations

import re

#: (CLI wording, TUI wording), applied in order; a flag's metavar (NAME, FILE, N, DIR, ...) goes with it.
FLAG_WORDS: tuple[tuple[str, str], ...] = (
    (r"--layers/--hidden/--heads", "a HuggingFace config.json path in the Model field"),
    (r"(?:pass |give )?--gpu-spec(?: \.\.\.)?", "describe it in a cluster file (Hardware step)"),
    (r"--preset NAME or --cluster FILE", "a preset or a cluster file (Hardware step)"),
    (r"(?:use |pass |give )--preset(?: NAME)?", "pick a preset (Hardware step)"),
    (r"--preset(?: NAME)?", "a preset (Hardware step)"),
    (r"(?:use |pass |give )--cluster(?: FILE)?", "load a cluster file (Hardware step)"),
    (r"--cluster(?: FILE)?", "a cluster file (Hardware step)"),
    (r"(?:use |pass |give )?--cpu-ranks(?: N)?(?: to (?:use|model) CPU ranks)?",
     "use CPU ranks from the command line (gpuadvisor suggest)"),
    (r"--seq-len", "Seq length"),
    (r"--global-batch", "Global batch"),
    (r"--tokens-per-step", "tokens per step"),
    (r"--token-budget", "Token budget"),
    (r"--precision", "Precision"),
    (r"--attention-kernel", "Attention"),
    (r"--kernels", "Kernels"),
    (r"--grad-reduce-in-bf16", "Megatron buffers"),
    (r"--fp8-param-gather", "Megatron buffers"),
    (r"--finetune", "Fine-tuning"),
    (r"--lora-rank", "LoRA rank"),
    (r"--objective", "the goal (Goal step)"),
    (r"--price-per-gpu-hour", "Price $/GPU-hour (Goal step)"),
    (r"--what-if(?: SPEC)?", "the What-if controls (Results step)"),
    (r"--top", "the number of plans shown"),
    (r"--confirm(?: K)?", "the Confirm step"),
    (r"--budget", "Budget (Confirm step)"),
    (r"--steps", "Steps (Confirm step)"),
    (r"--emit directory", "folder"),
    (r"--emit(?: DIR)?", "the Export step"),
)
_RULES = tuple((re.compile(r"(?<![\w-])" + pat + r"(?![\w-])"), words) for pat, words in FLAG_WORDS)
_ANY_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
#: the Python API's spelling beside a flag ("--global-batch N (API: global_batch=N)"): not the TUI's
_API_ASIDE = re.compile(r" \(API: [^)]*\)")


def tui_wording(message: str) -> str:
    """`message` with CLI flags replaced by the TUI's field and step names (other flags: plain words)."""
    out = _API_ASIDE.sub("", message)
    for pattern, words in _RULES:
        out = pattern.sub(words.replace("\\", "\\\\"), out)
    # a flag the table does not know: its words without the dashes ("--heads" -> "heads")
    return _ANY_FLAG.sub(lambda m: m.group(1).replace("-", " "), out)


def error_line(exc: BaseException) -> str:
    """An exception as one line in the TUI's words; the type is named unless it is a ValueError (UserError)."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, ValueError):
        msg = f"{type(exc).__name__}: {msg}"
    return tui_wording(msg)


__all__ = ["FLAG_WORDS", "error_line", "tui_wording"]
