"""Where routing matters: the test accuracy against the number of routing iterations."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import OTHER, WINNER, layout


def accuracy_figure(
    iterations: Sequence[int],
    accuracy: Sequence[float],
    differs_from_first: Sequence[int],
    trained: int,
    total: int,
    height: int = 340,
) -> go.Figure:
    """Test accuracy at each r (a line, the model's own r marked), over bars of how many answers differ from r = 1's.

    The accuracy axis spans the measured values with a little room, so a change of a few images shows, never below
    0% or above 100%; a point in the top tenth of the axis has its label under it, so that nothing is cut off.
    """
    rs, acc, differs = list(iterations), np.asarray(accuracy, dtype=float), np.asarray(differs_from_first)
    if not (len(rs) == len(acc) == len(differs)) or not rs:
        raise ValueError(f"need one accuracy and one count per iteration: {len(rs)}, {len(acc)}, {len(differs)}")
    low, high = float(acc.min()), float(acc.max())
    pad = max((high - low) * 0.6, 0.002)
    bottom, top = max(low - pad, 0.0), min(high + pad, 1.0)
    near_top = acc > top - 0.1 * (top - bottom)
    bars = go.Bar(
        x=rs, y=differs, yaxis="y2", marker_color=OTHER, opacity=0.35, name="answers that differ from r = 1",
        # each count at its bar's foot, inside it: above the bar it met the accuracy's label where the line crosses
        text=[f"{d:,}" if d else "" for d in differs], textposition="inside", insidetextanchor="start",
        textangle=0, cliponaxis=False,
        hovertemplate="r = %{x}: %{y:,} answers differ from r = 1<extra></extra>",
    )  # fmt: skip
    line = go.Scatter(
        x=rs, y=acc, mode="lines+markers+text", name="test accuracy", line=dict(color=WINNER, width=2.5),
        marker=dict(size=[14 if r == trained else 8 for r in rs], color=WINNER,
                    line=dict(color="white", width=[2 if r == trained else 0 for r in rs])),
        text=[f"{100 * a:.2f}%" for a in acc], cliponaxis=False,
        textposition=["bottom center" if near else "top center" for near in near_top],
        customdata=np.round(acc * total).astype(int),
        hovertemplate=f"r = %{{x}}: %{{y:.2%}} (%{{customdata:,}} of {total:,})<extra></extra>",
    )  # fmt: skip
    fig = go.Figure([bars, line])
    fig.update_layout(
        xaxis=dict(title="routing iterations r", tickvals=rs, ticktext=[f"{r}" + (" (trained)" if r == trained
                                                                                    else "") for r in rs]),
        yaxis=dict(title="test accuracy", tickformat=".1%", range=[bottom, top]),
        yaxis2=dict(title="answers that differ from r = 1", overlaying="y", side="right", showgrid=False,
                    showticklabels=False, range=[0, max(int(differs.max()), 1) * 3]),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )  # fmt: skip
    return layout(fig, height, margin=dict(l=70, r=70, t=50, b=50))


def answers_text(predictions: Sequence[int], label: int, iterations: Sequence[int], names: Sequence[str]) -> str:
    """One changed image's answers as markdown, r by r: a wrong answer struck through."""
    parts = []
    for r, p in zip(iterations, predictions):
        name = names[p] if 0 <= p < len(names) else str(p)
        parts.append(f"r={r}: **{name}**" if p == label else f"r={r}: ~~{name}~~")
    return " · ".join(parts)


def margins_text(
    lengths: Sequence[Sequence[float]], first: int, then: int, names: Sequence[str], symbol: str = "|v|"
) -> str:
    """|v_first| - |v_then| at each r: the margin between the answer without routing and the one routing gives
    (`symbol` "a" for the EM network's activations)."""
    margins = [row[first] - row[then] for row in lengths]
    return f"{symbol} of {names[first]} minus {names[then]}: " + ", ".join(f"{m:+.2f}" for m in margins)
