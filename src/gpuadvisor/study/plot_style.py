"""Readability helpers of the study figures: words for model shapes, bar value sizes, log-axis ticks."""
from __future__ import annotations

from typing import Any, Optional


def model_title(model: str, params: Optional[float] = None) -> str:
    """A study model in words: shapes 'L2-H32-A4-...' as '2-layer transformer, hidden 32, 4 heads', else as given."""
    from .spec import _SHAPE_RE

    m = _SHAPE_RE.fullmatch(model.strip())
    text = (f"{m.group(1)}-layer transformer, hidden {m.group(2)}, {m.group(3)} heads" if m else model)
    if params:
        from ..cli.render import human_count

        text += f" ({human_count(params)} params)"
    return text


def smart(y: float) -> str:
    """A bar value short and readable: 29,102 / 84 / 3.8."""
    return f"{y:,.0f}" if abs(y) >= 10 else f"{y:.2g}"


def bar_points(ax: Any, width: float, groups: int) -> float:
    """A bar's width in points, with the x axis spanning the groups (before the figure is drawn)."""
    fig = ax.get_figure()
    axes_pts = ax.get_position().width * fig.get_size_inches()[0] * 72.0
    return axes_pts * width / max(groups, 1)


def bar_figure_width(n_bars: int, minimum: float = 6.0) -> float:
    """Panel width in inches that leaves every bar room for its value written across it."""
    return max(minimum, 2.5 + 0.45 * n_bars)


def log_ticks(axis: Any, span: float) -> None:
    """Log-axis ticks labelled 10k/20k/50k (1, 2, 5 per decade; 1 per decade past 3 decades), never the crowded
    default minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if span <= 1e3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10)), numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda v, _: short(v)))
    axis.set_minor_formatter(NullFormatter())


def short(v: float) -> str:
    """10000 -> '10k', 2500000 -> '2.5M', 50 -> '50'."""
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"
