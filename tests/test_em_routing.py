"""EM routing (capsnet.nn.em_routing) against a slow float64 reference written from the paper's Procedure 1 in plain
loops, values and gradients, and on the pitfalls Gritzman (2019) lists."""

from __future__ import annotations

import math

import pytest
import torch

from capsnet.nn.em_capsnet import EM_PRESETS, EMCapsNet
from capsnet.nn.em_routing import (
    EPSILON,
    VARIANCE_FLOOR,
    child_softmax,
    em_routing,
    em_routing_by_iterations,
    inverse_temperature,
    reach_counts,
)
from capsnet.nn.matrix_capsules import ClassCapsules, ConvCapsules


def reference_em(votes, acts, child_index, children, beta_u, beta_a, iterations):
    """Procedure 1 of the EM paper, one example, parent and child at a time, in float64 (each pose entry h a vector).

    votes (B, P, J, I, H), acts (B, P, I); returns mu (B, P, J, H) and a (B, P, J). The data assigned to a parent is
    scaled by J / I (pitfall 3), every sigma^2 has the floor, and a child's R_ij sums to 1 over every parent it
    reaches, at every position (pitfall 1).
    """
    batch, positions, parents, slots, _ = votes.shape
    slot_of = {}  # child -> its (p, i) slots
    for p in range(positions):
        for i in range(slots):
            slot_of.setdefault(int(child_index[p, i]), []).append((p, i))
    means, activations = [], []
    for b in range(batch):
        R = {(p, j, i): 1.0 / (len(slot_of[int(child_index[p, i])]) * parents)
             for p in range(positions) for j in range(parents) for i in range(slots)}  # fmt: skip
        for t in range(iterations):
            lam = 0.3 * (1 - 0.95 ** (t + 1))
            mu, var, act = {}, {}, {}
            for p in range(positions):
                for j in range(parents):
                    r = [R[p, j, i] * acts[b, p, i] for i in range(slots)]
                    n = sum(r)
                    mu[p, j] = sum(r[i] * votes[b, p, j, i] for i in range(slots)) / (n + EPSILON)
                    spread = sum(r[i] * (votes[b, p, j, i] - mu[p, j]) ** 2 for i in range(slots)) / (n + EPSILON)
                    var[p, j] = spread + VARIANCE_FLOOR
                    cost = (beta_u[j] + 0.5 * torch.log(var[p, j])) * n * parents / slots
                    act[p, j] = torch.sigmoid(lam * (beta_a[j] - cost.sum()))
            if t < iterations - 1:  # E-step
                weight = {}
                for p in range(positions):
                    for j in range(parents):
                        for i in range(slots):
                            d = votes[b, p, j, i] - mu[p, j]
                            density = torch.exp(-0.5 * (d * d / var[p, j]).sum()) / torch.sqrt(
                                torch.prod(2 * math.pi * var[p, j])
                            )
                            weight[p, j, i] = act[p, j] * density
                for slots_of_child in slot_of.values():
                    total = sum(weight[p, j, i] for p, i in slots_of_child for j in range(parents))
                    for p, i in slots_of_child:
                        for j in range(parents):
                            R[p, j, i] = weight[p, j, i] / total
        means.append(torch.stack([torch.stack([mu[p, j] for j in range(parents)]) for p in range(positions)]))
        activations.append(torch.stack([torch.stack([act[p, j] for j in range(parents)]) for p in range(positions)]))
    return torch.stack(means), torch.stack(activations)


