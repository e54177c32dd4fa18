"""Rendering of rankings and estimates for the terminal, through the shared rich layer (cli/console.py)."""
from __future__ import annotations

from typing import Callable, Optional

from rich.console import RenderableType

from ..schemas import Cluster, Estimate, Plan, Ranking, Workload
from .console import Column, Group, Text, block, make_table, to_text

GIB = 1024 ** 3


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as nvidia-smi and torch report memory)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def human_count(n: float) -> str:
    """Parameter counts: 1.56e9 -> '1.56B', 350e6 -> '350M', 12e3 -> '12K'; past 1000T scientific ('1.12e+17')."""
    if n >= 1e15:
        return f"{n:.3g}"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}" if n < 10 * scale else f"{n / scale:.0f}{suffix}"
    return f"{n:.0f}"


def human_rate(x: float) -> str:
    """Tokens/s with k/M suffix."""
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.1f}k"
    if x >= 1e3:
        return f"{x / 1e3:.2f}k"
    return f"{x:.1f}"


def human_time(s: float) -> str:
    """Seconds as s / min / h / days."""
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def describe_cluster(c: Cluster) -> str:
    """One line: nodes x devices, device name and memory, network."""
    counts = sorted({len(n.devices) for n in c.nodes})
    dev = c.nodes[0].devices[0] if c.nodes[0].devices else None
    per = "/".join(map(str, counts))
    what = f"{dev.name} {human_bytes(dev.memory_bytes)}" if dev else "no devices"
    line = f"{c.name}: {len(c.nodes)} node(s) x {per} {what}"
    if c.network and len(c.nodes) > 1:
        n = c.network
        speed = f"{n.link_speed_gbit_per_s:g} Gb/s " if n.link_speed_gbit_per_s else ""
        line += f"; network {speed}{n.protocol} ~{n.bandwidth_gb_per_s:.2f} GB/s"
    return line


def describe_workload(w: Workload) -> str:
    """One line: model name, params, seq len, batch, precision (and cuDNN attention or fused kernels when asked
    for; eager PyTorch modules, the default, go unsaid)."""
    m, t = w.model, w.training
    params = human_count(m.params)
    if m.kind == "transformer":
        kernel = (", cuDNN attention" if t.attention_kernel == "cudnn" else
                  ", FlashAttention-3/4" if t.attention_kernel == "flash3" else
                  ", fused kernels" if t.kernels == "fused" else
                  ", fused kernels, chunked linear cross-entropy" if t.kernels == "liger" else
                  ", compiled layers, eager loss" if t.kernels == "fused-layers" else
                  ", Hugging Face eager modules" if t.kernels == "hf" else "")
        # Megatron's switches (--grad-reduce-in-bf16, --fp8-param-gather), said when asked for
        kernel += "".join(s for on, s in ((t.grad_reduce_in_bf16, ", bf16 gradients on Megatron"),
                                          (t.fp8_param_gather, ", FP8 weights on Megatron's distributed optimizer"))
                          if on)
        return (f"{m.name} ({params} params, {m.n_layers} layers, h={m.d_model}), seq {t.seq_len}, "
                f"global batch {t.global_batch}, {t.precision}{kernel}")
    return f"{m.name} ({params} params), global batch {t.global_batch}, {t.precision}"


def describe_finetune(w: Workload) -> Optional[str]:
    """'QLoRA r=16 on q,k,v,o,gate,up,down: 40.0M trainable of 6.74B (0.59 %)'; None for full fine-tuning."""
    from ..workload.finetune import LABELS, adapter_params

    ft = w.finetune
    if not ft.adapters:
        return None
    n, total = adapter_params(w.model, ft), w.model.params
    alpha = "" if ft.lora_alpha is None else f" alpha={ft.alpha:g}"
    nf4 = (", NF4 base" + (" with double quantisation" if ft.double_quant else "")) if ft.method == "qlora" else ""
    return (f"{LABELS[ft.method]} r={ft.lora_rank}{alpha} on {','.join(ft.target_modules)}: {human_count(n)} "
            f"trainable of {human_count(total)} ({100 * n / total:.2f} %){nf4}")


def workload_header(w: Workload) -> list[str]:
    """The header lines that describe the workload: the model, and the fine-tuning mode when adapters train."""
    lines = [f"Model   : {describe_workload(w)}"]
    tuning = describe_finetune(w)
    if tuning:
        lines.append(f"Tuning  : {tuning}")
    return lines


_TRIVIAL = {"tp=1", "pp=1", "zero=0", "m=1", "nodes=1"}


