"""The decoder that redraws the input from the class capsules, masked to one class (figure 2 of the paper).

Sabour, Frosst & Hinton (2017), "Dynamic Routing Between Capsules", NeurIPS. https://arxiv.org/abs/1710.09829

Every capsule network here that redraws its input uses it: the CapsNet from its 16-D DigitCaps, the EM network
(with a decoder preset) from its class capsules' 16 pose entries. During training the mask is the true class, so
the decoder never learns from the network's own mistakes; reading, it is the prediction (or a chosen class).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def one_hot_mask(poses: Tensor, classes: Tensor) -> Tensor:
    """Zero every capsule but `classes[b]` in each example: (B, K, D) -> (B, K, D)."""
    mask = F.one_hot(classes, poses.shape[1]).to(poses.dtype)  # (B, K)
    return poses * mask.unsqueeze(-1)


def decoder_input(poses: Tensor, class_index: Tensor | int, num_classes: int, dim: int) -> Tensor:
    """The class capsules (B, K, D) with all but `class_index`'s zeroed, what a decoder reads; ValueError for poses
    of another shape or a class out of range. `class_index` is one class for the whole batch or one per example."""
    if poses.dim() != 3 or tuple(poses.shape[1:]) != (num_classes, dim):
        raise ValueError(f"expected poses of shape (B, {num_classes}, {dim}), got {tuple(poses.shape)}")
    classes = torch.as_tensor(class_index, device=poses.device, dtype=torch.long)
    classes = classes.expand(poses.shape[0]) if classes.dim() == 0 else classes
    if classes.shape != poses.shape[:1]:
        raise ValueError(f"class_index must be an int or shape ({poses.shape[0]},), got {tuple(classes.shape)}")
    if ((classes < 0) | (classes >= num_classes)).any():
        raise ValueError(f"class_index must lie in [0, {num_classes}), got {classes.tolist()}")
    return one_hot_mask(poses, classes)  # (B, K, D)


class Decoder(nn.Module):
    """Fully connected layers (ReLU), then one to every pixel (sigmoid): the masked class capsules (B, K, D) redrawn
    as an image (B, C, H, W) in [0, 1]. The paper's widths are 512 and 1024."""

    def __init__(self, num_classes: int, dim: int, hidden: tuple[int, ...], image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.num_classes, self.dim, self.image_shape = num_classes, dim, image_shape
        channels, height, width = image_shape
        sizes = (num_classes * dim, *hidden)
        layers: list[nn.Module] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU(inplace=True)]
        layers += [nn.Linear(sizes[-1], channels * height * width), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, masked_poses: Tensor) -> Tensor:
        flat = self.net(masked_poses.flatten(1))  # (B, K*D) -> (B, C*H*W)
        return flat.view(-1, *self.image_shape)  # (B, C, H, W)

    def redraw(self, poses: Tensor, class_index: Tensor | int) -> Tensor:
        """Redraw images from class capsules (B, K, D), keeping only `class_index`'s (one, or one per example)."""
        return self(decoder_input(poses, class_index, self.num_classes, self.dim))  # (B, C, H, W)
