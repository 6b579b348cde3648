"""Pictures: images as people look at them, (H, W) grey or (H, W, 3) colour, beside the (C, H, W) a network reads.

A reading that hands images to the dashboard (a reconstruction, a training window) gives them as pictures, so that a
figure draws a grey digit and a colour photo alike; `as_inputs` turns pictures back into a network's input.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import Tensor

WIDE_GREY_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")  # Pillow's modes of 16-bit (and 32-bit integer) grey


def as_pictures(images: Tensor) -> np.ndarray:
    """Images (n, C, H, W) as pictures: (n, H, W) for one channel, (n, H, W, 3) for colour."""
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"expected images of shape (n, 1 or 3, H, W), got {tuple(images.shape)}")
    if images.shape[1] == 1:
        return images[:, 0].cpu().numpy()  # (n, H, W)
    return images.permute(0, 2, 3, 1).cpu().numpy()  # (n, H, W, 3)


def as_inputs(pictures: np.ndarray | Tensor) -> Tensor:
    """Pictures ((n, H, W) or (n, H, W, 3); uint8 0-255 or floats in [0, 1]) as a network's input (n, C, H, W)."""
    images = torch.as_tensor(pictures)
    images = images.float().div(255) if images.dtype == torch.uint8 else images.float()
    if images.dim() == 3:
        return images[:, None]  # (n, 1, H, W)
    if images.dim() == 4 and images.shape[3] == 3:
        return images.permute(0, 3, 1, 2)  # (n, 3, H, W)
    raise ValueError(f"expected pictures of shape (n, H, W) or (n, H, W, 3), got {tuple(images.shape)}")


def picture_of(image: np.ndarray | Tensor, channels: int, side: int) -> np.ndarray:
    """One input as a picture of a network's shape, float32 in [0, 1]: (side, side), or (side, side, 3) in colour.
    A flat or (1, side, side) grey image and a (3, side, side) colour one are taken too; ValueError otherwise."""
    if isinstance(image, Tensor):
        image = image.detach().cpu().numpy()
    picture = np.asarray(image, dtype=np.float32)
    if channels == 1 and picture.size == side * side:
        return picture.reshape(side, side)
    if channels == 3 and picture.shape == (3, side, side):
        return np.ascontiguousarray(picture.transpose(1, 2, 0))
    if channels == 3 and picture.shape == (side, side, 3):
        return picture
    kind = "grey " if channels == 1 else "colour "
    raise ValueError(f"expected one {kind}{side}x{side} image, got an array of shape {picture.shape}")


def eight_bit(image: Image.Image) -> Image.Image:
    """A decoded picture at 8 bits a channel. A 16-bit grey PNG opens as "I;16" (or "I"), which Pillow's own
    conversion to "L" or "RGB" clips at 255, so a 16-bit picture came out nearly white: it is scaled instead (65535
    to 255; a 32-bit integer picture by its largest value). Other pictures are returned as they are."""
    if image.mode not in WIDE_GREY_MODES:
        return image
    values = np.asarray(image, dtype=np.float64)  # (H, W), in the file's own range
    top = 65535.0 if image.mode != "I" or values.size == 0 or values.max() <= 65535 else float(values.max())
    return Image.fromarray(np.clip(np.rint(values * (255.0 / top)), 0, 255).astype(np.uint8), mode="L")
