"""The study's figures, after the papers': throughput vs GPUs, scaling efficiency, peak memory, ZeRO stages,
pipeline micro-batches, network volume/throughput (seed 000), predicted vs measured.

matplotlib is imported here only, lazily, with the Agg backend. Every figure also records the arrays it
drew in `plots.json` (series: panel, label, x, y, unit) so tests and readers can check a PNG against the CSV.
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ..errors import UserError
from .plot_style import bar_figure_width, bar_points, log_ticks, model_title, smart
from .results import StudyRow
from .state import write_file

STRATEGY_ORDER = ("single", "dp", "tp", "pp", "pp-4p", "zero1", "zero2", "zero2-offload", "zero3",
                  "zero3-offload-optim", "zero3-offload")
COLORS = {"single": "#555555", "dp": "#1f77b4", "tp": "#d62728", "pp": "#2ca02c", "pp-4p": "#98df8a",
          "zero1": "#9467bd", "zero2": "#8c564b", "zero2-offload": "#c49c94", "zero3": "#e377c2",
          "zero3-offload-optim": "#ffbb78", "zero3-offload": "#ff7f0e"}
MARKERS = "osD^v<>ph*"
MIB = 2**20


def require_matplotlib() -> None:
    """Fail before a study runs, naming the extra, when the plots it would draw at the end cannot be drawn."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("the study's plots need matplotlib, which is not installed; run: pip install "
                        "'gpuadvisor[plots]' (or pass --no-plots for results.csv/json only)")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gpu_label(r: StudyRow) -> str:
    """'1', '2', '4' on one node; 'NxM' across nodes."""
    return str(r.gpus) if r.nodes == 1 else f"{r.nodes}x{r.devices_per_node}"


def _ok(rows: list[StudyRow]) -> list[StudyRow]:
    return [r for r in rows if r.status == "ok" and r.tokens_per_s]


def _models(rows: list[StudyRow]) -> list[str]:
    return list(dict.fromkeys(r.model for r in rows))


def _gpu_labels(rows: list[StudyRow], with_one: bool = True) -> list[str]:
    labels = sorted({gpu_label(r) for r in rows}, key=lambda s: (eval_gpus(s), s))
    return [g for g in labels if with_one or g != "1"]


def eval_gpus(label: str) -> int:
    """'2x2' -> 4, '4' -> 4."""
    if "x" in label:
        a, b = label.split("x")
        return int(a) * int(b)
    return int(label)


def _strategies(rows: list[StudyRow]) -> list[str]:
    present = {r.strategy for r in rows}
    return [s for s in STRATEGY_ORDER if s in present]


def _fig(plt: Any, n: int, rows_n: int = 1, w: float = 5.2, h: float = 4.0):
    fig, axes = plt.subplots(rows_n, n, figsize=(w * n, h * rows_n), squeeze=False)
    return fig, axes


def _note(ax: Any, text: str) -> None:
    """A boxed explanation inside the axes instead of empty axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10, transform=ax.transAxes,
            bbox=dict(boxstyle="round", facecolor="#f4f4f4", edgecolor="#999999"))
    ax.set_xticks([])
    ax.set_yticks([])


def _log_if_wide(ax: Any, values: list[float], ratio: float = 20.0) -> None:
    vals = [v for v in values if v and v > 0]
    if vals and max(vals) / min(vals) > ratio:
        ax.set_yscale("log")


def _save(fig: Any, path: Path) -> None:
    """Render to PNG in memory, then write atomically."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    write_file(path, buf.getvalue())


