"""Capsules: the lengths of the digit capsules, and the dimensions of one capsule."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import MARGIN_LABEL_SPACE, OTHER, WINNER, layout, margin_lines


def lengths_bar(
    lengths: np.ndarray,
    class_names: Sequence[str],
    prediction: int | None = None,
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 320,
    compact: bool = False,
) -> go.Figure:
    """Bar chart of the K digit-capsule lengths |v_j|, the winner highlighted, margins 0.9 and 0.1 marked."""
    lengths = np.asarray(lengths, dtype=float).reshape(-1)
    if len(lengths) != len(class_names):
        raise ValueError(f"{len(lengths)} lengths but {len(class_names)} class names")
    winner = int(np.argmax(lengths)) if prediction is None else int(prediction)
    colours = [WINNER if k == winner else OTHER for k in range(len(lengths))]
    fig = go.Figure(
        go.Bar(
            x=list(class_names),
            y=lengths,
            marker_color=colours,
            text=[f"{v:.2f}" for v in lengths],
            textposition="outside",
            hovertemplate="capsule %{x}<br>|v| = %{y:.3f}<extra></extra>",
            name="|v|",
        )
    )
    if not compact:
        margin_lines(fig, m_plus, m_minus)
    fig.update_yaxes(range=[0, 1.08], title=None if compact else "capsule length |v|")
    fig.update_xaxes(type="category", title=None if compact else "class capsule")
    return layout(
        fig,
        height,
        showlegend=False,
        title=None if compact else "Capsule lengths: the probability that each class is present",
        margin=dict(l=10, r=10 if compact else MARGIN_LABEL_SPACE, t=10 if compact else 40, b=10),
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
