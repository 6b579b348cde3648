"""Turn a drawing, an uploaded file or any image into a 28x28 MNIST-style input.

MNIST was made from NIST's 128x128 black-and-white digits like this (LeCun et al.):
each digit was size-normalised to fit a 20x20 box keeping its aspect ratio, with
anti-aliasing (which gives the grey levels), then placed in a 28x28 field so that
its centre of mass lies at the centre. `to_mnist` does the same to any ink map:

    ink (H, W) in [0, 1], white ink on black
      -> crop to the bounding box of the ink
      -> scale the longer side to 20 px (area averaging when shrinking, bilinear when growing)
      -> paste into 28x28 with the centre of mass at the middle (13.5, 13.5)

Inputs are turned into an ink map first: a canvas (RGBA, white stroke on black or
on a transparent background), or an upload (PNG/JPEG, dark ink on light paper is
inverted automatically).

On the canvas the physical size is known, so a drawing narrower than a quarter of the canvas
(MIN_CANVAS_SPAN) is not blown up to 20 px: MNIST's digits were written at a size that the
normalisation only tidied, and a click on the canvas is a dot, not a 20-px disc that the
network would read as a confident, fat zero.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from capsnet.data.pictures import eight_bit
from capsnet.errors import CapsNetError

MNIST_SIZE = 28
BOX_SIZE = 20
CENTRE = (MNIST_SIZE - 1) / 2  # 13.5: the middle of a 28-pixel row, in pixel-centre coordinates
INK_THRESHOLD = 0.15  # fraction of full ink that counts as ink for the bounding box
MAX_UPLOAD_PIXELS = 4096 * 4096  # refuse decompression bombs long before Pillow's own limit
MIN_CANVAS_SPAN = 0.25  # a canvas drawing narrower than this share of the canvas is not enlarged to fill 20 px


class PreprocessError(CapsNetError):
    """An input image that cannot be turned into an MNIST-style digit."""


class EmptyImageError(PreprocessError):
    """The input holds no ink: nothing was drawn, or the image is one flat colour."""


class NotAnImageError(PreprocessError):
    """An upload that is not a readable PNG or JPEG image."""


def ink_from_canvas(rgba: np.ndarray) -> np.ndarray:
    """A canvas's pixels (H, W, 4) uint8 -> ink (H, W) float32 in [0, 1].

    The canvas draws a white stroke on black (or on transparent pixels), so ink is
    the brightness of each pixel times its opacity.
    """
    array = np.asarray(rgba)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"expected canvas pixels of shape (H, W, 4), got {array.shape}")
    pixels = array.astype(np.float32) / 255.0
    brightness = pixels[..., :3].max(axis=2)  # (H, W)
    if array.shape[2] == 4:
        brightness = brightness * pixels[..., 3]
    return brightness.astype(np.float32)


def ink_from_pil(image: Image.Image) -> np.ndarray:
    """Any PIL image -> ink (H, W) float32 in [0, 1], white ink on black.

    Transparent pixels count as background. Dark ink on a light background (a
    photo or scan of a digit on paper) is inverted, judged by the image border.
    The background level is then subtracted and the contrast stretched, so grey
    paper and pale pencil still give a clean digit.
    """
    rgba = np.asarray(eight_bit(image).convert("RGBA"), dtype=np.float32) / 255.0  # (H, W, 4), 16-bit scaled
    gray = rgba[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)  # (H, W) luminance
    alpha = rgba[..., 3]
    opaque = alpha > 0.5
    if not opaque.any():
        raise EmptyImageError("The image is fully transparent: there is no digit in it.")
    if (~opaque).any():
        # ink = the opaque pixels; their colour tells whether the ink is dark or light
        dark_ink = float(gray[opaque].mean()) < 0.5
        ink = alpha * ((1.0 - gray) if dark_ink else gray)
    else:
        border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
        ink = 1.0 - gray if float(np.median(border)) > 0.5 else gray  # light paper: invert
        level = float(np.median(ink))  # most of a digit image is background
        top = float(ink.max())
        if top - level < 0.1:
            raise EmptyImageError("The image is one flat colour: no digit could be found in it.")
        ink = np.clip((ink - level) / (top - level), 0.0, 1.0)
    return ink.astype(np.float32)


def open_image(data: bytes, name: str = "the upload") -> Image.Image:
    """Decode PNG/JPEG bytes, or raise NotAnImageError with a one-line message."""
    if not data:
        raise NotAnImageError(f"{name} is empty: upload a PNG or JPEG image of a digit.")
    try:
        image = Image.open(io.BytesIO(data))
        if image.format not in ("PNG", "JPEG"):
            raise NotAnImageError(
                f"{name} is a {image.format or 'unknown'} file: upload a PNG or JPEG image of a digit."
            )
        if image.width * image.height > MAX_UPLOAD_PIXELS:
            raise NotAnImageError(
                f"{name} is {image.width}x{image.height} pixels: too large, use an image under 4096x4096."
            )
        image.load()
    except NotAnImageError:
        raise
    except Image.DecompressionBombError:  # Pillow's own guard: a header claiming billions of pixels
        raise NotAnImageError(f"{name} is too large (a decompression bomb?): use an image under 4096x4096.") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise NotAnImageError(f"{name} is not a readable image: upload a PNG or JPEG image of a digit.") from None
    return image


def to_mnist(ink: np.ndarray, threshold: float = INK_THRESHOLD, max_scale: float | None = None) -> np.ndarray:
    """An ink map (H, W) in [0, 1] -> a 28x28 float32 digit the way MNIST was made.

    Crop to the ink's bounding box, scale so the longer side is 20 px keeping the
    aspect ratio (anti-aliased), and centre by centre of mass in 28x28. The result
    is scaled so that its brightest pixel is 1, like MNIST's saturated strokes.
    `max_scale` caps the enlargement (output pixels per input pixel), so that a speck
    stays small. Raises EmptyImageError if there is no ink.
    """
    ink = np.asarray(ink, dtype=np.float32)
    if ink.ndim != 2:
        raise ValueError(f"expected an ink map of shape (H, W), got {ink.shape}")
    ink = np.nan_to_num(np.clip(ink, 0.0, 1.0))
    if ink.size == 0 or float(ink.max()) < threshold:
        raise EmptyImageError("Nothing to read: the drawing is empty. Draw a digit first.")
    rows = np.flatnonzero((ink >= threshold).any(axis=1))
    cols = np.flatnonzero((ink >= threshold).any(axis=0))
    crop = ink[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]  # (h, w): the ink's bounding box
    height, width = crop.shape
    scale = BOX_SIZE / max(height, width)
    if max_scale is not None:
        scale = min(scale, max_scale)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    # area averaging when shrinking is true anti-aliasing; bilinear when a tiny drawing grows
    resample = Image.Resampling.BOX if scale < 1 else Image.Resampling.BILINEAR
    patch = np.asarray(
        Image.fromarray(np.ascontiguousarray(crop, dtype=np.float32)).resize((new_w, new_h), resample), dtype=np.float32
    )
    patch = np.clip(patch, 0.0, 1.0)  # (new_h, new_w), at most 20x20
    total = float(patch.sum())
    if total <= 0:
        raise EmptyImageError("Nothing to read: the drawing is empty. Draw a digit first.")
    ys, xs = np.arange(new_h, dtype=np.float32), np.arange(new_w, dtype=np.float32)
    com_y = float(patch.sum(axis=1) @ ys) / total
    com_x = float(patch.sum(axis=0) @ xs) / total
    # shift so the centre of mass lands on the middle; never cut off ink
    top = int(np.clip(round(CENTRE - com_y), 0, MNIST_SIZE - new_h))
    left = int(np.clip(round(CENTRE - com_x), 0, MNIST_SIZE - new_w))
    out = np.zeros((MNIST_SIZE, MNIST_SIZE), dtype=np.float32)
    out[top : top + new_h, left : left + new_w] = patch
    return out / max(float(out.max()), 1e-6)


def as_model_input(digit: np.ndarray) -> torch.Tensor:
    """A 28x28 digit in [0, 1] -> the (1, 1, 28, 28) float tensor the model reads."""
    digit = np.asarray(digit, dtype=np.float32)
    if digit.shape != (MNIST_SIZE, MNIST_SIZE):
        raise ValueError(f"expected a 28x28 digit, got {digit.shape}")
    return torch.from_numpy(digit.copy()).view(1, 1, MNIST_SIZE, MNIST_SIZE)


def preprocess_canvas(rgba: np.ndarray | None) -> np.ndarray:
    """Canvas pixels (H, W, 4) -> 28x28 MNIST-style digit. None (nothing drawn yet) is empty."""
    if rgba is None:
        raise EmptyImageError("Nothing to read: the drawing is empty. Draw a digit first.")
    ink = ink_from_canvas(rgba)
    return to_mnist(ink, max_scale=BOX_SIZE / (MIN_CANVAS_SPAN * max(ink.shape)))


def preprocess_image(image: Image.Image) -> np.ndarray:
    """Any PIL image -> 28x28 MNIST-style digit, by the canvas's rule: ink spanning less than a quarter of the
    image is not blown up to 20 px (a dot stays a dot, and is then not like any class)."""
    ink = ink_from_pil(image)
    return to_mnist(ink, max_scale=BOX_SIZE / (MIN_CANVAS_SPAN * max(ink.shape)))


def preprocess_upload(data: bytes, name: str = "the upload") -> np.ndarray:
    """PNG/JPEG bytes -> 28x28 MNIST-style digit; NotAnImageError or EmptyImageError otherwise."""
    image = open_image(data, name)
    try:
        return preprocess_image(image)
    except EmptyImageError as error:
        raise EmptyImageError(f"{name}: {error}") from None
