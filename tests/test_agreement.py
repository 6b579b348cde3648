"""The votes behind routing: the forward pass's own trace, projected in a fixed basis, traced back to the input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import agreement as ag
from capsnet.readings.explain import explain


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    digit = np.zeros((28, 28), np.float32)
    digit[6:22, 12:16] = 1.0
    digit[6:9, 9:19] = 0.8
    return digit


def test_votes_match_the_models_routing_and_a_loop(model: CapsNet, image: np.ndarray) -> None:
    votes = explain(model, image, 3).votes
    k, n, d = votes.votes.shape
    assert (k, d) == (10, 16) and n == model.config.num_primary and votes.coupling.shape == (3, n, k)
    with torch.no_grad():
        out = model(torch.from_numpy(image).view(1, 1, 28, 28), routing_iterations=3, return_trace=True)
    np.testing.assert_allclose(votes.poses, out.trace.poses[0].numpy(), atol=1e-5)  # v_j of every iteration
    np.testing.assert_allclose(votes.lengths[-1], out.lengths[0].numpy(), atol=1e-5)
    for t in range(3):  # the slow way: every child, every parent
        for j in (0, 7):
            s = sum(votes.coupling[t, i, j] * votes.votes[j, i] for i in range(n))
            np.testing.assert_allclose(votes.sums[t, j], s, atol=1e-4)
            np.testing.assert_allclose(votes.agreement[t, 5, j], votes.votes[j, 5] @ votes.poses[t, j], atol=1e-5)


def test_the_basis_is_orthonormal_fixed_and_faithful(model: CapsNet, image: np.ndarray) -> None:
    votes = explain(model, image, 4).votes
    view = ag.vote_view(votes, 3)
    basis = view.basis.astype(np.float64)
    np.testing.assert_allclose(basis @ basis.T, np.eye(2), atol=1e-5)
    np.testing.assert_allclose(basis[0], votes.poses[-1, 3] / np.linalg.norm(votes.poses[-1, 3]), atol=1e-5)
    # one basis for every iteration: each iteration's s_j is the coupling-weighted sum of the same 2-D points
    for t in range(4):
        np.testing.assert_allclose(view.sums[t], view.coupling[t] @ view.points, rtol=1e-4, atol=1e-4)
    assert view.points.shape == (votes.votes.shape[1], 2) and view.change.shape == view.coupling.shape
    # the first coordinate is the agreement with the final consensus, divided by its length
    np.testing.assert_allclose(
        view.points[:, 0], view.agreement[-1] / np.linalg.norm(votes.poses[-1, 3]), rtol=1e-4, atol=1e-5
    )
    with pytest.raises(ValueError, match="digit capsule"):
        ag.vote_view(votes, 10)


def test_vote_mass_sums_to_the_number_of_children(model: CapsNet, image: np.ndarray) -> None:
    votes = explain(model, image, 3).votes
    mass = ag.vote_mass(votes.coupling)
    assert mass.shape == (3, 10)
    np.testing.assert_allclose(mass.sum(axis=1), votes.coupling.shape[1], rtol=1e-6)
    np.testing.assert_allclose(mass[0], votes.coupling.shape[1] / 10, rtol=1e-5)  # uniform in the first iteration


@pytest.mark.parametrize("preset", ["paper", "tiny"])
def test_receptive_fields_match_the_gradient_and_cover_the_input(preset: str) -> None:
    config = CapsNetConfig.preset(preset)
    fields = ag.receptive_fields(config)
    g = config.primary_grid
    seen = fields.any(axis=(0, 1))
    assert fields.shape == (g, g, 28, 28) and fields[0, 0].sum() == 17 * 17 and fields[0, 0, :17, :17].all()
    # together they cover the input, but for its last row and column: Conv1 gives 20 rows, and the 9x9
    # stride-2 PrimaryCaps reads rows 0-18 of them, so input row 27 (and column 27) reaches no capsule
    assert seen[:27, :27].all() and not seen[27].any() and not seen[:, 27].any()
    # the slow reference: which input pixels the primary convolution's output at (y, x) depends on
    conv1 = torch.nn.Conv2d(1, 2, config.conv1_kernel)
    primary = torch.nn.Conv2d(2, 2, config.primary_kernel, stride=config.primary_stride)
    for layer in (conv1, primary):
        torch.nn.init.constant_(layer.weight, 1.0)
    for y, x in [(0, 0), (2, 3), (g - 1, g - 1)]:
        inputs = torch.ones(1, 1, 28, 28, requires_grad=True)
        primary(conv1(inputs))[0, 0, y, x].backward()
        np.testing.assert_array_equal(inputs.grad[0, 0].numpy() != 0, fields[y, x])


def test_pixel_votes_against_a_loop(model: CapsNet, image: np.ndarray) -> None:
    votes = explain(model, image).votes
    config = model.config
    pixels = ag.pixel_votes(votes.coupling[-1], votes.primary_lengths, config)  # (28, 28, K)
    fields = ag.receptive_fields(config)
    g = config.primary_grid
    slow = np.zeros((28, 28, 10))
    for i in range(config.num_primary):
        y, x = divmod(i % (g * g), g)
        slow[fields[y, x]] += votes.primary_lengths[i] * votes.coupling[-1, i]
    np.testing.assert_allclose(pixels, slow, rtol=1e-4, atol=1e-5)


def test_the_capsule_order_is_the_models_own(model: CapsNet) -> None:
    """A pixel seen only by grid position (5, 0) changes only the capsules i = type * G^2 + 5 * G + 0, and pixel_votes
    spreads exactly those capsules' votes over that pixel."""
    config = model.config
    g = config.primary_grid
    base = np.zeros((28, 28), np.float32)
    base[10:18, 10:18] = 0.5
    lit = base.copy()
    lit[26, 0] = 1.0  # rows 10-26 and columns 0-16 are position (5, 0)'s alone in the bottom-left corner
    changed = np.abs(explain(model, lit).votes.primary_lengths - explain(model, base).votes.primary_lengths) > 1e-7
    expected = np.zeros(config.num_primary, bool)
    expected[np.arange(config.primary_types) * g * g + 5 * g + 0] = True
    assert (changed == expected).all(), np.flatnonzero(changed)
    coupling = np.zeros((config.num_primary, 10), np.float32)
    coupling[expected, 3] = 1.0
    pixels = ag.pixel_votes(coupling, np.ones(config.num_primary, np.float32), config)
    assert pixels[26, 0, 3] == config.primary_types and pixels[26, 0].sum() == config.primary_types
    assert pixels[9, 0].sum() == 0 and pixels[26, 17].sum() == 0  # just outside that field


