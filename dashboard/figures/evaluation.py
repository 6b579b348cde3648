"""Evaluation: the confusion matrix and the accuracy per class."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import OTHER, WINNER, layout


def confusion_figure(confusion: np.ndarray, class_names: Sequence[str], height: int = 520) -> go.Figure:
    """Confusion matrix: rows true class, columns prediction; colour = share of the row, text = count."""
    counts = np.asarray(confusion, dtype=float)
    k = counts.shape[0]
    if counts.shape != (k, k) or len(class_names) != k:
        raise ValueError(f"expected a ({len(class_names)}, {len(class_names)}) matrix, got {counts.shape}")
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    names = list(class_names)
    fig = go.Figure(
        go.Heatmap(
            z=share,
            x=names,
            y=names,
            text=counts.astype(int),
            texttemplate="%{text}",
            colorscale="Blues",
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title="share", tickformat=".0%"),
            hovertemplate="true %{y}, predicted %{x}<br>%{text} examples (%{z:.1%} of the row)<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", title="true class", type="category")
    fig.update_xaxes(title="predicted class", type="category", side="top")
    return layout(fig, height)


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
            textposition="outside",
            hovertemplate="%{x}: %{y:.2%}<extra></extra>",
        )
    )
    low = float(values.min()) if len(values) else 0.0
    fig.update_yaxes(range=[max(0.0, low - 0.1), 1.02], tickformat=".0%", title="accuracy")
    fig.update_xaxes(type="category")
    return layout(fig, height, title="Accuracy per class (weakest in red)")
