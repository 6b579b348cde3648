"""Plotly figure builders for the dashboard: pure functions of arrays, no Streamlit calls.

Each builder takes NumPy arrays (as returned by `capsnet.explain`) and returns a
`plotly.graph_objects.Figure`, so tests can check them without a browser.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from PIL import Image
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from capsnet.explain import tile_columns, tile_maps

WINNER = "#ff4b4b"  # Streamlit's accent red: the winning capsule
OTHER = "#7f8ea3"
MARGIN_PLUS = "#21c354"
MARGIN_MINUS = "#ffa421"
RUN_COLOURS = qualitative.Plotly


def _layout(fig: go.Figure, height: int, **extra: Any) -> go.Figure:
    extra.setdefault("margin", dict(l=10, r=10, t=40, b=10))
    fig.update_layout(height=height, **extra)
    return fig


MARGIN_LABEL_SPACE = 64  # px right of the plot area for the margin labels


def _margin_marks(m_plus: float, m_minus: float, axis: str = "") -> tuple[list[dict], list[dict]]:
    """Dashed lines at m+ and m- across the plot on axes x{axis}/y{axis}, as (shapes, annotations) for a layout.

    Plain shapes are much cheaper than add_hline. Their labels sit just right of the plot area, at
    the end of each line, where no bar label or curve can reach them; the figure needs
    MARGIN_LABEL_SPACE px of room there.
    """
    shapes: list[dict] = []
    notes: list[dict] = []
    for y, colour, text in ((m_plus, MARGIN_PLUS, f"m⁺ = {m_plus}"), (m_minus, MARGIN_MINUS, f"m⁻ = {m_minus}")):
        shapes.append(
            dict(
                type="line",
                xref=f"x{axis} domain",
                yref=f"y{axis}",
                x0=0,
                x1=1,
                y0=y,
                y1=y,
                line=dict(color=colour, dash="dash", width=1.5),
            )
        )
        notes.append(
            dict(
                xref=f"x{axis} domain",
                yref=f"y{axis}",
                x=1,
                y=y,
                xshift=4,
                text=text,
                showarrow=False,
                xanchor="left",
                yanchor="middle",
                font=dict(size=11, color=colour),
            )
        )
    return shapes, notes


def _margin_lines(fig: go.Figure, m_plus: float, m_minus: float, axis: str = "") -> None:
    """Add the margin marks of `_margin_marks` to `fig`."""
    shapes, notes = _margin_marks(m_plus, m_minus, axis)
    fig.update_layout(
        shapes=[*(fig.layout.shapes or ()), *shapes], annotations=[*(fig.layout.annotations or ()), *notes]
    )


def lengths_bar(
    lengths: np.ndarray,
    class_names: Sequence[str],
    prediction: int | None = None,
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 320,
    compact: bool = False,
) -> go.Figure:
    """Bar chart of the K digit-capsule lengths |v_j|, the winner highlighted, margins 0.9 and 0.1 marked."""
    lengths = np.asarray(lengths, dtype=float).reshape(-1)
    if len(lengths) != len(class_names):
        raise ValueError(f"{len(lengths)} lengths but {len(class_names)} class names")
    winner = int(np.argmax(lengths)) if prediction is None else int(prediction)
    colours = [WINNER if k == winner else OTHER for k in range(len(lengths))]
    fig = go.Figure(
        go.Bar(
            x=list(class_names),
            y=lengths,
            marker_color=colours,
            text=[f"{v:.2f}" for v in lengths],
            textposition="outside",
            hovertemplate="capsule %{x}<br>|v| = %{y:.3f}<extra></extra>",
            name="|v|",
        )
    )
    if not compact:
        _margin_lines(fig, m_plus, m_minus)
    fig.update_yaxes(range=[0, 1.08], title=None if compact else "capsule length |v|")
    fig.update_xaxes(type="category", title=None if compact else "digit capsule")
    return _layout(
        fig,
        height,
        showlegend=False,
        title=None if compact else "Digit-capsule lengths: the probability that each class is present",
        margin=dict(l=10, r=10 if compact else MARGIN_LABEL_SPACE, t=10 if compact else 40, b=10),
    )


def _play_controls(
    names: Sequence[str],
    active: int,
    label: str,
    duration: int = 900,
    slider_y: float = -0.13,
    buttons_y: float = -0.2,
    slider_x: float = 0.18,
) -> dict[str, Any]:
    """Plotly updatemenus (play / pause) and a slider over the frames called `names`.

    `slider_y` and `buttons_y` are their tops, as fractions of the plot area's height below its bottom;
    the slider spans from `slider_x` (a fraction of the plot area's width) to the right edge.
    """
    step_args = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))
    return dict(
        updatemenus=[
            dict(
                type="buttons",
                direction="left",
                showactive=False,
                x=0.0,
                y=buttons_y,
                xanchor="left",
                yanchor="top",
                pad=dict(t=0, r=10),
                buttons=[
                    dict(
                        label="▶ Play",
                        method="animate",
                        args=[
                            list(names),
                            dict(
                                frame=dict(duration=duration, redraw=True),
                                transition=dict(duration=250),
                                mode="immediate",
                            ),
                        ],
                    ),
                    dict(
                        label="❚❚ Pause",
                        method="animate",
                        args=[[None], dict(mode="immediate", frame=dict(duration=0, redraw=False))],
                    ),
                ],
            )
        ],
        sliders=[
            dict(
                active=active,
                x=slider_x,
                len=1.0 - slider_x,
                y=slider_y,
                yanchor="top",
                currentvalue=dict(prefix=f"{label}: ", visible=True),
                steps=[dict(label=name, method="animate", args=[[name], step_args]) for name in names],
            )
        ],
    )


def routing_animation(
    by_type: np.ndarray,
    iteration_lengths: np.ndarray,
    class_names: Sequence[str],
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 620,
) -> go.Figure:
    """Routing by agreement, one frame per iteration.

    Left: coupling c_ij aggregated per primary-capsule type (types x K heatmap);
    right: the digit-capsule lengths after that iteration. Play/pause buttons and
    a slider run in the browser; the figure opens on the last iteration.
    """
    by_type = np.asarray(by_type, dtype=float)
    iteration_lengths = np.asarray(iteration_lengths, dtype=float)
    r, types, k = by_type.shape
    if iteration_lengths.shape != (r, k) or len(class_names) != k:
        raise ValueError(
            f"shapes do not match: coupling {by_type.shape}, lengths {iteration_lengths.shape}, {len(class_names)} names"
        )
    names = [str(t + 1) for t in range(r)]
    x = list(class_names)
    y = [f"type {t + 1}" for t in range(types)]
    zmax = max(float(by_type.max()), 1.0 / k + 0.05)

    def heatmap(t: int) -> go.Heatmap:
        return go.Heatmap(
            z=by_type[t],
            x=x,
            y=y,
            zmin=0.0,
            zmax=zmax,
            colorscale="Viridis",
            colorbar=dict(title="c", x=0.51, len=0.9, thickness=12),
            hovertemplate="%{y} → capsule %{x}<br>c = %{z:.3f}<extra></extra>",
        )

    def bars(t: int) -> go.Bar:
        lengths = iteration_lengths[t]
        winner = int(np.argmax(lengths))
        return go.Bar(
            x=x,
            y=lengths,
            marker_color=[WINNER if j == winner else OTHER for j in range(k)],
            text=[f"{v:.2f}" for v in lengths],
            textposition="outside",
            hovertemplate="capsule %{x}<br>|v| = %{y:.3f}<extra></extra>",
        )

    last = r - 1

    def frame(t: int) -> go.Frame:
        # a frame carries only what changes; plotly.js merges it into the traces
        lengths = iteration_lengths[t]
        winner = int(np.argmax(lengths))
        return go.Frame(
            data=[
                go.Heatmap(z=by_type[t]),
                go.Bar(
                    y=lengths,
                    marker_color=[WINNER if j == winner else OTHER for j in range(k)],
                    text=[f"{v:.2f}" for v in lengths],
                ),
            ],
            traces=[0, 1],
            name=names[t],
        )

    # the whole layout in one go: each later update_layout would re-validate all of it (tens of ms)
    margin_shapes, margin_notes = _margin_marks(m_plus, m_minus, axis="2")
    return go.Figure(
        data=[heatmap(last), bars(last).update(xaxis="x2", yaxis="y2")],
        frames=[frame(t) for t in range(r)],
        layout=dict(
            height=height,
            margin=dict(l=10, r=MARGIN_LABEL_SPACE, t=40, b=130),
            showlegend=False,
            shapes=margin_shapes,
            **_play_controls(names, last, "iteration"),
            xaxis=dict(domain=[0.0, 0.5], type="category", title="digit capsule"),
            yaxis=dict(autorange="reversed"),
            xaxis2=dict(domain=[0.64, 1.0], type="category", title="digit capsule", anchor="y2"),
            yaxis2=dict(range=[0, 1.1], anchor="x2"),
            annotations=[
                *(
                    dict(
                        text=text,
                        x=x,
                        y=1.0,
                        xref="paper",
                        yref="paper",
                        showarrow=False,
                        yanchor="bottom",
                        font=dict(size=14),
                    )
                    for text, x in (("Coupling c per primary-capsule type", 0.25), ("Digit-capsule lengths |v|", 0.82))
                ),
                *margin_notes,
            ],
        ),
    )


def _tile_hover(types: int, grid: int, columns: int) -> np.ndarray:
    """Type number (1-based) of each cell of a tiled map, NaN in the gaps."""
    ids = np.broadcast_to(np.arange(1, types + 1, dtype=np.float32)[:, None, None], (types, grid, grid))
    return tile_maps(ids, columns)


TILE_TOP, TILE_BOTTOM, TILE_SIDES = 40, 10, 100  # px around tiled maps: title, nothing, margins + colour bar
CONTROLS_HEIGHT = 142  # px under an animated figure for its slider and, under that, its play buttons
SLIDER_BELOW, BUTTONS_BELOW = 6, 106  # px from the plot area's bottom to the slider's and the buttons' tops


def _tiled_height(tiles: np.ndarray, width: int, bottom: int) -> tuple[int, int]:
    """(figure height, plot-area height) that show tiled maps (..., H, W) with square cells in a `width` px figure."""
    rows, cols = tiles.shape[-2:]
    plot = int(np.clip(round((width - TILE_SIDES) * rows / cols), 80, 900))
    return TILE_TOP + plot + bottom, plot


def _square_cells(fig: go.Figure) -> None:
    """Square cells, the blocks top to bottom, no ticks; a narrower container trims the sides, not the height."""
    fig.update_yaxes(
        autorange="reversed", showticklabels=False, scaleanchor="x", constrain="domain", showgrid=False, zeroline=False
    )
    fig.update_xaxes(showticklabels=False, constrain="domain", showgrid=False, zeroline=False)


def coupling_maps_figure(
    maps: np.ndarray, digit_name: str, columns: int | None = None, width: int = 560, height: int | None = None
) -> go.Figure:
    """Coupling of every primary capsule to one digit capsule, as a grid of types x (6x6 positions), one frame per iteration.

    The blocks are laid out about twice as wide as tall (`tile_columns`) and, unless `height` is
    given, the figure is as tall as they need in a figure about `width` px wide: no empty band.
    """
    maps = np.asarray(maps, dtype=np.float32)
    r, types, grid, _ = maps.shape
    columns = columns or tile_columns(types)
    tiles = tile_maps(maps, columns)  # (r, H, W)
    type_ids = _tile_hover(types, grid, columns)  # (H, W)
    names = [str(t + 1) for t in range(r)]
    finite = maps[np.isfinite(maps)]
    zmax = max(float(finite.max()) if finite.size else 1.0, 0.15)
    customdata = np.stack([type_ids, *np.indices(type_ids.shape) % (grid + 1)], axis=-1)  # (H, W, 3): type, y, x

    def heatmap(t: int) -> go.Heatmap:
        return go.Heatmap(
            z=tiles[t],
            zmin=0.0,
            zmax=zmax,
            colorscale="Viridis",
            customdata=customdata,
            colorbar=dict(title="c"),
            hoverongaps=False,
            xgap=0,
            ygap=0,
            hovertemplate=f"type %{{customdata[0]}}, position (%{{customdata[1]}}, %{{customdata[2]}})<br>c to {digit_name} = %{{z:.3f}}<extra></extra>",
        )

    auto_height, plot = _tiled_height(tiles, width, CONTROLS_HEIGHT)
    if height is not None:
        plot = max(height - TILE_TOP - CONTROLS_HEIGHT, 1)
    frames = [go.Frame(data=[go.Heatmap(z=tiles[t])], traces=[0], name=names[t]) for t in range(r)]  # only z changes
    fig = go.Figure(heatmap(r - 1), frames=frames)
    _square_cells(fig)
    fig.update_layout(
        # the slider across the whole width, the buttons under it: side by side they would overlap in a narrow column
        **_play_controls(
            names, r - 1, "iteration", slider_y=-SLIDER_BELOW / plot, buttons_y=-BUTTONS_BELOW / plot, slider_x=0.0
        ),
        title=f"Coupling to capsule {digit_name}: one {grid}x{grid} block per type",
    )
    return _layout(fig, height or auto_height, margin=dict(l=10, r=10, t=TILE_TOP, b=CONTROLS_HEIGHT))


def iteration_lengths_figure(
    iteration_lengths: np.ndarray,
    class_names: Sequence[str],
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 320,
) -> go.Figure:
    """Each digit capsule's length after each routing iteration (lines), the final winner drawn thick."""
    lengths = np.asarray(iteration_lengths, dtype=float)
    r, k = lengths.shape
    if len(class_names) != k:
        raise ValueError(f"{k} capsules but {len(class_names)} class names")
    winner = int(np.argmax(lengths[-1]))
    fig = go.Figure()
    iterations = list(range(1, r + 1))
    for j in range(k):
        fig.add_trace(
            go.Scatter(
                x=iterations,
                y=lengths[:, j],
                mode="lines+markers",
                name=str(class_names[j]),
                line=dict(width=4 if j == winner else 1.5, color=WINNER if j == winner else None),
                opacity=1.0 if j == winner else 0.6,
                hovertemplate=f"capsule {class_names[j]}<br>iteration %{{x}}: |v| = %{{y:.3f}}<extra></extra>",
            )
        )
    _margin_lines(fig, m_plus, m_minus)
    fig.update_xaxes(title="routing iteration", tickmode="array", tickvals=iterations)
    fig.update_yaxes(title="|v|", range=[0, 1.05])
    # the legend at the figure's right edge, past the margin labels at the ends of the dashed lines
    return _layout(
        fig,
        height,
        title="Lengths after each iteration",
        legend=dict(title="capsule", xref="container", x=1.0, xanchor="right"),
        margin=dict(l=10, r=MARGIN_LABEL_SPACE + 70, t=40, b=10),
    )


def primary_lengths_figure(
    maps: np.ndarray, columns: int | None = None, width: int = 900, height: int | None = None
) -> go.Figure:
    """Lengths of all primary capsules (types x 6x6 grid), tiled: which parts of the image each type detected.

    Laid out and sized like `coupling_maps_figure` (for a figure about `width` px wide).
    """
    maps = np.asarray(maps, dtype=np.float32)
    types, grid, _ = maps.shape
    columns = columns or tile_columns(types)
    tiles = tile_maps(maps, columns)
    type_ids = _tile_hover(types, grid, columns)
    customdata = np.stack([type_ids, *np.indices(type_ids.shape) % (grid + 1)], axis=-1)
    fig = go.Figure(
        go.Heatmap(
            z=tiles,
            zmin=0.0,
            zmax=1.0,
            colorscale="Magma",
            customdata=customdata,
            hoverongaps=False,
            colorbar=dict(title="|u|"),
            hovertemplate="type %{customdata[0]}, position (%{customdata[1]}, %{customdata[2]})<br>|u| = %{z:.3f}<extra></extra>",
        )
    )
    _square_cells(fig)
    return _layout(
        fig,
        height or _tiled_height(tiles, width, TILE_BOTTOM)[0],
        title=f"Primary capsules: length of each of the {types * grid * grid} (one block per type)",
        margin=dict(l=10, r=10, t=TILE_TOP, b=TILE_BOTTOM),
    )


def _to_uint8(image: np.ndarray) -> np.ndarray:
    return (
        (np.clip(np.nan_to_num(np.asarray(image, dtype=np.float32), nan=0.35), 0.0, 1.0) * 255).round().astype(np.uint8)
    )


def pixel_image(image: np.ndarray, scale: int = 6) -> np.ndarray:
    """A small grey image in [0, 1] -> uint8, enlarged `scale` times with sharp pixels (for st.image)."""
    image = _to_uint8(image)
    return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)


