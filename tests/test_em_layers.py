"""The EM network's convolutional capsule layers read one child at a time (capsnet.readings.em_layers), checked
against the forward pass and against where each child's windows are, counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.readings.explain_em import explain_em_with_layers


@pytest.fixture(scope="module")
def net() -> EMCapsNet:
    torch.manual_seed(0)
    return EMCapsNet(EMCapsNetConfig.preset("tiny", routing_iterations=3)).eval()


def windows_of(side: int, kernel: int, stride: int, y: int, x: int) -> list[int]:
    """The windows (row-major) whose K x K cells hold cell (y, x), counted in plain loops."""
    n = (side - kernel) // stride + 1
    return [py * n + px for py in range(n) for px in range(n)
            if py * stride <= y < py * stride + kernel and px * stride <= x < px * stride + kernel]  # fmt: skip


def test_each_layer_is_the_forward_pass(net: EMCapsNet) -> None:
    image = torch.rand(28, 28, generator=torch.Generator().manual_seed(1))
    first, second = explain_em_with_layers(net, image.numpy())[1]
    c = net.config
    with torch.no_grad():
        poses, acts = net.primary(F.relu(net.conv1(image.view(1, 1, 28, 28))))
        poses, out1, _ = net.convcaps1(poses, acts, 3)
        _, out2, _ = net.convcaps2(poses, out1, 3)
    assert first.name == "ConvCaps1" and second.name == "ConvCaps2" and first.iterations == second.iterations == 3
    assert first.child_grid == (c.primary_types, 12) and first.parent_grid == (c.convcaps1_types, 5)
    assert second.child_grid == (c.convcaps1_types, 5) and second.parent_grid == (c.convcaps2_types, 3)
    np.testing.assert_allclose(first.child_activations, acts[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(first.parent_activations[-1], out1[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second.child_activations, out1[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second.parent_activations[-1], out2[0].numpy(), rtol=1e-5, atol=1e-6)
    assert first.most_active_child() == int(acts[0].argmax())
    for layer in (first, second):  # a view opens on the most active child that more than one window holds
        chosen = layer.default_child()
        kind, y, x = layer.position(chosen)
        types, side = layer.child_grid
        assert len(windows_of(side, layer.kernel, layer.stride, y, x)) > 1
        shared = [layer.child_activations[t, i, j] for t in range(types) for i in range(side) for j in range(side)
                  if len(windows_of(side, layer.kernel, layer.stride, i, j)) > 1]  # fmt: skip
        assert layer.child_activations[kind, y, x] == max(shared)
    fewer, _ = explain_em_with_layers(net, image.numpy(), iterations=1)[1]
    assert fewer.iterations == 1 and fewer.parent_activations.shape == (1, c.convcaps1_types, 5, 5)


def test_every_child_shares_out_its_one_unit_over_every_window_that_holds_it(net: EMCapsNet) -> None:
    """Parents at different positions compete for a child (Gritzman's pitfall avoided): its R_ij over all its windows
    and all parent types add up to 1, spread evenly at the start; a child in no window (row or column 11 under 3x3
    windows of stride 2) gives nothing."""
    image = torch.rand(28, 28, generator=torch.Generator().manual_seed(2))
    for layer in explain_em_with_layers(net, image.numpy())[1]:
        types, side = layer.child_grid
        parents = layer.parent_grid[0]
        for kind in (0, types - 1):
            for y in range(side):
                for x in range(side):
                    child = layer.child(kind, y, x)
                    assert layer.position(child) == (kind, y, x)
                    windows = windows_of(side, layer.kernel, layer.stride, y, x)
                    for step in range(1, layer.iterations + 1):
                        split = layer.split(child, step)
                        assert sorted(split.positions.tolist()) == windows and split.shares.shape == (
                            len(windows),
                            parents,
                        )
                        assert split.total == pytest.approx(1.0 if windows else 0.0, abs=1e-5)
                    if windows:  # the first M-step weighs it evenly over every parent that sees it
                        np.testing.assert_allclose(
                            layer.split(child, 1).shares, 1 / (len(windows) * parents), rtol=1e-5
                        )
    first, _ = explain_em_with_layers(net, image.numpy())[1]
    assert windows_of(12, 3, 2, 11, 4) == [] and first.split(first.child(0, 11, 4), 1).total == 0.0
    assert len(windows_of(12, 3, 2, 4, 4)) == 4  # a cell on both a row and a column where windows meet: 4 of them
    with pytest.raises(ValueError, match="no child"):
        first.child(0, 12, 0)
    with pytest.raises(ValueError, match="step must be"):
        first.split(0, 4)