def compact_plan(plan: Plan) -> str:
    """Plan.to_string() without the trivial items (tp=1, pp=1, zero=0, m=1, nodes=1), so knobs stand out."""
    return ",".join(i for i in plan.to_string().split(",") if i not in _TRIVIAL)


def plan_label(e: Estimate) -> str:
    """Compact plan description for a table row."""
    p = e.plan
    bits = [p.strategy]
    if p.nodes > 1:
        bits.append(f"{p.nodes}x{p.devices_per_node}")
    elif p.world_size > 1:
        bits.append(f"1x{p.devices_per_node}")
    bits.append(f"mb={p.micro_batch_size}")
    if p.num_micro_batches > 1:
        bits.append(f"m={p.num_micro_batches}")
    if p.pp > 1:
        bits.append(p.pp_schedule)
    if p.recompute:
        bits.append("recompute" if p.recompute_interval == 1 else f"recompute 1/{p.recompute_interval}")
    if p.offload_activations:
        bits.append("ckpt-offload")  # the checkpoints in host RAM (DeepSpeed's cpu_checkpointing)
    if p.recompute_attention:
        bits.append("recompute attn")
    if p.recompute_ops:
        bits.append("recompute op")
    if p.comm_hook != "none":
        bits.append(f"hook={p.comm_hook}")
    if p.zero_hpz_partition_size > 1:
        bits.append(f"hpz={p.zero_hpz_partition_size}")
    return " ".join(bits)


def ranking_view(r: Ranking, cluster: Cluster, workload: Workload, *, details: int = 1,
                 title: Optional[str] = None) -> RenderableType:
    """The ranked table plus a breakdown of the top `details` plans, as a rich renderable (fits any width)."""
    unit = "tok/s" if workload.model.kind == "transformer" else "samples/s"
    head = [f"Cluster : {describe_cluster(cluster)}", *workload_header(workload),
            f"Ranked {r.n_candidates} candidate plans, {r.n_feasible} feasible, by {r.objective}.",
            *(f"note: {n}" for n in r.notes)]
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    parts.append(block(head))
    if not r.top:
        msg = r.fits_nowhere or "nothing fits on this cluster"
        lines = ["", msg[:1].upper() + msg[1:]]
        if r.infeasible_reasons:
            lines.append("Rejected: " + "; ".join(f"{k} ({v})" for k, v in r.infeasible_reasons.items()))
        return Group(*parts, block(lines))
    extra = objective_columns(r, unit)
    # the time to train a budget stands in for the step time (still in each plan's breakdown): 80 columns hold it
    step = [] if any(name == "to train" for name, _ in extra) else [("step", lambda e: f"{e.step_time_s * 1e3:.0f}ms")]
    cols = [*step, ("peak mem", lambda e: human_bytes(e.memory.total)),
            ("net/step", lambda e: human_bytes(e.network_bytes_per_step)), *extra]
    table = make_table(Column("#", justify="right", no_wrap=True), Column("plan", overflow="fold", min_width=12),
                       Column(unit, justify="right", no_wrap=True), Column("eff", justify="right", no_wrap=True),
                       *(Column(name, justify="right", no_wrap=True) for name, _ in cols))
    for i, e in enumerate(r.top, 1):
        eff = f"{e.scaling_efficiency:.2f}" if e.scaling_efficiency is not None else "-"
        table.add_row(str(i), plan_label(e), human_rate(e.tokens_per_s), eff, *(f(e) for _, f in cols))
    parts += [Text(""), table]
    for i, e in enumerate(r.top[:details], 1):
        parts += [Text(""), Text(f"#{i} {plan_label(e)}", style="bold"), block(render_estimate(e), indent=2)]
    return Group(*parts)


def objective_columns(r: Ranking, unit: str) -> list[tuple[str, Callable[[Estimate], str]]]:
    """The columns that show what a time or cost ranking sorts by: the time to train the token budget (when one is
    given) and, for cost, GPU-hours per million tokens or samples (world size / rate, what rank() minimises), priced
    when a price per GPU-hour is given (Estimate.cost is that price over the budget)."""
    cols: list[tuple[str, Callable[[Estimate], str]]] = []
    if r.objective not in ("time", "cost") or not r.top:
        return cols
    if any(e.time_to_train_s is not None for e in r.top):
        cols.append(("to train", lambda e: human_time(e.time_to_train_s) if e.time_to_train_s is not None else "-"))
    if r.objective == "cost":
        per = "Mtok" if unit == "tok/s" else "M samples"

        def gpu_hours(e: Estimate) -> float:
            return e.plan.world_size / max(e.tokens_per_s, 1e-12) * 1e6 / 3600.0

        priced = [(e.cost, e.plan.world_size * e.time_to_train_s / 3600.0) for e in r.top
                  if e.cost is not None and e.time_to_train_s]
        if priced:  # price per GPU-hour = cost / (world x hours); the same for every plan
            price = priced[0][0] / priced[0][1]
            cols.append((f"cost/{per}", lambda e: f"{price * gpu_hours(e):.3g}"))
        else:
            cols.append((f"GPU-h/{per}", lambda e: f"{gpu_hours(e):.3g}"))
    return cols