def _png_data_url(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(_to_uint8(image)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _image_figure(image: np.ndarray, height: int) -> go.Figure:
    """A grey image as one PNG-encoded trace (light to send, unlike a heatmap of every pixel)."""
    fig = go.Figure(go.Image(source=_png_data_url(image), hoverinfo="skip"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, height)


def perturbation_figure(grid: np.ndarray, steps: Sequence[float], height: int = 760) -> go.Figure:
    """The paper's Figure 4: row d shows the reconstruction with dimension d moved by each step."""
    grid = np.asarray(grid, dtype=np.float32)
    dims, count, h, w = grid.shape
    if len(steps) != count:
        raise ValueError(f"{count} columns but {len(steps)} steps")
    gap = 2
    tiles = tile_maps(grid.reshape(dims * count, h, w), columns=count, gap=gap)  # (dims*(h+gap)-gap, count*(w+gap)-gap)
    fig = _image_figure(tiles, height)
    fig.update_xaxes(
        tickmode="array",
        tickvals=[c * (w + gap) + (w - 1) / 2 for c in range(count)],
        ticktext=[f"{s:+.2f}" for s in steps],
        side="top",
        showgrid=False,
        title="change added to the dimension",
    )
    fig.update_yaxes(
        tickmode="array",
        tickvals=[d * (h + gap) + (h - 1) / 2 for d in range(dims)],
        ticktext=[f"dim {d + 1}" for d in range(dims)],
        showgrid=False,
    )
    return fig


def image_rows_figure(rows: Sequence[np.ndarray], labels: Sequence[str], height: int | None = None) -> go.Figure:
    """Rows of 28x28 images (e.g. originals over their reconstructions), one labelled row each."""
    if len(rows) != len(labels) or not rows:
        raise ValueError("need one label per row and at least one row")
    stack = np.stack([np.asarray(r, dtype=np.float32) for r in rows])  # (R, n, h, w)
    count, n, h, w = stack.shape
    gap = 2
    tiles = tile_maps(stack.reshape(count * n, h, w), columns=n, gap=gap)
    fig = _image_figure(tiles, height or 60 + count * 70)
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_yaxes(
        tickmode="array",
        tickvals=[i * (h + gap) + (h - 1) / 2 for i in range(count)],
        ticktext=list(labels),
        showgrid=False,
    )
    return fig


def dimension_profile_figure(
    original: np.ndarray, edited: np.ndarray, low: np.ndarray, high: np.ndarray, height: int = 260
) -> go.Figure:
    """The 16 dimensions of the capsule: as read from the input, as edited, and the slider ranges."""
    original, edited = np.asarray(original, dtype=float), np.asarray(edited, dtype=float)
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    dims = [f"{d + 1}" for d in range(len(original))]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=dims, y=high - low, base=low, marker_color="rgba(127,142,163,0.25)", name="slider range", hoverinfo="skip"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=dims,
            y=original,
            mode="markers",
            marker=dict(size=11, symbol="line-ew-open", color=OTHER, line=dict(width=3)),
            name="from the input",
        )
    )
    fig.add_trace(go.Scatter(x=dims, y=edited, mode="markers", marker=dict(size=9, color=WINNER), name="edited"))
    fig.update_xaxes(type="category", title="dimension")
    fig.update_yaxes(title="value")
    return _layout(fig, height, legend=dict(orientation="h", y=1.12), barmode="overlay")


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
    return _layout(fig, height, legend=dict(orientation="h", y=-0.2), margin=dict(l=10, r=10, t=40, b=40))


def confusion_figure(confusion: np.ndarray, class_names: Sequence[str], height: int = 520) -> go.Figure:
    """Confusion matrix: rows true class, columns prediction; colour = share of the row, text = count."""
    counts = np.asarray(confusion, dtype=float)
    k = counts.shape[0]
    if counts.shape != (k, k) or len(class_names) != k:
        raise ValueError(f"expected a ({len(class_names)}, {len(class_names)}) matrix, got {counts.shape}")
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    names = list(class_names)
    fig = go.Figure(
        go.Heatmap(
            z=share,
            x=names,
            y=names,
            text=counts.astype(int),
            texttemplate="%{text}",
            colorscale="Blues",
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title="share", tickformat=".0%"),
            hovertemplate="true %{y}, predicted %{x}<br>%{text} examples (%{z:.1%} of the row)<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", title="true class", type="category")
    fig.update_xaxes(title="predicted class", type="category", side="top")
    return _layout(fig, height)


def per_class_accuracy_figure(accuracy: Sequence[float], class_names: Sequence[str], height: int = 300) -> go.Figure:
    """Accuracy of each class as bars, the weakest highlighted."""
    values = np.asarray(accuracy, dtype=float)
    if len(values) != len(class_names):
        raise ValueError(f"{len(values)} accuracies but {len(class_names)} class names")
    worst = int(np.argmin(values)) if len(values) else -1
    fig = go.Figure(
        go.Bar(
            x=list(class_names),
            y=values,
            marker_color=[WINNER if k == worst else OTHER for k in range(len(values))],
            text=[f"{100 * v:.1f}%" for v in values],
            textposition="outside",
            hovertemplate="%{x}: %{y:.2%}<extra></extra>",
        )
    )
    low = float(values.min()) if len(values) else 0.0
    fig.update_yaxes(range=[max(0.0, low - 0.1), 1.02], tickformat=".0%", title="accuracy")
    fig.update_xaxes(type="category")
    return _layout(fig, height, title="Accuracy per class (weakest in red)")
