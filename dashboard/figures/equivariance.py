"""Pose under transforms: a capsule's 16-D pose before and after, and each dimension against the rotation angle."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import OTHER, WINNER, layout


def pose_figure(original: np.ndarray, transformed: np.ndarray, name: str, height: int = 280) -> go.Figure:
    """The tracked capsule's pose dimensions: as read from the input (hollow) and from the transformed input (bars)."""
    original, transformed = np.asarray(original, dtype=float), np.asarray(transformed, dtype=float)
    dims = [str(d + 1) for d in range(len(original))]
    fig = go.Figure(
        [
            go.Bar(x=dims, y=transformed, marker_color=WINNER, name="transformed input",
                   hovertemplate="dimension %{x}: %{y:.3f}<extra>transformed</extra>"),
            go.Scatter(x=dims, y=original, mode="markers", name="original input",
                       marker=dict(symbol="line-ew-open", size=14, color="#fafafa", line=dict(width=3)),
                       hovertemplate="dimension %{x}: %{y:.3f}<extra>original</extra>"),
        ]
    )  # fmt: skip
    fig.update_xaxes(type="category", title="dimension")
    fig.update_yaxes(title="value")
    return layout(fig, height, title=f"Pose of capsule {name}", legend=dict(orientation="h", y=1.15))


def rotation_sweep_figure(
    angles: Sequence[float], poses: np.ndarray, current: float, name: str, highlight: Sequence[int], height: int = 360
) -> go.Figure:
    """Each pose dimension (A, D) against the rotation angle; the `highlight`ed dimensions drawn strong."""
    poses = np.asarray(poses, dtype=float)
    fig = go.Figure()
    for d in range(poses.shape[1]):
        strong = d in highlight
        fig.add_trace(
            go.Scatter(
                x=list(angles), y=poses[:, d], mode="lines", name=f"dim {d + 1}",
                line=dict(width=3 if strong else 1, color=None if strong else OTHER), opacity=1.0 if strong else 0.35,
                showlegend=strong, hovertemplate=f"dimension {d + 1}<br>%{{x:+.1f}}°: %{{y:.3f}}<extra></extra>",
            )
        )  # fmt: skip
    fig.add_vline(x=current, line=dict(color=WINNER, dash="dash", width=1.5))
    fig.update_xaxes(title="rotation (degrees, counter-clockwise)", zeroline=False)
    fig.update_yaxes(title="pose value")
    return layout(fig, height, title=f"Capsule {name}'s pose as the input turns", legend=dict(orientation="h", y=-0.25))
