"""The EM network's routing, iteration by iteration: its class layer (the Draw and Routing pages) and its
convolutional capsule layers, one child capsule at a time (the Routing page)."""

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


def em_assignment_figure(
    assignments: np.ndarray, child_activations: np.ndarray, grid: tuple[int, int], klass: str, height: int = 340
) -> go.Figure:
    """R_ij of one class j for every child i of the last grid (I,), laid out by type (rows) and position (columns),
    with each child's activation a_i in the hover: who the class was given, at one iteration."""
    types, side = grid
    shares = np.asarray(assignments, np.float32).reshape(types, side * side)  # (types, positions)
    acts = np.asarray(child_activations, np.float32).reshape(types, side * side)
    places = [f"({y},{x})" for y in range(side) for x in range(side)]
    fig = go.Figure(
        go.Heatmap(
            z=shares, x=places, y=[f"type {t + 1}" for t in range(types)], zmin=0, zmax=1, colorscale="Reds",
            customdata=acts, colorbar=dict(title=dict(text="R_ij"), thickness=12),
            hovertemplate="%{y} at %{x}<br>R_ij = %{z:.3f}<br>a_i = %{customdata:.3f}<extra></extra>",
        )
    )  # fmt: skip
    fig.update_xaxes(title="position (row, column) on the last grid", type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    return layout(
        fig, height, margin=dict(l=10, r=10, t=58, b=10),
        title=f"R_ij: the share of each child given to class {klass}<br><sup>rows: capsule types</sup>",
    )  # fmt: skip


def em_fit_figure(
    activations: np.ndarray, spreads: np.ndarray, names: Sequence[str], chosen: int, height: int = 300
) -> go.Figure:
    """Each class's Gaussian as one M-step fitted it: its activation a_j (left) and spread, the mean sigma_j over
    its 16 pose entries (right), (K,) each; the chosen class in red."""
    activations, spreads = np.asarray(activations, float), np.asarray(spreads, float)
    colours = [WINNER if k == chosen else OTHER for k in range(len(names))]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("activation a_j", "spread (mean σ_j)"))  # fmt: skip
    for col, (values, symbol) in enumerate(((activations, "a"), (spreads, "mean σ")), start=1):
        fig.add_trace(
            go.Bar(x=list(names), y=values, marker_color=colours, showlegend=False,
                   hovertemplate=f"class %{{x}}: {symbol} = %{{y:.3f}}<extra></extra>"),
            row=1, col=col,
        )  # fmt: skip
        fig.update_xaxes(type="category", row=1, col=col)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    return layout(fig, height, margin=dict(l=10, r=10, t=40, b=10))


def em_layer_figure(
    parent_activations: np.ndarray,
    positions: np.ndarray,
    shares: np.ndarray,
    layer: str,
    child: str,
    height: int = 420,
) -> go.Figure:
    """A convolutional capsule layer's parents at one iteration, a_j (J, n, n) by type (rows) and position (columns),
    with circles where one child's unit of data went: `shares` (M, J) of R_ij to the types at `positions` (M,)."""
    acts = np.asarray(parent_activations, np.float32)
    types, n = acts.shape[0], acts.shape[-1]
    shares = np.asarray(shares, np.float32).reshape(len(positions), types)  # (M, J)
    places = [f"({y},{x})" for y in range(n) for x in range(n)]
    rows = [f"type {t + 1}" for t in range(types)]
    fig = go.Figure(
        go.Heatmap(
            z=acts.reshape(types, n * n),  # (J, n*n): a row per type, a column per position
            x=places, y=rows, zmin=0, zmax=1, colorscale="Viridis",
            colorbar=dict(title=dict(text="a_j"), thickness=12),
            hovertemplate="%{y} at %{x}<br>a_j = %{z:.3f}<extra></extra>",
        )
    )  # fmt: skip
    m, j = np.nonzero(shares > 0.005)  # the parents given at least half a percent of the child
    if len(m):
        given = shares[m, j]
        fig.add_trace(
            go.Scatter(
                x=[places[int(positions[k])] for k in m], y=[rows[t] for t in j], mode="markers",
                marker=dict(size=6 + 30 * np.sqrt(given / shares.max()), color="rgba(0,0,0,0)",
                            line=dict(color=WINNER, width=2)),
                customdata=given, showlegend=False,
                hovertemplate=f"{child} gives %{{y}} at %{{x}}<br>R_ij = %{{customdata:.3f}}<extra></extra>",
            )
        )  # fmt: skip
    fig.update_xaxes(title=f"position (row, column) on {layer}'s {n}x{n} grid", type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    return layout(
        fig, height, margin=dict(l=10, r=10, t=58, b=10),
        title=f"{layer}: every parent's activation a_j<br><sup>red circles: the parents {child} was given to, "
        "sized by R_ij</sup>",
    )  # fmt: skip


def em_child_windows_figure(
    child_activations: np.ndarray,
    y: int,
    x: int,
    windows: Sequence[tuple[int, int, int]],
    title: str,
    height: int = 300,
) -> go.Figure:
    """One child type's activations a_i on its grid (side, side), the child (y, x) marked and each window that holds
    it outlined: `windows` as (top row, left column, size)."""
    acts = np.asarray(child_activations, np.float32)
    side = acts.shape[-1]
    boxes = [dict(type="rect", x0=left - 0.5, x1=left + k - 0.5, y0=top - 0.5, y1=top + k - 0.5,
                  line=dict(color=WINNER, width=2)) for top, left, k in windows]  # fmt: skip
    chosen = dict(type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5, line=dict(color="#fafafa", width=3))
    fig = go.Figure(
        go.Heatmap(
            z=acts, zmin=0, zmax=1, colorscale="Viridis", colorbar=dict(title=dict(text="a_i"), thickness=12),
            hovertemplate="(%{y}, %{x})<br>a_i = %{z:.3f}<extra></extra>",
        )
    )  # fmt: skip
    fig.update_xaxes(constrain="domain", dtick=1 if side <= 6 else 2, range=[-0.5, side - 0.5], title="x")
    fig.update_yaxes(scaleanchor="x", constrain="domain", dtick=1 if side <= 6 else 2, range=[side - 0.5, -0.5],
                     title="y")  # fmt: skip
    return layout(fig, height, margin=dict(l=40, r=10, t=40, b=40), title=title, shapes=[*boxes, chosen])
