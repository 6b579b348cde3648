"""Preprocessing: any drawing or upload becomes a 28x28 digit made the way MNIST was."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from capsnet.data.preprocess import (
    CENTRE,
    EmptyImageError,
    NotAnImageError,
    as_model_input,
    ink_from_canvas,
    preprocess_canvas,
    preprocess_image,
    preprocess_upload,
    to_mnist,
)
from capsnet.errors import CapsNetError


def centre_of_mass(image: np.ndarray) -> tuple[float, float]:
    """(row, column) centre of mass of a non-negative image (H, W): where MNIST puts it, the test's yardstick."""
    image = np.asarray(image, dtype=np.float64)
    ys, xs = np.arange(image.shape[0]), np.arange(image.shape[1])
    return float(image.sum(axis=1) @ ys / image.sum()), float(image.sum(axis=0) @ xs / image.sum())


def canvas(draw: callable, size: int = 280, transparent: bool = False) -> np.ndarray:
    """An RGBA canvas as the Draw page reads it: white strokes on black (or on transparent)."""
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0 if transparent else 255))
    draw(ImageDraw.Draw(image))
    return np.asarray(image)


def seven_top_left(d: ImageDraw.ImageDraw) -> None:
    """A large '7' squeezed into the top-left corner: far from MNIST's centring."""
    d.line([(5, 10), (200, 10)], fill=(255, 255, 255, 255), width=18)
    d.line([(200, 10), (60, 250)], fill=(255, 255, 255, 255), width=18)


def ink_box(digit: np.ndarray) -> tuple[int, int]:
    rows = np.flatnonzero((digit > 0).any(axis=1))
    cols = np.flatnonzero((digit > 0).any(axis=0))
    return rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1


def test_off_centre_large_digit_comes_out_centred_like_mnist() -> None:
    digit = preprocess_canvas(canvas(seven_top_left))
    assert digit.shape == (28, 28) and digit.dtype == np.float32
    y, x = centre_of_mass(digit)
    assert abs(y - CENTRE) <= 1.0 and abs(x - CENTRE) <= 1.0
    height, width = ink_box(digit)
    assert max(height, width) <= 20 and max(height, width) >= 19
    assert digit.min() >= 0.0 and digit.max() == pytest.approx(1.0)
    # anti-aliased: grey levels between 0 and 1, not a binary image
    assert ((digit > 0.05) & (digit < 0.95)).sum() > 10


def test_aspect_ratio_is_kept() -> None:
    # a wide horizontal bar: the long side becomes 20 px, the short side stays short
    digit = preprocess_canvas(canvas(lambda d: d.line([(40, 140), (240, 140)], fill="white", width=20)))
    height, width = ink_box(digit)
    assert width == 20 and height <= 4


def test_small_drawing_is_scaled_up_to_20_px() -> None:
    digit = preprocess_canvas(canvas(lambda d: d.line([(140, 105), (140, 175)], fill="white", width=3)))  # 71 px
    height, _ = ink_box(digit)
    assert height == 20


def test_a_dot_on_the_canvas_stays_a_dot() -> None:
    """A click (18 px on the 280-px canvas) is not blown up into a 20-px disc: at most a quarter of the canvas fills 20 px."""
    digit = preprocess_canvas(canvas(lambda d: d.ellipse([131, 131, 149, 149], fill="white")))
    height, width = ink_box(digit)
    assert 4 <= height <= 6 and 4 <= width <= 6  # 19 px x 20/70
    centre = centre_of_mass(digit)
    assert abs(centre[0] - 13.5) <= 0.5 and abs(centre[1] - 13.5) <= 0.5


def test_transparent_canvas_background_is_background() -> None:
    a = preprocess_canvas(canvas(seven_top_left, transparent=True))
    b = preprocess_canvas(canvas(seven_top_left))
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("pixels", [None, np.zeros((280, 280, 4), np.uint8)])
def test_empty_canvas_raises_a_clear_error(pixels: np.ndarray | None) -> None:
    with pytest.raises(EmptyImageError, match="empty") as caught:
        preprocess_canvas(pixels)
    assert isinstance(caught.value, CapsNetError)
    assert "\n" not in str(caught.value)


