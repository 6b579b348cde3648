"""Routing by agreement: coupling per type and per capsule, lengths per iteration, primary capsules."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dashboard.figures.agreement import DIVERGING
from dashboard.figures.images import tile_columns, tile_maps
from dashboard.figures.style import MARGIN_LABEL_SPACE, OTHER, WINNER, layout, margin_marks


def coupling_by_type_figure(
    by_type: np.ndarray,
    iteration_lengths: np.ndarray,
    class_names: Sequence[str],
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    height: int = 520,
    step: int | None = None,
    uniform: float | None = None,
) -> go.Figure:
    """Routing by agreement in iteration `step` (from 0; default the last), summed up per primary-capsule type.

    Left: coupling c_ij aggregated per type (types x K heatmap), as its change from uniform, c - 1/K (`uniform`: 1/K
    by default, 1/(K+1) with "none of the above"),
    on a diverging scale centred at 0 whose ends are the same for every iteration, so stepping
    through them compares like with like; right: the class-capsule lengths after that iteration.
    by_type (r, types, K), iteration_lengths (r, K).
    """
    by_type = np.asarray(by_type, dtype=np.float32)  # float32: half the bytes, more digits than the hover shows
    iteration_lengths = np.asarray(iteration_lengths, dtype=float)
    r, types, k = by_type.shape
    if iteration_lengths.shape != (r, k) or len(class_names) != k:
        raise ValueError(
            f"shapes do not match: coupling {by_type.shape}, lengths {iteration_lengths.shape}, {len(class_names)} names"
        )
    shown = r - 1 if step is None else int(np.clip(step, 0, r - 1))
    x = list(class_names)
    change = by_type - (1.0 / k if uniform is None else uniform)  # (r, types, K)
    reach = max(float(np.abs(change).max()), 1e-3)
    heatmap = dict(
        type="heatmap", z=change[shown], x=x, y=[f"type {t + 1}" for t in range(types)], zmin=-reach, zmax=reach,
        zmid=0.0, colorscale=DIVERGING, customdata=by_type[shown],
        colorbar=dict(title=dict(text="c − 1/K", side="top"), x=0.45, xanchor="left", len=0.9, thickness=12),
        hovertemplate="%{y} → capsule %{x}<br>c = %{customdata:.3f} (%{z:+.3f} from uniform)<extra></extra>",
    )  # fmt: skip
    lengths = iteration_lengths[shown]
    winner = int(np.argmax(lengths))
    bars = dict(
        type="bar", x=x, y=lengths, text=[f"{v:.2f}" for v in lengths], textposition="outside",
        marker=dict(color=[WINNER if j == winner else OTHER for j in range(k)]),
        hovertemplate="capsule %{x}<br>|v| = %{y:.3f}<extra></extra>", xaxis="x2", yaxis="y2",
    )  # fmt: skip
    suffix = f", iteration {shown + 1} of {r}" if r > 1 else ""
    titles = (("Coupling per type, c − 1/K" + suffix, 0.0), ("Capsule lengths |v|" + suffix, 0.62))
    # the whole layout in one go: each later update_layout would re-validate all of it (tens of ms)
    margin_shapes, margin_notes = margin_marks(m_plus, m_minus, axis="2")
    return go.Figure(
        data=[heatmap, bars],
        layout=dict(
            height=height,
            margin=dict(l=68, r=MARGIN_LABEL_SPACE, t=48, b=76),
            showlegend=False,
            shapes=margin_shapes,
            # the heatmap, its colour bar (with its ticks) and the bars each in a band of their own: nothing overprints
            xaxis=dict(domain=[0.0, 0.42], type="category", title="class capsule"),
            yaxis=dict(autorange="reversed"),
            xaxis2=dict(domain=[0.62, 1.0], type="category", title="class capsule", anchor="y2"),
            yaxis2=dict(range=[0, 1.1], anchor="x2"),
            annotations=[
                *(
                    dict(text=text, x=x0, y=1.0, xref="paper", yref="paper", showarrow=False, xanchor="left",
                         yanchor="bottom", font=dict(size=13))
                    for text, x0 in titles
                ),
                *margin_notes,
            ],
        ),
    )  # fmt: skip


def _tile_hover(types: int, grid: int, columns: int) -> np.ndarray:
    """Type number (1-based) of each cell of a tiled map, NaN in the gaps."""
    ids = np.broadcast_to(np.arange(1, types + 1, dtype=np.float32)[:, None, None], (types, grid, grid))
    return tile_maps(ids, columns)


TILE_TOP, TILE_BOTTOM, TILE_SIDES = 40, 10, 118  # px around tiled maps: title, nothing, margins + colour bar
TILE_LEFT = 18  # px left of tiled maps (the rest of TILE_SIDES is right, for the colour bar)


def _tiled_height(tiles: np.ndarray, width: int, bottom: int) -> tuple[int, int]:
    """(figure height, plot-area height) that show tiled maps (..., H, W) with square cells in a `width` px figure."""
    rows, cols = tiles.shape[-2:]
    plot = int(np.clip(round((width - TILE_SIDES) * rows / cols), 80, 900))
    return TILE_TOP + plot + bottom, plot


def _square_axes() -> dict[str, dict]:
    """Square cells, the blocks top to bottom, no ticks; a narrower container trims the sides, not the height."""
    hidden = dict(showticklabels=False, showgrid=False, zeroline=False, constrain="domain")
    return dict(xaxis=hidden, yaxis=dict(hidden, autorange="reversed", scaleanchor="x"))


def coupling_maps_figure(
    maps: np.ndarray,
    digit_name: str,
    columns: int | None = None,
    width: int = 560,
    height: int | None = None,
    num_classes: int = 10,
    step: int | None = None,
    selected: tuple[int, int, int] | None = None,
    uniform: float | None = None,
) -> go.Figure:
    """Coupling of every primary capsule to one digit capsule in iteration `step` (from 0; default the last), as a
    grid of types x (6x6 positions); maps (r, types, G, G).

    Shown as the change from uniform, c - 1/K (`uniform`: 1/(K+1) with "none of the above"), on a diverging scale
    centred at 0. The blocks are
    laid out about twice as wide as tall (`tile_columns`) and, unless `height` is given, the
    figure is as tall as they need in a figure about `width` px wide: no empty band. `selected`
    (type, y, x), all from 0: the selected primary capsule's cell, outlined (the linked views).
    """
    maps = np.asarray(maps, dtype=np.float32) - (1.0 / num_classes if uniform is None else uniform)
    r, types, grid, _ = maps.shape
    columns = columns or tile_columns(types)
    tiles = tile_maps(maps, columns)  # (r, H, W)
    type_ids = _tile_hover(types, grid, columns)  # (H, W)
    finite = maps[np.isfinite(maps)]
    reach = max(float(np.abs(finite).max()) if finite.size else 0.0, 1e-3)
    customdata = np.stack([type_ids, *np.indices(type_ids.shape) % (grid + 1)], axis=-1)  # (H, W, 3): type, y, x

    auto_height, _ = _tiled_height(tiles, width, TILE_BOTTOM)
    shown = r - 1 if step is None else int(np.clip(step, 0, r - 1))
    suffix = f", iteration {shown + 1} of {r}" if r > 1 else ""
    heatmap = dict(
        type="heatmap",
        z=tiles[shown],
        zmin=-reach,
        zmax=reach,
        zmid=0.0,
        colorscale=DIVERGING,
        customdata=customdata,
        colorbar=dict(title=dict(text="c − 1/K")),
        hoverongaps=False,
        xgap=0,
        ygap=0,
        hovertemplate=f"type %{{customdata[0]}}, position (%{{customdata[1]}}, %{{customdata[2]}})<br>c to {digit_name}: %{{z:+.3f}} from uniform<extra></extra>",
    )
    shapes = []
    if selected is not None:  # its cell in its type's block: blocks are (grid + 1) apart, `columns` to a row
        kind, y, x = selected
        top, left = (kind // columns) * (grid + 1) + y, (kind % columns) * (grid + 1) + x
        shapes.append(dict(type="rect", x0=left - 0.5, x1=left + 0.5, y0=top - 0.5, y1=top + 0.5,
                           line=dict(color="#fafafa", width=2), name="selected capsule"))  # fmt: skip
    # the whole figure in one construction: each update_* call would validate it again
    return go.Figure(
        data=[heatmap],
        layout=dict(
            shapes=shapes,
            height=height or auto_height,
            margin=dict(l=TILE_LEFT, r=TILE_SIDES - TILE_LEFT, t=TILE_TOP, b=TILE_BOTTOM),
            title=dict(text=f"Coupling to {digit_name}, c − 1/K{suffix}"),
            **_square_axes(),
        ),
    )


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
    iterations = list(range(1, r + 1))
    lines = [
        dict(
            type="scatter",
            x=iterations,
            y=lengths[:, j],
            mode="lines+markers",
            name=str(class_names[j]),
            line=dict(width=4, color=WINNER) if j == winner else dict(width=1.5),
            opacity=1.0 if j == winner else 0.6,
            hovertemplate=f"capsule {class_names[j]}<br>iteration %{{x}}: |v| = %{{y:.3f}}<extra></extra>",
        )
        for j in range(k)
    ]
    shapes, notes = margin_marks(m_plus, m_minus)
    # the whole figure in one construction (each update_* call would validate it again); the legend at the
    # figure's right edge, past the margin labels at the ends of the dashed lines
    return go.Figure(
        data=lines,
        layout=dict(
            height=height,
            margin=dict(l=72, r=MARGIN_LABEL_SPACE + 70, t=40, b=68),
            title=dict(text="Lengths after each iteration"),
            legend=dict(title=dict(text="capsule"), xref="container", x=1.0, xanchor="right"),
            shapes=shapes,
            annotations=notes,
            xaxis=dict(title=dict(text="routing iteration"), tickmode="array", tickvals=iterations),
            yaxis=dict(title=dict(text="|v|"), range=[0, 1.05]),
        ),
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
    fig.update_layout(**_square_axes())
    return layout(
        fig,
        height or _tiled_height(tiles, width, TILE_BOTTOM)[0],
        title=f"Primary capsules: length of each of the {types * grid * grid} (one block per type)",
        margin=dict(l=TILE_LEFT, r=TILE_SIDES - TILE_LEFT, t=TILE_TOP, b=TILE_BOTTOM),
    )