def _bars(ax: Any, groups: list[str], series: list[tuple[str, list[Optional[float]]]],
          fmt: Union[str, Callable[[float], str]] = "{:.0f}",
          annotate: bool = True) -> dict[tuple[str, int], tuple[float, float]]:
    """Grouped bars, one group per x label; each group holds only the series that have a value there, centred.

    Returns {(series label, group index): (bar centre, bar width)} for overlays.
    """
    colors = {label: COLORS.get(label.split(" ")[0], f"C{i}") for i, (label, _) in enumerate(series)}
    per_group = [[i for i, (_, ys) in enumerate(series) if ys[j] is not None] for j in range(len(groups))]
    width = 0.8 / max([len(p) for p in per_group] + [1])
    where: dict[tuple[str, int], tuple[float, float]] = {}
    seen: set[str] = set()
    for j, present in enumerate(per_group):
        for pos, i in enumerate(present):
            label, ys = series[i]
            x = j + (pos - (len(present) - 1) / 2) * width
            y = ys[j]
            assert y is not None  # per_group lists only the present values
            ax.bar([x], [y], width=width, color=colors[label], edgecolor="black", linewidth=0.4,
                   label=None if label in seen else label)
            seen.add(label)
            where[(label, j)] = (x, width)
            if annotate:
                text = fmt(y) if callable(fmt) else fmt.format(y)
                upright = bar_points(ax, width, len(groups)) >= 6.0 * len(text) + 2  # does it fit across the bar?
                ax.annotate(text, (x, y), ha="center", va="bottom", fontsize=8, rotation=0 if upright else 90,
                            xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.margins(y=0.12)
    return where


def _legend_out(ax: Any) -> None:
    """Legend to the right of the axes (never over the bars or reference lines)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


class Recorder:
    """Collects the arrays each figure draws (written to plots.json); knows the device noun and model titles."""

    def __init__(self, cpu: bool = False, titles: Optional[dict[str, str]] = None) -> None:
        self.data: dict[str, dict[str, Any]] = {}
        self.device = "CPU rank" if cpu else "GPU"
        self.devices = "CPU ranks" if cpu else "GPUs"
        self.titles = titles or {}
        self._current = ""

    def title(self, model: str) -> str:
        """The model in words, e.g. '2-layer transformer, hidden 32, 4 heads (34K params)'."""
        return self.titles.get(model) or model_title(model)

    def panel(self, ax: Any, what: str, model: str) -> None:
        """A panel title: what it shows, then the model in words."""
        text = f"{what}\n{self.title(model)}"
        ax.set_title(text, fontsize=10)
        self.data[self._current]["panels"].append(text)

    def fig(self, name: str, title: str, **info: Any) -> dict[str, Any]:
        self.data[name] = {"title": title, "devices": self.devices, "panels": [], "series": [], **info}
        self._current = name
        return self.data[name]

    def series(self, name: str, panel: str, label: str, x: list, y: list, unit: str, metric: str) -> None:
        self.data[name]["series"].append({"panel": panel, "label": label, "x": x, "y": y, "unit": unit,
                                          "metric": metric})


def _value(rows: list[StudyRow], model: str, strategy: str, glabel: str, attr: str) -> Optional[float]:
    for r in rows:
        if r.model == model and r.strategy == strategy and gpu_label(r) == glabel:
            v = getattr(r, attr)
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
    return None


def plot_throughput(rows: list[StudyRow], out: Path, rec: Recorder) -> str:
    """Throughput vs GPUs per strategy, one panel per model (seed 001 Fig. 1a); ideal scaling dashed."""
    plt = _plt()
    name = "throughput.png"
    ok = _ok(rows)
    models = _models(rows)
    fig, axes = _fig(plt, len(models))
    rec.fig(name, "Throughput vs GPUs")
    for ax, model in zip(axes[0], models):
        mrows = [r for r in ok if r.model == model]
        labels = _gpu_labels([r for r in rows if r.model == model])
        base = _value(mrows, model, "single", "1", "tokens_per_s")
        allv: list[float] = []
        for k, s in enumerate(_strategies(mrows)):
            if s == "single":
                continue
            xs, ys = [], []
            for j, g in enumerate(labels):
                v = base if g == "1" else _value(mrows, model, s, g, "tokens_per_s")
                if v is not None:
                    xs.append(j)
                    ys.append(v)
            if ys:
                ax.plot(xs, ys, marker=MARKERS[k % len(MARKERS)], label=s, color=COLORS.get(s))
                rec.series(name, model, s, [labels[x] for x in xs], ys, "tokens/s", "tokens_per_s")
                allv += ys
        if base is not None:
            ideal = [base * eval_gpus(g) for g in labels]
            ax.plot(range(len(labels)), ideal, ls="--", color="#999999", label=f"ideal (1 {rec.device} x N)")
            ax.scatter([labels.index("1")] if "1" in labels else [], [base], color="black", zorder=5,
                       label=f"1-{rec.device} baseline")
            rec.series(name, model, "single", ["1"], [base], "tokens/s", "tokens_per_s")
            allv += ideal
        if not allv:
            _note(ax, f"{model}: no successful runs to plot")
        else:
            _log_if_wide(ax, allv, 10.0)
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels)
            ax.set_xlabel(f"{rec.devices} (NxM = nodes x {rec.devices} per node)")
            ax.set_ylabel("throughput (tokens/s)")
            ax.grid(alpha=0.3)
            _legend_out(ax)
        rec.panel(ax, f"Throughput vs {rec.devices}", model)
    _save(fig, out / name)
    return name


def plot_efficiency(rows: list[StudyRow], out: Path, rec: Recorder) -> str:
    """Throughput scaling efficiency (% of ideal) per strategy and GPU count, one panel per model."""
    plt = _plt()
    name = "efficiency.png"
    ok = _ok(rows)
    models = _models(rows)
    n_bars = max([sum(1 for r in ok if r.model == m and r.strategy != "single") for m in models] + [1])
    fig, axes = _fig(plt, len(models), w=bar_figure_width(n_bars))
    rec.fig(name, "Throughput scaling efficiency")
    for ax, model in zip(axes[0], models):
        mrows = [r for r in ok if r.model == model and r.strategy != "single" and r.efficiency_pct is not None]
        labels = _gpu_labels(mrows, with_one=False)
        series = []
        for s in _strategies(mrows):
            ys = [_value(mrows, model, s, g, "efficiency_pct") for g in labels]
            series.append((s, ys))
            rec.series(name, model, s, [g for g, y in zip(labels, ys) if y is not None],
                       [y for y in ys if y is not None], "%", "efficiency_pct")
        if not series:
            _note(ax, f"no multi-{rec.device} run with a 1-{rec.device} baseline to compare")
        else:
            _bars(ax, labels, series)
            ax.axhline(100, color="black", lw=0.8, ls="--", label="ideal 100%")
            ax.axhline(80, color="green", lw=0.8, ls=":", label="80% (desirable)")
            ax.axhline(70, color="red", lw=0.8, ls=":", label="70% (poor below)")
            ax.set_xlabel(rec.devices)
            ax.set_ylabel("scaling efficiency (% of ideal)")
            ax.set_ylim(0, max(110, max(y for _, ys in series for y in ys if y is not None) * 1.15))
            _legend_out(ax)
            ax.grid(axis="y", alpha=0.3)
        rec.panel(ax, "Throughput scaling efficiency", model)
    _save(fig, out / name)
    return name


def plot_memory(rows: list[StudyRow], out: Path, rec: Recorder) -> str:
    """Peak memory per device (MiB) per strategy and GPU count; predicted peaks as black ticks (seed 001 Fig. 1b)."""
    plt = _plt()
    name = "memory.png"
    ok = [r for r in rows if r.peak_memory_bytes is not None]
    models = _models(rows)
    fig, axes = _fig(plt, len(models), w=6.0)
    rec.fig(name, "Peak memory per device")
    for ax, model in zip(axes[0], models):
        mrows = [r for r in ok if r.model == model]
        labels = _gpu_labels(mrows)
        series = []
        strategies = _strategies(mrows)
        for s in strategies:
            ys = [_value(mrows, model, s, g, "peak_memory_bytes") for g in labels]
            ys = [y / MIB if y is not None else None for y in ys]
            series.append((s, ys))
            rec.series(name, model, s, [g for g, y in zip(labels, ys) if y is not None],
                       [y for y in ys if y is not None], "MiB", "peak_memory_bytes")
        if not series:
            _note(ax, "no successful runs")
        else:
            where = _bars(ax, labels, series, annotate=False)
            first = True
            for s in strategies:
                for j, g in enumerate(labels):
                    p = _value(mrows, model, s, g, "predicted_peak_memory_bytes")
                    if p is not None and (s, j) in where:
                        x, width = where[(s, j)]
                        ax.plot([x - width / 2, x + width / 2], [p / MIB] * 2, color="black", lw=2.0,
                                label="predicted" if first else None)
                        first = False
            ax.set_xlabel(rec.devices)
            ax.set_ylabel("peak memory per device (MiB)")
            _legend_out(ax)
            ax.grid(axis="y", alpha=0.3)
        rec.panel(ax, "Peak memory per device (bars measured)", model)
    _save(fig, out / name)
    return name


ZERO = ("single", "zero1", "zero2", "zero2-offload", "zero3", "zero3-offload-optim", "zero3-offload")


def plot_zero(rows: list[StudyRow], out: Path, rec: Recorder) -> Optional[str]:
    """ZeRO stage comparison: throughput and peak memory per stage, bars per GPU count (seed 001 Fig. 2)."""
    ok = [r for r in _ok(rows) if r.strategy in ZERO]
    if not any(r.strategy != "single" for r in ok):
        return None
    plt = _plt()
    name = "zero.png"
    models = _models(rows)
    fig, axes = _fig(plt, 2, rows_n=len(models), w=6.0)
    rec.fig(name, "ZeRO stage comparison")
    for row_axes, model in zip(axes, models):
        mrows = [r for r in ok if r.model == model]
        labels = _gpu_labels(mrows)
        stages = [s for s in ZERO if any(r.strategy == s for r in mrows)]
        xl = [f"1 {rec.device}" if s == "single" else s for s in stages]
        for ax, attr, unit, scale, title in ((row_axes[0], "tokens_per_s", "tokens/s", 1.0, "throughput"),
                                             (row_axes[1], "peak_memory_bytes", "MiB", MIB, "peak memory")):
            series = []
            for g in labels:
                ys = []
                for s in stages:
                    v = _value(mrows, model, s, g, attr)
                    ys.append(v / scale if v is not None else None)
                lab = f"{g} {rec.device if g == '1' else rec.devices}"
                series.append((lab, ys))
                rec.series(name, f"{model}/{title}", g, [x for x, y in zip(stages, ys) if y is not None],
                           [y for y in ys if y is not None], unit, attr)
            _bars(ax, xl, series, fmt=smart)
            ax.set_ylabel(f"{title} ({unit})")
            rec.panel(ax, f"{title[:1].upper() + title[1:]} by ZeRO stage", model)
            ax.legend(fontsize=7)
            ax.grid(axis="y", alpha=0.3)
    _save(fig, out / name)
    return name


def plot_pipeline(rows: list[StudyRow], out: Path, rec: Recorder) -> Optional[str]:
    """Pipeline micro-batches: throughput with m = p vs m = 4p per GPU count (seed 001 sec. IV-B)."""
    ok = [r for r in _ok(rows) if r.strategy in ("pp", "pp-4p")]
    if not any(r.strategy == "pp" or r.strategy == "pp-4p" for r in rows):
        return None
    plt = _plt()
    name = "pipeline.png"
    models = _models(rows)
    fig, axes = _fig(plt, len(models))
    rec.fig(name, "Pipeline micro-batches m=p vs m=4p")
    for ax, model in zip(axes[0], models):
        mrows = [r for r in ok if r.model == model]
        labels = _gpu_labels(mrows, with_one=False)
        series = []
        for s, lab in (("pp", "pp (m=p)"), ("pp-4p", "pp-4p (m=4p)")):
            ys = [_value(mrows, model, s, g, "tokens_per_s") for g in labels]
            if any(y is not None for y in ys):
                series.append((lab, ys))
                rec.series(name, model, s, [g for g, y in zip(labels, ys) if y is not None],
                           [y for y in ys if y is not None], "tokens/s", "tokens_per_s")
        if not series:
            _note(ax, "no successful pipeline run")
        else:
            _bars(ax, labels, series)
            base = _value(_ok(rows), model, "single", "1", "tokens_per_s")
            if base:
                ax.axhline(base, color="black", ls="--", lw=0.8, label=f"1-{rec.device} baseline")
            if len(series) == 1:
                ax.text(0.02, 0.97, "only m=p measured: rerun with --pp-microbatches p,4p", transform=ax.transAxes,
                        va="top", fontsize=7)
            ax.set_xlabel(f"{rec.devices} (pipeline stages p)")
            ax.set_ylabel("throughput (tokens/s)")
            ax.legend(fontsize=7)
            ax.grid(axis="y", alpha=0.3)
        rec.panel(ax, "Pipeline micro-batches m=p vs m=4p", model)
    _save(fig, out / name)
    return name


def _byte_unit(vmax: float) -> tuple[str, float]:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if vmax >= scale:
            return unit, scale
    return "B", 1.0


def plot_network(rows: list[StudyRow], out: Path, rec: Recorder) -> str:
    """Seed 000's network diagnostics per strategy: volume (bytes through NICs) and throughput (Gbit/s).

    On one node nothing crosses a NIC: the figure says so and shows the loopback traffic (gloo between
    ranks of the host) instead, or a note when there is none either.
    """
    plt = _plt()
    name = "network.png"
    ok = [r for r in _ok(rows) if r.strategy != "single"]
    models = _models(rows)
    multi_node = [r for r in ok if r.nodes > 1]
    lo_total = sum(r.loopback_bytes or 0 for r in ok)
    background = sum((r.network_tx_bytes or 0) + (r.network_rx_bytes or 0) for r in ok if r.nodes == 1)
    source = "nic" if multi_node else ("loopback" if lo_total > 0 else "none")
    rec.fig(name, "Network volume and throughput", source=source)
    fig, axes = _fig(plt, 2, rows_n=len(models), w=6.0)
    for row_axes, model in zip(axes, models):
        mrows = [r for r in ok if r.model == model]
        if source == "none" or not mrows:
            _note(row_axes[0], "single node: no training traffic crosses a NIC, and none went over loopback\n"
                               "(ranks talk through shared memory / NVLink / PCIe), so seed 000's network\n"
                               f"diagnostics are ~0 here (NIC counters saw {background:,} B of background traffic)")
            _note(row_axes[1], "network throughput: ~0 Gbit/s (single node)")
            rec.panel(row_axes[0], "Network volume", model)
            rec.panel(row_axes[1], "Network throughput", model)
            continue
        labels = _gpu_labels(mrows, with_one=False)
        vols: list[tuple[str, list[Optional[float]]]] = []
        thr: list[tuple[str, list[Optional[float]]]] = []
        for s in _strategies(mrows):
            v: list[Optional[float]] = []
            t: list[Optional[float]] = []
            for g in labels:
                r = next((x for x in mrows if x.strategy == s and gpu_label(x) == g), None)
                if r is None:
                    v.append(None)
                    t.append(None)
                    continue
                b = ((r.network_tx_bytes or 0) + (r.network_rx_bytes or 0)) if source == "nic" else (r.loopback_bytes or 0)
                v.append(float(b))
                t.append(r.network_gbit_per_s if source == "nic" else b * 8 / (r.total_time_s or 1) / 1e9)
            vols.append((s, v))
            thr.append((s, t))
        unit, scale = _byte_unit(max((y for _, ys in vols for y in ys if y), default=1.0))
        scaled = [(s, [y / scale if y is not None else None for y in ys]) for s, ys in vols]
        for (s, ys), (_, ts) in zip(scaled, thr):
            xs = [g for g, y in zip(labels, ys) if y is not None]
            rec.series(name, f"{model}/volume", s, xs, [y for y in ys if y is not None], unit, f"{source}_volume")
            rec.series(name, f"{model}/throughput", s, xs, [t for t in ts if t is not None], "Gbit/s",
                       f"{source}_gbit_per_s")
        _bars(row_axes[0], labels, scaled, fmt="{:.2g}")
        _bars(row_axes[1], labels, thr, fmt="{:.2g}")
        what = "NIC tx+rx" if source == "nic" else "loopback"
        row_axes[0].set_ylabel(f"{what} volume per timed window ({unit})")
        row_axes[1].set_ylabel(f"{what} throughput (Gbit/s)")
        for ax, title in ((row_axes[0], "network volume"), (row_axes[1], "network throughput")):
            ax.set_xlabel(rec.devices)
            rec.panel(ax, title[:1].upper() + title[1:] + (" (loopback)" if source == "loopback" else ""), model)
            ax.grid(axis="y", alpha=0.3)
        _legend_out(row_axes[1])
    if source == "loopback":
        fig.suptitle(f"Single node: no training traffic crosses a NIC (its counters saw {background:,} B of background "
                     "traffic);\nthe bars show the gloo traffic between the ranks over loopback instead", fontsize=10,
                     color="#aa0000")
    _save(fig, out / name)
    return name


def plot_predicted(rows: list[StudyRow], out: Path, rec: Recorder) -> Optional[str]:
    """Predicted vs measured throughput for every cell, log-log, with the y = x line and a 2x band."""
    pts = [r for r in _ok(rows) if r.predicted_tokens_per_s]
    if not pts:
        return None
    plt = _plt()
    name = "predicted_vs_measured.png"
    rec.fig(name, "Predicted vs measured throughput")
    fig, axes = _fig(plt, 1, w=9.0, h=5.5)
    ax = axes[0][0]
    models = _models(pts)
    strategies = _strategies(pts)
    for s in strategies:
        for k, model in enumerate(models):
            sel = [r for r in pts if r.strategy == s and r.model == model]
            if not sel:
                continue
            xs = [r.predicted_tokens_per_s for r in sel]
            ys = [r.tokens_per_s for r in sel]
            ax.scatter(xs, ys, color=COLORS.get(s), marker=MARKERS[k % len(MARKERS)], edgecolor="black",
                       linewidth=0.4, s=45)
            rec.series(name, "all", f"{s}/{model}", xs, ys, "tokens/s", "tokens_per_s")
    vals = [v for r in pts for v in (r.predicted_tokens_per_s, r.tokens_per_s) if v is not None]
    lo, hi = min(vals) / 2, max(vals) * 2
    ideal = ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)[0]
    band = ax.fill_between([lo, hi], [lo / 2, hi / 2], [lo * 2, hi * 2], color="#cccccc", alpha=0.3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    for axis in (ax.xaxis, ax.yaxis):
        log_ticks(axis, hi / lo)
    ax.set_xlabel("predicted throughput (tokens/s)")
    ax.set_ylabel("measured throughput (tokens/s)")
    ax.set_title("Cost model: predicted vs measured throughput")
    ax.grid(alpha=0.3, which="both")
    # colour = strategy, marker = model: two short legends instead of one entry per pair
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", color=COLORS.get(s), markeredgecolor="black", label=s)
               for s in strategies] + [ideal, band]
    labels = [*strategies, "measured = predicted", "within 2x"]
    first = ax.legend(handles, labels, fontsize=7, title="strategy", title_fontsize=8, loc="upper left",
                      bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    if len(models) > 1:
        ax.add_artist(first)
        marks = [Line2D([], [], ls="", marker=MARKERS[k % len(MARKERS)], color="#888888", markeredgecolor="black",
                        label=rec.title(m)) for k, m in enumerate(models)]
        ax.legend(handles=marks, fontsize=7, title="model", title_fontsize=8, loc="lower left",
                  bbox_to_anchor=(1.02, 0.0), borderaxespad=0.0)
    _save(fig, out / name)
    return name


PLOTTERS = (plot_throughput, plot_efficiency, plot_memory, plot_zero, plot_pipeline, plot_network, plot_predicted)


def make_plots(rows: list[StudyRow], out: Path, meta: Optional[dict] = None) -> tuple[list[str], dict[str, Any]]:
    """Draw every figure that has data; returns the file names and the plotted arrays (for plots.json).

    `meta` (results.json's) supplies the device kind (axes read "CPU ranks" on a CPU study) and parameter counts.
    """
    meta = meta or {}
    titles = {m: model_title(m, d.get("params")) for m, d in (meta.get("models") or {}).items()}
    rec = Recorder(cpu=meta.get("device_kind") == "cpu", titles=titles)
    names = []
    for plot in PLOTTERS:
        n = plot(rows, out, rec)
        if n:
            names.append(n)
    return names, rec.data
