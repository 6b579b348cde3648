"""Routing by agreement, shown through the votes: where they point, how much weight each gets, where they come from."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from capsnet.readings.agreement import largest_share_change, vote_shares
from dashboard.figures.images import is_colour, picture_trace, strokes
from dashboard.figures.style import CLASS_COLOURS, OTHER, WINNER

DIVERGING = "RdBu_r"  # blue: less than uniform, white: uniform, red: more
RING, RING_EDGE = "#ffd21f", "#0e1117"  # the selected vote's ring: a colour the diverging scale never takes, edged


def _capsule_labels(types: int, grid: int) -> np.ndarray:
    """'type t, position (y, x)' of each primary capsule i = type * grid^2 + y * grid + x, the type from 1.

    An array, not a list: plotly.py deep-copies a figure's data to send it, an array in one go, a list item by item.
    """
    return np.array(
        [f"type {t + 1}, position ({y}, {x})" for t in range(types) for y in range(grid) for x in range(grid)]
    )


def _ring(x: float, y: float) -> list[dict]:
    """The selected capsule's vote ringed: yellow on a dark ring, seen on the white of uniform couplings and on the
    page alike."""
    return [
        dict(
            type="scatter",
            x=[x],
            y=[y],
            mode="markers",
            name="the selected capsule's vote",
            hoverinfo="skip",
            showlegend=colour == RING,
            marker=dict(symbol="circle-open", size=size, color=colour, line=dict(width=width)),
        )  # fmt: skip
        for size, colour, width in ((25, RING_EDGE, 5.0), (22, RING, 2.5))
    ]


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
    selected: int | None = None,
) -> go.Figure:
    """One digit capsule's N votes in 2-D, sized and coloured by their coupling c_ij in iteration `step`.

    points (N, 2): the votes in a basis fixed across iterations; coupling and agreement (r, N);
    sums and poses (r, 2): s_j and v_j, projected. `step` (from 0) is the iteration drawn; the page's
    own stepper chooses it for every chart at once, so the figure has no Play of its own. With more
    than one iteration a label in the plot's corner names the iteration shown, and the axes are fixed
    to hold the votes and every iteration's s_j and v_j, so stepping never rescales them. `reach` sets
    the colour scale's +- end (give two figures one, to compare them), else their own. `selected`
    rings the vote of that primary capsule (the linked views' selection); clicking a vote selects its
    capsule. The arrays are sent as float32 (`tests/test_figures.py` bounds the figure's JSON).
    """
    points, coupling, agreement = (np.asarray(a, dtype=np.float32) for a in (points, coupling, agreement))
    sums, poses = np.asarray(sums, dtype=np.float32), np.asarray(poses, dtype=np.float32)
    r, n = coupling.shape
    change = coupling - np.float32(1.0 / num_classes)  # (r, N)
    reach = max(float(np.abs(change).max()), 1e-3) if reach is None else max(float(reach), 1e-3)
    every = np.concatenate([points, sums, poses])  # (N+2r, 2)
    low, high = every.min(axis=0), every.max(axis=0)
    pad = 0.06 * np.maximum(high - low, 1e-3)
    ranges = [[float(low[a] - pad[a]), float(high[a] + pad[a])] for a in (0, 1)]
    step = int(np.clip(step, 0, r - 1))
    sizes = 3 + 60 * coupling[step]  # (N,) px
    hover = np.stack([coupling[step], change[step], agreement[step]], axis=-1)  # (N, 3): c, c - 1/K, û·v
    length = float(np.hypot(*poses[step]))  # |v_j|, projected

    # plain dicts: the figure validates each once
    votes = dict(
        type="scatter", x=points[:, 0], y=points[:, 1], text=_capsule_labels(n // (grid * grid), grid),
        mode="markers", name="votes", customdata=hover,
        hovertemplate="%{text}<br>c = %{customdata[0]:.3f} (%{customdata[1]:+.3f} from uniform)<br>"
                      "agreement û·v = %{customdata[2]:.3f}<extra></extra>",
        marker=dict(
            size=sizes, color=change[step], colorscale=DIVERGING, cmin=-reach, cmax=reach, cmid=0.0,
            line=dict(width=0), opacity=0.85, colorbar=dict(title="c − 1/K", thickness=10, len=0.8),
        ),
    )  # fmt: skip
    sum_mark = dict(
        type="scatter", x=[float(sums[step, 0])], y=[float(sums[step, 1])], mode="markers", name="s_j (weighted sum)",
        marker=dict(symbol="x", size=14, color="#fafafa", line=dict(width=2)),
        hovertemplate="s_j, the weighted sum of the votes<extra></extra>",
    )  # fmt: skip
    pose_mark = dict(
        type="scatter", x=[float(poses[step, 0])], y=[float(poses[step, 1])], customdata=[length], mode="markers",
        name="v_j = squash(s_j)", marker=dict(symbol="diamond", size=14, color=WINNER, line=dict(width=1, color="#fafafa")),
        hovertemplate="v_j = squash(s_j): |v_j| = %{customdata:.3f}<extra></extra>",
    )  # fmt: skip
    label = []  # the iteration shown, in the top left corner of the fixed axes
    if r > 1:
        label.append(dict(
            type="scatter", x=[ranges[0][0]], y=[ranges[1][1]], text=[f"iteration {step + 1} of {r}"], mode="text",
            textposition="bottom right", showlegend=False, hoverinfo="skip", textfont=dict(size=13, color="#fafafa"),
        ))  # fmt: skip
    ring = [] if selected is None else _ring(float(points[selected, 0]), float(points[selected, 1]))
    axis = dict(zeroline=True, zerolinecolor="#3a4150", autorange=False)
    # the whole figure in one construction: each update_* call would validate it again
    return go.Figure(
        data=[votes, sum_mark, pose_mark, *label, *ring],
        layout=dict(
            height=height,
            margin=dict(l=78, r=88, t=70, b=114),  # room for the axis titles, colour bar and legend (`style.layout`)
            title=dict(text=f"Votes for capsule {name}", x=0.0, xanchor="left"),
            legend=dict(orientation="h", y=-0.2),
            xaxis=dict(axis, title=dict(text="along v_j: agreement / |v_j|"), range=ranges[0]),
            yaxis=dict(axis, title=dict(text="across: the votes' main spread"), range=ranges[1]),
        ),
    )


def coupling_distribution_figure(coupling: np.ndarray, name: str, num_classes: int, height: int = 320) -> go.Figure:
    """How the N couplings to one capsule are spread, one box per iteration: (r, N)."""
    coupling = np.asarray(coupling, dtype=np.float32)
    r = coupling.shape[0]
    boxes = [
        dict(
            type="box", y=coupling[t], name=f"iteration {t + 1}", boxpoints="outliers", marker=dict(size=3, color=OTHER),
            line=dict(color=WINNER if t == r - 1 else OTHER), showlegend=False, hovertemplate="c = %{y:.3f}<extra></extra>",
        )
        for t in range(r)
    ]  # fmt: skip
    uniform = dict(
        type="line", xref="x domain", x0=0, x1=1, yref="y", y0=1.0 / num_classes, y1=1.0 / num_classes,
        line=dict(color="#fafafa", dash="dot", width=1),
    )  # fmt: skip
    # the whole figure in one construction: each update_* call would validate it again
    return go.Figure(
        data=boxes,
        layout=dict(
            height=height,
            margin=dict(l=78, r=10, t=58, b=38),  # two title lines: a half-width chart cuts a long one
            title=dict(
                text=f"Couplings to capsule {name}, per iteration<br><sup>dotted: uniform 1/{num_classes}</sup>"
            ),
            shapes=[uniform],
            yaxis=dict(title=dict(text=f"c to capsule {name}"), rangemode="tozero"),
        ),
    )


LEAN_SCALE = 0.005  # the stroke maps' smallest colour scale (+-): a smaller lean is drawn near grey, as it is
VISIBLE_SHARE_CHANGE = 0.02  # a share that moves less than this over the iterations looks the same in stacked bars


def _share_change_figure(change: np.ndarray, class_names: Sequence[str], height: int) -> go.Figure:
    """Each capsule's change in share since iteration 1, in points, one bar per later iteration: (r, K)."""
    r = change.shape[0]
    bars = [
        dict(
            type="bar", x=list(map(str, class_names)), y=100 * change[t], name=f"iteration {t + 1}",
            marker=dict(color=OTHER if t < r - 1 else WINNER, opacity=0.45 + 0.55 * t / (r - 1)),
            hovertemplate=f"capsule %{{x}}, iteration {t + 1}: %{{y:+.2f}} points<extra></extra>",
        )
        for t in range(1, r)
    ]  # fmt: skip
    return go.Figure(
        data=bars,
        layout=dict(
            height=height,
            margin=dict(l=84, r=80, t=58, b=38),
            # short: a half-width chart at 1,100 px (each share within VISIBLE_SHARE_CHANGE: the caption says it)
            title=dict(text="Where the evidence goes<br><sup>change since iteration 1, in points</sup>"),
            barmode="group",
            legend=dict(title=dict(text="since iteration 1")),
            xaxis=dict(type="category", title=dict(text="capsule")),
            yaxis=dict(title=dict(text="change in share (points)"), zeroline=True, tickformat="+.2f"),
        ),
    )


def shows_share_changes(mass: np.ndarray) -> bool:
    """Whether the share chart shows each share's change since iteration 1 (no share moves by VISIBLE_SHARE_CHANGE,
    over more than one iteration) rather than the shares themselves."""
    return len(mass) > 1 and largest_share_change(mass) < VISIBLE_SHARE_CHANGE


def vote_share_figure(mass: np.ndarray, class_names: Sequence[str], height: int = 320) -> go.Figure:
    """The share of all the vote mass each digit capsule receives, per iteration: (r, K), stacked to 100%
    (the mass weighted by each primary capsule's length: `capsnet.readings.agreement.vote_mass`). Where no share
    moves by VISIBLE_SHARE_CHANGE (a trained network's couplings barely move: ten bands of 10% at every iteration),
    each share's change since iteration 1 instead."""
    share = vote_shares(mass)  # (r, K)
    r, k = share.shape
    if shows_share_changes(mass):
        return _share_change_figure(share - share[:1], class_names, height)
    winner = int(np.argmax(share[-1]))
    x = [f"iteration {t + 1}" for t in range(r)]
    bars = [
        dict(
            type="bar", x=x, y=share[:, j], name=str(class_names[j]),
            marker=dict(color=CLASS_COLOURS[j % len(CLASS_COLOURS)], line=dict(width=2 if j == winner else 0, color="#fafafa")),
            text=[f"{v:.0%}" if v >= 0.06 else "" for v in share[:, j]], textposition="inside",
            hovertemplate=f"capsule {class_names[j]}<br>%{{x}}: %{{y:.2%}} of the weighted votes<extra></extra>",
        )
        for j in range(k)
    ]  # fmt: skip
    return go.Figure(
        data=bars,
        layout=dict(
            height=height,
            margin=dict(l=84, r=80, t=40, b=38),
            title=dict(text="Where the evidence goes"),
            legend=dict(title=dict(text="capsule"), traceorder="normal"),
            barmode="stack",
            yaxis=dict(tickformat=".0%", range=[0, 1], title=dict(text="share of the votes, by |u_i|")),
        ),
    )


def _lean_layer(
    share: np.ndarray, ink: np.ndarray, class_names: Sequence[str], pair: tuple[int, int], see_through: float
) -> tuple[dict, str]:
    """The strokes coloured by how much more of their votes go to the pair's first capsule than to its second."""
    a, b = pair
    lean = share[..., a] - share[..., b]  # (H, W) > 0: more of the stroke's votes go to the first
    largest = float(np.abs(lean[ink]).max()) if ink.any() else 0.0
    reach = max(largest, LEAN_SCALE)  # leans of a thousandth stay grey, not one saturated colour
    top = dict(
        type="heatmap", z=np.where(ink, lean, np.nan).astype(np.float32), zmin=-reach, zmax=reach, zmid=0.0,
        colorscale=[[0.0, PAIR_GREEN], [0.5, "#9e9e9e"], [1.0, PAIR_RED]], opacity=0.95 - see_through, hoverongaps=False,
        colorbar=dict(title=dict(text=f"{class_names[a]} − {class_names[b]}"), thickness=10),
        hovertemplate="pixel (%{y}, %{x})<br>share to capsule " + str(class_names[a]) + " minus to "
                      + str(class_names[b]) + ": %{z:+.2%}<extra></extra>",
    )  # fmt: skip
    title = f"Which strokes vote for {class_names[a]} (red) or {class_names[b]} (green)"
    if largest < LEAN_SCALE:
        title += f"<br><sup>no stroke leans by {LEAN_SCALE:.1%} of its votes: routing barely split them</sup>"
    return top, title


def _class_layer(
    share: np.ndarray, ink: np.ndarray, class_names: Sequence[str], see_through: float
) -> tuple[dict, str]:
    """The strokes coloured by the class that most of their votes reach (a tie, as with uniform routing: grey)."""
    k = share.shape[-1]
    best = share.argmax(axis=-1)  # (H, W)
    lead = share.max(axis=-1) - 1.0 / k  # how far the top class is above uniform
    z = np.where(ink & (lead > 1e-4), best, np.nan).astype(np.float32)  # a tie (uniform routing) leans nowhere
    colours = [CLASS_COLOURS[j % len(CLASS_COLOURS)] for j in range(k)]
    top = dict(
        type="heatmap", z=z, zmin=-0.5, zmax=k - 0.5, colorscale=_discrete(colours), opacity=0.9 - see_through, hoverongaps=False,
        customdata=np.stack([np.round(share.max(axis=-1), 4), np.asarray(class_names, dtype=object)[best]], axis=-1),
        colorbar=dict(title=dict(text="votes for"), tickvals=list(range(k)), ticktext=list(class_names), thickness=10),
        hovertemplate="pixel (%{y}, %{x})<br>most of its votes go to capsule %{customdata[1]}"
                      " (%{customdata[0]:.1%})<extra></extra>",
    )  # fmt: skip
    return top, "Where each stroke votes"  # short: the chart is a third of the page


def _coupling_layer(
    share: np.ndarray, ink: np.ndarray, class_names: Sequence[str], digit: int, see_through: float
) -> tuple[dict, str]:
    """The strokes coloured by their coupling to capsule `digit`, from uniform."""
    change = share[..., digit] - 1.0 / share.shape[-1]
    reach = max(float(np.abs(change[ink]).max()) if ink.any() else 0.0, LEAN_SCALE)
    top = dict(
        type="heatmap", z=np.where(ink, change, np.nan).astype(np.float32), zmin=-reach, zmax=reach, zmid=0.0,
        colorscale=DIVERGING, opacity=0.95 - see_through, hoverongaps=False, colorbar=dict(title=dict(text="c − 1/K"), thickness=10),
        hovertemplate="pixel (%{y}, %{x})<br>coupling to capsule " + str(class_names[digit])
                      + ": %{z:+.3f} from uniform<extra></extra>",
    )  # fmt: skip
    return top, f"Each stroke's vote for {class_names[digit]}"


def vote_overlay_figure(
    image: np.ndarray,
    pixel_votes: np.ndarray,
    class_names: Sequence[str],
    digit: int | None = None,
    height: int = 360,
    box: tuple[int, int, int] | None = None,
    pair: tuple[int, int] | None = None,
) -> go.Figure:
    """The input, its strokes coloured by the digit capsule they vote for (or, with `digit`, by their coupling to it;
    with `pair`, the two capsules a MultiMNIST model read: red for the first, green for the second, as the redraw
    beside it colours them, by how much more of the stroke's votes go to one than to the other: a tie stays grey).

    pixel_votes (H, W, K): the vote mass reaching each capsule through each pixel (`capsnet.readings.agreement.pixel_votes`).
    Only ink is coloured, by the class with the most mass; ink where no class leads (uniform routing) stays grey.
    `box` (top, left, size): the receptive field of the selected primary capsule, outlined.
    """
    image = np.asarray(image, dtype=np.float32)
    votes = np.asarray(pixel_votes, dtype=np.float64)
    share = votes / np.maximum(votes.sum(axis=-1, keepdims=True), 1e-12)  # (H, W, K)
    ink = strokes(image)  # (H, W): a digit's ink, or the whole of a colour picture
    base = picture_trace(image)
    see_through = 0.45 if is_colour(image) else 0.0  # a photo stays visible under its colours
    if pair is not None:
        top, title = _lean_layer(share, ink, class_names, pair, see_through)
    elif digit is None:
        top, title = _class_layer(share, ink, class_names, see_through)
    else:
        top, title = _coupling_layer(share, ink, class_names, digit, see_through)
    hidden = dict(showticklabels=False, showgrid=False, zeroline=False)
    shapes = []
    if box is not None:
        row, col, size = box
        bottom, right = min(row + size, image.shape[0]), min(col + size, image.shape[1])
        shapes.append(dict(
            type="rect", x0=col - 0.5, x1=right - 0.5, y0=row - 0.5, y1=bottom - 0.5,
            line=dict(color="#fafafa", width=2, dash="dot"), name="receptive field",
        ))  # fmt: skip
    return go.Figure(
        data=[base, top],
        layout=dict(
            height=height,
            margin=dict(l=18, r=92, t=40, b=18),  # room for the colour bar: no second layout (see `style.layout`)
            shapes=shapes,
            title=dict(text=title),
            xaxis=dict(hidden, constrain="domain"),
            yaxis=dict(hidden, autorange="reversed", scaleanchor="x"),
        ),
    )


PAIR_RED, PAIR_GREEN = "#ff4b4b", "#21c354"  # the redraw's two digits (`images.segmentation_image`: red, green)


def _discrete(colours: list[str]) -> list[list]:
    """A colour scale with one flat band per class (for integer z from 0 to len(colours) - 1)."""
    k = len(colours)
    scale: list[list] = []
    for j, colour in enumerate(colours):
        scale += [[j / k, colour], [(j + 1) / k, colour]]
    return scale


def primary_coupling_figure(
    coupling: np.ndarray,
    agreement: np.ndarray,
    class_names: Sequence[str],
    title: str,
    step: int,
    height: int = 320,
    uniform: float | None = None,
) -> go.Figure:
    """One primary capsule's couplings c_ij to every digit capsule, one group of bars per iteration up to `step`.

    coupling and agreement (r, K) (`capsnet.readings.agreement.primary_reading`); the dotted line is uniform routing,
    `uniform` (1/K by default; 1/(K+1) with "none of the above", `Votes.uniform`).
    """
    coupling, agreement = np.asarray(coupling, np.float32), np.asarray(agreement, np.float32)
    r, k = coupling.shape
    uniform = 1.0 / k if uniform is None else uniform
    shown = int(np.clip(step, 0, r - 1)) + 1
    names = list(class_names)
    bars = [
        dict(
            type="bar", x=names, y=coupling[t], name=f"iteration {t + 1}", customdata=agreement[t],
            marker=dict(color=WINNER if t == shown - 1 else OTHER, opacity=0.35 + 0.65 * (t + 1) / shown),
            hovertemplate="capsule %{x}<br>c = %{y:.3f}<br>agreement û·v after it = %{customdata:.3f}<extra></extra>",
        )
        for t in range(shown)
    ]  # fmt: skip
    return go.Figure(
        data=bars,
        layout=dict(
            height=height,
            margin=dict(l=60, r=20, t=48, b=60),
            title=dict(text=title, x=0.0, xanchor="left"),
            barmode="group",
            xaxis=dict(title=dict(text="digit capsule j"), type="category"),
            yaxis=dict(title=dict(text="coupling c_ij"), rangemode="tozero"),
            shapes=[
                dict(
                    type="line",
                    xref="paper",
                    x0=0,
                    x1=1,
                    y0=uniform,
                    y1=uniform,
                    line=dict(color="#8a93a6", dash="dot", width=1),
                )
            ],  # fmt: skip
            legend=dict(orientation="h", y=-0.25),
        ),
    )