def test_the_overlay_leaves_ink_blank_where_routing_has_not_chosen() -> None:
    from dashboard import figures

    image = np.zeros((28, 28), np.float32)
    image[8:20, 12:16] = 1.0
    uniform = np.ones((28, 28, 10))  # every capsule gets the same mass: iteration 1
    z = np.asarray(figures.vote_overlay_figure(image, uniform, [str(k) for k in range(10)]).data[1].z, dtype=float)
    assert np.isnan(z).all()  # no stroke is painted as capsule 0 for a tie
    leaning = uniform.copy()
    leaning[..., 7] += 0.5
    fig = figures.vote_overlay_figure(image, leaning, [f"c{k}" for k in range(10)])
    z = np.asarray(fig.data[1].z, dtype=float)
    assert (z[8:20, 12:16] == 7).all() and np.isnan(z[0, 0])  # ink only
    assert np.asarray(fig.data[1].customdata)[10, 13, 1] == "c7"  # the hover names the class


def test_a_primary_capsules_reading_is_its_row_of_the_trace(model: CapsNet, image: np.ndarray) -> None:
    votes = explain(model, image, 3).votes
    config = model.config
    g = config.primary_grid
    i = 2 * g * g + 1 * g + 3  # type 2, row 1, column 3
    one = ag.primary_reading(votes, config, i)
    assert (one.kind, one.y, one.x) == (2, 1, 3)
    np.testing.assert_array_equal(one.coupling, votes.coupling[:, i])
    np.testing.assert_allclose(one.coupling.sum(axis=1), 1.0, rtol=1e-5)  # a child's couplings sum to 1 over K
    slow = [float(votes.votes[j, i] @ votes.poses[-1, j]) for j in range(10)]  # u_hat_{j|i} . v_j, one j at a time
    np.testing.assert_allclose(one.agreement[-1], slow, rtol=1e-5, atol=1e-7)
    # its box is the receptive field: the same pixels, at every position
    fields = ag.receptive_fields(config)
    for index in (0, i, config.num_primary - 1):
        top, left, size = ag.receptive_box(config, index)
        _, y, x = config.primary_position(index)
        box = np.zeros((28, 28), bool)
        box[top : top + size, left : left + size] = True
        np.testing.assert_array_equal(box, fields[y, x])
    # the first capsule shown: sure of its feature where the ink is, its couplings moved by routing (the slow way:
    # one capsule at a time); the longest where the ink is had couplings of 1/K, a flat chart
    ink = [float(image[fields[config.primary_position(n)[1:]]].sum()) for n in range(config.num_primary)]
    moved = [max(abs(float(c) - 0.1) for c in votes.coupling[-1, n]) for n in range(config.num_primary)]
    score = [votes.primary_lengths[n] * ink[n] * (moved[n] + 1e-9) for n in range(config.num_primary)]
    first = ag.first_primary(votes, image, config)
    assert first == int(np.argmax(score))
    assert moved[first] >= np.median([m for m, k in zip(moved, ink) if k > 0])  # it moved more than most under ink
    with pytest.raises(ValueError, match="primary capsule"):
        ag.primary_reading(votes, config, config.num_primary)


