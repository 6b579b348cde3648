"""Margin and reconstruction losses against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.losses import capsule_loss, margin_loss, reconstruction_loss


def test_margin_loss_by_hand() -> None:
    lengths = torch.tensor([[0.95, 0.05, 0.5], [0.3, 0.2, 0.0]])
    labels = torch.tensor([0, 2])
    # example 1: present 0.95 >= 0.9 -> 0; absent 0.05 <= 0.1 -> 0; absent 0.5 -> 0.5 * 0.4^2 = 0.08
    # example 2: absent 0.3 -> 0.5 * 0.2^2 = 0.02; absent 0.2 -> 0.5 * 0.1^2 = 0.005; present 0.0 -> 0.9^2 = 0.81
    expected = (0.08 + (0.02 + 0.005 + 0.81)) / 2
    assert margin_loss(lengths, labels).item() == pytest.approx(expected, abs=1e-6)


def test_margin_loss_zero_for_perfect_lengths() -> None:
    lengths = torch.full((4, 10), 0.05)
    labels = torch.tensor([1, 3, 5, 7])
    lengths[torch.arange(4), labels] = 0.97
    assert margin_loss(lengths, labels).item() == 0.0


def test_reconstruction_loss_is_a_sum_over_pixels_not_a_mean() -> None:
    images = torch.zeros(2, 1, 28, 28)
    recon = torch.full((2, 1, 28, 28), 0.5)
    # each image: 784 * 0.25 = 196; times 0.0005 = 0.098; mean over the batch
    assert reconstruction_loss(recon, images).item() == pytest.approx(0.098, abs=1e-6)
    with pytest.raises(ValueError, match="differ"):
        reconstruction_loss(recon[:1], images)


def test_capsule_loss_uses_config_weights() -> None:
    config = CapsNetConfig(reconstruction_weight=0.001, m_plus=0.8, down_weight=1.0)
    lengths = torch.tensor([[0.5, 0.6]])
    labels = torch.tensor([0])
    images, recon = torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    loss = capsule_loss(lengths, recon, images, labels, config)
    assert loss.margin.item() == pytest.approx(0.3**2 + 1.0 * 0.5**2)
    assert loss.reconstruction.item() == pytest.approx(0.004)
    assert loss.total.item() == pytest.approx(loss.margin.item() + 0.004)
