"""Training: loss and accuracy per epoch for several runs, and a run's window of test images as it learns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.images import _png_data_url, tile_pictures
from dashboard.figures.style import MARGIN_LABEL_SPACE, MARGIN_PLUS, OTHER, RUN_COLOURS, WINNER, layout, margin_marks

MARKED_EPOCHS = 40  # runs up to this long get a marker on every epoch
TICKED_EPOCHS = 20  # runs up to this long get a tick on every epoch; longer ones plotly's round numbers


def training_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], height: int = 400) -> go.Figure:
    """Loss and accuracy per epoch for several runs side by side (test solid with filled dots, train dotted with open
    ones: a run of one epoch is two dots, told apart by their marker).

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
            symbol = "circle" if label == "test" else "circle-open"
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
                    marker=dict(size=5 if label == "test" else 7, symbol=symbol),
                    hovertemplate=f"{name}<br>epoch %{{x}}<br>{key.replace('_', ' ')} = %{{y:.4f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title="epoch", **(dict(tick0=1, dtick=1) if longest <= TICKED_EPOCHS else {}))
    fig.update_yaxes(title="loss", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="accuracy", tickformat=".1%", row=1, col=2)
    return layout(fig, height, legend=dict(orientation="h", y=-0.2), margin=dict(l=10, r=10, t=40, b=40))


WINDOW_GAP = 4  # pixels between two images of the training window


def training_window(
    images: np.ndarray,
    scores: np.ndarray,
    reconstructions: np.ndarray | None,
    labels: np.ndarray,
    predictions: np.ndarray,
    class_names: Sequence[str],
    margins: tuple[float, float] | None = None,
    height: int = 400,
    score_name: str = "class score",
) -> go.Figure:
    """A training run's window at one snapshot: each test image over its reconstruction, its class scores below.

    images (n, H, W) and reconstructions (n, H, W) (None for a network without a decoder) in [0, 1], or (n, H, W, 3)
    each in colour;
    scores (n, K): capsule lengths, EM activations or a CNN's class probabilities (`score_name`, the axis title);
    labels and predictions (n, L): each
    image's classes and its L highest scores'. Image i's K bars stand right under it (one shared x axis, in
    pixels). `margins` (m+, m-) draws the margin loss's lines over capsule lengths.
    """
    images, scores = np.asarray(images, dtype=np.float32), np.asarray(scores, dtype=np.float32)
    n, h, w = images.shape[:3]
    k = scores.shape[1]
    if scores.shape[0] != n or len(labels) != n or len(predictions) != n or len(class_names) != k:
        raise ValueError(f"{n} images need {n} score rows, labels and predictions, and {k} class names")
    rows = [images] if reconstructions is None else [images, np.asarray(reconstructions, dtype=np.float32)]
    stack = np.stack(rows).reshape(len(rows) * n, *images.shape[1:])  # (R*n, H, W), or (R*n, H, W, 3) in colour
    tiles = tile_pictures(stack, columns=n, gap=WINDOW_GAP)  # (Ht, Wt), or (Ht, Wt, 3)
    slot = w + WINDOW_GAP
    x = (np.arange(n)[:, None] * slot - 0.5 + (np.arange(k)[None, :] + 0.5) * w / k).ravel()  # (n*K,) under image i
    winner = np.zeros((n, k), dtype=bool)
    np.put_along_axis(winner, np.asarray(predictions), True, axis=1)
    names = np.broadcast_to(np.asarray(class_names, dtype=object), (n, k)).ravel()
    data = [
        go.Image(source=_png_data_url(tiles), hoverinfo="skip", xaxis="x", yaxis="y"),
        go.Bar(
            x=x, y=scores.ravel(), width=0.8 * w / k, customdata=names, xaxis="x2", yaxis="y2",
            marker=dict(color=np.where(winner.ravel(), WINNER, OTHER).tolist()),
            hovertemplate="%{customdata}: %{y:.3f}<extra></extra>", showlegend=False,
        ),
    ]  # fmt: skip
    right = (np.sort(predictions, axis=1) == np.sort(labels, axis=1)).all(axis=1)  # (n,)
    centres = [i * slot + (w - 1) / 2 for i in range(n)]
    said = [("✓ " if ok else "✗ ") + " + ".join(class_names[c] for c in p) for ok, p in zip(right, predictions)]
    data.append(
        go.Scatter(
            x=centres, y=[1.02] * n, text=said, mode="text", textposition="top center", xaxis="x2", yaxis="y2",
            textfont=dict(size=12, color=np.where(right, MARGIN_PLUS, WINNER).tolist()), hoverinfo="skip",
            showlegend=False,
        )
    )  # fmt: skip
    shapes, notes = margin_marks(*margins, axis="2") if margins is not None else ([], [])
    axes = dict(
        # one x axis in pixels for both panels (plotly.js keeps the images square on it)
        xaxis=dict(
            anchor="y", matches="x2", side="top", tickmode="array", tickvals=centres, showgrid=False, zeroline=False,
            ticktext=[" + ".join(class_names[c] for c in row) for row in labels], ticks="",
        ),
        yaxis=dict(
            domain=[0.52, 1], anchor="x", autorange="reversed", scaleanchor="x", showgrid=False,
            tickmode="array", tickvals=[r * slot + (h - 1) / 2 for r in range(len(rows))],
            ticktext=["test image", "redrawn"][: len(rows)],
        ),
        xaxis2=dict(
            anchor="y2", tickmode="array", tickvals=x.tolist(), ticktext=[str(c) for c in range(k)] * n,
            tickfont=dict(size=9), showgrid=False, range=[-0.5, n * slot - WINDOW_GAP - 0.5],
        ),
        yaxis2=dict(
            domain=[0, 0.48], anchor="x2", range=[0, 1.25], tickvals=[0, 0.5, 1],
            title=score_name,
        ),
    )  # fmt: skip
    fig = go.Figure(data, dict(annotations=notes, shapes=shapes, bargap=0, **axes))
    right_space = MARGIN_LABEL_SPACE if margins is not None else 10
    return layout(fig, height, margin=dict(l=10, r=right_space, t=30, b=30))