def test_in_a_colour_picture_the_first_capsule_shown_sees_what_stands_out() -> None:
    """A photo has no ink: the first capsule shown sits where the picture differs from its mean colour (a
    red square on blue), never where it is as plain as the rest."""
    torch.manual_seed(4)
    net = CapsNet(CapsNetConfig.preset("tiny", in_channels=3, image_size=32)).eval()
    config = net.config
    picture = np.zeros((32, 32, 3), np.float32)
    picture[..., 2] = 0.7
    picture[20:30, 20:30] = (1.0, 0.0, 0.0)  # the square, at the bottom right
    votes = explain(net, picture, 3).votes
    first = ag.first_primary(votes, picture, config)
    top, left, size = ag.receptive_box(config, first)
    assert top + size > 20 and left + size > 20  # its receptive field holds some of the square
    stands_out = ag._ink(picture)
    assert stands_out.shape == (32, 32) and stands_out[25, 25] > 5 * stands_out[2, 2]


def test_vote_mass_weighted_by_length_ignores_the_capsules_that_detect_nothing() -> None:
    """A thousand inactive children with uniform couplings held every share at 1/K."""
    coupling = np.full((2, 1000, 10), 0.1)  # (r, N, K): 999 idle children, uniform
    coupling[1, 0] = [0.55] + [0.05] * 9  # iteration 2: the one active child leans to capsule 0
    lengths = np.zeros(1000)
    lengths[0] = 0.9
    plain = ag.vote_mass(coupling)
    weighted = ag.vote_mass(coupling, lengths)
    assert plain[1, 0] / plain[1].sum() < 0.101  # drowned
    np.testing.assert_allclose(weighted.sum(axis=1), [0.9, 0.9])  # each row sums to sum |u_i|
    np.testing.assert_allclose(weighted[:, 0] / weighted.sum(axis=1), [0.1, 0.55])  # what routing did


def test_with_none_of_the_above_uniform_is_one_over_k_plus_one() -> None:
    """Section 7's "none-of-the-above" category: before routing each child sends 1/(K+1) to each class (the rest to
    no class), and the views measure a coupling's move from that, not from 1/K."""
    from dashboard.figures import primary_coupling_figure
    from dashboard.routing_texts import primary_coupling

    torch.manual_seed(6)
    net = CapsNet(CapsNetConfig.preset("tiny", none_of_the_above=True)).eval()
    digit = np.zeros((28, 28), np.float32)
    digit[6:22, 12:16] = 1.0
    votes = explain(net, digit, 3).votes
    assert votes.leak and votes.uniform == pytest.approx(1 / 11) == net.config.uniform_coupling
    np.testing.assert_allclose(votes.coupling[0], 1 / 11, rtol=1e-5)
    view = ag.vote_view(votes, 2)
    np.testing.assert_allclose(view.change[0], 0.0, atol=1e-6)  # no move before routing
    one = ag.primary_reading(votes, net.config, 0)
    line = primary_coupling_figure(one.coupling, one.agreement, list("0123456789"), "t", 2, uniform=votes.uniform)
    assert line.layout.shapes[0].y0 == pytest.approx(1 / 11)
    said = primary_coupling(one.length, one.coupling[-1], list("0123456789"), 3, leak=True)
    assert "to none of the above" in said and "1/11" in said
