"""Evaluation: the confusion matrix and the accuracy per class."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import OTHER, WINNER, layout


def confusion_figure(confusion: np.ndarray, class_names: Sequence[str], height: int = 520) -> go.Figure:
    """Confusion matrix: rows true class, columns prediction; text = count.

    Two colour scales, so that a mistake never looks like an empty cell: the diagonal (right)
    in green by its share of the row, the off-diagonal cells that hold mistakes in orange to red
    by their count (on a log scale: one mistake is already clearly visible), the empty ones blank.
    """
    counts = np.asarray(confusion, dtype=float)
    k = counts.shape[0]
    if counts.shape != (k, k) or len(class_names) != k:
        raise ValueError(f"expected a ({len(class_names)}, {len(class_names)}) matrix, got {counts.shape}")
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    diagonal = np.eye(k, dtype=bool)
    names = list(class_names)
    mistakes = np.where(~diagonal & (counts > 0), np.log10(np.maximum(counts, 1)) + 1, np.nan)
    most = max(float(np.nanmax(mistakes)) if np.isfinite(mistakes).any() else 1.0, 1.0)
    common = dict(x=names, y=names, xgap=2, ygap=2, hoverongaps=False, texttemplate="%{text}")
    right = go.Heatmap(
        z=np.where(diagonal, share, np.nan), text=np.where(diagonal, counts.astype(int).astype(str), ""),
        colorscale="Greens", zmin=0.0, zmax=1.0, customdata=share, showscale=False,
        hovertemplate="true %{y}, predicted %{x}: right<br>%{text} examples (%{z:.1%} of the row)<extra></extra>",
        **common,
    )  # fmt: skip
    wrong = go.Heatmap(
        z=mistakes, text=np.where(~diagonal & (counts > 0), counts.astype(int).astype(str), ""),
        colorscale=[[0.0, "#fdd49e"], [0.5, "#fc8d59"], [1.0, "#d7301f"]], zmin=1.0, zmax=most, customdata=share,
        colorbar=dict(title="mistakes", tickvals=[1, 2, 3], ticktext=["1", "10", "100"], thickness=12),
        hovertemplate="true %{y}, predicted %{x}<br>%{text} mistakes (%{customdata:.1%} of the row)<extra></extra>",
        **common,
    )  # fmt: skip
    fig = go.Figure([right, wrong])
    fig.update_yaxes(autorange="reversed", title="true class", type="category", showgrid=False)
    fig.update_xaxes(title="predicted class", type="category", side="top", showgrid=False)
    return layout(fig, height, plot_bgcolor="rgba(0,0,0,0)")


def per_class_accuracy_figure(accuracy: Sequence[float], class_names: Sequence[str], height: int = 300) -> go.Figure:
    """Accuracy of each class as bars, the weakest highlighted."""
    values = np.asarray(accuracy, dtype=float)
    if len(values) != len(class_names):
        raise ValueError(f"{len(values)} accuracies but {len(class_names)} class names")
    worst = int(np.argmin(values)) if len(values) else -1
    fig = go.Figure(
        go.Bar(
            x=list(class_names),
            y=values,
            marker_color=[WINNER if k == worst else OTHER for k in range(len(values))],
            text=[f"{100 * v:.1f}%" for v in values],
            textposition="inside",
            insidetextanchor="end",
            hovertemplate="%{x}: %{y:.2%}<extra></extra>",
        )
    )
    low = float(values.min()) if len(values) else 0.0
    fig.update_yaxes(range=[max(0.0, low - 0.1), 1.0], tickformat=".0%", title="accuracy")  # never past 100%
    fig.update_xaxes(type="category")
    return layout(fig, height, title="Accuracy per class (weakest in red)")
