"""Training: loss and accuracy per epoch for several runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.style import RUN_COLOURS, layout

MARKED_EPOCHS = 40  # runs up to this long get a marker on every epoch
TICKED_EPOCHS = 20  # runs up to this long get a tick on every epoch; longer ones plotly's round numbers


def training_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], height: int = 400) -> go.Figure:
    """Loss and accuracy per epoch for several runs side by side (test solid, train dotted).

    The legend has one group per run, titled with its name, holding a "test" (solid) and a "train"
    (dotted) entry: clicking an entry shows or hides the whole run.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Loss", "Accuracy"), horizontal_spacing=0.1)
    longest = max((len(records) for records in runs.values()), default=1)
    mode = "lines+markers" if longest <= MARKED_EPOCHS else "lines"  # a hundred markers hide the line
    for n, (name, records) in enumerate(runs.items()):
        colour = RUN_COLOURS[n % len(RUN_COLOURS)]
        epochs = [r.get("epoch") for r in records]
        for key, col, dash, label in (
            ("test_loss", 1, "solid", "test"),
            ("train_loss", 1, "dot", "train"),
            ("test_accuracy", 2, "solid", "test"),
            ("train_accuracy", 2, "dot", "train"),
        ):
            values = [r.get(key) for r in records]
            fig.add_trace(
                go.Scatter(
                    x=epochs,
                    y=values,
                    mode=mode,
                    name=label,
                    legendgroup=name,
                    legendgrouptitle=dict(text=name),
                    showlegend=col == 1,  # one entry per line style, the accuracy panel's twins share them
                    line=dict(color=colour, dash=dash),
                    marker=dict(size=5),
                    hovertemplate=f"{name}<br>epoch %{{x}}<br>{key.replace('_', ' ')} = %{{y:.4f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title="epoch", **(dict(tick0=1, dtick=1) if longest <= TICKED_EPOCHS else {}))
    fig.update_yaxes(title="loss", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="accuracy", tickformat=".1%", row=1, col=2)
    return layout(fig, height, legend=dict(orientation="h", y=-0.2), margin=dict(l=10, r=10, t=40, b=40))