def _inputs(positions, parents, slots, batch=2, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    votes = torch.randn(batch, positions, parents, slots, 16, generator=g, dtype=torch.float64) * spread
    acts = torch.rand(batch, positions, slots, generator=g, dtype=torch.float64)
    beta_u = torch.randn(parents, generator=g, dtype=torch.float64) * 0.5
    beta_a = torch.randn(parents, generator=g, dtype=torch.float64) * 0.5
    return [x.requires_grad_() for x in (votes, acts, beta_u, beta_a)]


def _check_against_reference(votes, acts, beta_u, beta_a, child_index, children, iterations):
    """Both backward paths ("manual" and "autograd") against one run of the slow reference."""
    inputs = (votes, acts, beta_u, beta_a)
    ref_mean, ref_act = reference_em(votes, acts, child_index, children, beta_u, beta_a, iterations)
    g = torch.Generator().manual_seed(1)
    w_mean = torch.randn(ref_mean.shape, generator=g, dtype=torch.float64)
    w_act = torch.randn(ref_act.shape, generator=g, dtype=torch.float64)
    ref_grads = torch.autograd.grad((ref_mean * w_mean).sum() + (ref_act * w_act).sum(), inputs)
    for backward in ("manual", "autograd"):
        mean, act, _ = em_routing(votes, acts, child_index, children, beta_u, beta_a, iterations, backward=backward)
        grads = torch.autograd.grad((mean * w_mean).sum() + (act * w_act).sum(), inputs)
        torch.testing.assert_close(mean, ref_mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(act, ref_act, rtol=1e-9, atol=1e-10)
        for name, got, want in zip(("votes", "activations", "beta_u", "beta_a"), grads, ref_grads):
            torch.testing.assert_close(
                got, want, rtol=1e-7, atol=1e-9, msg=lambda m, n=name, b=backward: f"{b}: d/d{n}: {m}"
            )


# three iterations of the reference on a preset's fan-in take 3-10 s each: the whole suite runs them, `make check` 1 and 2
@pytest.mark.parametrize("iterations", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("preset", sorted(EM_PRESETS))
def test_class_layer_matches_the_reference(preset, iterations):
    """Each preset's class capsules (every child reaches every class once), both backward passes."""
    c = EM_PRESETS[preset]
    layer = ClassCapsules(c.convcaps2_types, c.num_classes, c.convcaps2_grid)
    slots = layer.children_count
    if slots > 100:  # the reference is slow: the preset's fan-in per class, but fewer positions of it
        slots = c.convcaps2_types * 2
    index = torch.arange(slots).view(1, -1)
    votes, acts, beta_u, beta_a = _inputs(1, c.num_classes, slots, spread=0.5)
    _check_against_reference(votes, acts, beta_u, beta_a, index, slots, iterations)


@pytest.mark.parametrize("layout", ["contiguous", "slots first"])
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_convolutional_layer_matches_the_reference(iterations, layout):
    """A 3x3 stride-1 capsule convolution, where a child sits in up to 9 windows that compete for it; its votes laid
    out (B, P, J, I, H) or, as `ConvCapsules` makes them, a view of one product per slot (I, B, P, J, H)."""
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=1, in_size=4)  # 2x2 windows of 18 slots
    positions, slots = layer.child_index.shape
    votes, acts, beta_u, beta_a = _inputs(positions, 3, slots, seed=3)
    if layout == "slots first":
        votes = votes.detach().permute(3, 0, 1, 2, 4).contiguous().requires_grad_().permute(1, 2, 3, 0, 4)
        assert not votes.is_contiguous()
    _check_against_reference(votes, acts, beta_u, beta_a, layer.child_index, layer.children_count, iterations)


def test_one_run_gives_what_routing_r_times_gives_for_every_r():
    """`em_routing_by_iterations(.., 4)[r - 1]` is `em_routing(.., r)` for r = 1..4, values and gradients, on a
    capsule convolution whose windows compete for their children; and r = 2 matches the float64 reference."""
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=1, in_size=4)
    positions, slots = layer.child_index.shape
    votes, acts, beta_u, beta_a = _inputs(positions, 3, slots, seed=5)
    args = (layer.child_index, layer.children_count, beta_u, beta_a)
    means, activations = em_routing_by_iterations(votes, acts, *args, 4)
    assert means.shape == (4, 2, positions, 3, 16) and activations.shape == (4, 2, positions, 3)
    for r in range(1, 5):
        mean, act, _ = em_routing(votes, acts, *args, r, backward="autograd")
        torch.testing.assert_close(means[r - 1], mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(activations[r - 1], act, rtol=1e-12, atol=1e-12)
        ours = torch.autograd.grad(means[r - 1].sum() + activations[r - 1].sum(), (votes, acts), retain_graph=True)
        theirs = torch.autograd.grad(mean.sum() + act.sum(), (votes, acts))
        for got, want in zip(ours, theirs):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    ref_mean, ref_act = reference_em(votes, acts, layer.child_index, layer.children_count, beta_u, beta_a, 2)
    torch.testing.assert_close(means[1], ref_mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(activations[1], ref_act, rtol=1e-9, atol=1e-10)
    with pytest.raises(ValueError, match="routing iterations must be from 1"):
        em_routing_by_iterations(votes, acts, *args, 0)


@pytest.mark.parametrize("backward", ["manual", "autograd"])
def test_sharp_assignments_never_become_subnormal_numbers(backward):
    """Votes far apart make later iterations assign sharply; a weight below e^-69 (1e-30) of a child's likeliest
    parent stays there, so no R_ij is a subnormal float32 (a CPU computes those 20-100 times slower): the values stay
    the float64 routing's, and gradients stay finite."""
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=1, in_size=4)
    positions, slots = layer.child_index.shape
    votes, acts, beta_u, beta_a = (x.detach() for x in _inputs(positions, 3, slots, seed=7, spread=30.0))
    args = (layer.child_index, layer.children_count)
    wide = [x.float().requires_grad_() for x in (votes, acts, beta_u, beta_a)]
    mean, act, trace = em_routing(wide[0], wide[1], *args, wide[2], wide[3], 5, trace=True)
    assigned = trace.assignments.detach()[trace.assignments != 0].abs()
    assert assigned.numel() > 0 and bool((assigned >= torch.finfo(torch.float32).tiny).all())
    assert float(assigned.min()) < 1e-20  # sharp indeed: the floor was reached
    exact = em_routing(votes, acts, *args, beta_u, beta_a, 5)
    # float32 against float64 after five sharp iterations: the sums' rounding differs with the CPU's vector width
    # (an AMD EPYC's differ by 5e-3 on means of about 13, 4e-4 of them); a floor that moved a value would move it
    # by far more
    torch.testing.assert_close(mean.double(), exact[0], rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(act.double(), exact[1], rtol=1e-3, atol=1e-4)
    mean, act, _ = em_routing(*wide[:2], *args, *wide[2:], 5, backward=backward)
    grads = torch.autograd.grad(mean.sum() + act.sum(), wide)
    assert all(bool(torch.isfinite(g).all()) for g in grads)


def test_inverse_temperature_grows_towards_its_final_value():
    lambdas = [inverse_temperature(t) for t in (1, 2, 3)]
    assert lambdas == pytest.approx([0.015, 0.02925, 0.0427875])
    assert lambdas == sorted(lambdas) and all(0 < x < 1 for x in lambdas)
    with pytest.raises(ValueError):
        inverse_temperature(0)


def test_parents_at_different_positions_compete_for_a_child():
    """Pitfall 1: a child's assignments sum to 1 over every parent it reaches, not to 1 at each position."""
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=1, in_size=5)
    positions, slots = layer.child_index.shape
    votes, acts, beta_u, beta_a = (x.detach().float() for x in _inputs(positions, 3, slots, seed=5))
    _, _, trace = em_routing(votes, acts, layer.child_index, layer.children_count, beta_u, beta_a, 3, trace=True)
    counts = reach_counts(layer.child_index, layer.children_count)
    assert counts.max() == 9  # the centre child of the 5x5 grid sits in all nine 3x3 windows
    for t in range(3):
        per_slot = trace.assignments[:, t].sum(dim=2)  # (B, P, I): summed over the parent types
        per_child = torch.zeros(2, layer.children_count).index_add_(1, layer.child_index.flatten(), per_slot.flatten(1))
        torch.testing.assert_close(per_child, torch.ones_like(per_child))
        # so at one position a shared child gives only part of itself
        centre = (layer.child_index == 12).nonzero()[0]
        assert per_slot[:, centre[0], centre[1]].max() < 0.99


def test_child_softmax_matches_a_softmax_over_each_childs_parents():
    index = torch.tensor([[0, 1], [1, 2]])  # child 1 in both positions
    logits = torch.randn(3, 2, 4, 2)
    got = child_softmax(logits, index, 3)
    both = torch.cat([logits[:, 0, :, 1], logits[:, 1, :, 0]], dim=1).softmax(dim=1)  # child 1's 8 parents
    torch.testing.assert_close(torch.cat([got[:, 0, :, 1], got[:, 1, :, 0]], dim=1), both)
    torch.testing.assert_close(got[:, 0, :, 0], logits[:, 0, :, 0].softmax(dim=1))


@pytest.mark.parametrize("backward", ["manual", "autograd"])
def test_a_parent_with_one_child_or_none_stays_finite(backward):
    """Pitfall 2: one active child (sigma^2 = 0 without the floor) or no active child (n_j = 0): no NaN, no inf."""
    votes, acts, beta_u, beta_a = (x.detach().float() for x in _inputs(1, 4, 6, seed=7))
    index = torch.arange(6).view(1, -1)
    for child_a in (torch.tensor([1.0, 0, 0, 0, 0, 0]), torch.zeros(6), torch.full((6,), 1e-30)):
        a = child_a.expand(2, 1, 6).clone().requires_grad_()
        v = votes.clone().requires_grad_()
        mean, act, _ = em_routing(v, a, index, 6, beta_u, beta_a, 3, backward=backward)
        (mean.sum() + act.sum()).backward()
        for x in (mean, act, v.grad, a.grad):
            assert torch.isfinite(x).all()
        if child_a[0] == 1:  # one child: the parent sits on its vote
            torch.testing.assert_close(mean[0, 0], votes[0, 0, :, 0], rtol=1e-4, atol=1e-4)


def test_the_data_assigned_to_a_parent_is_normalised():
    """Pitfall 3: every child counted twice (twice the fan-in, the same votes) leaves the parents as they were."""
    votes, acts, beta_u, beta_a = (x.detach() for x in _inputs(1, 3, 8, seed=9))
    mean, act, _ = em_routing(votes, acts, torch.arange(8).view(1, -1), 8, beta_u, beta_a, 3)
    twice_v, twice_a = torch.cat([votes, votes], dim=3), torch.cat([acts, acts], dim=2)
    mean2, act2, _ = em_routing(twice_v, twice_a, torch.arange(16).view(1, -1), 16, beta_u, beta_a, 3)
    torch.testing.assert_close(mean2, mean)
    torch.testing.assert_close(act2, act)


def test_routing_is_separate_for_each_example():
    """The assignments are never shared across the batch: changing one example changes only its own parents."""
    votes, acts, beta_u, beta_a = (x.detach() for x in _inputs(1, 3, 8, batch=3, seed=11))
    mean, act, _ = em_routing(votes, acts, torch.arange(8).view(1, -1), 8, beta_u, beta_a, 3)
    changed = votes.clone()
    changed[2] = torch.randn_like(changed[2])
    mean2, act2, _ = em_routing(changed, acts, torch.arange(8).view(1, -1), 8, beta_u, beta_a, 3)
    torch.testing.assert_close(mean2[:2], mean[:2])
    torch.testing.assert_close(act2[:2], act[:2])
    assert not torch.allclose(mean2[2], mean[2])


def test_the_trace_holds_every_iteration():
    votes, acts, beta_u, beta_a = (x.detach().float() for x in _inputs(1, 4, 6, seed=13))
    mean, act, trace = em_routing(votes, acts, torch.arange(6).view(1, -1), 6, beta_u, beta_a, 3, trace=True)
    assert trace.assignments.shape == (2, 3, 1, 4, 6)
    assert trace.means.shape == trace.variances.shape == (2, 3, 1, 4, 16)
    assert trace.activations.shape == (2, 3, 1, 4)
    torch.testing.assert_close(trace.assignments[:, 0], torch.full((2, 1, 4, 6), 0.25))  # uniform start
    torch.testing.assert_close(trace.means[:, -1], mean)
    torch.testing.assert_close(trace.activations[:, -1], act)
    assert (trace.variances >= VARIANCE_FLOOR).all()


def test_bad_arguments_are_refused_in_one_line():
    votes, acts, beta_u, beta_a = (x.detach() for x in _inputs(1, 3, 8))
    index = torch.arange(8).view(1, -1)
    with pytest.raises(ValueError, match="votes must be"):
        em_routing(votes[0], acts, index, 8, beta_u, beta_a, 3)
    with pytest.raises(ValueError, match="activations must be"):
        em_routing(votes, acts[:, :, :4], index, 8, beta_u, beta_a, 3)
    with pytest.raises(ValueError, match="routing iterations"):
        em_routing(votes, acts, index, 8, beta_u, beta_a, 0)


def test_bf16_autocast_gives_finite_values_and_gradients_close_to_float32():
    torch.manual_seed(0)
    model = EMCapsNet(EM_PRESETS["tiny"])
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    out32 = model(images, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out16 = model(images, labels)
    out16.activations.sum().backward()
    assert torch.isfinite(out16.activations).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    torch.testing.assert_close(out16.activations.float(), out32.activations, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("backward", ["manual", "autograd"])
def test_a_step_leaves_nothing_alive_once_its_tensors_are_gone(backward):
    """No reference cycle through the routing's outputs: without one, every step's votes and fits are freed as soon
    as the step's tensors go, not when Python's garbage collector happens to run (a training run once grew to 24 GB
    of them and was killed)."""
    import gc
    import weakref

    generator = torch.Generator().manual_seed(0)
    votes = torch.randn(2, 3, 4, 5, 16, generator=generator, requires_grad=True)
    beta_u, beta_a = torch.zeros(4, requires_grad=True), torch.zeros(4, requires_grad=True)
    index = torch.arange(15).view(3, 5)
    gc.disable()  # only reference counts may free them
    try:
        mean, activations, _ = em_routing(votes, torch.rand(2, 3, 5, generator=generator), index, 15, beta_u, beta_a,
                                          3, backward=backward)  # fmt: skip
        refs = [weakref.ref(mean), weakref.ref(activations)]
        (mean.sum() + activations.sum()).backward()
        del mean, activations
        assert all(ref() is None for ref in refs)
    finally:
        gc.enable()


@pytest.mark.slow
def test_compiled_routing_gives_the_eager_values_and_gradients():
    """`torch.compile` traces the hand-written backward whole (no graph break) and keeps its numbers: an EM run on a
    CPU compiles by default (`TrainOptions.cpu_compile_pays`)."""
    torch._dynamo.reset()
    layer = ConvCapsules(in_types=2, out_types=3, kernel=3, stride=2, in_size=5)  # children in several windows
    positions, slots = layer.child_index.shape
    inputs = _inputs(positions, 3, slots)

    def routed(votes, acts, beta_u, beta_a):
        mean, act, _ = em_routing(votes, acts, layer.child_index, layer.children_count, beta_u, beta_a, 2)
        return mean.sin().sum() + act.cos().sum()

    eager, compiled = routed(*inputs), torch.compile(routed, fullgraph=True)(*inputs)
    torch.testing.assert_close(compiled, eager, rtol=1e-9, atol=1e-10)
    grads = zip(torch.autograd.grad(compiled, inputs), torch.autograd.grad(eager, inputs))
    for name, (got, want) in zip(("votes", "activations", "beta_u", "beta_a"), grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10, msg=lambda m, n=name: f"d/d{n}: {m}")


@pytest.mark.parametrize("offset", [30.0, 100.0, 1000.0])
@pytest.mark.parametrize("backward", ["manual", "autograd"])
def test_moments_of_large_votes_with_a_small_spread_match_float64(offset, backward):
    """Votes far from zero with a small spread (|V| up to 1e3, sigma 0.05): in float32, E[V^2] - mu^2 would cancel
    the spread away (15% off at |V| = 30, all of it at 1e3); routed about each parent's centre, the variances,
    activations, poses and gradients stay those of float64."""
    g = torch.Generator().manual_seed(4)
    shape = (2, 1, 5, 24, 16)  # (B, P, J, I, H)
    votes64 = offset * torch.sign(torch.randn(1, 1, 5, 1, 16, generator=g, dtype=torch.float64)) + 0.05 * torch.randn(
        shape, generator=g, dtype=torch.float64
    )
    votes64 = votes64.float().double()  # the same votes in both precisions: float32 holds |V| = 1e3 to 6e-5
    acts64 = torch.rand(2, 1, 24, generator=g, dtype=torch.float64)
    beta_u64, beta_a64 = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    index = torch.arange(24).view(1, -1)
    results = {}
    for dtype in (torch.float64, torch.float32):
        inputs = [x.to(dtype).requires_grad_() for x in (votes64, acts64, beta_u64, beta_a64)]
        mean, act, trace = em_routing(*inputs[:2], index, 24, *inputs[2:], iterations=3, trace=True)
        mean, act, _ = em_routing(*inputs[:2], index, 24, *inputs[2:], iterations=3, backward=backward)
        weights = torch.linspace(-1, 1, mean.numel(), dtype=dtype).view(mean.shape)
        grads = torch.autograd.grad((mean * weights).sum() + act.sum(), inputs)
        results[dtype] = (trace.variances.double(), act.double(), mean.double(), [x.double() for x in grads])
    (var64, act64, mean64, grads64), (var32, act32, mean32, grads32) = results[torch.float64], results[torch.float32]
    assert float(var64[:, -1].detach().mean()) > 1e-3  # the spread is real, far above the floor of 1e-4
    torch.testing.assert_close(var32, var64, rtol=1e-3, atol=1e-7)
    torch.testing.assert_close(act32, act64, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(mean32, mean64, rtol=1e-6, atol=offset * 1e-6)
    for got, want in zip(grads32, grads64):
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3 * float(want.abs().max()))
