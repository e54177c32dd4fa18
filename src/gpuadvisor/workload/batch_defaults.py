"""The global batch a run gets when the user gives none: a batch people train with, and where it comes from.

One function, `default_batch`, decides it; `make_workload` uses it and `api.suggest` states its `why` in the
note that tells the user the batch is a default and which flag changes it. Order of the rules:

1. a catalog preset's own `default_global_batch` wins (the A6000 paper's models keep its Table I batch, ResNet
   He et al.'s 256: knowledge/models.yaml, `batch_source` beside each);
2. a generic (non-token) model without one: 8 samples (no published batch applies to an arbitrary model);
3. a transformer under 100M parameters (per token, as the GPT-3 row below): 8 sequences. This is below GPT-3's
   smallest size (125M), and these are the tiny test and CPU-rank models (0.3M, 3M, 10M GPTs): the trials on
   CPU ranks and the test suite depend on small steps;
4. LoRA/QLoRA fine-tuning: 128 sequences (Stanford Alpaca);
5. otherwise (pre-training, or a full fine-tune, which cannot be told apart from it): GPT-3's tokens per batch
   for the model's size (Brown et al. 2020 Table 2.1) divided by the sequence length.
"""
from __future__ import annotations

from typing import Optional

from ..schemas.workload import BatchDefault, FineTune, ModelSpec

#: GPT-3's batch size in tokens by model size: Brown et al. 2020, "Language Models are Few-Shot Learners"
#: (arXiv:2005.14165), Table 2.1, column "Batch Size": 0.5M for Small/Medium/Large (125M, 350M, 760M), 1M for
#: XL and 2.7B, 2M for 6.7B and 13B, 3.2M for 175B. The paper's 0.5M/1M/2M are 2^19/2^20/2^21 tokens
#: (256/512/1024 sequences of its 2048 tokens); 3.2M is 1600 x 2048 = 3,276,800.
#: Rows: (nominal size in parameters, the paper's size name, its batch as written, tokens per batch).
GPT3_TOKENS_PER_BATCH: tuple[tuple[float, str, str, int], ...] = (
    (125e6, "125M", "0.5M", 2 ** 19),
    (350e6, "350M", "0.5M", 2 ** 19),
    (760e6, "760M", "0.5M", 2 ** 19),
    (1.3e9, "1.3B", "1M", 2 ** 20),
    (2.7e9, "2.7B", "1M", 2 ** 20),
    (6.7e9, "6.7B", "2M", 2 ** 21),
    (13e9, "13B", "2M", 2 ** 21),
    (175e9, "175B", "3.2M", 1600 * 2048),
)
#: A row applies from 95% of its nominal size: the paper's size names are rounded down or up. Its own models,
#: counted from their Table 2.1 shapes (tied embeddings, 2048 learned positions, vocabulary 50257), have
#: 2.65B (2.7B), 6.66B (6.7B), 12.95B (13B) and 174.6B (175B) parameters; the 175B is the catalog's gpt3-175b.
ROW_TOLERANCE = 0.95
#: Below this a transformer keeps SMALL_MODEL_BATCH sequences. GPT-3's smallest row (125M) has GPT-2 small's
#: shape (12 layers, d_model 768, 12 heads: Table 2.1; GPT-2 small counts 124.4M with its 1024 positions), so the
#: first row reaches down to 100M; everything smaller is a test / CPU-rank model (module docstring, rule 3).
SMALL_MODEL_PARAMS = 100e6
#: The project's long-standing default for the tiny test / CPU-rank models and generic models: short steps on
#: CPU ranks (tests/trials); not a published training batch, which is why the note says so.
SMALL_MODEL_BATCH = 8
#: LoRA/QLoRA fine-tuning batch: Stanford Alpaca (Taori et al. 2023, github.com/tatsu-lab/stanford_alpaca,
#: README "Fine-tuning" table: "Batch size 128" for LLaMA-7B and 13B); tloen/alpaca-lora's finetune.py keeps
#: batch_size 128 (micro_batch_size 4 with gradient accumulation).
LORA_BATCH = 128


def default_batch(model: ModelSpec, seq_len: int, finetune: Optional[FineTune] = None, *,
                  preset_batch: Optional[int] = None, preset_source: str = "") -> BatchDefault:
    """The global batch for `model` at `seq_len` when the user gives none (module docstring: the rules).

    `preset_batch` / `preset_source`: the catalog preset's own default and its source, which win.

    The GPT-3 row is picked by `model.active_params` (parameters per token; = the total for a dense model).
    GPT-3 chose its batches with the gradient noise scale (Brown et al. 2020 sec. 2.3, after McCandlish et al.
    2018, arXiv:1812.06162), which grows as the loss falls: larger models take larger batches. For a dense model
    the total and the per-token count are one number. An MoE reaches a loss between dense models of its active
    and of its total size, so neither count is exact; the active count is used because it is what the compute
    and activation memory per token follow (the step the ranking times; Mixtral 8x7B: 12.9B active of 46.7B),
    and it errs toward the smaller batch, while the suggest note names the flag that changes it.
    """
    if preset_batch:
        return BatchDefault(preset_batch, f"the preset's own batch: {preset_source}" if preset_source
                            else "the preset's own batch")
    if model.kind != "transformer":
        return BatchDefault(SMALL_MODEL_BATCH, "no published batch for a generic model")
    n = model.active_params
    if n < SMALL_MODEL_PARAMS:
        return BatchDefault(SMALL_MODEL_BATCH, "small steps for a model under 100M parameters, below GPT-3's "
                            "smallest size")
    if finetune is not None and finetune.adapters:
        return BatchDefault(LORA_BATCH, f"{'QLoRA' if finetune.method == 'qlora' else 'LoRA'} "
                            "fine-tuning: Stanford Alpaca's batch of 128, Taori et al. 2023")
    row = GPT3_TOKENS_PER_BATCH[0]
    for r in GPT3_TOKENS_PER_BATCH:
        if n >= ROW_TOLERANCE * r[0]:
            row = r
    _, size, written, tokens = row
    active = f", by its {n / 1e9:.3g}B active parameters" if model.n_experts else ""
    return BatchDefault(max(1, tokens // seq_len),
                        f"GPT-3's {written} tokens per batch at its {size} size{active}, Brown et al. 2020 Table 2.1")
