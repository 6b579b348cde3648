"""The routing playground's figures: votes in a plane with their weights (dynamic routing's c_ij and v_j, or EM's R_ij
and Gaussians), the weights per child, squash and margin loss."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import CLASS_COLOURS, MARGIN_MINUS, MARGIN_PLUS, OTHER

LIGHT = "#fafafa"


def colour(parent: int) -> str:
    return CLASS_COLOURS[int(parent) % len(CLASS_COLOURS)]


def _chosen_ring(points: np.ndarray, selected: tuple[int, int]) -> dict:
    """A ring around the chosen vote (parent, child) of points (P, N, 2): the same in both routings' charts."""
    p, i = selected
    return dict(
        type="scatter", x=[float(points[p, i, 0])], y=[float(points[p, i, 1])], mode="markers", name="chosen vote",
        hoverinfo="skip", marker=dict(symbol="circle-open", size=24, color=LIGHT, line=dict(width=2)),
    )  # fmt: skip


def plane_figure(
    points: np.ndarray,
    coupling: np.ndarray,
    agreement: np.ndarray,
    sums: np.ndarray,
    poses: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    step: int,
    selected: tuple[int, int] | None = None,
    label_children: bool = True,
    height: int = 520,
) -> go.Figure:
    """Every shown parent's votes in one plane, sized and faded by their coupling, with s_j and v_j of iteration `step`.

    points (P, N, 2) the votes; coupling and agreement (r, N, P); sums and poses (r, P, 2); `parents`
    the P parents' indices (their colours), `names` their names; `step` from 0. The axes hold every
    iteration's s_j and v_j, so stepping moves the marks, not the picture. Each vote's customdata is
    (child, position in `parents`), for a click to say which vote it is; `selected` rings one vote.
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
    children = np.arange(n)
    traces: list[dict] = []
    for p, parent in enumerate(parents):
        c = coupling[t, :, p]  # (N,)
        # (N, 4): the child (from 0), the parent's position, c_ij and the agreement
        custom = np.stack([children, np.full(n, p), c, agreement[t, :, p]], axis=-1)
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
    for p, parent in enumerate(
        parents
    ):  # v_j: an arrow from the origin (light over one parent's votes, all its colour)
        arrow = colour(parent) if p_count > 1 else LIGHT
        traces.append(
            dict(
                type="scatter", x=[0.0, float(poses[t, p, 0])], y=[0.0, float(poses[t, p, 1])], mode="lines+markers",
                name=f"v for {names[p]}", legendgroup=str(p), showlegend=False, hoverinfo="skip",
                line=dict(color=arrow, width=3),
                marker=dict(symbol="arrow", angleref="previous", size=[0, 16], color=arrow),
            )
        )  # fmt: skip
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
    if selected is not None:
        traces.append(_chosen_ring(points, selected))
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


def _ellipse(centre: np.ndarray, radii: np.ndarray, points: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """The axis-aligned ellipse of `radii` (2,) around `centre` (2,), as a closed line: (x, y)."""
    angle = np.linspace(0.0, 2 * np.pi, points)
    return centre[0] + radii[0] * np.cos(angle), centre[1] + radii[1] * np.sin(angle)


def em_plane_figure(
    points: np.ndarray,
    assignments: np.ndarray,
    means: np.ndarray,
    stds: np.ndarray,
    activations: np.ndarray,
    names: Sequence[str],
    step: int,
    selected: tuple[int, int] | None = None,
    height: int = 520,
) -> go.Figure:
    """EM routing of the same votes: each vote sized and faded by its R_ij, each parent's Gaussian (mean and 1 and 2
    sigma) as fitted by iteration `step`'s M-step.

    points (K, N, 2); assignments (r, N, K); means and stds (r, K, 2); activations (r, K); `step` from 0. The axes
    are the dynamic chart's (the votes and the unit circle), so the two charts can be read side by side.
    """
    points, assignments = np.asarray(points, dtype=np.float32), np.asarray(assignments, dtype=np.float32)
    k, n, _ = points.shape
    r = assignments.shape[0]
    t = int(np.clip(step, 0, r - 1))
    reach = max(float(np.abs(points).max()), 1.05) * 1.12
    children = np.arange(n)
    traces: list[dict] = []
    for j in range(k):
        weight = assignments[t, :, j]  # (N,)
        traces.append(
            dict(
                type="scatter", x=points[j, :, 0], y=points[j, :, 1], name=f"votes for {names[j]}",
                mode="markers+text", text=(children + 1).astype(str), textposition="top center",
                textfont=dict(size=10, color=colour(j)), legendgroup=str(j),
                customdata=np.stack([children, np.full(n, j), weight], axis=-1),
                marker=dict(size=5 + 26 * weight, color=colour(j), opacity=0.25 + 0.75 * weight, line=dict(width=0)),
                hovertemplate=f"child %{{text}} → {names[j]}<br>V = (%{{x:.2f}}, %{{y:.2f}})<br>"
                              "R = %{customdata[2]:.3f}<extra></extra>",
            )
        )  # fmt: skip
    for j in range(k):  # the Gaussian of each parent: 1 and 2 sigma, its mean a diamond
        mean, std = np.asarray(means[t, j], dtype=np.float64), np.asarray(stds[t, j], dtype=np.float64)
        for width, dash in ((2, "solid"), (1, "dot")):
            # whole ellipses: the plot area cuts off what lies beyond the axes (clipping the points would bend an
            # ellipse into the axes' rectangle)
            x, y = _ellipse(mean, std * (1 if dash == "solid" else 2))
            traces.append(
                dict(
                    type="scatter", x=x, y=y, mode="lines",
                    legendgroup=str(j), showlegend=False, hoverinfo="skip",
                    line=dict(color=colour(j), width=width, dash=dash),
                )
            )  # fmt: skip
        traces.append(
            dict(
                type="scatter", x=[float(np.clip(mean[0], -reach, reach))], y=[float(np.clip(mean[1], -reach, reach))],
                mode="markers", name=f"μ for {names[j]}", legendgroup=str(j), showlegend=False,
                marker=dict(symbol="diamond", size=13, color=colour(j), line=dict(width=1, color=LIGHT)),
                hovertemplate=f"μ for {names[j]} = ({mean[0]:.2f}, {mean[1]:.2f}), σ = ({std[0]:.2f}, {std[1]:.2f}), "
                              f"a = {float(activations[t, j]):.3f}<extra></extra>",
            )
        )  # fmt: skip
    if selected is not None:
        traces.append(_chosen_ring(points, selected))
    axis = dict(range=[-reach, reach], zeroline=True, zerolinecolor="#3a4150", autorange=False)
    return go.Figure(
        data=traces,
        layout=dict(
            height=height,
            margin=dict(l=50, r=20, t=70, b=90),
            title=dict(
                text=f"Iteration {t + 1} of {r}: μ_j and its 1σ, 2σ ellipses", x=0.0, xanchor="left", font=dict(size=14)
            ),
            legend=dict(orientation="h", y=-0.12),
            xaxis=dict(axis),
            yaxis=dict(axis, scaleanchor="x", scaleratio=1),
            dragmode="pan",
        ),
    )


MIN_LABELLED = 0.12  # a bar segment narrower than this (of a row's 1) is not labelled: its number would not fit


def coupling_bars_figure(
    coupling: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    selected: int | None = None,
    height: int = 420,
    symbol: str = "c",
) -> go.Figure:
    """c_ij (or EM's R_ij, `symbol` "R") of each child (N, P) as one stacked bar per child: every bar reaches 1."""
    coupling = np.asarray(coupling, dtype=np.float32)
    n = coupling.shape[0]
    labels = [f"child {i + 1}" + (" ◀" if selected == i else "") for i in range(n)]
    bars = [
        dict(
            type="bar", orientation="h", x=coupling[:, p], y=labels, name=names[p], marker=dict(color=colour(parent)),
            text=[f"{v:.2f}" if v >= MIN_LABELLED else "" for v in coupling[:, p]], textposition="inside",
            insidetextanchor="middle", textangle=0,  # never turned on its side in a narrow segment
            hovertemplate=f"%{{y}}: {symbol} to {names[p]} = %{{x:.3f}}<extra></extra>",
        )
        for p, parent in enumerate(parents)
    ]  # fmt: skip
    return go.Figure(
        data=bars,
        layout=dict(
            height=height,
            barmode="stack",
            margin=dict(l=80, r=10, t=40, b=60),
            title=dict(text=f"{symbol}_ij of each child (a row sums to 1)", x=0.0, xanchor="left"),
            xaxis=dict(range=[0, 1]),
            yaxis=dict(autorange="reversed"),
            legend=dict(orientation="h", y=-0.12, traceorder="normal"),
        ),
    )


def lengths_figure(
    lengths: np.ndarray,
    parents: Sequence[int] | np.ndarray,
    names: Sequence[str],
    step: int,
    height: int = 300,
    quantity: str = "|v_j|",
    span: tuple[float, float] = (0.0, 1.02),
) -> go.Figure:
    """|v_j| (or EM's a_j, `quantity` "a_j") after each iteration (r, P), one line per parent, the iteration shown
    marked; `span` is the value axis."""
    lengths = np.asarray(lengths, dtype=np.float32)
    r = lengths.shape[0]
    lines = [
        dict(
            type="scatter", x=np.arange(1, r + 1), y=lengths[:, p], mode="lines+markers", name=names[p],
            line=dict(color=colour(parent)), hovertemplate=f"{names[p]}: {quantity} = %{{y:.3f}}<extra></extra>",
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
            title=dict(text=f"{quantity} after each iteration", x=0.0, xanchor="left"),
            xaxis=dict(title=dict(text="iteration"), dtick=1, range=[0.7, r + 0.3]),
            yaxis=dict(range=list(span), title=dict(text=quantity)),
            shapes=[here],
            **({"legend": dict(orientation="h", y=-0.3)} if len(lines) > 4 else {}),
        ),
    )


def squash_figure(
    norms: np.ndarray, lengths: np.ndarray, marks: np.ndarray, parents: Sequence[int], names: Sequence[str],
    height: int = 320,
) -> go.Figure:  # fmt: skip
    """Equation 1 as a curve, |v| against |s|, with each parent's (|s_j|, |v_j|) marks (P, 2) on it."""
    marks = np.asarray(marks, dtype=np.float32).reshape(-1, 2)
    data = [
        dict(type="scatter", x=norms, y=lengths, mode="lines", name="|squash(s)|", line=dict(color=OTHER, width=2),
             hovertemplate="|s| = %{x:.2f} → |v| = %{y:.3f}<extra></extra>"),
        *(
            dict(type="scatter", x=[float(marks[p, 0])], y=[float(marks[p, 1])], mode="markers", name=names[p],
                 marker=dict(size=11, color=colour(parent), line=dict(width=1, color=LIGHT)),
                 hovertemplate=f"{names[p]}: |s| = %{{x:.2f}}, |v| = %{{y:.3f}}<extra></extra>")
            for p, parent in enumerate(parents)
        ),
    ]  # fmt: skip
    one = dict(
        type="line", xref="x domain", yref="y", x0=0, x1=1, y0=1, y1=1, line=dict(color=LIGHT, dash="dot", width=1)
    )
    return go.Figure(
        data=data,
        layout=dict(
            height=height,
            margin=dict(l=50, r=10, t=62, b=50),  # a two-line title: half a 1,100 px window cuts one long line
            title=dict(text="Squash: short vectors shrink to ~0,<br>long ones to just below 1", x=0.0, xanchor="left"),
            xaxis=dict(title=dict(text="|s_j|"), range=[0, float(norms[-1])]),
            yaxis=dict(title=dict(text="|v_j|"), range=[0, 1.05]),
            shapes=[one],
            showlegend=False,
        ),
    )


def margin_figure(
    lengths: np.ndarray, present: np.ndarray, absent: np.ndarray, m_plus: float, m_minus: float,
    marks: np.ndarray, names: Sequence[str], height: int = 320,
) -> go.Figure:  # fmt: skip
    """Equation 4 for one class against |v_k|: the loss when the class is present and when it is absent; marks (P,)."""
    data = [
        dict(type="scatter", x=lengths, y=present, mode="lines", name="class present (T_k = 1)",
             line=dict(color=MARGIN_PLUS, width=2), hovertemplate="|v| = %{x:.2f}: L = %{y:.3f}<extra></extra>"),
        dict(type="scatter", x=lengths, y=absent, mode="lines", name="class absent (T_k = 0)",
             line=dict(color=MARGIN_MINUS, width=2), hovertemplate="|v| = %{x:.2f}: L = %{y:.3f}<extra></extra>"),
    ]  # fmt: skip
    shapes = [
        dict(type="line", xref="x", yref="y domain", x0=m, x1=m, y0=0, y1=1, line=dict(color=c, dash="dash", width=1))
        for m, c in ((m_plus, MARGIN_PLUS), (m_minus, MARGIN_MINUS))
    ]
    notes = [
        dict(x=m, y=1, xref="x", yref="y domain", text=text, showarrow=False, yanchor="bottom", font=dict(color=c))
        for m, c, text in ((m_plus, MARGIN_PLUS, f"m⁺ = {m_plus}"), (m_minus, MARGIN_MINUS, f"m⁻ = {m_minus}"))
    ]
    for p, length in enumerate(np.asarray(marks, dtype=np.float32).reshape(-1)):
        shapes.append(dict(type="line", xref="x", yref="y domain", x0=float(length), x1=float(length), y0=0, y1=0.12,
                           line=dict(color=LIGHT, width=2)))  # fmt: skip
        notes.append(dict(x=float(length), y=0.13 + 0.09 * p, xref="x", yref="y domain", text=names[p], showarrow=False,
                          yanchor="bottom", font=dict(size=10, color=LIGHT)))  # fmt: skip
    return go.Figure(
        data=data,
        layout=dict(
            height=height,
            margin=dict(l=50, r=10, t=50, b=50),
            title=dict(text="Margin loss of one class, by its length", x=0.0, xanchor="left", y=0.98),
            xaxis=dict(title=dict(text="|v_k|"), range=[0, 1]),
            yaxis=dict(title=dict(text="L_k"), rangemode="tozero"),
            shapes=shapes,
            annotations=notes,
            legend=dict(orientation="h", y=-0.25),
        ),
    )
