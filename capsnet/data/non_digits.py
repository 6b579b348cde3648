"""The drawn non-digits: inputs that are no digit, drawn as a user draws on the Draw page, for the not-like-any-class
test (`capsnet.readings.novelty`).

Each is drawn in white on the 280x280 black canvas and read through the canvas's own preprocessing
(`capsnet.data.preprocess.preprocess_canvas`), so it reaches a network exactly as a drawing does: a dot, a scribble,
an X, an H, a smiley, an A and a bar, and grey noise (not drawn: noise at up to half the ink). Some are far from any
digit (the dot, the noise), some near one (the bar is close to a 1, the A to a 4): a network that flags them all
is stricter than one that flags the far ones only.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from PIL import Image, ImageDraw

from capsnet.data.preprocess import preprocess_canvas

CANVAS = 280  # the Draw page's canvas side
Stroke = tuple[Literal["line", "disc", "ring", "arc"], list[tuple[int, int]] | list[int], int]  # kind, points, width

DRAWINGS: dict[str, tuple[Stroke, ...]] = {
    "a dot": (("disc", [130, 130, 150, 150], 0),),
    "a scribble": (("line", [(40, 60), (240, 90), (50, 140), (230, 170), (60, 220), (220, 240)], 16),),
    "an X": (("line", [(50, 50), (230, 230)], 18), ("line", [(230, 50), (50, 230)], 18)),
    "an H": (
        ("line", [(70, 40), (70, 240)], 18),
        ("line", [(210, 40), (210, 240)], 18),
        ("line", [(70, 140), (210, 140)], 18),
    ),  # fmt: skip
    "a smiley": (
        ("ring", [40, 40, 240, 240], 14),
        ("disc", [95, 100, 115, 120], 0),
        ("disc", [165, 100, 185, 120], 0),
        ("arc", [90, 120, 190, 200], 12),
    ),  # fmt: skip
    "an A": (
        ("line", [(140, 30), (60, 250)], 18),
        ("line", [(140, 30), (220, 250)], 18),
        ("line", [(90, 160), (190, 160)], 18),
    ),  # fmt: skip
    "a bar": (("line", [(140, 30), (140, 250)], 18),),
}
NOISE = "grey noise"


def drawn(strokes: tuple[Stroke, ...]) -> np.ndarray:
    """White strokes on the black canvas, read as the Draw page reads a drawing: a 28x28 digit-style image in [0, 1]."""
    white = (255, 255, 255, 255)
    image = Image.new("RGBA", (CANVAS, CANVAS), (0, 0, 0, 255))
    pen = ImageDraw.Draw(image)
    for kind, points, width in strokes:
        if kind == "line":
            pen.line(points, fill=white, width=width)
        elif kind == "disc":
            pen.ellipse(points, fill=white)
        elif kind == "ring":
            pen.ellipse(points, outline=white, width=width)
        else:
            pen.arc(points, 20, 160, fill=white, width=width)
    return preprocess_canvas(np.asarray(image))


def non_digits() -> dict[str, np.ndarray]:
    """Every drawn non-digit by name, and grey noise: 28x28 float32 images in [0, 1]."""
    images = {name: drawn(strokes) for name, strokes in DRAWINGS.items()}
    images[NOISE] = (np.random.default_rng(0).random((28, 28)) * 0.5).astype(np.float32)
    return images
