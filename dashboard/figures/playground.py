"""The routing playground's figures for the real model's votes: the votes in a plane with their couplings c_ij, s_j
and v_j, and |v_j| after each iteration. The toy's charts are drawn in the browser (`dashboard/knobs/js`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import CLASS_COLOURS, OTHER

LIGHT = "#fafafa"


def colour(parent: int) -> str:
    return CLASS_COLOURS[int(parent) % len(CLASS_COLOURS)]


def _vote_traces(
    points: np.ndarray,
    coupling: np.ndarray,
    agreement: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    label_children: bool,
    scale: float,
) -> list[dict]:
    """Each parent's votes points (P, N, 2), sized and faded by one iteration's coupling (N, P); their customdata the
    child, the parent's position, c_ij and the agreement (N, P)."""
    n = points.shape[1]
    children = np.arange(n)
    traces: list[dict] = []
    for p, parent in enumerate(parents):
        c = coupling[:, p]  # (N,)
        custom = np.stack([children, np.full(n, p), c, agreement[:, p]], axis=-1)  # (N, 4)
        traces.append(
            dict(
                type="scatter", x=points[p, :, 0], y=points[p, :, 1], name=f"votes for {names[p]}",
                mode="markers+text" if label_children else "markers",
                text=(children + 1).astype(str), textposition="top center",
                textfont=dict(size=10, color=colour(parent)), customdata=custom, legendgroup=str(p),
                marker=dict(size=5 + 26 * c / scale, color=colour(parent), opacity=0.25 + 0.75 * c / scale,
                            line=dict(width=0)),
                hovertemplate=f"child %{{text}} → {names[p]}<br>û = (%{{x:.2f}}, %{{y:.2f}})<br>"
                              "c = %{customdata[2]:.3f}<br>û·v = %{customdata[3]:.3f}<extra></extra>",
            )
        )  # fmt: skip
    return traces


def _pose_arrows(poses: np.ndarray, parents: Sequence[int] | np.ndarray, names: Sequence[str]) -> list[dict]:
    """Each parent's v_j (P, 2) as an arrow from the origin: light over one parent's votes, else in its colour."""
    traces = []
    for p, parent in enumerate(parents):
        arrow = colour(parent) if len(parents) > 1 else LIGHT
        traces.append(
            dict(
                type="scatter", x=[0.0, float(poses[p, 0])], y=[0.0, float(poses[p, 1])], mode="lines+markers",
                name=f"v for {names[p]}", legendgroup=str(p), showlegend=False, hoverinfo="skip",
                line=dict(color=arrow, width=3),
                marker=dict(symbol="arrow", angleref="previous", size=[0, 16], color=arrow),
            )
        )  # fmt: skip
    return traces


