"""Capsules: the lengths of the digit capsules, and the dimensions of one capsule."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.em import activations_bar
from dashboard.figures.style import MARGIN_LABEL_SPACE, OTHER, WINNER, layout, margin_lines

LABEL_SIZE = 10  # px: at 12, neighbouring labels ran together in the Draw page's column at 1,100 px
LABEL_GAP = 0.01  # between a bar's top and its label, in units of |v|
LINE_CLEARANCE = 0.05  # a label (about 12 px tall on the 1.08 axis) that would start within this of m- starts above it


def label_heights(lengths: np.ndarray, m_minus: float) -> list[float]:
    """Where each bar's value label starts: just above the bar, or, for a bar that ends near the m- line, above
    the line, so the dashed line never strikes a label through."""
    heights = []
    for v in np.asarray(lengths, dtype=float):
        y = v + LABEL_GAP
        heights.append(m_minus + LABEL_GAP if m_minus - LINE_CLEARANCE < y < m_minus + LABEL_GAP else y)
    return heights


def lengths_bar(
    lengths: np.ndarray,
    class_names: Sequence[str],
    prediction: int | None = None,
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 320,
    compact: bool = False,
    symbol: str = "|v|",
    leaders_only: bool = False,
) -> go.Figure:
    """Bar chart of the K digit-capsule lengths |v_j|, the winner highlighted, margins 0.9 and 0.1 marked (not when
    `compact`). `symbol` names the score in the hover: "a" for the EM network's activations. `leaders_only`: values
    written over the winner and the runner-up alone (a narrow column: ten labels would meet), every value in the hover."""
    lengths = np.asarray(lengths, dtype=float).reshape(-1)
    if len(lengths) != len(class_names):
        raise ValueError(f"{len(lengths)} lengths but {len(class_names)} class names")
    winner = int(np.argmax(lengths)) if prediction is None else int(prediction)
    colours = [WINNER if k == winner else OTHER for k in range(len(lengths))]
    leaders = set(np.argsort(-lengths, kind="stable")[:2].tolist()) | {winner} if leaders_only else range(len(lengths))
    said = [f"{v:.2f}" if k in leaders else "" for k, v in enumerate(lengths)]
    fig = go.Figure(
        go.Bar(
            x=list(class_names),
            y=lengths,
            marker_color=colours,
            text=said if compact else None,
            textposition="outside" if compact else "none",
            hovertemplate=f"capsule %{{x}}<br>{symbol} = %{{y:.3f}}<extra></extra>",
            name=symbol,
        )
    )
    if not compact:
        margin_lines(fig, m_plus, m_minus)
        # each bar's value just above it, but never on the dashed m- line: a short bar's label goes over the line
        fig.add_trace(
            go.Scatter(
                x=list(class_names), y=label_heights(lengths, m_minus), text=said, mode="text",
                textposition="top center", hoverinfo="skip", showlegend=False, name="value",
                textfont=dict(size=LABEL_SIZE),  # "0.93" in about 22 px: ten apart in a 1,100 px window's column
            )
        )  # fmt: skip
    fig.update_yaxes(range=[0, 1.08], title=None if compact else "capsule length |v|")
    fig.update_xaxes(type="category", title=None if compact else "class capsule")
    return layout(
        fig,
        height,
        showlegend=False,
        title=None if compact else "Capsule lengths<br><sup>the probability that each class is present</sup>",
        margin=dict(l=10, r=10 if compact else MARGIN_LABEL_SPACE, t=10 if compact else 58, b=10),
    )


def dimension_profile_figure(
    original: np.ndarray, edited: np.ndarray, low: np.ndarray, high: np.ndarray, height: int = 260
) -> go.Figure:
    """The 16 dimensions of the capsule: as read from the input, as edited, and the slider ranges."""
    original, edited = np.asarray(original, dtype=float), np.asarray(edited, dtype=float)
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    dims = [f"{d + 1}" for d in range(len(original))]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=dims, y=high - low, base=low, marker_color="rgba(127,142,163,0.25)", name="slider range", hoverinfo="skip"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=dims,
            y=original,
            mode="markers",
            marker=dict(size=11, symbol="line-ew-open", color=OTHER, line=dict(width=3)),
            name="from the input",
        )
    )
    fig.add_trace(go.Scatter(x=dims, y=edited, mode="markers", marker=dict(size=9, color=WINNER), name="edited"))
    fig.update_xaxes(type="category", title="dimension")
    fig.update_yaxes(title="value")
    return layout(fig, height, legend=dict(orientation="h", y=1.12), barmode="overlay")


# the primer's capsules: (what it stands for, length, pose angle in degrees)
PRIMER_CAPSULES = (("a 7, slanted right", 0.92, 62.0), ("a 3", 0.12, 200.0), ("a 1, upright", 0.35, 95.0))


def capsule_primer_figure(height: int = 300) -> go.Figure:
    """What a capsule is, in one picture: a vector whose length (below 1) is how sure it is that its entity is
    present, and whose direction is that entity's pose. Three capsules, drawn as arrows in the unit circle."""
    fig = go.Figure()
    angles = np.linspace(0, 2 * np.pi, 121)
    fig.add_trace(go.Scatter(x=np.cos(angles), y=np.sin(angles), mode="lines", line=dict(color=OTHER, dash="dot"),
                             hoverinfo="skip", showlegend=False))  # fmt: skip
    for name, length, degrees in PRIMER_CAPSULES:
        x, y = length * np.cos(np.radians(degrees)), length * np.sin(np.radians(degrees))
        colour = WINNER if length > 0.5 else OTHER
        fig.add_annotation(x=x, y=y, ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowwidth=3, arrowcolor=colour)  # fmt: skip
        fig.add_annotation(x=x, y=y, text=f"{name}: |v| = {length:.2f}", showarrow=False, yshift=12,
                           font=dict(color=colour))  # fmt: skip
    fig.update_xaxes(range=[-1.15, 1.15], visible=False, scaleanchor="y")
    fig.update_yaxes(range=[-1.15, 1.15], visible=False)
    return layout(fig, height, showlegend=False, margin=dict(l=10, r=10, t=10, b=10))


def scores_bar(
    scores: np.ndarray, class_names: Sequence[str], prediction: int, margins: tuple[float, float] | None, height: int
) -> go.Figure:
    """The class scores as bars, the winner highlighted: capsule lengths with the margins their loss trains them
    toward (`Network.score_margins`), else activations, each value above its bar."""
    if margins is not None:
        return lengths_bar(scores, class_names, prediction, *margins, height=height)
    return activations_bar(scores, class_names, prediction, height=height)
