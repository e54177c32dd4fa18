"""The model a Megatron-LM or Megatron-DeepSpeed argument list trains: the read-back of `megatron.megatron_args`'s
shape flags, for `predict --from` (which then needs no --model, and says when --model describes another model).

Flag names and defaults from Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM commit 000c4ac2):
_add_network_size_args (--num-layers, --hidden-size, --ffn-hidden-size, default 4·hidden, or with --swiglu
int(4·hidden·2/3 / 64)·64 (validate_args); --num-attention-heads, --kv-channels, default hidden / heads;
--group-query-attention with --num-query-groups; --max-position-embeddings; --position-embedding-type
learned_absolute (default), rope, none...; --use-rotary-position-embeddings and --no-position-embedding (deprecated
spellings); --normalization LayerNorm (default) or RMSNorm; --swiglu; --untie-embeddings-and-output-weights
(tied by default); --disable-bias-linear (biases by default), --add-qkv-bias; --qk-layernorm;
--make-vocab-size-divisible-by 128), _add_regularization_args (--attention-dropout, --hidden-dropout, 0.1 each),
_add_moe_args (--num-experts, --moe-router-topk 2, --moe-ffn-hidden-size = --ffn-hidden-size,
--moe-shared-expert-intermediate-size), the tokenizer's vocabulary (GPT2BPETokenizer: GPT-2's 50,257; --vocab-size
for the others' NullTokenizer) padded to a multiple of make-vocab-size-divisible-by x tp
(`_vocab_size_with_padding`; without a tokenizer type or --vocab-size, GPT-2's is assumed and said).
Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/arguments.py) spells grouped-query attention
--num-key-value-heads and builds DeepSpeed-MoE layers from --num-experts (a list, every --expert-interval-th
layer), which are not read.
"""
from __future__ import annotations

from typing import Optional

from ..errors import UserError, validation_message
from ..schemas.workload import ModelSpec
from ..workload.catalog import format_size
from .values import positive_int as _int

#: valued flags this module reads (readback adds them to the flags it knows)
VALUED = {"--hidden-size", "--num-attention-heads", "--ffn-hidden-size", "--kv-channels", "--num-query-groups",
          "--num-key-value-heads", "--max-position-embeddings", "--position-embedding-type", "--normalization",
          "--vocab-size", "--padded-vocab-size", "--make-vocab-size-divisible-by", "--tokenizer-type",
          "--attention-dropout", "--hidden-dropout", "--moe-router-topk", "--moe-ffn-hidden-size",
          "--moe-shared-expert-intermediate-size"}
#: --num-experts: Megatron-LM's is one number, Megatron-DeepSpeed's a list (nargs '+'), so its words are collected
LISTED = {"--num-experts", "--ds-num-experts"}
SWITCHES = {"--swiglu", "--group-query-attention", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
            "--add-qkv-bias", "--use-rotary-position-embeddings", "--no-position-embedding", "--qk-layernorm"}
#: the three flags without which there is no shape to read
CORE = ("--num-layers", "--hidden-size", "--num-attention-heads")
#: --position-embedding-type values that put no learned table in the model (rotary variants, none)
_NO_TABLE = {"rope", "mrope", "yarn", "none", "relative"}
_POSITION_TYPES = ("learned_absolute", *sorted(_NO_TABLE))
#: GPT-2's byte-level BPE vocabulary (Radford et al. 2019), Megatron's GPT2BPETokenizer
GPT2_VOCAB = 50257