def plane_figure(
    points: np.ndarray,
    coupling: np.ndarray,
    agreement: np.ndarray,
    sums: np.ndarray,
    poses: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    step: int,
    label_children: bool = True,
    height: int = 520,
) -> go.Figure:
    """Every shown parent's votes in one plane, sized and faded by their coupling, with s_j and v_j of iteration `step`.

    points (P, N, 2) the votes; coupling and agreement (r, N, P); sums and poses (r, P, 2); `parents`
    the P parents' indices (their colours), `names` their names; `step` from 0. The axes hold every
    iteration's s_j and v_j, so stepping moves the marks, not the picture. Each vote's customdata is
    (child, position in `parents`, c_ij, agreement).
    """
    points, coupling, agreement = (np.asarray(a, dtype=np.float32) for a in (points, coupling, agreement))
    sums, poses = np.asarray(sums, dtype=np.float32), np.asarray(poses, dtype=np.float32)
    p_count, n, _ = points.shape
    r = coupling.shape[0]
    t = int(np.clip(step, 0, r - 1))
    scale = max(float(coupling.max()), 1e-6)  # the largest coupling of any iteration gets the largest marker
    # the axes hold the votes and the unit circle (every v_j is inside it); an s_j beyond them is drawn at their edge
    reach = max(float(np.abs(points).max()), 1.05) * 1.12
    norms = np.linalg.norm(sums[t], axis=-1)  # (P,)
    outside = norms > 0.94 * reach
    shown = sums[t] * np.where(outside, 0.94 * reach / np.maximum(norms, 1e-9), 1.0)[:, None]  # (P, 2)
    traces = _vote_traces(points, coupling[t], agreement[t], parents, names, label_children, scale)
    traces += _pose_arrows(poses[t], parents, names)
    traces.append(
        dict(
            type="scatter", x=shown[:, 0], y=shown[:, 1], mode="markers", name="s_j (weighted sum)",
            marker=dict(symbol="x", size=12, color=[colour(p) for p in parents], line=dict(width=1, color=LIGHT)),
            customdata=np.stack([sums[t, :, 0], sums[t, :, 1], norms], axis=-1),
            hovertext=[f"s for {name}" + (", drawn at the edge" if far else "") for name, far in zip(names, outside)],
            hovertemplate="%{hovertext} = (%{customdata[0]:.2f}, %{customdata[1]:.2f}), "
                          "|s| = %{customdata[2]:.2f}<extra></extra>",
        )
    )  # fmt: skip
    circle = dict(
        type="circle", xref="x", yref="y", x0=-1, y0=-1, x1=1, y1=1, line=dict(color=OTHER, dash="dot", width=1)
    )
    axis = dict(range=[-reach, reach], zeroline=True, zerolinecolor="#3a4150", autorange=False)
    return go.Figure(
        data=traces,
        layout=dict(
            height=height,
            margin=dict(l=50, r=20, t=70, b=90),
            # a sum beyond the view is drawn at its edge and its length said here, where it covers no vote
            title=dict(
                text=f"Iteration {t + 1} of {r}: arrows are v_j, crosses s_j"
                + ("<br>" if outside.any() else "")
                + "; ".join(
                    f"|s| = {v:.1f} for {name} (at the edge)" for v, far, name in zip(norms, outside, names) if far
                ),
                x=0.0,
                xanchor="left",
                font=dict(size=14),
            ),
            legend=dict(orientation="h", y=-0.12),
            shapes=[circle],
            xaxis=dict(axis),
            yaxis=dict(axis, scaleanchor="x", scaleratio=1),
            clickmode="event+select",
            dragmode="pan",
        ),
    )


def lengths_figure(
    lengths: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    step: int,
    height: int = 300,
) -> go.Figure:
    """|v_j| after each iteration (r, P), one line per parent, the iteration shown marked."""
    lengths = np.asarray(lengths, dtype=np.float32)
    r = lengths.shape[0]
    lines = [
        dict(
            type="scatter", x=np.arange(1, r + 1), y=lengths[:, p], mode="lines+markers", name=names[p],
            line=dict(color=colour(parent)), hovertemplate=f"{names[p]}: |v_j| = %{{y:.3f}}<extra></extra>",
        )
        for p, parent in enumerate(parents)
    ]  # fmt: skip
    here = dict(type="line", xref="x", yref="y domain", x0=step + 1, x1=step + 1, y0=0, y1=1,
                line=dict(color=LIGHT, dash="dot", width=1))  # fmt: skip
    return go.Figure(
        data=lines,
        layout=dict(
            height=height + (70 if len(lines) > 4 else 0),
            margin=dict(l=50, r=10, t=40, b=120 if len(lines) > 4 else 50),
            title=dict(text="|v_j| after each iteration", x=0.0, xanchor="left"),
            xaxis=dict(title=dict(text="iteration"), dtick=1, range=[0.7, r + 0.3]),
            yaxis=dict(range=[0.0, 1.02], title=dict(text="|v_j|")),
            shapes=[here],
            **({"legend": dict(orientation="h", y=-0.3)} if len(lines) > 4 else {}),
        ),
    )
