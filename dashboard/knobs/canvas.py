"""The drawing canvas: strokes drawn in the browser (`js/canvas.js`), read on the server once, when the pen lifts.

The browser sends the picture as a small PNG and the strokes (to draw them again when the page is opened again); the
server reads the picture as the canvas's digit (`capsnet.data.preprocess.preprocess_canvas`) and keeps both in the
session. What the browser sends is checked like any upload: a PNG of the canvas's size, strokes of bounded length;
anything else is an empty drawing.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import numpy as np
import streamlit as st
from PIL import Image

from capsnet.data.preprocess import PreprocessError, open_image, preprocess_canvas
from dashboard.knobs import payload
from dashboard.knobs.component import knobs

SIZE = 280  # the canvas's side, in pixels
STROKE_WIDTH = 18
PNG_PREFIX = "data:image/png;base64,"
MOST_PNG_CHARS = 1_000_000  # a 280x280 drawing is a few KB as a PNG
MOST_POINTS = 100_000  # of all strokes together: minutes of drawing


def _strokes_key(key: str) -> str:
    return f"{key}_strokes"


def _digit_key(key: str) -> str:
    return f"{key}_digit"


def _nonce_key(key: str) -> str:
    return f"{key}_nonce"


def digit(key: str) -> np.ndarray | None:
    """The digit canvas `key` holds (MNIST-style, 28x28), or None when it holds none."""
    held: np.ndarray | None = st.session_state.get(_digit_key(key))
    return held


def clear(key: str) -> None:
    """Forget the drawing of canvas `key` and give the browser an empty canvas on the next run."""
    st.session_state[_strokes_key(key)] = []
    st.session_state[_digit_key(key)] = None
    st.session_state[_nonce_key(key)] = st.session_state.get(_nonce_key(key), 0) + 1


def read_strokes(value: Any) -> list[list[int]]:
    """The strokes the browser sent, as lists of whole pixel coordinates on the canvas; [] for anything else."""
    if not isinstance(value, list):
        return []
    strokes: list[list[int]] = []
    total = 0
    for points in value:
        if not isinstance(points, list) or not points or len(points) % 2:
            return []
        total += len(points)
        if total > 2 * MOST_POINTS or not all(type(p) in (int, float) and np.isfinite(p) for p in points):
            return []
        strokes.append([int(min(SIZE, max(0, round(p)))) for p in points])
    return strokes


def read_picture(value: Any) -> np.ndarray | None:
    """The canvas's picture (a PNG data URL of SIZE x SIZE pixels) as an MNIST-style digit; None when it is empty,
    or is not such a picture."""
    if not isinstance(value, str) or not value.startswith(PNG_PREFIX) or len(value) > MOST_PNG_CHARS:
        return None
    try:
        data = base64.b64decode(value[len(PNG_PREFIX) :], validate=True)
        with Image.open(io.BytesIO(data)) as header:  # its size read before any pixel is decoded
            if header.format != "PNG" or header.size != (SIZE, SIZE):
                return None
        return preprocess_canvas(np.asarray(open_image(data, "the drawing").convert("RGBA")))
    except (binascii.Error, OSError, ValueError, PreprocessError):
        return None


def _read(key: str) -> None:
    """The pen lifted (or Undo, or Clear): keep the strokes and read the picture."""
    drawing = (st.session_state.get(key) or {}).get("drawing")
    drawing = drawing if isinstance(drawing, dict) else {}
    st.session_state[_strokes_key(key)] = read_strokes(drawing.get("strokes"))
    st.session_state[_digit_key(key)] = read_picture(drawing.get("png"))


def drawing_canvas(key: str, *, label: str, caption: str) -> np.ndarray | None:
    """Draw canvas `key` (its strokes restored) and return the digit it holds, or None when it holds none."""
    for name, default in ((_strokes_key(key), []), (_digit_key(key), None), (_nonce_key(key), 0)):
        st.session_state.setdefault(name, default)
    header = {
        "view": "canvas",
        "identity": f"{key}#{st.session_state[_nonce_key(key)]}",
        "size": SIZE,
        "width": STROKE_WIDTH,
        "strokes": st.session_state[_strokes_key(key)],
        "label": label,
        "caption": caption,
    }
    knobs(payload.pack(header, {}), key=key, reports=("drawing",), on_change=lambda: _read(key))
    return digit(key)
