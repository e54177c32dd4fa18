"""The chunked-loss advice (ranking/loss.py): when the loss's logits weigh on the top plan, or nothing fits, the
workload is ranked again with Liger-Kernel's layers and loss and the gain is said when it is worth a line."""
from __future__ import annotations

from gpuadvisor import api
from gpuadvisor.hardware.presets import load_preset
from gpuadvisor.ranking import rank
from gpuadvisor.ranking.loss import LOGITS_SHARE, MIN_GAIN, chunked_loss_note


def _loss_notes(sug) -> list[str]:
    return [n for n in sug.notes if "chunked linear cross-entropy" in n]


def test_qlora_with_a_large_vocabulary_is_told_what_liger_gains():
    """QLoRA of Llama 3.1 8B (128,256 entries) at 4,096 tokens on two 4090s: the eager loss's logits are ~40 % of the
    top plan's peak; with Liger the best plan runs a larger micro-batch without recompute, faster."""
    sug = api.suggest("llama-3.1-8b", preset="workstation-2x4090", finetune="qlora", seq_len=4096)
    top = sug.ranking.top[0]
    assert top.memory.logits / top.memory.total >= LOGITS_SHARE
    (note,) = _loss_notes(sug)
    assert note.startswith("the loss holds ") and "--kernels liger" in note and "AutoLigerKernelForCausalLM" in note
    liger = api.suggest("llama-3.1-8b", preset="workstation-2x4090", finetune="qlora", seq_len=4096,
                        kernels="liger").ranking.top[0]
    assert liger.tokens_per_s >= (1 + MIN_GAIN) * top.tokens_per_s
    assert f"{liger.tokens_per_s:,.0f} tokens/s" in note
    assert not _loss_notes(api.suggest("llama-3.1-8b", preset="workstation-2x4090", finetune="qlora", seq_len=4096,
                                       kernels="liger"))  # already chunked: nothing to say


def test_long_sequences_whose_logits_push_the_ranking_to_splitting_the_sequence_are_ranked_again():
    """Llama 3.1 8B at 8,192 tokens on 8 H100: one sequence's eager logits are 11.7 GiB (SEQUENCE_SHARE of the card),
    although the top plan's own share is under LOGITS_SHARE: the top plan splits each sequence's tokens (context
    parallelism, as NVIDIA's Llama 3 8B recipe at 8k runs CP 2; tensor parallelism before CP was in the plan space);
    with Liger, ZeRO-3 without either wins."""
    from gpuadvisor.ranking.loss import SEQUENCE_SHARE

    sug = api.suggest("llama-3.1-8b", preset="hgx-h100-8x", seq_len=8192, global_batch=64)
    top = sug.ranking.top[0]
    assert top.memory.logits / top.memory.total < LOGITS_SHARE and top.plan.cp == 2 and top.plan.tp == 1
    (note,) = _loss_notes(sug)
    assert note.startswith("the loss's logits take 11.7 GiB per sequence of 8,192 tokens") and SEQUENCE_SHARE == 0.10
    assert "best plan zero3 on 1x8" in note
    # at 32k tokens context parallelism splits the logits eight ways; Liger's loss still gains >= MIN_GAIN there
    (note,) = _loss_notes(api.suggest("llama-3.1-8b", preset="hgx-h100-8x", seq_len=32768, global_batch=16))
    assert "best plan cp4-zero3 on 1x8" in note


def test_a_sequence_that_fits_only_with_the_chunked_loss_says_so():
    sug = api.suggest("llama-3.1-8b", preset="hgx-h100-8x", seq_len=262144, global_batch=8)
    assert not sug.ranking.top and sug.ranking.fits_nowhere
    (note,) = _loss_notes(sug)
    assert note.startswith("nothing fits with the loss holding whole logits") and "best plan" in note


def test_small_logits_and_transformer_engine_stacks_rank_once(monkeypatch):
    """The default 1.5B GPT (50,257 entries at 1,024 tokens) keeps its logits under the share: no second ranking;
    a Transformer Engine (cudnn) stack has its own loss and is never told to use Liger."""
    import sys

    rank_module = sys.modules["gpuadvisor.ranking.rank"]  # the package's `rank` attribute is the function
    cluster = load_preset("hgx-h100-8x")
    wl = api.make_workload("1.5B", seq_len=1024, global_batch=512)
    te = api.make_workload("llama-3.1-8b", seq_len=262144, global_batch=8, attention_kernel="cudnn")
    rankings = (rank(cluster, wl, top=1), rank(cluster, te, top=1))
    top = rankings[0].top[0]
    assert top.memory.logits / top.memory.total < LOGITS_SHARE
    calls = []
    real = rank_module.rank
    monkeypatch.setattr(rank_module, "rank", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    assert chunked_loss_note(wl, cluster, rankings[0]) is None
    assert chunked_loss_note(te, cluster, rankings[1]) is None
    assert calls == []


def test_hopper_long_sequences_are_told_what_flash_attention_3_gains():
    """The top plan estimated again with FlashAttention-3/4: said on Hopper when it gains 10 % (at 64k tokens the core
    is most of the step), not at 2k tokens, not on an A100 (which cannot run it), not when already asked for."""
    from gpuadvisor.ranking.attention import MIN_GAIN as FA3_GAIN, flash3_note

    def notes(preset, seq, **kw):
        return [n for n in api.suggest("llama-3.1-8b", preset=preset, seq_len=seq, global_batch=8, **kw).notes
                if n.startswith("attention: FlashAttention-3")]

    cluster = load_preset("hgx-h100-8x")
    wl = api.make_workload("llama-3.1-8b", seq_len=65536, global_batch=8)
    top = rank(cluster, wl, top=1).top[0]
    fast = api.predict(wl.model_copy(update={"training": wl.training.model_copy(
        update={"attention_kernel": "flash3"})}), top.plan, cluster=cluster)
    gain = fast.tokens_per_s / top.tokens_per_s - 1.0
    assert gain > 0.5  # 64k tokens: the core dominates
    note = flash3_note(wl, cluster, top)
    from gpuadvisor.costmodel.calibration import load_calibration
    hopper = load_calibration()["gemm_efficiency"]["families"]["hopper"]
    share = float(hopper["attn_rel"]) / float(hopper["attn_rel_flash3"])  # 0.5 / 1.8: 28 %
    assert note is not None and f"+{gain:.0%}" in note and f"{share:.0%} of their rate" in note
    assert "attn_implementation='flash_attention_3'" in note and "--attention-kernel flash3" in note
    assert notes("hgx-h100-8x", 65536) == [note]
    assert notes("hgx-h100-8x", 2048) == []  # the core is a small share: under FA3_GAIN
    assert FA3_GAIN == 0.10
    assert notes("dgx-a100-8x", 65536) == []
    assert notes("hgx-h100-8x", 65536, attention_kernel="flash3") == []
