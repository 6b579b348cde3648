"""Folders of labelled pictures this package makes itself, to measure what a network learns from a user's folder.

    shapes/   circle/ 0.png 1.jpg ...   square/ ...   triangle/ ...   cross/ ...

`shapes_folder` draws one coloured shape per picture (a circle, a square, a triangle, a cross; of random size,
place and colour) on a ground of another random colour with noise in every pixel, and writes it as PNG or JPEG, at
48x48 or 64x48: the kind of folder a user brings (a few hundred pictures, mixed formats and sizes). `tinted_folder`
writes real pictures (MNIST digits, Fashion-MNIST items) in colour, each on a random coloured ground, at a given
side. Both are seeded: the same call writes the same files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

SHAPES = ("circle", "cross", "square", "triangle")
SIZES = ((48, 48), (64, 48))  # (width, height) of the pictures written, one of these each


def _mask(shape: str, width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A (height, width) bool mask of one shape, of a random size and place inside the picture."""
    side = min(width, height)
    radius = rng.uniform(0.28, 0.38) * side
    # near the centre of the centre square (which the reader keeps of a wider picture), by up to a tenth of its side
    cy = height / 2 + rng.uniform(-0.1, 0.1) * side
    cx = width / 2 + rng.uniform(-0.1, 0.1) * side
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    dy, dx = y - cy, x - cx
    if shape == "circle":
        return dy**2 + dx**2 <= radius**2
    if shape == "square":
        half = radius * 0.85
        return (np.abs(dy) <= half) & (np.abs(dx) <= half)
    if shape == "cross":
        arm = radius * 0.3
        return ((np.abs(dy) <= arm) & (np.abs(dx) <= radius)) | ((np.abs(dx) <= arm) & (np.abs(dy) <= radius))
    if shape == "triangle":  # pointing up: its width grows from the apex to the base
        top, bottom = cy - radius, cy + radius * 0.8
        half_width = (dy + radius) / (bottom - top) * radius * 1.1
        return (y >= top) & (y <= bottom) & (np.abs(dx) <= half_width)
    raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")


def _colours(rng: np.random.Generator, light_ink: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A ground colour and a shape colour that differ clearly (at least 120 apart in one channel or more); with
    `light_ink`, a dark ground and a light shape (every channel under 90, and over 165)."""
    if light_ink:
        return rng.integers(0, 90, 3).astype(np.float32), rng.integers(166, 256, 3).astype(np.float32)
    while True:
        ground, ink = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        if np.abs(ground - ink).max() >= 120:
            return ground.astype(np.float32), ink.astype(np.float32)


def shape_picture(
    shape: str, width: int, height: int, rng: np.random.Generator, noise: float = 24.0, light_ink: bool = False
) -> Image.Image:
    """One RGB picture: `shape` in one colour on a ground of another, with Gaussian noise (sigma `noise`) on every
    pixel."""
    ground, ink = _colours(rng, light_ink)
    mask = _mask(shape, width, height, rng)[..., None]  # (H, W, 1)
    picture = np.where(mask, ink, ground) + rng.normal(0.0, noise, (height, width, 3))
    return Image.fromarray(np.clip(picture, 0, 255).round().astype(np.uint8), mode="RGB")


def shapes_folder(
    root: Path,
    per_class: int = 110,
    seed: int = 0,
    noise: float = 24.0,
    sizes: tuple[tuple[int, int], ...] = SIZES,
    light_ink: bool = False,
) -> Path:
    """Write `per_class` pictures of each of the four shapes under `root` (one folder per shape): every other
    picture a PNG, the rest JPEG, each of one of `sizes` (width, height): 48x48 or 64x48. `light_ink`: every shape
    lighter than its ground (an easier folder). Returns `root`."""
    if per_class < 2:
        raise ValueError(f"per_class must be at least 2 (one held out to test), got {per_class}")
    rng = np.random.default_rng(seed)
    for shape in SHAPES:
        folder = Path(root) / shape
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            width, height = sizes[int(rng.integers(len(sizes)))]
            picture = shape_picture(shape, width, height, rng, noise, light_ink)
            if n % 2:
                picture.save(folder / f"{n}.jpg", quality=90)
            else:
                picture.save(folder / f"{n}.png")
    return Path(root)


def tinted_folder(
    root: Path, images: torch.Tensor, labels: torch.Tensor, classes: tuple[str, ...], side: int, seed: int = 0
) -> Path:
    """Write grey pictures (`images` (N, 1, H, W) uint8, `labels` (N,)) in colour under `root`, one folder per class
    of `classes`: each on a random coloured ground, its ink another colour, resized to `side` x `side`, as PNG."""
    rng = np.random.default_rng(seed)
    for name in classes:
        (Path(root) / name.replace("/", "-")).mkdir(parents=True, exist_ok=True)
    counts = [0] * len(classes)
    for picture, label in zip(images, labels.tolist(), strict=True):
        grey = Image.fromarray(picture[0].numpy()).resize((side, side), Image.Resampling.BILINEAR)
        ink = np.asarray(grey, dtype=np.float32)[..., None] / 255  # (side, side, 1)
        ground, colour = _colours(rng)
        coloured = ground * (1 - ink) + colour * ink + rng.normal(0.0, 8.0, (side, side, 3))
        name = classes[label].replace("/", "-")
        Image.fromarray(np.clip(coloured, 0, 255).round().astype(np.uint8), mode="RGB").save(
            Path(root) / name / f"{counts[label]}.png"
        )
        counts[label] += 1
    return Path(root)
