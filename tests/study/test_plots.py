"""Figure readability: log-axis tick labels never overlap, bar values are upright and legible, words for shapes."""
from __future__ import annotations

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gpuadvisor.study.plot_style import bar_figure_width, log_ticks, model_title, smart  # noqa: E402
from gpuadvisor.study.plots import _bars  # noqa: E402


def _overlaps(texts) -> list[tuple[str, str]]:
    fig = texts[0].get_figure()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text() and t.get_visible()]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


@pytest.mark.parametrize("lo,hi", [(2e3, 8e3), (2.5e3, 1.1e5), (50, 2e7), (0.5, 3e9)])
def test_log_tick_labels_do_not_overlap(lo, hi):
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([lo, hi], [lo, hi])
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    for axis in (ax.xaxis, ax.yaxis):
        log_ticks(axis, hi / lo)
    fig.canvas.draw()
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        assert len([t for t in labels if t.get_text()]) >= 2
        assert not _overlaps(labels), _overlaps(labels)
    plt.close(fig)


@pytest.mark.parametrize("groups,series", [(1, 9), (3, 9), (2, 4)])
def test_bar_values_are_upright_and_legible(groups, series):
    names = ["dp", "tp", "pp", "pp-4p", "zero1", "zero2", "zero3", "zero3-offload", "single"][:series]
    fig, ax = plt.subplots(figsize=(bar_figure_width(groups * series), 4.0))
    _bars(ax, [str(2 ** (g + 1)) for g in range(groups)],
          [(n, [93.0 - 7 * i - g for g in range(groups)]) for i, n in enumerate(names)])
    fig.canvas.draw()
    assert len(ax.texts) == groups * series
    assert all(t.get_rotation() == 0 and t.get_fontsize() >= 8 for t in ax.texts)
    assert not _overlaps(ax.texts)
    plt.close(fig)


def test_words_not_shapes():
    assert model_title("L2-H32-A4-V256-S16", 34176) == "2-layer transformer, hidden 32, 4 heads (34K params)"
    assert model_title("gpt2") == "gpt2"
    assert [smart(v) for v in (29102.4, 84.2, 3.81)] == ["29,102", "84", "3.8"]
