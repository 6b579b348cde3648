"""Efficient-CapsNet (capsnet/nn/efficient_capsnet.py): the paper's parameter count, its squash, self-attention
routing against a slow reference, each example routed on its own, and the decoder masked by the truth in training."""

from __future__ import annotations

import math

import pytest
import torch

from capsnet.nn.efficient_capsnet import EfficientCapsNet, EfficientCapsNetConfig, squash
from capsnet.nn.registry import network, network_of


def test_the_paper_network_has_the_papers_parameters() -> None:
    """161,824 trainable parameters without the decoder (the paper's "161K"), the decoder the CapsNet's 1,411,344."""
    model = EfficientCapsNet()
    assert model.num_parameters(decoder=False) == 161_824
    assert model.num_parameters() - model.num_parameters(decoder=False) == 1_411_344
    assert model.config.num_primary == 16 and model.config.feature_side == 9


def test_squash_is_the_papers_and_has_no_nan_at_zero() -> None:
    s = torch.tensor([[0.0, 0.0], [3.0, 4.0]], requires_grad=True)
    v = squash(s)
    assert torch.isfinite(v).all() and v[0].abs().sum() == 0
    assert math.isclose(float(v[1].norm()), 1 - math.exp(-5.0), rel_tol=1e-6)
    v.sum().backward()
    assert torch.isfinite(s.grad).all()


def _reference(model: EfficientCapsNet, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FCCaps for one example at a time, loop by loop, as the paper writes it: the class capsules and the couplings."""
    c = model.config
    poses, couplings = [], []
    for image in images:
        u = squash(model.primary(model.features(image[None])).reshape(c.num_primary, c.primary_dim))  # (N, d)
        v = torch.zeros(c.num_classes, c.digit_dim)
        coupling = torch.zeros(c.num_primary, c.num_classes)
        votes = torch.stack([torch.stack([u[i] @ model.W[j, i] for i in range(c.num_primary)])
                             for j in range(c.num_classes)])  # (K, N, D)  # fmt: skip
        logits = torch.zeros(c.num_classes, c.num_primary)
        for j in range(c.num_classes):
            for i in range(c.num_primary):
                logits[j, i] = sum(votes[j, i] @ votes[j, m] for m in range(c.num_primary)) / math.sqrt(c.digit_dim)
        for i in range(c.num_primary):
            coupling[i] = torch.softmax(logits[:, i], dim=0) + model.b[:, i]
        for j in range(c.num_classes):
            v[j] = squash(sum(coupling[i, j] * votes[j, i] for i in range(c.num_primary)))
        poses.append(v)
        couplings.append(coupling)
    return torch.stack(poses), torch.stack(couplings)


def test_attention_routing_matches_a_slow_reference_and_each_example_routes_on_its_own() -> None:
    torch.manual_seed(0)
    model = EfficientCapsNet(EfficientCapsNetConfig.preset("tiny")).eval()
    with torch.no_grad():
        model.b.normal_(0, 0.01)
        images = torch.rand(3, 1, 28, 28)
        out = model(images)
        poses, coupling = _reference(model, images)
        torch.testing.assert_close(out.poses, poses, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out.coupling, coupling, rtol=1e-4, atol=1e-5)
        # a child's attention is a softmax over the classes (the bias apart), never over the children
        torch.testing.assert_close((out.coupling - model.b.T).sum(dim=2), torch.ones(3, model.config.num_primary))
        alone = model(images[1:2])  # another batch around it changes nothing of an example's routing
        torch.testing.assert_close(alone.coupling[0], out.coupling[1], rtol=1e-5, atol=1e-6)


def test_the_decoder_redraws_the_true_class_in_training_and_the_prediction_reading() -> None:
    torch.manual_seed(1)
    model = EfficientCapsNet(EfficientCapsNetConfig.preset("tiny"))
    images = torch.rand(4, 1, 28, 28)
    model.eval()
    with torch.no_grad():
        read = model(images)
        labels = (read.prediction + 1) % 10  # every label wrong
        model.train()
        trained = model(images, labels)
        model.eval()
        torch.testing.assert_close(trained.reconstruction, model.decode(trained.poses, labels))
        torch.testing.assert_close(read.reconstruction, model.decode(read.poses, read.prediction))


def test_it_is_a_registered_family_with_its_own_routing() -> None:
    net = network("efficient")
    assert network_of(EfficientCapsNetConfig()) is net and net.routes().kind == "attention"
    assert net.redraws(EfficientCapsNetConfig()) and not net.redraws(EfficientCapsNetConfig(decoder_hidden=()))
    with pytest.raises(ValueError, match="too small"):
        EfficientCapsNetConfig(image_size=8)
    loss = net.loss(EfficientCapsNet(EfficientCapsNetConfig.preset("tiny")).train()(torch.rand(2, 1, 28, 28),
                    torch.tensor([3, 4])), torch.rand(2, 1, 28, 28), torch.tensor([3, 4]), EfficientCapsNetConfig())  # fmt: skip
    assert torch.isfinite(loss.total) and float(loss.reconstruction) > 0
