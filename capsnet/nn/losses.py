"""The losses of section 3 and 4.1 of Sabour, Frosst & Hinton (2017).

margin:          L_k = T_k max(0, m+ - |v_k|)^2 + lambda (1 - T_k) max(0, |v_k| - m-)^2,
                 summed over the classes k, averaged over the batch;
reconstruction:  the SUM of squared pixel errors of each image, scaled by 0.0005 so
                 that it does not dominate the margin loss, averaged over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from capsnet.nn.config import CapsNetConfig


def targets_of(labels: Tensor, classes: int) -> Tensor:
    """T_k for each example: (B,) one class or (B, L) several (MultiMNIST's two) -> (B, K) of 0 and 1."""
    hot = F.one_hot(labels, classes)  # (B, K) or (B, L, K)
    return (hot.sum(dim=1).clamp(max=1) if labels.dim() == 2 else hot).float()


def margin_loss(
    lengths: Tensor, labels: Tensor, m_plus: float = 0.9, m_minus: float = 0.1, down_weight: float = 0.5
) -> Tensor:
    """Equation 4 on capsule lengths (B, K) and integer labels (B,), or (B, L) for several present; mean over the batch."""
    targets = targets_of(labels, lengths.shape[1]).to(lengths.dtype)  # (B, K)
    present = targets * F.relu(m_plus - lengths) ** 2
    absent = down_weight * (1.0 - targets) * F.relu(lengths - m_minus) ** 2
    return (present + absent).sum(dim=1).mean()


def reconstruction_loss(reconstruction: Tensor, images: Tensor, weight: float = 0.0005) -> Tensor:
    """weight * sum of squared pixel errors per example, mean over the batch.

    For MultiMNIST, reconstruction and images are (B, 2, C, H, W): each digit redrawn from its own
    capsule against that digit alone, the two errors summed (section 6 of the paper).
    """
    if reconstruction.shape != images.shape:
        raise ValueError(f"reconstruction {tuple(reconstruction.shape)} and images {tuple(images.shape)} differ")
    return weight * ((reconstruction - images) ** 2).flatten(1).sum(dim=1).mean()


@dataclass
class CapsuleLoss:
    """Total loss and its two parts, as tensors (call `.item()` to log)."""

    total: Tensor
    margin: Tensor
    reconstruction: Tensor


def capsule_loss(
    lengths: Tensor, reconstruction: Tensor, images: Tensor, labels: Tensor, config: CapsNetConfig
) -> CapsuleLoss:
    """Margin loss plus weighted reconstruction loss, with the weights of `config`."""
    margin = margin_loss(lengths.float(), labels, config.m_plus, config.m_minus, config.down_weight)
    recon = reconstruction_loss(reconstruction.float(), images.float(), config.reconstruction_weight)
    return CapsuleLoss(total=margin + recon, margin=margin, reconstruction=recon)


def spread_loss(activations: Tensor, labels: Tensor, margin: float) -> Tensor:
    """The EM paper's spread loss on class activations (B, K) and labels (B,), mean over the batch.

    L = sum_{i != t} max(0, m - (a_t - a_i))^2: every wrong class must stay a margin m below the target's
    activation (Hinton, Sabour & Frosst 2018, section 3.1). The margin grows from 0.2 to 0.9 during training
    (`EMCapsNetConfig.margin`), which keeps dead capsules from being pushed apart too early.
    """
    if labels.dim() != 1:
        raise ValueError(f"the spread loss takes one label per image (B,), got {tuple(labels.shape)}")
    target = activations.gather(1, labels.view(-1, 1))  # a_t: (B, 1)
    gaps = F.relu(margin - (target - activations)) ** 2  # (B, K); the target's own term is m^2
    wrong = 1.0 - F.one_hot(labels, activations.shape[1]).to(activations.dtype)  # (B, K)
    return (gaps * wrong).sum(dim=1).mean()
