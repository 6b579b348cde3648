"""The EM network's class layer, iteration by iteration: what the Draw page shows of an EM model's reading."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import OTHER, WINNER, layout


def em_class_routing_figure(
    activations: np.ndarray, shares: np.ndarray, names: Sequence[str], prediction: int, height: int = 330
) -> go.Figure:
    """Each class's activation a_j (left) and share of the children's data (right) after each EM iteration, (r, K)
    each: one line per class, the prediction's in red and named."""
    activations, shares = np.asarray(activations, np.float32), np.asarray(shares, np.float32)
    if activations.shape != shares.shape or activations.ndim != 2 or activations.shape[1] != len(names):
        raise ValueError(f"need (r, {len(names)}) activations and shares, got {activations.shape} and {shares.shape}")
    r = activations.shape[0]
    steps = np.arange(1, r + 1)
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.14,
        subplot_titles=("activation a_j<br>after each M-step", "share of the data<br>Σ_i R_ij a_i / Σ_i a_i"),
    )  # fmt: skip
    order = [k for k in range(len(names)) if k != prediction] + [prediction]  # the winner drawn last, on top
    for col, (values, symbol) in enumerate(((activations, "a"), (shares, "share")), start=1):
        for k in order:
            winner = k == prediction
            fig.add_trace(
                go.Scatter(
                    x=steps, y=values[:, k], mode="lines+markers", name=names[k], showlegend=False,
                    line=dict(color=WINNER if winner else OTHER, width=3 if winner else 1),
                    marker=dict(size=7 if winner else 4),
                    hovertemplate=f"class {names[k]}, iteration %{{x}}: {symbol} = %{{y:.3f}}<extra></extra>",
                ),
                row=1, col=col,
            )  # fmt: skip
        fig.add_annotation(
            x=r, y=float(values[-1, prediction]), text=names[prediction], showarrow=False, xanchor="left",
            xshift=6, font=dict(color=WINNER), row=1, col=col,
        )  # fmt: skip
        fig.update_xaxes(title_text="iteration", dtick=1, range=[0.8, r + 0.45], row=1, col=col)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    return layout(fig, height, margin=dict(l=40, r=20, t=60, b=45))


def activations_bar(
    activations: np.ndarray, class_names: Sequence[str], prediction: int, height: int = 320
) -> go.Figure:
    """Bar chart of the K class activations a_j of the EM network, the winner highlighted, each value above its bar."""
    activations = np.asarray(activations, dtype=float).reshape(-1)
    if len(activations) != len(class_names):
        raise ValueError(f"{len(activations)} activations but {len(class_names)} class names")
    fig = go.Figure(
        go.Bar(
            x=list(class_names), y=activations, text=[f"{a:.2f}" for a in activations], textposition="outside",
            marker_color=[WINNER if k == prediction else OTHER for k in range(len(activations))],
            hovertemplate="class capsule %{x}<br>a = %{y:.3f}<extra></extra>", cliponaxis=False,
        )
    )  # fmt: skip
    fig.update_yaxes(range=[0, 1.12], title="activation a_j")
    fig.update_xaxes(type="category", title="class capsule")
    return layout(
        fig, height, showlegend=False, margin=dict(l=10, r=10, t=58, b=10),
        title="Class activations<br><sup>the winner is the class whose votes agree best</sup>",
    )  # fmt: skip
