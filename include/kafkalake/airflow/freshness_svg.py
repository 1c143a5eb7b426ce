"""Line charts as inline SVG, drawn on the server: the pages load nothing from anywhere else.

A chart is a time axis (the window the page shows), a value axis from zero, one line through the
points in time order, a dot per point (red for a failed run) whose tooltip gives the exact figure,
and optionally a dashed threshold (the SLA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

WIDTH, HEIGHT = 760, 190
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 26  # room for the axis labels


@dataclass(frozen=True)
class Point:
    at: datetime
    value: float
    #: The dot's tooltip.
    label: str
    bad: bool = False


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (an axis' top)."""
    if value <= 0:
        return 1.0
    power = 1.0
    while power * 10 <= value:
        power *= 10
    while power > value:
        power /= 10
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * power >= value:
            return step * power
    return 10 * power


#: Round steps of a time axis, in seconds: 1 s to 1 min, to 1 h, to 1 d, then whole days.
DURATION_STEPS = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
)  # fmt: skip
TICKS = 4  # intervals on the value axis


def nice_duration(seconds: float) -> float:
    """An axis top for durations: the smallest ``TICKS`` times a round step (``DURATION_STEPS``, then
    whole days) at or above ``seconds``, so the labels read 2h, 4h, 6h rather than 1h44m, 3h28m."""
    for step in DURATION_STEPS:
        if step * TICKS >= seconds:
            return float(step * TICKS)
    days = -(-seconds // (86400 * TICKS))
    return float(days * 86400 * TICKS)


def line_chart(
    points: Sequence[Point],
    *,
    start: datetime,
    end: datetime,
    title: str,
    value_text: Callable[[float], str],
    threshold: float | None = None,
    threshold_label: str = "",
    axis_top: Callable[[float], float] = nice_ceiling,
) -> str:
    """An ``<svg>`` element plotting ``points`` between ``start`` and ``end``.

    Args:
        points: in any order; drawn in time order. Points outside the window are left out.
        value_text: how an axis label or a tooltip spells a value (an age, a count).
        threshold: a dashed horizontal line (the SLA), kept in view by the axis.
        axis_top: rounds the largest value up to the axis' top (:func:`nice_duration` for times).
    """
    shown = sorted((p for p in points if start <= p.at <= end), key=lambda p: p.at)
    span = max((end - start).total_seconds(), 1.0)
    top_value = max([p.value for p in shown] + ([threshold] if threshold is not None else []) + [0.0])
    y_max = axis_top(top_value * 1.05)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: datetime) -> float:
        return round(LEFT + (at - start).total_seconds() / span * plot_w, 1)

    def y(value: float) -> float:
        return round(TOP + plot_h - max(value, 0.0) / y_max * plot_h, 1)

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>',
    ]
    for i in range(TICKS + 1):
        value = y_max * i / TICKS
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value)}" y2="{y(value)}"/>')
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y(value) + 4}" text-anchor="end">'
            f"{escape(value_text(value))}</text>"
        )
    for i in range(5):
        at = start + (end - start) * (i / 4)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="axis" x="{x(at)}" y="{HEIGHT - 8}" text-anchor="{anchor}">'
            f"{at.strftime('%m-%d %H:%M')}</text>"
        )
    if threshold is not None:
        parts.append(
            f'<line class="threshold" x1="{LEFT}" x2="{WIDTH - RIGHT}"'
            f' y1="{y(threshold)}" y2="{y(threshold)}"/>'
            f'<text class="threshold-label" x="{WIDTH - RIGHT - 4}" y="{y(threshold) - 4}" text-anchor="end">'
            f"{escape(threshold_label)}</text>"
        )
    if not shown:
        parts.append(
            f'<text class="empty" x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle">'
            "no runs in this window</text>"
        )
    elif len(shown) > 1:
        path = " ".join(f"{x(p.at)},{y(p.value)}" for p in shown)
        parts.append(f'<polyline class="line" points="{path}"/>')
    for p in shown:
        css = "dot bad" if p.bad else "dot"
        parts.append(
            f'<circle class="{css}" cx="{x(p.at)}" cy="{y(p.value)}" r="3">'
            f"<title>{escape(p.label)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)
