"""The explanation math: every view is one pass, one reshape or one batched decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capsnet.checkpoints.header import CheckpointInfo
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings.decoding import PERTURBATION_STEPS, decode_vector, dimension_ranges, perturbation_grid
from capsnet.readings.explain import (
    coupling_by_type,
    coupling_maps,
    explain,
)
from capsnet.readings.reconstruction import misclassified, reconstruct


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    img = np.zeros((28, 28), np.float32)
    img[4:24, 12:16] = 1.0  # a '1'
    return img


def test_explain_returns_every_view(model: CapsNet, image: np.ndarray) -> None:
    c = model.config
    e = explain(model, image, routing_iterations=4)
    assert e.iterations == 4
    assert e.lengths.shape == (10,) and e.poses.shape == (10, c.digit_dim)
    assert e.prediction == int(np.argmax(e.lengths))
    assert e.reconstruction.shape == (28, 28) and e.decode_class == e.prediction
    assert e.coupling.shape == (4, c.num_primary, 10)
    np.testing.assert_allclose(e.coupling.sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(e.coupling[0], 0.1, atol=1e-6)  # b = 0: uniform at the first iteration
    assert e.iteration_lengths.shape == (4, 10)
    np.testing.assert_allclose(e.iteration_lengths[-1], e.lengths, atol=1e-5)
    assert e.primary_lengths.shape == (c.num_primary,)
    # the same as the model's own forward pass
    with torch.inference_mode():
        out = model(torch.from_numpy(image).view(1, 1, 28, 28), routing_iterations=4)
    np.testing.assert_allclose(e.lengths, out.lengths[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(e.reconstruction, out.reconstruction[0, 0].numpy(), atol=1e-6)


def test_explain_follows_any_number_of_iterations(image: np.ndarray) -> None:
    """Training allows any r >= 1, so a model trained with 6 (or 8) iterations must be explainable as it is."""
    model = CapsNet(CapsNetConfig.preset("tiny", routing_iterations=6)).eval()
    e = explain(model, image)
    assert e.iterations == 6 and e.coupling.shape[0] == 6 and e.iteration_lengths.shape == (6, 10)
    assert explain(model, image, routing_iterations=8).coupling.shape[0] == 8


def test_explain_decodes_another_class(model: CapsNet, image: np.ndarray) -> None:
    e = explain(model, image)
    other = (e.prediction + 1) % 10
    f = explain(model, image, decode_class=other)
    assert f.decode_class == other and f.prediction == e.prediction
    assert not np.allclose(f.reconstruction, e.reconstruction)
    np.testing.assert_allclose(f.reconstruction, decode_vector(model, e.poses[other], other), atol=1e-6)


def test_explain_names_the_runner_up_and_the_answer_before_routing(model: CapsNet, image: np.ndarray) -> None:
    e = explain(model, image, routing_iterations=3)
    ranked = sorted(range(10), key=lambda j: -e.lengths[j])  # the slow way
    assert (e.prediction, e.runner_up) == (ranked[0], ranked[1])
    one = explain(model, image, routing_iterations=1)
    assert e.first_prediction == one.prediction  # the first iteration is routing with uniform couplings
    np.testing.assert_allclose(e.iteration_lengths[0], one.lengths, atol=1e-6)
    # the trace is the forward pass's own: s_j is the coupling-weighted sum of the votes
    np.testing.assert_allclose(e.votes.sums, np.einsum("tnk,knd->tkd", e.coupling, e.votes.votes), atol=1e-5)


def test_explain_checks_its_inputs(model: CapsNet, image: np.ndarray) -> None:
    with pytest.raises(ValueError, match="iteration"):
        explain(model, image, routing_iterations=0)
    with pytest.raises(ValueError, match="class index"):
        explain(model, image, decode_class=10)
    with pytest.raises(ValueError, match="28x28"):
        explain(model, np.zeros((10, 10)))
    training = CapsNet(CapsNetConfig.preset("tiny")).train()
    with pytest.raises(ValueError, match="eval mode"):
        explain(training, image)


def test_coupling_by_type_weighted_and_plain() -> None:
    # 2 types of a 1x2 grid (4 primary capsules), 2 classes, 1 iteration
    coupling = np.array([[[0.9, 0.1], [0.5, 0.5], [0.2, 0.8], [0.4, 0.6]]], np.float32)  # (1, 4, 2)
    lengths = np.array([1.0, 0.0, 0.5, 0.5], np.float32)
    weighted = coupling_by_type(coupling, lengths, 4, 1)
    np.testing.assert_allclose(weighted[0], coupling[0], atol=1e-6)  # grid 1: each capsule is its own type
    coupling8 = np.concatenate([coupling, coupling], axis=1)  # (1, 8, 2): 2 types of a 2x2 grid
    lengths8 = np.concatenate([lengths, lengths])
    mean = coupling_by_type(coupling8, None, 2, 2, "mean")
    np.testing.assert_allclose(mean[0, 0], coupling[0].mean(axis=0), atol=1e-6)
    w = coupling_by_type(coupling8, lengths8, 2, 2, "length")
    expected = (coupling[0] * lengths[:, None]).sum(axis=0) / lengths.sum()
    np.testing.assert_allclose(w[0, 0], expected, atol=1e-6)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-6)
    # a type with no active capsule falls back to the plain mean
    zero = coupling_by_type(coupling8, np.zeros(8, np.float32), 2, 2, "length")
    np.testing.assert_allclose(zero, mean, atol=1e-6)
    with pytest.raises(ValueError, match="weighting"):
        coupling_by_type(coupling8, lengths8, 2, 2, "median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        coupling_by_type(coupling8, lengths8, 3, 2)


def test_coupling_maps_follow_the_capsule_order(model: CapsNet, image: np.ndarray) -> None:
    """Primary capsule i = type * grid^2 + y * grid + x."""
    e = explain(model, image)
    g, types = e.primary_grid, e.primary_types
    maps = coupling_maps(e.coupling, 3, types, g)
    assert maps.shape == (e.iterations, types, g, g)
    t, y, x = 5, 2, 4
    assert maps[-1, t, y, x] == e.coupling[-1, t * g * g + y * g + x, 3]
    with pytest.raises(ValueError, match="digit capsule"):
        coupling_maps(e.coupling, 10, types, g)


def test_perturbation_grid_is_one_batched_decode(
    model: CapsNet, image: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = explain(model, image)
    vector, klass = e.poses[e.prediction], e.prediction
    calls = []
    original = model.decode
    monkeypatch.setattr(model, "decode", lambda *a, **k: calls.append(a[0].shape) or original(*a, **k))
    grid = perturbation_grid(model, vector, klass)
    assert calls == [(16 * 11, 10, 16)]
    assert grid.shape == (16, 11, 28, 28)
    monkeypatch.undo()
    assert len(PERTURBATION_STEPS) == 11 and PERTURBATION_STEPS[0] == pytest.approx(-0.25)
    assert PERTURBATION_STEPS[5] == 0.0 and np.allclose(np.diff(PERTURBATION_STEPS), 0.05)
    for d, s in [(0, 0), (7, 3), (15, 10)]:
        moved = vector.copy()
        moved[d] += PERTURBATION_STEPS[s]
        np.testing.assert_allclose(grid[d, s], decode_vector(model, moved, klass), atol=1e-5)
    np.testing.assert_allclose(grid[:, 5], np.broadcast_to(e.reconstruction, (16, 28, 28)), atol=1e-5)


def test_decode_vector_checks_its_input(model: CapsNet) -> None:
    assert decode_vector(model, np.zeros(16), 2).shape == (28, 28)
    with pytest.raises(ValueError, match="16-D"):
        decode_vector(model, np.zeros(8), 2)
    with pytest.raises(ValueError, match="class index"):
        decode_vector(model, np.zeros(16), -1)


def test_dimension_ranges_from_checkpoint_statistics() -> None:
    mean = np.arange(160, dtype=np.float32).reshape(10, 16) / 1000
    std = np.full((10, 16), 0.05, np.float32)
    info = CheckpointInfo.from_dict({"dimension_mean": mean.tolist(), "dimension_std": std.tolist()})
    ranges = dimension_ranges(info, 3, digit_dim=16)
    assert ranges.from_statistics
    np.testing.assert_allclose(ranges.low, mean[3] - 0.1, atol=1e-6)
    np.testing.assert_allclose(ranges.high, mean[3] + 0.1, atol=1e-6)
    current = mean[3].copy()
    current[0] = 5.0  # far outside: the range widens to hold it
    low, high = (r := dimension_ranges(info, 3, current, 16)).low, r.high
    assert low[0] <= 5.0 <= high[0] and np.all(low <= current) and np.all(current <= high)
    ranges = dimension_ranges(CheckpointInfo(), 3, digit_dim=16)  # no statistics: -0.5 .. 0.5, and it says so
    np.testing.assert_allclose(ranges.low, -0.5)
    np.testing.assert_allclose(ranges.high, 0.5)
    assert not ranges.from_statistics


def test_dimension_ranges_say_when_the_statistics_are_unusable() -> None:
    """Statistics of the wrong shape (or not numbers) fall back to -0.5 .. 0.5: the page must be told."""
    wrong = CheckpointInfo.from_dict({"dimension_mean": [[0.0] * 8] * 10, "dimension_std": [[0.1] * 8] * 10})
    assert wrong.dimension_mean is not None  # present in the header...
    ranges = dimension_ranges(wrong, 3, digit_dim=16)
    assert not ranges.from_statistics  # ...but not usable for 16-D capsules
    np.testing.assert_allclose(ranges.low, -0.5)
    garbage = CheckpointInfo.from_dict({"dimension_mean": "lots", "dimension_std": None})
    assert garbage.dimension_mean is None and not dimension_ranges(garbage, 0).from_statistics


def test_reconstruct_and_misclassified(model: CapsNet, image: np.ndarray) -> None:
    batch = np.stack([image, image.T, np.zeros_like(image)])
    r = reconstruct(model, batch, batch_size=2)
    assert r.reconstructions.shape == (3, 28, 28) and r.lengths.shape == (3, 10) and r.predictions.shape == (3,)
    np.testing.assert_allclose(r.reconstructions[0], explain(model, image).reconstruction, atol=1e-5)
    predictions = np.array([1, 2, 3, 4])
    labels = np.array([1, 5, 3, 7])
    lengths = np.zeros((4, 10))
    lengths[1, 2], lengths[3, 4] = 0.6, 0.9
    assert misclassified(predictions, labels, lengths).tolist() == [3, 1]  # most confident mistake first
    assert misclassified(predictions, labels, lengths, limit=1).tolist() == [3]


def test_figure_4_moves_each_capsule_by_its_own_spread() -> None:
    """The paper's +/- 0.25 is about 3 of the CapsNet's standard deviations and 15 of the EM
    network's pose entries' (most of its rows were broken drawings): a capsule that spreads less is moved by +/- 4 of
    its mean standard deviation; the CapsNet keeps the paper's steps, and so does a checkpoint without statistics."""
    from capsnet.readings.decoding import perturbation_steps

    capsnet_std = np.full((10, 16), 0.0777)  # the shipped MNIST CapsNet's mean
    assert np.array_equal(perturbation_steps(capsnet_std), PERTURBATION_STEPS)
    em = perturbation_steps(np.full((10, 16), 0.0162))  # the shipped EM model's
    assert len(em) == 11 and em[5] == 0.0 and em[-1] == pytest.approx(0.065) and em[0] == pytest.approx(-0.065)
    assert np.allclose(np.diff(em), 0.013)
    for missing in (None, [], "wide", [[float("nan")]], [[0.0]]):
        assert np.array_equal(perturbation_steps(missing), PERTURBATION_STEPS), missing


def test_a_colour_capsule_is_redrawn_in_colour() -> None:
    """A colour model's decodes are pictures (H, W, 3), one per dimension and step in Figure 4's grid,
    each the same as decoding that vector alone."""
    torch.manual_seed(3)
    net = CapsNet(CapsNetConfig.preset("tiny", in_channels=3, image_size=32)).eval()
    vector = np.linspace(-0.2, 0.2, 16).astype(np.float32)
    grid = perturbation_grid(net, vector, 4)
    assert grid.shape == (16, 11, 32, 32, 3)
    moved = vector.copy()
    moved[5] += PERTURBATION_STEPS[2]
    np.testing.assert_allclose(grid[5, 2], decode_vector(net, moved, 4), atol=1e-5)
