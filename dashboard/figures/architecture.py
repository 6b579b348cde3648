"""The network as a diagram of its stages, and what each stage computes on one input.

Each figure is written as one plain dict and handed to `go.Figure` once: plotly validates it a
single time (`update_layout`, `add_shape` and `make_subplots` validate again at every call, which
made a click on the page cost several times the 50 ms budget; `benchmarks/bench_architecture.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from capsnet.readings.stages import Stage
from dashboard.figures.agreement import DIVERGING
from dashboard.figures.images import is_colour, picture_trace, tile_maps
from dashboard.figures.style import OTHER, WINNER

CHOSEN = WINNER  # the stage shown below the diagram
STAGE = "#dfe5ee"  # the others
FIELD = "#ff4b4b"  # the receptive field's and the Conv1 window's outline
ACTIVATION = "Viridis"
HIDDEN = dict(visible=False, fixedrange=True)


def shape_text(shape: Sequence[int]) -> str:
    """(256, 20, 20) -> "256 x 20 x 20"; (1152, 8) -> "1,152 x 8"."""
    return " x ".join(f"{s:,}" for s in shape)


def _figure(data: list[dict], height: int, margin: dict[str, int], **layout: Any) -> go.Figure:
    """One figure from plain dicts, validated once."""
    return go.Figure(dict(data=data, layout=dict(height=height, margin=margin, **layout)))


def _title(text: str) -> dict:
    return dict(text=text, font=dict(size=13))


def _rect(x0: float, x1: float, y0: float, y1: float, width: float = 2, **refs: str) -> dict:
    return dict(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line=dict(color=FIELD, width=width), **refs)


def diagram_figure(stages: Sequence[Stage], chosen: str, height: int = 300) -> go.Figure:
    """The stages as a row of boxes joined by arrows, `chosen` highlighted; a click on a box selects it.

    The boxes are the bars of one bar trace whose customdata is each stage's key, so that a
    selection event (`st.plotly_chart(on_select=...)`) names the stage clicked. Each box shows the
    stage's name, its output's shape and its parameter count; hovering it lists the tensors on the way.
    """
    keys = [s.key for s in stages]
    if chosen not in keys:
        raise ValueError(f"unknown stage {chosen!r}; choose from {', '.join(keys)}")
    count = len(stages)
    texts = [
        f"<b>{s.title}</b><br>{shape_text(s.shape)}<br>"  # the count over its noun: a box is a sixth of the page
        + (f"{s.parameters:,}<br>parameters" if s.parameters else "no<br>parameters")
        for s in stages
    ]
    hover = [
        f"<b>{s.title}</b>: {s.operation}<br>"
        + "<br>".join(f"{name}: ({', '.join(map(str, shape))})" for name, shape in s.steps)
        + "<br><i>click to see its computation</i>"
        for s in stages
    ]
    bars = dict(
        type="bar",
        x=list(range(count)),
        y=[1.0] * count,
        width=0.72,
        customdata=keys,
        text=texts,
        textposition="inside",
        insidetextanchor="middle",
        textangle=0,
        textfont=dict(size=13, color=["white" if k == chosen else "#262730" for k in keys]),
        marker=dict(color=[CHOSEN if k == chosen else STAGE for k in keys], line=dict(color=OTHER, width=1)),
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
        selected=dict(marker=dict(opacity=1)),
        unselected=dict(marker=dict(opacity=1)),
    )
    # the arrows and the captions as two traces, not 2 x 6 annotations: a third of the time to build and send
    arrows = dict(
        type="scatter",
        x=[v for i in range(count - 1) for v in (i + 0.36, i + 0.62, None)],
        y=[v for _ in range(count - 1) for v in (0.5, 0.5, None)],
        mode="lines+markers",
        line=dict(color=OTHER, width=2),
        marker=dict(symbol="arrow", angleref="previous", size=[0, 11, 0] * (count - 1), color=OTHER),
        hoverinfo="skip",
    )
    captions = dict(
        type="scatter",
        x=list(range(count)),
        y=[-0.06] * count,
        mode="text",
        text=[_wrap(s.operation, 17) for s in stages],  # as wide as a box at 1,100 px
        textposition="bottom center",
        textfont=dict(size=11),
        hoverinfo="skip",
    )
    return _figure(
        [bars, arrows, captions],
        height,
        dict(l=0, r=0, t=0, b=0),
        xaxis=dict(HIDDEN, range=[-0.5, count - 0.5]),
        yaxis=dict(HIDDEN, range=[-0.78, 1.02]),  # under the boxes, captions of up to six lines
        showlegend=False,
        bargap=0.0,
        clickmode="event+select",
        dragmode=False,
        uniformtext=dict(minsize=10, mode="show"),
    )


def _wrap(text: str, width: int) -> str:
    """Break `text` at spaces into lines of about `width` characters, joined by <br>."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def feature_maps_figure(
    maps: np.ndarray,
    channels: Sequence[int] | np.ndarray,
    window: tuple[int, int] | None,
    kernel: int,
    height: int = 420,
    name: str = "map",
    scale: str = "ReLU(a)",
) -> go.Figure:
    """Some of Conv1's feature maps (M, S, S), tiled, each labelled with its channel on hover (`name` and `scale`
    say what the maps are: the EM network's capsule types' activations are tiled the same way).

    `window` (row, column): the top-left corner of the kernel x kernel patch that the chosen primary
    capsule reads, outlined on every map.
    """
    maps = np.asarray(maps, dtype=np.float32)
    count, side, _ = maps.shape
    if len(channels) != count:
        raise ValueError(f"{count} maps but {len(channels)} channel numbers")
    columns = int(np.ceil(np.sqrt(count)))
    gap = 2
    tiles = tile_maps(maps, columns=columns, gap=gap)  # (rows*(S+gap)-gap, cols*(S+gap)-gap)
    cell = side + gap
    number = np.full((-(-count // columns) * columns,), -1, dtype=np.int32)
    number[:count] = np.asarray(channels, dtype=np.int32) + 1
    numbers = np.broadcast_to(number[:, None, None], (number.size, side, side))  # each map's number on its pixels
    channel = tile_maps(numbers, columns=columns, gap=gap)  # laid out as the maps are
    data: list[dict] = []
    if window is not None:  # one outline per map, drawn as one trace (16 shapes cost more than the maps)
        rows, cols = np.divmod(np.arange(count), columns)  # (M,) each
        left, top = cols * cell + window[1] - 0.5, rows * cell + window[0] - 0.5  # (M,)
        xs = np.stack([left, left + kernel, left + kernel, left, left, np.full(count, np.nan)], axis=1)  # (M, 6)
        ys = np.stack([top, top, top + kernel, top + kernel, top, np.full(count, np.nan)], axis=1)  # (M, 6)
        data.append(dict(type="scatter", x=xs.ravel(), y=ys.ravel(), mode="lines", line=dict(color=FIELD, width=1.5),
                         hoverinfo="skip", showlegend=False))  # fmt: skip
    heatmap = dict(
        type="heatmap",
        z=tiles,
        customdata=np.nan_to_num(channel, nan=-1).astype(np.int32),
        colorscale=ACTIVATION,
        zmin=0.0,
        colorbar=dict(title=dict(text=scale), thickness=12),
        hovertemplate=f"{name} %{{customdata}}<br>activation %{{z:.3f}}<extra></extra>",
        hoverongaps=False,
    )
    return _figure(
        [heatmap, *data],
        height,
        dict(l=0, r=0, t=10, b=0),
        xaxis=dict(visible=False, constrain="domain"),
        yaxis=dict(visible=False, autorange="reversed", scaleanchor="x"),
    )


def receptive_field_figure(image: np.ndarray, field: np.ndarray, title: str, height: int = 300) -> go.Figure:
    """The input, dimmed outside a primary capsule's receptive field `field` (H, W) bool, which is outlined."""
    image = np.asarray(image, dtype=np.float32)
    field = np.asarray(field, dtype=bool)
    if image.shape[:2] != field.shape:
        raise ValueError(f"image {image.shape} and field {field.shape} differ")
    rows, cols = np.nonzero(field)
    shapes = [_rect(cols.min() - 0.5, cols.max() + 0.5, rows.min() - 0.5, rows.max() + 0.5)] if rows.size else []
    dimmed = np.where(field, 1.0, 0.35).astype(np.float32)  # (H, W)
    dimmed = dimmed[..., None] if is_colour(image) else dimmed  # (H, W, 1) in colour: each channel alike
    return _figure(
        [picture_trace(image * dimmed, hover="pixel (%{y}, %{x})<extra></extra>")],
        height,
        dict(l=0, r=0, t=30, b=0),
        title=_title(title),
        shapes=shapes,
        xaxis=dict(visible=False, constrain="domain"),
        yaxis=dict(visible=False, autorange="reversed", scaleanchor="x"),
    )


def grid_lengths_figure(lengths: np.ndarray, y: int, x: int, title: str, height: int = 300) -> go.Figure:
    """One capsule type's lengths on its G x G grid, the chosen position (y, x) outlined."""
    lengths = np.asarray(lengths, dtype=np.float32)
    side = lengths.shape[0]
    heatmap = dict(
        type="heatmap",
        z=lengths,
        colorscale=ACTIVATION,
        zmin=0.0,
        zmax=1.0,
        colorbar=dict(title=dict(text="|u|"), thickness=12),
        hovertemplate="position (%{y}, %{x})<br>|u| = %{z:.3f}<extra></extra>",
    )
    return _figure(
        [heatmap],
        height,
        dict(l=40, r=10, t=30, b=40),
        title=_title(title),
        shapes=[_rect(x - 0.5, x + 0.5, y - 0.5, y + 0.5, width=3)],
        xaxis=dict(constrain="domain", dtick=1, title=dict(text="x"), range=[-0.5, side - 0.5]),
        # both axes keep their range and the plot shrinks to a square (a tall plot widened y to -7..12 on 6x6)
        yaxis=dict(scaleanchor="x", constrain="domain", dtick=1, title=dict(text="y"), range=[side - 0.5, -0.5]),
    )


def pose_figure(pose: np.ndarray, title: str, height: int = 300) -> go.Figure:
    """A capsule's pose vector as one bar per dimension."""
    pose = np.asarray(pose, dtype=np.float32).reshape(-1)
    bars = dict(
        type="bar",
        x=[str(d + 1) for d in range(pose.size)],
        y=pose,
        marker=dict(color=[WINNER if v >= 0 else OTHER for v in pose]),
        hovertemplate="dimension %{x}<br>%{y:.3f}<extra></extra>",
    )
    return _figure(
        [bars],
        height,
        dict(l=40, r=10, t=30, b=40),
        title=_title(title),
        xaxis=dict(type="category", title=dict(text="dimension")),
    )


def matrix_product_figure(weight: np.ndarray, pose: np.ndarray, vote: np.ndarray, height: int = 380) -> go.Figure:
    """W_ij u_i = u_hat_{j|i} drawn as the product it is: the D x P matrix, the P-vector, the D-vector."""
    weight, pose, vote = (np.asarray(a, dtype=np.float32) for a in (weight, pose, vote))
    d, p = weight.shape
    if pose.shape != (p,) or vote.shape != (d,):
        raise ValueError(
            f"W is {weight.shape}: needs u of ({p},) and u_hat of ({d},), got {pose.shape} and {vote.shape}"
        )
    # three panels side by side, as wide as their columns (the vectors a little wider, for their numbers)
    widths = np.array([p, 1.6, 1.6], dtype=float)
    spans = np.concatenate([[0.0], np.cumsum(widths / widths.sum() * (1 - 2 * 0.06))])
    domains = [[spans[i] + 0.06 * i, spans[i + 1] + 0.06 * i] for i in range(3)]
    data, layout, notes = [], {}, []
    panels = (
        (weight, "W", f"W_ij ({d}x{p})"),
        (pose[:, None], "u", f"u_i ({p})"),
        (vote[:, None], "û", f"û_j|i ({d})"),
    )
    for i, (z, name, title) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        reach = max(float(np.abs(z).max()), 1e-6)
        data.append(
            dict(
                type="heatmap", z=z, zmin=-reach, zmax=reach, zmid=0.0, colorscale=DIVERGING, showscale=False,
                xaxis=f"x{axis}", yaxis=f"y{axis}", texttemplate=None if i == 0 else "%{z:.2f}",
                hovertemplate=f"{name}[%{{y}}, %{{x}}] = %{{z:.3f}}<extra></extra>" if i == 0
                else f"{name}[%{{y}}] = %{{z:.3f}}<extra></extra>",
            )
        )  # fmt: skip
        layout[f"xaxis{axis}"] = dict(domain=domains[i], anchor=f"y{axis}", showgrid=False, showticklabels=i == 0,
                                      dtick=1)  # fmt: skip
        layout[f"yaxis{axis}"] = dict(anchor=f"x{axis}", autorange="reversed", showgrid=False, dtick=1,
                                      showticklabels=i == 0)  # fmt: skip
        notes.append(dict(text=title, x=sum(domains[i]) / 2, y=1.0, xref="paper", yref="paper", xanchor="center",
                          yanchor="bottom", showarrow=False, font=dict(size=13)))  # fmt: skip
    return _figure(data, height, dict(l=30, r=10, t=30, b=20), annotations=notes, **layout)


def vote_lengths_figure(lengths: np.ndarray, names: Sequence[str], digit: int, height: int = 260) -> go.Figure:
    """|u_hat_{j|i}| of one primary capsule's votes for every digit capsule, the chosen one highlighted."""
    return lengths_figure(
        lengths, names, digit, "digit capsule j", "|û_j|i|", "vote for capsule %{x}<br>|û| = ", height
    )


def lengths_figure(
    lengths: np.ndarray, names: Sequence[str], chosen: int, x_title: str, y_title: str, hover: str, height: int = 260
) -> go.Figure:
    """One bar per capsule, its length, the `chosen` one highlighted; `hover` leads each bar's value."""
    lengths = np.asarray(lengths, dtype=np.float32)
    bars = dict(
        type="bar",
        x=list(names),
        y=lengths,
        marker=dict(color=[WINNER if j == chosen else OTHER for j in range(len(names))]),
        hovertemplate=hover + "%{y:.3f}<extra></extra>",
    )
    return _figure(
        [bars],
        height,
        dict(l=50, r=10, t=10, b=40),
        xaxis=dict(type="category", title=dict(text=x_title)),
        yaxis=dict(title=dict(text=y_title)),
    )


def routing_figure(coupling: np.ndarray, lengths: np.ndarray, names: Sequence[str], height: int = 300) -> go.Figure:
    """Left: one primary capsule's couplings c_ij per iteration (r, K); right: every |v_j| per iteration (r, K)."""
    coupling, lengths = np.asarray(coupling, dtype=np.float32), np.asarray(lengths, dtype=np.float32)
    r, k = coupling.shape
    if lengths.shape != (r, k) or len(names) != k:
        raise ValueError(f"shapes do not match: coupling {coupling.shape}, lengths {lengths.shape}, {len(names)} names")
    rows = [f"iteration {t + 1}" for t in range(r)]
    top = max(float(coupling.max()), 2.0 / k)  # couplings stay near 1/K in most trained networks: a scale to see them
    panels = (
        (coupling, "Blues", top, "c = %{z:.3f}", "couplings c_ij of capsule i", [0.0, 0.46]),
        (lengths, ACTIVATION, 1.0, "|v| = %{z:.3f}", "lengths |v_j|", [0.54, 1.0]),
    )
    data, notes = [], []
    layout: dict[str, Any] = {}
    for i, (z, scale, high, label, title, domain) in enumerate(panels):
        axis = "" if i == 0 else "2"
        data.append(
            dict(type="heatmap", z=z, x=list(names), y=rows, zmin=0.0, zmax=high, colorscale=scale, showscale=False,
                 texttemplate="%{z:.2f}", xaxis=f"x{axis}", yaxis=f"y{axis}",
                 hovertemplate=f"%{{y}}, capsule %{{x}}<br>{label}<extra></extra>")
        )  # fmt: skip
        layout[f"xaxis{axis}"] = dict(domain=domain, anchor=f"y{axis}", type="category",
                                      title=dict(text="digit capsule j"))  # fmt: skip
        layout[f"yaxis{axis}"] = dict(anchor=f"x{axis}", autorange="reversed", showticklabels=i == 0)
        notes.append(dict(text=title, x=sum(domain) / 2, y=1.0, xref="paper", yref="paper", xanchor="center",
                          yanchor="bottom", showarrow=False, font=dict(size=13)))  # fmt: skip
    return _figure(data, height, dict(l=80, r=10, t=30, b=40), annotations=notes, **layout)


def masked_figure(masked: np.ndarray, names: Sequence[str], kept: int, height: int = 300) -> go.Figure:
    """The decoder's input: the K x D capsules with every row but `kept` zeroed."""
    masked = np.asarray(masked, dtype=np.float32)
    reach = max(float(np.abs(masked).max()), 1e-6)
    heatmap = dict(
        type="heatmap", z=masked, y=[f"capsule {n}" for n in names], x=[str(d + 1) for d in range(masked.shape[1])],
        zmin=-reach, zmax=reach, zmid=0.0, colorscale=DIVERGING, colorbar=dict(thickness=12),
        hovertemplate="%{y}, dimension %{x}<br>%{z:.3f}<extra></extra>",
    )  # fmt: skip
    return _figure(
        [heatmap],
        height,
        dict(l=80, r=10, t=10, b=40),
        shapes=[_rect(0, 1, kept - 0.5, kept + 0.5, xref="x domain", yref="y")],
        xaxis=dict(type="category", title=dict(text="dimension")),
        yaxis=dict(type="category", autorange="reversed"),
    )