def test_ink_from_canvas_rejects_wrong_shapes() -> None:
    with pytest.raises(ValueError, match="H, W, 4"):
        ink_from_canvas(np.zeros((28, 28)))


def png_bytes(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def paper_digit(mode: str = "L") -> Image.Image:
    """A dark '1' written on light grey paper, as a photo or scan would give."""
    image = Image.new(mode, (300, 400), 230 if mode == "L" else (230, 228, 220))
    ImageDraw.Draw(image).line([(150, 50), (150, 350)], fill=20 if mode == "L" else (20, 20, 40), width=24)
    return image


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_upload_dark_on_light_is_inverted_and_centred(fmt: str) -> None:
    digit = preprocess_upload(png_bytes(paper_digit("RGB"), fmt), f"digit.{fmt.lower()}")
    assert digit[0, 0] == 0.0 and digit[:, :3].max() < 0.05  # background is black
    y, x = centre_of_mass(digit)
    assert abs(y - CENTRE) <= 1.0 and abs(x - CENTRE) <= 1.0
    assert ink_box(digit)[0] == 20


def test_upload_black_on_transparent() -> None:
    image = Image.new("RGBA", (100, 100), (0, 0, 0, 0))
    ImageDraw.Draw(image).ellipse([20, 10, 80, 90], outline=(0, 0, 0, 255), width=8)
    digit = preprocess_upload(png_bytes(image), "zero.png")
    assert digit.max() == pytest.approx(1.0) and digit[13, 13] < 0.2  # a ring: dark in the middle


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"this is not an image", "not a readable image"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "not a readable image"),
    ],
)
def test_bad_uploads_raise_one_line_errors(data: bytes, message: str) -> None:
    with pytest.raises(NotAnImageError, match=message) as caught:
        preprocess_upload(data, "upload.png")
    assert "upload.png" in str(caught.value) and "\n" not in str(caught.value)


def test_other_image_formats_are_refused() -> None:
    with pytest.raises(NotAnImageError, match="GIF"):
        preprocess_upload(png_bytes(paper_digit(), "GIF"), "digit.gif")


def test_flat_image_has_no_digit() -> None:
    with pytest.raises(EmptyImageError, match="flat"):
        preprocess_upload(png_bytes(Image.new("L", (50, 50), 255)), "white.png")


def test_an_mnist_digit_is_left_almost_unchanged() -> None:
    """An MNIST-style digit (20 px tall, centred) goes through nearly unchanged."""
    image = Image.new("L", (28, 28), 0)
    ImageDraw.Draw(image).ellipse([8, 4, 19, 23], outline=255, width=2)
    original = np.asarray(image, dtype=np.float32) / 255
    digit = preprocess_image(image)
    assert np.corrcoef(original.ravel(), digit.ravel())[0, 1] > 0.9


def test_to_mnist_and_model_input() -> None:
    ink = np.zeros((50, 40), np.float32)
    ink[10:40, 18:22] = 1.0
    digit = to_mnist(ink)
    tensor = as_model_input(digit)
    assert tensor.shape == (1, 1, 28, 28) and tensor.dtype == torch.float32
    with pytest.raises(ValueError, match="28x28"):
        as_model_input(np.zeros((10, 10)))
    with pytest.raises(ValueError, match="H, W"):
        to_mnist(np.zeros((2, 2, 2)))


def test_an_uploaded_dot_stays_a_dot_as_on_the_canvas() -> None:
    """The upload path follows the canvas's rule: a dot is not blown up into a 20 px blob that reads as a 0."""
    from capsnet.data.preprocess import preprocess_upload

    picture = Image.new("L", (280, 280))
    picture.paste(255, (130, 130, 142, 142))  # a 12 px dot in a 280 px picture
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    digit = preprocess_upload(buffer.getvalue(), "dot.png")
    assert (digit > 0.5).sum() < 40  # a few pixels, not a 20x20 disc (about 300)


def test_a_decompression_bomb_is_called_too_large() -> None:
    import struct
    import zlib

    from capsnet.data.preprocess import NotAnImageError, preprocess_upload

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)  # claims 10 billion pixels
    bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    with pytest.raises(NotAnImageError, match="too large"):
        preprocess_upload(io.BytesIO(bomb).getvalue(), "bomb.png")
