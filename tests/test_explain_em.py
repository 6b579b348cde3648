"""One input read by the EM network (capsnet.readings.explain_em), checked against the forward pass it comes from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.readings.explain_em import explain_em


@pytest.fixture(scope="module")
def net() -> EMCapsNet:
    torch.manual_seed(0)
    return EMCapsNet(EMCapsNetConfig.preset("tiny", decoder_hidden=(16,), routing_iterations=3)).eval()


def test_the_reading_is_the_forward_pass(net: EMCapsNet) -> None:
    image = torch.rand(28, 28, generator=torch.Generator().manual_seed(1))
    reading = explain_em(net, image.numpy())
    with torch.no_grad():
        out = net(image.view(1, 1, 28, 28), return_trace=True)
    np.testing.assert_allclose(reading.activations, out.activations[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(reading.poses, out.poses[0].numpy(), rtol=1e-6)
    assert reading.prediction == int(out.activations[0].argmax()) == reading.decode_class
    assert reading.reconstruction is not None and reading.reconstruction.shape == (28, 28)
    assert reading.iterations == 3
    # the last M-step's activations are the output's; each M-step shares out all of the children's data
    np.testing.assert_allclose(reading.activations_by_iteration[-1], reading.activations, rtol=1e-5)
    assert reading.shares.shape == (3, 10) and np.allclose(reading.shares.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(reading.shares[0], 0.1, atol=1e-6)  # the start: every child spread evenly
    assert (reading.spreads > 0).all() and np.isfinite(reading.spreads).all()
    assert reading.runner_up != reading.prediction
    # every child's data is shared out over the classes; the trace's own R_ij, in (type, y, x) order
    types, side = reading.child_grid
    assert reading.assignments.shape == (3, 10, types * side * side) == (3, 10, len(reading.child_activations))
    np.testing.assert_allclose(reading.assignments.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(reading.assignments, out.trace.assignments[0, :, 0].numpy(), atol=1e-6)
    fewer = explain_em(net, image.numpy(), iterations=1)  # every capsule layer routed once: one M-step
    assert fewer.iterations == 1 and fewer.assignments.shape[0] == 1
    with torch.no_grad():
        once = net(image.view(1, 1, 28, 28), routing_iterations=1)
    np.testing.assert_allclose(fewer.activations, once.activations[0].numpy(), rtol=1e-6)


def test_another_class_is_redrawn_on_request_and_a_bad_one_refused(net: EMCapsNet) -> None:
    image = np.zeros((28, 28), np.float32)  # an empty canvas: no NaN anywhere
    winner = explain_em(net, image)
    assert np.isfinite(winner.activations).all() and np.isfinite(winner.shares).all()
    other = (winner.prediction + 1) % 10
    redrawn = explain_em(net, image, decode_class=other)
    assert redrawn.decode_class == other and not np.allclose(redrawn.reconstruction, winner.reconstruction)
    with pytest.raises(ValueError, match="class index"):
        explain_em(net, image, decode_class=10)


def test_without_a_decoder_there_is_no_redraw() -> None:
    torch.manual_seed(0)
    reading = explain_em(EMCapsNet(EMCapsNetConfig.preset("tiny")).eval(), np.zeros((28, 28), np.float32))
    assert reading.reconstruction is None
