"""Routing by agreement, shown through the votes: where they point, how much weight each gets, where they come from."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.style import CLASS_COLOURS, OTHER, WINNER, layout

DIVERGING = "RdBu_r"  # blue: less than uniform, white: uniform, red: more


def _capsule_ids(types: int, grid: int) -> np.ndarray:
    """(N, 3) type (from 1), row and column of each primary capsule i = type * grid^2 + y * grid + x."""
    i = np.arange(types * grid * grid)
    return np.stack([i // (grid * grid) + 1, (i // grid) % grid, i % grid], axis=1)


def votes_figure(
    points: np.ndarray,
    coupling: np.ndarray,
    agreement: np.ndarray,
    sums: np.ndarray,
    poses: np.ndarray,
    name: str,
    num_classes: int,
    grid: int,
    step: int,
    height: int = 440,
    reach: float | None = None,
) -> go.Figure:
    """One digit capsule's N votes in 2-D, sized and coloured by their coupling c_ij, one frame per iteration.

    points (N, 2): the votes in a basis fixed across iterations; coupling and agreement (r, N);
    sums and poses (r, 2): s_j and v_j, projected. `step` (from 0) is the iteration shown; with
    more than one iteration, Play animates them in the browser, the points staying in place
    while their weights change (no redraw between frames, so no blank frame). The axes are fixed
    to hold the votes and every iteration's s_j and v_j, so neither Next nor Play rescales them;
    `reach` sets the colour scale's +- end (give two figures one, to compare them), else their own.
    """
    points, coupling, agreement = (np.asarray(a, dtype=np.float32) for a in (points, coupling, agreement))
    r, n = coupling.shape
    change = coupling - 1.0 / num_classes  # (r, N)
    reach = max(float(np.abs(change).max()), 1e-3) if reach is None else max(float(reach), 1e-3)
    every = np.concatenate(
        [points, np.asarray(sums, dtype=np.float32), np.asarray(poses, dtype=np.float32)]
    )  # (N+2r, 2)
    low, high = every.min(axis=0), every.max(axis=0)
    pad = 0.06 * np.maximum(high - low, 1e-3)
    ranges = [[float(low[a] - pad[a]), float(high[a] + pad[a])] for a in (0, 1)]
    ids = _capsule_ids(n // (grid * grid), grid)  # (N, 3)
    frames_names = [str(t + 1) for t in range(r)]

    def votes(t: int) -> go.Scatter:
        return go.Scatter(
            x=points[:, 0],
            y=points[:, 1],
            mode="markers",
            marker=dict(
                size=3 + 60 * coupling[t],
                color=change[t],
                colorscale=DIVERGING,
                cmin=-reach,
                cmax=reach,
                cmid=0.0,
                line=dict(width=0),
                opacity=0.85,
                colorbar=dict(title="c − 1/K", thickness=10, len=0.8),
            ),
            customdata=np.column_stack([ids, coupling[t], change[t], agreement[t]]),
            hovertemplate=(
                "type %{customdata[0]}, position (%{customdata[1]}, %{customdata[2]})<br>"
                "c = %{customdata[3]:.3f} (%{customdata[4]:+.3f} from uniform)<br>"
                "agreement û·v = %{customdata[5]:.3f}<extra></extra>"
            ),
            name="votes",
        )

    def consensus(t: int) -> list[go.Scatter]:
        return [
            go.Scatter(
                x=[sums[t, 0]], y=[sums[t, 1]], mode="markers", name="s_j (weighted sum)",
                marker=dict(symbol="x", size=14, color="#fafafa", line=dict(width=2)),
                hovertemplate="s_j, the weighted sum of the votes<extra></extra>",
            ),
            go.Scatter(
                x=[poses[t, 0]], y=[poses[t, 1]], mode="markers", name="v_j = squash(s_j)",
                marker=dict(symbol="diamond", size=14, color=WINNER, line=dict(width=1, color="#fafafa")),
                hovertemplate="v_j = squash(s_j): |v_j| = %{customdata:.3f}<extra></extra>",
                customdata=[float(np.hypot(*poses[t]))],
            ),
        ]  # fmt: skip

    step = int(np.clip(step, 0, r - 1))
    frames = [go.Frame(data=[votes(t), *consensus(t)], traces=[0, 1, 2], name=frames_names[t]) for t in range(r)]
    fig = go.Figure(data=[votes(step), *consensus(step)], frames=frames if r > 1 else None)
    extra: dict = {}
    if r > 1:
        play = dict(frame=dict(duration=1000, redraw=False), transition=dict(duration=600, easing="cubic-in-out"))
        extra["updatemenus"] = [
            dict(
                type="buttons", direction="left", showactive=False, x=1.0, y=1.02, xanchor="right", yanchor="bottom",
                buttons=[
                    dict(label="▶ Play", method="animate", args=[frames_names, dict(play, mode="immediate", fromcurrent=False)]),
                    dict(label="❚❚ Pause", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0, redraw=False))]),
                ],
            )
        ]  # fmt: skip
    fig.update_xaxes(title="along v_j: agreement / |v_j|", zeroline=True, zerolinecolor="#3a4150", range=ranges[0],
                     autorange=False)  # fmt: skip
    fig.update_yaxes(title="across: the votes' main spread", zeroline=True, zerolinecolor="#3a4150", range=ranges[1],
                     autorange=False)  # fmt: skip
    return layout(
        fig,
        height,
        title=dict(text=f"Votes for capsule {name}", x=0.0, xanchor="left"),
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=10, r=10, t=70, b=10),
        **extra,
    )


def coupling_distribution_figure(coupling: np.ndarray, name: str, num_classes: int, height: int = 320) -> go.Figure:
    """How the N couplings to one capsule are spread, one box per iteration: (r, N)."""
    coupling = np.asarray(coupling, dtype=np.float32)
    fig = go.Figure()
    for t in range(coupling.shape[0]):
        fig.add_trace(
            go.Box(
                y=coupling[t], name=f"iteration {t + 1}", boxpoints="outliers", marker=dict(size=3, color=OTHER),
                line=dict(color=WINNER if t == coupling.shape[0] - 1 else OTHER), showlegend=False,
                hovertemplate="c = %{y:.3f}<extra></extra>",
            )
        )  # fmt: skip
    fig.add_hline(y=1.0 / num_classes, line=dict(color="#fafafa", dash="dot", width=1))
    fig.update_yaxes(title=f"c to capsule {name}", rangemode="tozero")
    return layout(fig, height, title=f"Couplings to capsule {name}, per iteration (dotted: uniform 1/{num_classes})")


def vote_share_figure(mass: np.ndarray, class_names: Sequence[str], height: int = 320) -> go.Figure:
    """The share of all the vote mass each digit capsule receives, per iteration: (r, K), stacked to 100%."""
    mass = np.asarray(mass, dtype=np.float64)
    share = mass / np.maximum(mass.sum(axis=1, keepdims=True), 1e-12)  # (r, K)
    r, k = share.shape
    winner = int(np.argmax(share[-1]))
    x = [f"iteration {t + 1}" for t in range(r)]
    fig = go.Figure()
    for j in range(k):
        fig.add_trace(
            go.Bar(
                x=x, y=share[:, j], name=str(class_names[j]), marker_color=CLASS_COLOURS[j % len(CLASS_COLOURS)],
                marker_line=dict(width=2 if j == winner else 0, color="#fafafa"),
                text=[f"{v:.0%}" if v >= 0.06 else "" for v in share[:, j]], textposition="inside",
                hovertemplate=f"capsule {class_names[j]}<br>%{{x}}: %{{y:.1%}} of the vote mass<extra></extra>",
            )
        )  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_yaxes(tickformat=".0%", range=[0, 1], title="share of all votes")
    return layout(fig, height, title="Where the votes go", legend=dict(title="capsule", traceorder="normal"))


def vote_overlay_figure(
    image: np.ndarray,
    pixel_votes: np.ndarray,
    class_names: Sequence[str],
    digit: int | None = None,
    height: int = 360,
) -> go.Figure:
    """The input, its strokes coloured by the digit capsule they vote for (or, with `digit`, by their coupling to it).

    pixel_votes (H, W, K): the vote mass reaching each capsule through each pixel (`capsnet.agreement.pixel_votes`).
    Only ink is coloured, by the class with the most mass; ink where no class leads (uniform routing) stays grey.
    """
    image = np.asarray(image, dtype=np.float32)
    votes = np.asarray(pixel_votes, dtype=np.float64)
    k = votes.shape[-1]
    share = votes / np.maximum(votes.sum(axis=-1, keepdims=True), 1e-12)  # (H, W, K)
    ink = image > 0.15
    base = go.Heatmap(z=image, colorscale="gray", showscale=False, hoverinfo="skip", zmin=0, zmax=1)
    if digit is None:
        best = share.argmax(axis=-1)  # (H, W)
        lead = share.max(axis=-1) - 1.0 / k  # how far the top class is above uniform
        z = np.where(ink & (lead > 1e-4), best, np.nan)  # a tie (uniform routing) leans to no capsule: left blank
        colours = [CLASS_COLOURS[j % len(CLASS_COLOURS)] for j in range(k)]
        top = go.Heatmap(
            z=z, zmin=-0.5, zmax=k - 0.5, colorscale=_discrete(colours), opacity=0.9, hoverongaps=False,
            customdata=np.stack([share.max(axis=-1), np.asarray(class_names, dtype=object)[best]], axis=-1),
            colorbar=dict(title="votes for", tickvals=list(range(k)), ticktext=list(class_names), thickness=10),
            hovertemplate="pixel (%{y}, %{x})<br>most of its votes go to capsule %{customdata[1]}"
                          " (%{customdata[0]:.1%})<extra></extra>",
        )  # fmt: skip
        title = "Which capsule each stroke votes for"
    else:
        change = share[..., digit] - 1.0 / k
        reach = max(float(np.abs(change[ink]).max()) if ink.any() else 0.0, 1e-3)
        top = go.Heatmap(
            z=np.where(ink, change, np.nan), zmin=-reach, zmax=reach, zmid=0.0, colorscale=DIVERGING, opacity=0.95,
            hoverongaps=False, colorbar=dict(title="c − 1/K", thickness=10),
            hovertemplate="pixel (%{y}, %{x})<br>coupling to capsule " + str(class_names[digit])
                          + ": %{z:+.3f} from uniform<extra></extra>",
        )  # fmt: skip
        title = f"How strongly each stroke votes for capsule {class_names[digit]}"
    fig = go.Figure([base, top])
    fig.update_yaxes(autorange="reversed", scaleanchor="x", showticklabels=False, showgrid=False, zeroline=False)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, constrain="domain")
    return layout(fig, height, title=title)


def _discrete(colours: list[str]) -> list[list]:
    """A colour scale with one flat band per class (for integer z from 0 to len(colours) - 1)."""
    k = len(colours)
    scale: list[list] = []
    for j, colour in enumerate(colours):
        scale += [[j / k, colour], [(j + 1) / k, colour]]
    return scale
