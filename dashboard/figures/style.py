"""The look the figures share: colours, layout defaults, the margin lines m+ and m-, play controls."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative

WINNER = "#ff4b4b"  # Streamlit's accent red: the winning capsule
OTHER = "#7f8ea3"
MARGIN_PLUS = "#21c354"
MARGIN_MINUS = "#ffa421"
RUN_COLOURS = qualitative.Plotly
CLASS_COLOURS = qualitative.Plotly  # one colour per class where classes are told apart by colour


def layout(fig: go.Figure, height: int, **extra: Any) -> go.Figure:
    """The figure's height, and its margins (narrow unless `margin` is given).

    Give a figure margins as wide as its axis titles, tick labels, colour bar, legend and controls
    need under Streamlit's theme (which sets automargin): with narrower ones plotly.js draws the
    figure, widens the margins and draws it all again, each time Streamlit hands it the figure
    (twice per chart and rerun). Margins too narrow still work, at that cost.
    """
    extra.setdefault("margin", dict(l=10, r=10, t=40, b=10))
    fig.update_layout(height=height, **extra)
    return fig


MARGIN_LABEL_SPACE = 64  # px right of the plot area for the margin labels


def margin_marks(m_plus: float, m_minus: float, axis: str = "") -> tuple[list[dict], list[dict]]:
    """Dashed lines at m+ and m- across the plot on axes x{axis}/y{axis}, as (shapes, annotations) for a layout.

    Plain shapes are much cheaper than add_hline. Their labels sit just right of the plot area, at
    the end of each line, where no bar label or curve can reach them; the figure needs
    MARGIN_LABEL_SPACE px of room there.
    """
    shapes: list[dict] = []
    notes: list[dict] = []
    for y, colour, text in ((m_plus, MARGIN_PLUS, f"m⁺ = {m_plus}"), (m_minus, MARGIN_MINUS, f"m⁻ = {m_minus}")):
        shapes.append(
            dict(
                type="line",
                xref=f"x{axis} domain",
                yref=f"y{axis}",
                x0=0,
                x1=1,
                y0=y,
                y1=y,
                line=dict(color=colour, dash="dash", width=1.5),
            )
        )
        notes.append(
            dict(
                xref=f"x{axis} domain",
                yref=f"y{axis}",
                x=1,
                y=y,
                xshift=4,
                text=text,
                showarrow=False,
                xanchor="left",
                yanchor="middle",
                font=dict(size=11, color=colour),
            )
        )
    return shapes, notes


def margin_lines(fig: go.Figure, m_plus: float, m_minus: float, axis: str = "") -> None:
    """Add the margin marks of `margin_marks` to `fig`."""
    shapes, notes = margin_marks(m_plus, m_minus, axis)
    fig.update_layout(
        shapes=[*(fig.layout.shapes or ()), *shapes], annotations=[*(fig.layout.annotations or ()), *notes]
    )
