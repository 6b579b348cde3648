"""The drawing canvas's server side (dashboard/knobs/canvas.py): what the browser sends when the pen lifts is read
as the Draw page reads a canvas, and anything else (another format, another size, a huge or broken value, strokes
that are not strokes) as an empty drawing, never an error. The canvas itself is driven in tests/test_browser.py."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from capsnet.data.preprocess import preprocess_canvas
from dashboard.knobs import canvas


def _data_url(image: Image.Image, kind: str = "PNG") -> str:
    out = io.BytesIO()
    image.save(out, format=kind)
    return f"data:image/{kind.lower()};base64," + base64.b64encode(out.getvalue()).decode()


def _drawing() -> Image.Image:
    picture = Image.new("RGBA", (canvas.SIZE, canvas.SIZE), (0, 0, 0, 255))
    picture.paste((255, 255, 255, 255), (130, 40, 148, 240))  # a "1"
    return picture


def test_the_picture_is_read_as_the_canvas_digit() -> None:
    digit = canvas.read_picture(_data_url(_drawing()))
    assert digit is not None and digit.shape == (28, 28) and digit.max() > 0.9
    np.testing.assert_array_equal(digit, preprocess_canvas(np.asarray(_drawing())))


def test_anything_but_a_png_of_the_canvas_is_an_empty_drawing() -> None:
    png = _data_url(_drawing())
    huge = Image.new("L", (4096, 4096))  # a few KB that would decode to 16 M pixels: refused from its header
    for value in (
        None,
        42,
        {"png": png},
        png.replace("data:image/png", "data:image/gif"),
        png[:-7] + "!!!!!!=",  # not base64
        _data_url(_drawing().convert("RGB"), "JPEG").replace("image/jpeg", "image/png"),
        _data_url(_drawing().resize((140, 140))),
        _data_url(huge),
        "data:image/png;base64," + "A" * (canvas.MOST_PNG_CHARS + 8),
        "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n broken").decode(),
        _data_url(Image.new("RGBA", (canvas.SIZE, canvas.SIZE), (0, 0, 0, 255))),  # black: nothing drawn
    ):
        assert canvas.read_picture(value) is None, str(value)[:80]


def test_strokes_are_kept_as_whole_pixels_on_the_canvas_and_anything_else_is_none() -> None:
    assert canvas.read_strokes([[10.4, 20.6, 300, -5], [7, 7]]) == [[10, 21, 280, 0], [7, 7]]
    too_many = [[1, 1] * (canvas.MOST_POINTS // 2 + 1)] * 2
    for value in (None, "strokes", [[1, 2, 3]], [[]], [["1", 2]], [[float("nan"), 1]], [[True, 1]], [5], too_many):
        assert canvas.read_strokes(value) == [], str(value)[:80]
