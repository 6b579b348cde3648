"""Self-attention routing (Efficient-CapsNet) for one input: each primary capsule's attention over the class capsules,
and the share of the evidence each class receives."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import OTHER, WINNER, layout


def attention_figure(
    coupling: np.ndarray, primary_lengths: np.ndarray, names: Sequence[str], height: int = 420
) -> go.Figure:
    """The couplings c_ij (N, K) as a heatmap: a row per primary capsule (its length |u_i| in the hover), a column
    per class, as its change from uniform (c - 1/K) on a scale centred at 0."""
    coupling = np.asarray(coupling, dtype=np.float32)
    n, k = coupling.shape
    if len(primary_lengths) != n or len(names) != k:
        raise ValueError(f"{n}x{k} couplings, {len(primary_lengths)} primary lengths and {len(names)} class names")
    change = coupling - np.float32(1.0 / k)
    reach = max(float(np.abs(change).max()), 1e-3)
    lengths = np.repeat(np.asarray(primary_lengths, dtype=np.float32)[:, None], k, axis=1)
    return layout(
        go.Figure(
            go.Heatmap(
                z=change,
                x=list(names),
                y=[f"u{i + 1}" for i in range(n)],
                zmin=-reach,
                zmax=reach,
                zmid=0.0,
                colorscale="RdBu_r",
                customdata=np.stack([coupling, lengths], axis=-1),
                colorbar=dict(title=dict(text="c − 1/K"), thickness=10),
                hovertemplate="primary capsule %{y} (|u| = %{customdata[1]:.2f}) → class %{x}<br>"
                "c = %{customdata[0]:.3f}<extra></extra>",
            )
        ),  # fmt: skip
        height,
        title="Each primary capsule's attention over the classes",
        xaxis=dict(title="class capsule", type="category"),
        yaxis=dict(title="primary capsule", autorange="reversed"),
    )


def attention_share_figure(
    coupling: np.ndarray, primary_lengths: np.ndarray, names: Sequence[str], prediction: int, height: int = 300
) -> go.Figure:
    """The evidence each class receives, sum_i |u_i| c_ij, the prediction red. Not a share: the learned bias can
    make a coupling negative, so a class can receive less than nothing."""
    mass = (np.asarray(primary_lengths, dtype=np.float64)[:, None] * np.asarray(coupling, dtype=np.float64)).sum(0)
    return layout(
        go.Figure(
            go.Bar(
                x=list(names),
                y=mass,
                marker_color=[WINNER if j == prediction else OTHER for j in range(len(names))],
                text=[f"{m:.2f}" for m in mass],
                textposition="outside",
                cliponaxis=False,
                hovertemplate="class %{x}: Σ|u|·c = %{y:.3f}<extra></extra>",
            )
        ),  # fmt: skip
        height,
        title="Where the evidence goes: Σ |u_i| c_ij",
        yaxis=dict(title="Σ |u_i| c_ij"),
        xaxis=dict(title="class capsule", type="category"),
        showlegend=False,
    )
