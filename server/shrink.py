"""The picture of a shrink: the `aoti:/<id>/shrink.md` document. A Markdown page with the shrink curve
(the smallest failing graph's node count over time, each checkpoint a point) as an SVG image, the
points as a table, and the final graph. Pure: it renders a FailureRecord."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .failures import FailureRecord, ShrinkPoint

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 24, 28, 44


def _nice(value: float) -> float:
    """A round axis end at or above `value`."""
    if value <= 0:
        return 1.0
    step = 10 ** len(str(int(value))) / 10
    for factor in (1, 2, 2.5, 5, 10):
        if value <= step * factor:
            return step * factor
    return value


def svg(points: Sequence[ShrinkPoint], title: str) -> str:
    """Nodes over seconds: a step line (a graph stays the smallest until the next checkpoint), a dot
    and its node count at each checkpoint."""
    x_max = _nice(max(p.seconds for p in points))
    y_max = _nice(max(p.nodes for p in points))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(seconds: float) -> float:
        return LEFT + plot_w * seconds / x_max

    def y(nodes: float) -> float:
        return TOP + plot_h * (1 - nodes / y_max)

    steps = [f"{x(points[0].seconds):.1f},{y(points[0].nodes):.1f}"]
    for before, point in itertools.pairwise(points):
        steps += [f"{x(point.seconds):.1f},{y(before.nodes):.1f}", f"{x(point.seconds):.1f},{y(point.nodes):.1f}"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="18" font-size="13" fill="#222">{_escape(title)}</text>',
    ]
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        gy, gx = y(y_max * fraction), x(x_max * fraction)
        parts += [
            f'<line x1="{LEFT}" y1="{gy:.1f}" x2="{LEFT + plot_w}" y2="{gy:.1f}" stroke="#e4e4e4"/>',
            f'<text x="{LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" fill="#555">{y_max * fraction:g}</text>',
            f'<text x="{gx:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" fill="#555">{x_max * fraction:g}</text>',
        ]
    parts += [
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#888"/>',
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle" fill="#333">seconds</text>',
        f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" fill="#333" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2})">graph nodes</text>',
        f'<polyline points="{" ".join(steps)}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
    ]
    for point in points:
        px, py = x(point.seconds), y(point.nodes)
        parts += [
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#d62728"/>',
            f'<text x="{px + 6:.1f}" y="{py - 6:.1f}" fill="#d62728">{point.nodes}</text>',
        ]
    return "\n".join(parts + ["</svg>"])


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def text_curve(points: Sequence[ShrinkPoint]) -> str:
    """The curve in words, for editors that cannot show the document."""
    return " -> ".join(f"{p.nodes} nodes at {p.seconds:.0f} s" for p in points)


def markdown(record: FailureRecord) -> str:
    what = record.signature.describe() if record.signature else record.noun
    lines = [
        f"# Shrink of {record.id}",
        "",
        f"`{what}` · {record.state}"
        + (f" · {record.queries or 0} queries, {record.seconds or 0:.0f} s" if record.history else ""),
        "",
    ]
    points = record.history
    if not points:
        lines += ["No minification yet: minify the failure to see its shrink curve here.", ""]
    else:
        image = base64.b64encode(svg(points, f"{points[0].nodes} -> {points[-1].nodes} nodes").encode()).decode()
        lines += [
            f"![shrink curve: graph nodes over seconds](data:image/svg+xml;base64,{image})",
            "",
            "| seconds | nodes |",
            "| ---: | ---: |",
            *[f"| {p.seconds:.1f} | {p.nodes} |" for p in points],
            "",
        ]
    graph = record.current_graph()
    nodes = record.nodes_now or record.nodes_at_start
    heading = "Final graph" if record.state == "minimized" else "Smallest failing graph so far"
    lines += [f"## {heading}" + (f" ({nodes} node{'s' if nodes != 1 else ''})" if nodes else ""), ""]
    lines += ["```python", graph or "# no graph yet: reproduce or minify the failure", "```", ""]
    return "\n".join(lines)