def whatif_view(base: Ranking, scenarios: list[tuple[str, Ranking]]) -> RenderableType:
    """Side by side: the best plan and its throughput on the unmodified cluster and under each what-if."""
    table = make_table(Column("scenario", overflow="fold"), Column("best plan", overflow="fold"),
                       Column("rate/s", justify="right", no_wrap=True), Column("vs baseline", justify="right",
                                                                                no_wrap=True),
                       title="What-if comparison (best plan per scenario)")
    b = base.top[0].tokens_per_s if base.top else 0.0
    table.add_row("baseline", plan_label(base.top[0]) if base.top else "nothing fits", human_rate(b) if b else "-",
                  "")
    for spec, r in scenarios:
        w = r.top[0].tokens_per_s if r.top else 0.0
        gain = f"x{w / b:.2f}" if b > 0 and w > 0 else "n/a"
        table.add_row(spec, plan_label(r.top[0]) if r.top else "nothing fits", human_rate(w) if w else "-", gain)
    return table


def render_ranking(r: Ranking, cluster: Cluster, workload: Workload, *, details: int = 1,
                   width: Optional[int] = None) -> str:
    """ranking_view as plain text `width` columns wide (default: the terminal's or COLUMNS)."""
    return to_text(ranking_view(r, cluster, workload, details=details), width)


def render_estimate(e: Estimate, indent: str = "") -> list[str]:
    """Step-time and memory breakdown, rules and reasons of one estimate."""
    s, m = e.step, e.memory
    total = max(s.total_s, 1e-12)
    parts = [("compute", s.compute_s), *((f"comm {k}", v) for k, v in s.comm_exposed_s.items()),
             ("pipeline bubble", s.bubble_s), ("offload", s.offload_s), ("optimizer", s.optimizer_s),
             ("overhead", s.overhead_s)]
    lines = [f"{indent}plan: {e.plan.to_string()}",
             f"{indent}step {s.total_s * 1e3:.1f} ms = " + ", ".join(
                 f"{k} {v * 1e3:.1f} ms ({100 * v / total:.0f}%)" for k, v in parts if v > 0)]
    mem = [("weights", m.weights), ("grads", m.gradients), ("optimizer", m.optimizer),
           ("activations", m.activations), ("logits", m.logits), ("comm buffers", m.comm_buffers),
           ("framework", m.framework)]
    lines.append(f"{indent}peak memory {human_bytes(m.total)} of {human_bytes(e.memory_capacity_bytes)} = "
                 + ", ".join(f"{k} {human_bytes(v)}" for k, v in mem if v > 0))
    if e.host_memory_bytes:
        lines.append(f"{indent}host memory for offload: {human_bytes(e.host_memory_bytes)} per node")
    if e.link_bytes_per_step:
        lines.append(f"{indent}bytes per step: " + ", ".join(
            f"{k} {human_bytes(v)}" for k, v in e.link_bytes_per_step.items()))
    if e.network_bytes_per_run is not None:
        lines.append(f"{indent}over the network for the token budget: {human_bytes(e.network_bytes_per_run)}")
    if e.time_to_train_s is not None:
        cost = f", cost {e.cost:.2f}" if e.cost is not None else ""
        lines.append(f"{indent}time to train the token budget: {human_time(e.time_to_train_s)}{cost}")
    if e.learned_factor != 1.0:
        unc = f" ± {e.learned_uncertainty:.0%}" if e.learned_uncertainty else ""
        lines.append(f"{indent}learned correction x{e.learned_factor:.2f}{unc} "
                     f"(analytical {human_rate(e.analytical_tokens_per_s)}/s)")
    for rule in e.rules:
        lines.append(f"{indent}[{rule.severity}] {rule.message} ({rule.source})")
    for reason in e.reasons:
        lines.append(f"{indent}why: {reason}")
    return lines