def _float(where: str, flag: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not 0.0 <= x < 1.0:
        raise UserError(f"{where}: {flag} must be a probability in [0, 1), got {value!r}")
    return x


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    """Megatron's `_vocab_size_with_padding`: up to a multiple of make-vocab-size-divisible-by x tp."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def megatron_model(vals: dict[str, str], switches: set[str], *, tp: int, deepspeed: bool,
                   where: str) -> tuple[Optional[ModelSpec], list[str]]:
    """(the model the arguments train, notes on what was assumed), or (None, []) when the arguments do not give
    --num-layers, --hidden-size and --num-attention-heads together ((None, [why]) for a DeepSpeed-MoE model).
    Values outside Megatron's are one-line errors."""
    if not all(f in vals for f in CORE):
        return None, []
    notes: list[str] = []
    layers, hidden, heads = (_int(where, f, vals[f]) for f in CORE)
    gated = "--swiglu" in switches
    if "--ffn-hidden-size" in vals:
        ffn = _int(where, "--ffn-hidden-size", vals["--ffn-hidden-size"])
    else:
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if gated else 4 * hidden
    kv = 0
    if "--num-key-value-heads" in vals:  # Megatron-DeepSpeed
        kv = _int(where, "--num-key-value-heads", vals["--num-key-value-heads"])
    elif "--group-query-attention" in switches:
        kv = _int(where, "--num-query-groups", vals.get("--num-query-groups", "1"))
    head_dim = _int(where, "--kv-channels", vals["--kv-channels"]) if "--kv-channels" in vals else 0
    norm = vals.get("--normalization", "LayerNorm")
    if norm.lower() not in ("layernorm", "rmsnorm"):
        raise UserError(f"{where}: --normalization must be LayerNorm or RMSNorm (Megatron's choices), got {norm!r}")
    pos = vals.get("--position-embedding-type", "learned_absolute")
    if pos not in _POSITION_TYPES:
        raise UserError(f"{where}: --position-embedding-type must be one of {', '.join(_POSITION_TYPES)}, "
                        f"got {pos!r}")
    learned = (pos == "learned_absolute" and "--use-rotary-position-embeddings" not in switches
               and "--no-position-embedding" not in switches)
    table = 0
    if learned:
        if "--max-position-embeddings" not in vals and "--seq-length" not in vals:
            raise UserError(f"{where}: learned absolute positions (Megatron's default) need --max-position-embeddings "
                            "or --seq-length; add one, or --position-embedding-type rope for rotary positions")
        table = _int(where, "--max-position-embeddings",
                     vals.get("--max-position-embeddings", vals.get("--seq-length", "0")))
    dropout = max(_float(where, f, vals.get(f, "0.1")) for f in ("--attention-dropout", "--hidden-dropout")) > 0
    moe = _experts(vals, deepspeed, ffn, where)
    if moe is None:
        return None, [f"{where}: DeepSpeed-MoE layers (--num-experts with --deepspeed) are not read from the "
                      "arguments; pass --model with the MoE model's config.json"]
    experts, topk, expert_ffn, shared = moe
    vocab = _vocab(vals, tp, where, notes)
    fields = dict(n_layers=layers, d_model=hidden, n_heads=heads, d_ff=ffn, n_kv_heads=kv if kv != heads else 0,
                  head_dim=head_dim if head_dim and head_dim * heads != hidden else 0, vocab_size=vocab,
                  max_seq_len=table, mlp="swiglu" if gated else "gelu", norm=norm.lower(),
                  bias="--disable-bias-linear" not in switches,
                  qkv_bias=True if "--add-qkv-bias" in switches else None,
                  qk_norm="--qk-layernorm" in switches, dropout=dropout,
                  tied_embeddings="--untie-embeddings-and-output-weights" not in switches,
                  n_experts=experts, experts_per_token=topk, expert_d_ff=expert_ffn if expert_ffn != ffn else 0,
                  shared_expert_d_ff=shared)
    label = f"Megatron arguments: L{layers} h{hidden} a{heads}" + (f" kv{kv}" if fields["n_kv_heads"] else "") + \
        (f" ffn {ffn}" + (" swiglu" if gated else "")) + (f", {experts} experts top-{topk}" if experts else "")
    try:
        spec = ModelSpec(name=label, source=f"{where}: the model shape flags", **fields)
    except ValueError as exc:
        raise UserError(f"{where}: the model shape flags do not make a model: {validation_message(exc)}") from None
    return spec.model_copy(update={"name": f"{label} ({format_size(spec.params)})"}), notes


def _experts(vals: dict[str, str], deepspeed: bool, ffn: int,
             where: str) -> Optional[tuple[int, int, int, int]]:
    """(routed experts, top-k, expert width, shared-expert width) of a Megatron-Core MoE; zeros for a dense model;
    None for DeepSpeed-MoE (experts every --expert-interval-th layer, top-k from --topk), which is not read."""
    words = (vals.get("--num-experts") or vals.get("--ds-num-experts") or "").split()
    counts = [_int(where, "--num-experts", w) for w in words]
    if not counts or max(counts) <= 1:
        return 0, 0, 0, 0
    if deepspeed or len(counts) > 1 or "--ds-num-experts" in vals:
        return None
    topk = _int(where, "--moe-router-topk", vals.get("--moe-router-topk", "2"))
    expert_ffn = _int(where, "--moe-ffn-hidden-size", vals.get("--moe-ffn-hidden-size", str(ffn)))
    shared = (_int(where, "--moe-shared-expert-intermediate-size", vals["--moe-shared-expert-intermediate-size"])
              if "--moe-shared-expert-intermediate-size" in vals else 0)
    return counts[0], topk, expert_ffn, shared


def _vocab(vals: dict[str, str], tp: int, where: str, notes: list[str]) -> int:
    """The padded vocabulary: --padded-vocab-size as given, else the tokenizer's (GPT-2's for GPT2BPETokenizer,
    --vocab-size for the others) padded as Megatron pads it; GPT-2's assumed, with a note, when neither says."""
    if "--padded-vocab-size" in vals:
        return _int(where, "--padded-vocab-size", vals["--padded-vocab-size"])
    tokenizer = vals.get("--tokenizer-type")
    if "--vocab-size" in vals:
        vocab = _int(where, "--vocab-size", vals["--vocab-size"])
    else:
        vocab = GPT2_VOCAB
        if tokenizer != "GPT2BPETokenizer":
            said = f"of --tokenizer-type {tokenizer} is" if tokenizer else "is"
            notes.append(f"the vocabulary {said} not in the arguments: GPT-2's {GPT2_VOCAB:,} assumed (it sizes the "
                         "embedding and the LM head); pass --model with the model's config.json for its own")
    divisible = _int(where, "--make-vocab-size-divisible-by", vals.get("--make-vocab-size-divisible-by", "128"))
    return padded_vocab(vocab, divisible, tp)
