"""The CapsNet beside its CNN baseline: both answers to one input, and accuracy as the test set turns or grows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from capsnet.readings.claims import NETWORKS, Verdict
from dashboard.figures.style import OTHER, WINNER, layout

CNN = "#1c83e1"  # the baseline's colour throughout


def comparison_figure(
    lengths: np.ndarray, scores: np.ndarray, class_names: Sequence[str], marked: Sequence[int] = (), height: int = 260
) -> go.Figure:
    """Per class, the CapsNet's capsule length and the CNN's score side by side; `marked` classes named on the axis."""
    lengths, scores = np.asarray(lengths, dtype=float), np.asarray(scores, dtype=float)
    if lengths.shape != scores.shape or len(lengths) != len(class_names):
        raise ValueError(f"{len(lengths)} lengths, {len(scores)} scores, {len(class_names)} class names")
    labels = [f"<b>{n}</b>" if k in marked else str(n) for k, n in enumerate(class_names)]
    fig = go.Figure(
        [
            go.Bar(x=labels, y=lengths, name="CapsNet: capsule length |v|", marker_color=WINNER,
                   hovertemplate="class %{x}: |v| = %{y:.3f}<extra>CapsNet</extra>"),
            go.Bar(x=labels, y=scores, name="CNN: class score", marker_color=CNN,
                   hovertemplate="class %{x}: %{y:.3f}<extra>CNN</extra>"),
        ]
    )  # fmt: skip
    fig.update_xaxes(type="category")
    fig.update_yaxes(range=[0, 1.05], title="score")
    return layout(fig, height, barmode="group", legend=dict(orientation="h", y=1.18), title=None)


def robustness_figure(
    values: Sequence[float],
    curves: dict[str, Sequence[float]],
    kind: str,
    current: float | None = None,
    height: int = 300,
    examples: int | None = None,
) -> go.Figure:
    """Test accuracy (%) of each network against the rotation angle (degrees) or the scale, `current` marked; with
    `examples` (the images per point), each point's 95% sampling interval as an error bar."""
    colours = {"CapsNet": WINNER, "CNN": CNN}
    fig = go.Figure()
    for name, accuracy in curves.items():
        p = np.asarray(accuracy, dtype=float)
        bars = None if not examples else dict(type="data", array=100 * sampling_interval(p, examples), thickness=1.2)
        fig.add_trace(
            go.Scatter(
                x=list(values), y=100 * p, mode="lines+markers", name=name, error_y=bars,
                line=dict(color=colours.get(name, OTHER), width=2.5),
                hovertemplate=f"{name}<br>%{{x}}: %{{y:.1f}}%" + (" ± %{error_y.array:.1f}" if examples else "")
                + "<extra></extra>",
            )
        )  # fmt: skip
    if current is not None:
        fig.add_vline(x=current, line=dict(color=OTHER, dash="dash", width=1.5))
    title = "rotation (degrees, counter-clockwise)" if kind == "rotation" else "scale"
    fig.update_xaxes(title=title, zeroline=False)
    fig.update_yaxes(title="test accuracy (%)", range=[0, 101])
    what = "turned" if kind == "rotation" else "scaled"
    return layout(fig, height, title=f"Every test image {what} alike", legend=dict(orientation="h", y=-0.3))


def sampling_interval(accuracy: np.ndarray, examples: int) -> np.ndarray:
    """The half-width of the 95% interval of an accuracy measured on `examples` images: 1.96 standard errors."""
    p = np.clip(np.asarray(accuracy, dtype=float), 0.0, 1.0)
    return 1.96 * np.sqrt(p * (1 - p) / max(int(examples), 1))


def claim_figure(verdict: Verdict, height: int = 320) -> go.Figure:
    """Test error (%) of both networks against the training examples seen, from their runs' metrics; each kept
    file's figure in the table as a diamond at the examples it had seen; the paper's fully trained figures as
    dashed lines."""
    colours = {"capsnet": WINNER, "cnn": CNN}
    fig = go.Figure()
    for row in verdict.rows:
        name = NETWORKS[row.network]
        seen, error = zip(*row.curve) if row.curve else ((), ())
        fig.add_trace(
            go.Scatter(
                x=list(seen), y=[100 * e for e in error], mode="lines+markers", name=f"{name} here",
                line=dict(color=colours[row.network], width=2.5),
                hovertemplate=f"{name}<br>%{{x:,}} examples: %{{y:.1f}}% error<extra></extra>",
            )
        )  # fmt: skip
    for row in verdict.rows:
        kept = row.kept_examples
        if row.error is None or kept is None:
            continue
        name = NETWORKS[row.network]
        fig.add_trace(
            go.Scatter(
                x=[kept], y=[100 * row.error], mode="markers", name=f"{name}, the kept file",
                marker=dict(color=colours[row.network], symbol="diamond", size=13, line=dict(color="white", width=1)),
                hovertemplate=f"{name}, the kept file<br>%{{x:,}} examples: %{{y:.2f}}% error (the table's)"
                "<extra></extra>",
            )
        )  # fmt: skip
    widest = max([s for row in verdict.rows for s, _ in row.curve] + [r.kept_examples or 0 for r in verdict.rows] + [1])
    for row in verdict.rows:  # the paper's fully trained figures, dashed, across the whole range
        name = NETWORKS[row.network]
        fig.add_trace(
            go.Scatter(
                x=[0, widest], y=[100 * row.paper_error] * 2, mode="lines", name=f"{name}, paper: "
                f"{100 * row.paper_error:.1f}%", line=dict(color=colours[row.network], dash="dash", width=1.5),
                hovertemplate=f"{name}, the paper's: {100 * row.paper_error:.1f}%<extra></extra>",
            )
        )  # fmt: skip
    fig.update_xaxes(title="training examples seen", rangemode="tozero")
    # errors from a first epoch's 35% down to a kept file's 2%: on a log scale both ends are readable
    # every tick in full: plotly's own log ticks write 20 as "2" beside the 2 below it
    ticks = [0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 30, 50, 100]  # a few labelled ticks in any one decade
    fig.update_yaxes(title="test error (%, log scale)", type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    return layout(fig, height, title="Test error as training goes on", legend=dict(orientation="h", y=-0.3))
