"""Images: tiles of small maps, enlarged pixels for st.image, and figures made of images (Figure 4, image rows)."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from dashboard.figures.style import layout


def tile_columns(count: int, aspect: float = 2.0) -> int:
    """How many columns of square maps make a grid about `aspect` times as wide as it is tall.

    32 types -> 8 columns (4 rows of 8, as in the paper's figures); 8 types -> 4 (2 rows of 4).
    """
    count = max(1, int(count))
    columns = min(count, max(1, math.ceil(math.sqrt(aspect * count))))
    rows = -(-count // columns)
    return -(-count // rows)  # as few empty cells as that many rows allows


def tile_maps(maps: np.ndarray, columns: int = 8, gap: int = 1) -> np.ndarray:
    """Lay (..., M, h, w) maps out as one (..., rows*(h+gap)-gap, columns*(w+gap)-gap) image, NaN in the gaps.

    Used to show all 32 types of 6x6 capsules at once (4 rows of 8).
    """
    maps = np.asarray(maps, dtype=np.float32)
    *lead, count, h, w = maps.shape
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    padded = np.full((*lead, rows * columns, h + gap, w + gap), np.nan, dtype=np.float32)
    padded[..., :count, :h, :w] = maps
    grid = padded.reshape(*lead, rows, columns, h + gap, w + gap)  # (..., rows, cols, h+gap, w+gap)
    grid = np.moveaxis(grid, -3, -2)  # (..., rows, h+gap, cols, w+gap)
    image = grid.reshape(*lead, rows * (h + gap), columns * (w + gap))
    return image[..., : rows * (h + gap) - gap, : columns * (w + gap) - gap]


def tile_pictures(pictures: np.ndarray, columns: int = 8, gap: int = 1) -> np.ndarray:
    """`tile_maps` for pictures (M, h, w) grey or (M, h, w, 3) colour: one (H, W) or (H, W, 3) image."""
    pictures = np.asarray(pictures, dtype=np.float32)
    if pictures.ndim == 4 and pictures.shape[-1] == 3:  # each colour plane tiled alike, then put back together
        return np.moveaxis(tile_maps(np.moveaxis(pictures, -1, 0), columns=columns, gap=gap), 0, -1)
    return tile_maps(pictures, columns=columns, gap=gap)


def _to_uint8(image: np.ndarray) -> np.ndarray:
    return (
        (np.clip(np.nan_to_num(np.asarray(image, dtype=np.float32), nan=0.35), 0.0, 1.0) * 255).round().astype(np.uint8)
    )


def pixel_image(image: np.ndarray, scale: int = 6) -> np.ndarray:
    """A small picture in [0, 1], grey (h, w) or colour (h, w, 3) -> uint8, enlarged `scale` times with sharp pixels
    (for st.image)."""
    image = _to_uint8(image)
    return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)


def _png_data_url(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(_to_uint8(image)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def is_colour(image: np.ndarray) -> bool:
    """Whether a picture is colour (H, W, 3) rather than grey (H, W)."""
    return np.ndim(image) == 3 and np.shape(image)[-1] == 3


def picture_trace(image: np.ndarray, hover: str | None = None) -> dict:
    """A picture as the trace a figure draws over: a grey one as a heatmap (0 black, 1 white), a colour one as a PNG
    image, each pixel at (row, column) as a heatmap's; `hover` is its hover template (none without)."""
    image = np.asarray(image, dtype=np.float32)
    hovers = dict(hovertemplate=hover) if hover else dict(hoverinfo="skip")
    if is_colour(image):
        return dict(type="image", source=_png_data_url(image), **hovers)
    return dict(type="heatmap", z=image, colorscale="gray", showscale=False, zmin=0, zmax=1, **hovers)


def strokes(image: np.ndarray) -> np.ndarray:
    """The pixels a reading is drawn on, (H, W) bool: a grey digit's ink; every pixel of a colour picture (a photo has
    no blank background)."""
    image = np.asarray(image, dtype=np.float32)
    if is_colour(image):
        return np.ones(image.shape[:2], dtype=bool)
    return image > 0.15


def _image_figure(image: np.ndarray, height: int) -> go.Figure:
    """A grey image as one PNG-encoded trace (light to send, unlike a heatmap of every pixel)."""
    fig = go.Figure(go.Image(source=_png_data_url(image), hoverinfo="skip"))
    fig.update_yaxes(autorange="reversed")
    return layout(fig, height)


def perturbation_figure(
    grid: np.ndarray, steps: Sequence[float], rows: Sequence[str] | None = None, height: int = 760
) -> go.Figure:
    """The paper's Figure 4: row d shows the reconstruction with dimension d moved by each step; `rows` names the
    rows as the page names the dimensions ("Dimension 3", "Pose entry (1, 3)"), else "dim d"."""
    grid = np.asarray(grid, dtype=np.float32)  # (D, S, h, w), or (D, S, h, w, 3) in colour
    dims, count, h, w = grid.shape[:4]
    if len(steps) != count:
        raise ValueError(f"{count} columns but {len(steps)} steps")
    gap = 2
    tiles = tile_pictures(grid.reshape(dims * count, *grid.shape[2:]), columns=count, gap=gap)  # (rows, cols[, 3])
    fig = _image_figure(tiles, height)
    fig.update_xaxes(
        tickmode="array",
        tickvals=[c * (w + gap) + (w - 1) / 2 for c in range(count)],
        ticktext=[f"{s:+.2f}" if abs(steps[-1]) >= 0.1 else f"{s:+.3f}" for s in steps],
        side="top",
        showgrid=False,
        title="change added to the dimension",
    )
    fig.update_yaxes(
        tickmode="array",
        tickvals=[d * (h + gap) + (h - 1) / 2 for d in range(dims)],
        ticktext=list(rows) if rows is not None else [f"dim {d + 1}" for d in range(dims)],
        showgrid=False,
    )
    return fig


def image_rows_figure(
    rows: Sequence[np.ndarray],
    labels: Sequence[str],
    height: int | None = None,
    ids: Sequence[int] | None = None,
) -> go.Figure:
    """Rows of small pictures (e.g. originals over their reconstructions; grey or colour), one labelled row each.

    With `ids` (one per column), each column gets an invisible point that selection events can
    pick: clicking a column selects its id (the dashboard opens that test image).
    """
    if len(rows) != len(labels) or not rows:
        raise ValueError("need one label per row and at least one row")
    stack = np.stack([np.asarray(r, dtype=np.float32) for r in rows])  # (R, n, h, w), or (R, n, h, w, 3) in colour
    count, n, h, w = stack.shape[:4]
    gap = 2
    tiles = tile_pictures(stack.reshape(count * n, *stack.shape[2:]), columns=n, gap=gap)
    fig = _image_figure(tiles, height or 60 + count * 70)
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_yaxes(
        tickmode="array",
        tickvals=[i * (h + gap) + (h - 1) / 2 for i in range(count)],
        ticktext=list(labels),
        showgrid=False,
    )
    if ids is not None:
        if len(ids) != n:
            raise ValueError(f"{n} columns but {len(ids)} ids")
        x = np.repeat([c * (w + gap) + (w - 1) / 2 for c in range(n)], count)
        y = np.tile([i * (h + gap) + (h - 1) / 2 for i in range(count)], n)
        fig.add_trace(
            go.Scatter(
                x=x, y=y, mode="markers", customdata=np.repeat(list(ids), count), showlegend=False,
                marker=dict(size=max(h, w) * 1.5, color="rgba(0,0,0,0)", symbol="square"),
                hovertemplate="test image #%{customdata}: click to explore it<extra></extra>",
            )
        )  # fmt: skip
        fig.update_layout(clickmode="event+select", dragmode=False)
    return fig


def segmentation_image(image: np.ndarray, first: np.ndarray, second: np.ndarray, scale: int = 6) -> np.ndarray:
    """The paper's Figure 5: the input in grey, one digit's reconstruction in red over it, the other's in green.

    All (H, W) in [0, 1] -> (H*scale, W*scale, 3) uint8 with sharp pixels, for st.image.
    """
    grey = np.clip(np.asarray(image, dtype=np.float32), 0, 1) * 0.45
    red, green = (np.clip(np.asarray(a, dtype=np.float32), 0, 1) for a in (first, second))
    rgb = np.stack([np.maximum(grey, red), np.maximum(grey, green), grey], axis=-1)  # (H, W, 3)
    rgb = (rgb * 255).round().astype(np.uint8)
    return np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)
