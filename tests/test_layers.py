"""squash and dynamic routing, against the paper's definitions and a loop-by-loop reference."""

from __future__ import annotations

import pytest
import torch
from cli_support import capsnet

from capsnet.errors import InvalidArgumentError
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.dynamic_routing import _DynamicRouting, _route, dynamic_routing
from capsnet.nn.layers import RoutingCapsules
from capsnet.nn.squash import squash


def reference_routing(u_hat: torch.Tensor, iterations: int, leak: bool = False) -> torch.Tensor:
    """Procedure 1 written loop by loop, for one example at a time. u_hat: (B, N, K, D).

    Every quantity stays a tensor, so that autograd through these loops is a reference for the gradients too. `leak`:
    the CIFAR-10 network's "none-of-the-above" category, one more parent whose logit stays 0 and whose share is lost.
    """
    batch, children, parents, _ = u_hat.shape
    out = []
    for b in range(batch):
        logits = [[u_hat.new_zeros(()) for _ in range(parents)] for _ in range(children)]
        for _ in range(iterations):
            coupling = []
            for i in range(children):
                exps = [torch.exp(logits[i][j]) for j in range(parents)]
                total = sum(exps) + (1.0 if leak else 0.0)  # exp(0) for none of the above
                coupling.append([e / total for e in exps])  # softmax over the parents j
            v = []
            for j in range(parents):
                s = sum(coupling[i][j] * u_hat[b, i, j] for i in range(children))
                norm2 = (s * s).sum()
                v.append(norm2 / (1 + norm2) * s / torch.sqrt(norm2))
            for i in range(children):
                for j in range(parents):
                    logits[i][j] = logits[i][j] + (u_hat[b, i, j] * v[j]).sum()
        out.append(torch.stack(v))
    return torch.stack(out)  # (B, K, D)


class TestSquash:
    def test_lengths_below_one_and_direction_kept(self) -> None:
        s = torch.randn(64, 10, 16, dtype=torch.float64) * torch.logspace(-3, 3, 64, dtype=torch.float64).view(64, 1, 1)
        v = squash(s)
        lengths = v.norm(dim=-1)
        assert (lengths < 1).all() and (lengths >= 0).all()
        assert (squash(s.float()).norm(dim=-1) <= 1).all()
        cosine = torch.nn.functional.cosine_similarity(v, s, dim=-1)
        assert torch.allclose(cosine, torch.ones_like(cosine), atol=1e-5)

    def test_matches_formula(self) -> None:
        s = torch.randn(5, 16, dtype=torch.float64)
        n = s.norm(dim=-1, keepdim=True)
        assert torch.allclose(squash(s), n**2 / (1 + n**2) * s / n, atol=1e-7)

    def test_long_vectors_approach_one_short_ones_shrink_quadratically(self) -> None:
        assert squash(torch.tensor([[1000.0, 0.0]])).norm() == pytest.approx(1.0, abs=1e-5)
        assert squash(torch.tensor([[1e-2, 0.0]])).norm() == pytest.approx(1e-4, rel=1e-3)

    def test_zero_maps_to_zero_with_finite_gradient(self) -> None:
        s = torch.zeros(3, 16, requires_grad=True)
        v = squash(s)
        assert torch.equal(v, torch.zeros_like(v))
        v.sum().backward()
        assert torch.isfinite(s.grad).all()

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_precision_is_squashed_in_float32(self, dtype: torch.dtype) -> None:
        s = torch.tensor([[0.0] * 8, [1e-3] * 8, [0.5] * 8, [300.0] * 8], dtype=dtype, requires_grad=True)
        v = squash(s)  # float16 alone: 0/0 at zero (eps underflows) and inf/inf at |s|^2 > 65504
        assert v.dtype == dtype
        assert torch.allclose(v.float(), squash(s.detach().float()), rtol=1e-2, atol=1e-6)
        v.float().sum().backward()
        assert torch.isfinite(s.grad.float()).all()


class TestRouting:
    def test_matches_loop_by_loop_reference(self) -> None:
        u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64)  # (B, N, K, D)
        for r in (1, 2, 3, 4):
            fast, _ = dynamic_routing(u_hat.permute(0, 2, 1, 3).contiguous(), r)  # (B, K, N, D)
            assert torch.allclose(fast, reference_routing(u_hat, r), atol=1e-10), r

    def test_coupling_sums_to_one_over_parents(self) -> None:
        u_hat = torch.randn(4, 10, 1152, 16)
        _, trace = dynamic_routing(u_hat, 3, trace=True)
        assert trace.coupling.shape == (4, 3, 10, 1152)  # (B, r, K, N): parents before children, as in EM's trace
        assert torch.allclose(trace.coupling.sum(dim=2), torch.ones(4, 3, 1152), atol=1e-5)
        # and it is not normalised over the children instead
        assert not torch.allclose(trace.coupling[:, 1:].sum(dim=-1), torch.ones(4, 2, 10), atol=1e-2)

    def test_one_iteration_is_uniform_coupling(self) -> None:
        u_hat = torch.randn(3, 10, 50, 16)
        v, trace = dynamic_routing(u_hat, 1, trace=True)
        assert torch.allclose(v, squash(u_hat.sum(dim=2) / 10), atol=1e-6)  # c_ij = 1/K
        assert torch.allclose(trace.coupling, torch.full_like(trace.coupling, 0.1))

    def test_example_does_not_depend_on_the_rest_of_the_batch(self) -> None:
        u_hat = torch.randn(5, 10, 100, 16)
        alone, _ = dynamic_routing(u_hat[:1], 3)
        other = u_hat.clone()
        other[1:] = torch.randn(4, 10, 100, 16) * 5
        together, _ = dynamic_routing(other, 3)
        assert torch.allclose(alone[0], together[0], atol=1e-6)

    def test_logits_start_at_zero_and_accumulate_agreement(self) -> None:
        u_hat = torch.randn(2, 10, 30, 16)
        _, trace = dynamic_routing(u_hat, 3, trace=True)
        assert torch.equal(trace.logits[:, 0], torch.zeros(2, 10, 30))
        agreement = torch.einsum("bknd,bkd->bkn", u_hat, trace.poses[:, 0])
        assert torch.allclose(trace.logits[:, 1], agreement, atol=1e-5)
        assert torch.allclose(trace.lengths, trace.poses.norm(dim=-1))

    def test_trace_and_plain_paths_agree(self) -> None:
        u_hat = torch.randn(2, 10, 40, 16)
        plain, none = dynamic_routing(u_hat, 4)
        traced, trace = dynamic_routing(u_hat, 4, trace=True)
        assert none is None and torch.allclose(plain, traced) and torch.allclose(trace.poses[:, -1], plain)

    @pytest.mark.parametrize("iterations", [1, 2, 3, 5])
    def test_hand_written_backward_matches_autograd(self, iterations: int) -> None:
        u_hat = (torch.randn(3, 4, 7, 5, dtype=torch.float64) * 0.7).requires_grad_()
        assert torch.autograd.gradcheck(lambda x: _DynamicRouting.apply(x, iterations, False), (u_hat,))
        grad_out = torch.randn(3, 4, 5, dtype=torch.float64)
        (expected,) = torch.autograd.grad(_route(u_hat, iterations)[3][-1], u_hat, grad_out)
        (actual,) = torch.autograd.grad(_DynamicRouting.apply(u_hat, iterations, False), u_hat, grad_out)
        assert torch.allclose(actual, expected, atol=1e-12)

    @pytest.mark.parametrize("iterations", [1, 3])
    def test_none_of_the_above_matches_the_loop_reference_forward_and_backward(self, iterations: int) -> None:
        """Section 7's "none-of-the-above" category: each child's couplings are a softmax over K+1 parents whose
        extra one has logit 0 and is dropped; both backwards match autograd through the loop reference."""
        torch.manual_seed(5)
        u_hat = (torch.randn(2, 6, 4, 5, dtype=torch.float64) * 0.8).requires_grad_()  # (B, N, K, D)
        reference = reference_routing(u_hat, iterations, leak=True)
        (expected,) = torch.autograd.grad(reference.square().sum(), u_hat)
        layout = u_hat.transpose(1, 2)  # (B, K, N, D)
        assert not torch.allclose(dynamic_routing(layout, iterations)[0], reference)  # the leak changes the answer
        for backward in ("manual", "autograd"):
            v, _ = dynamic_routing(layout, iterations, backward=backward, leak=True)
            torch.testing.assert_close(v, reference)
            (grad,) = torch.autograd.grad(v.square().sum(), u_hat)
            torch.testing.assert_close(grad, expected)
        plain = layout.detach().clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda x: _DynamicRouting.apply(x, iterations, True), (plain,))
        _, trace = dynamic_routing(layout.detach(), iterations, trace=True, leak=True)
        assert torch.allclose(trace.coupling[:, 0], torch.full_like(trace.coupling[:, 0], 1 / 5))  # 1/(K+1) at first
        sums = trace.coupling.sum(dim=2)  # (B, r, N): what each child sends to the K classes, less than 1
        assert bool((sums < 1).all()) and bool((sums > 0).all())

    def test_rejects_zero_iterations(self) -> None:
        with pytest.raises(ValueError, match="from 1 to 20"):
            dynamic_routing(torch.randn(1, 2, 3, 4), 0)
        with pytest.raises(ValueError, match="backward"):
            dynamic_routing(torch.randn(1, 2, 3, 4), 1, backward="fast")

    @pytest.mark.parametrize("iterations", [1, 3])
    def test_both_backwards_match_the_loop_reference(self, iterations: int) -> None:
        """The compiler-friendly path (plain ops, for CUDA) and the hand-written one (the CPU's) agree with Procedure 1."""
        torch.manual_seed(3)
        u_hat = (torch.randn(2, 6, 4, 5, dtype=torch.float64) * 0.5).requires_grad_()  # (B, N, K, D), the loop's layout
        reference = reference_routing(u_hat, iterations)
        (expected,) = torch.autograd.grad(reference.square().sum(), u_hat)
        layout = u_hat.transpose(1, 2)  # (B, K, N, D), routing's layout
        for backward in ("manual", "autograd", "auto"):
            v, _ = dynamic_routing(layout, iterations, backward=backward)
            torch.testing.assert_close(v, reference)
            (grad,) = torch.autograd.grad(v.square().sum(), u_hat)
            torch.testing.assert_close(grad, expected)
        assert dynamic_routing(layout, iterations, backward="manual")[0].grad_fn.name().startswith("_DynamicRouting")
        assert not dynamic_routing(layout, iterations, backward="autograd")[0].grad_fn.name().startswith("_Dynamic")
        assert dynamic_routing(layout, iterations)[0].grad_fn.name().startswith("_DynamicRouting")  # auto, CPU
        elsewhere = torch.randn(2, 4, 6, 5, device="meta", requires_grad=True)  # any other device: plain ops
        assert not dynamic_routing(elsewhere, iterations)[0].grad_fn.name().startswith("_Dynamic")


class TestRoutingCapsules:
    def test_predictions_are_w_times_u(self) -> None:
        layer = RoutingCapsules(children=20, child_dim=8, parents=10, parent_dim=16)
        u = torch.randn(3, 20, 8)
        expected = torch.einsum("nkdp,bnp->bknd", layer.weight, u)
        assert torch.allclose(layer.predictions(u), expected, atol=1e-5)

    def test_weight_gradient_matches_autograd_reference(self) -> None:
        layer = RoutingCapsules(children=12, child_dim=8, parents=4, parent_dim=16).double()
        u = squash(torch.randn(3, 12, 8, dtype=torch.float64)).requires_grad_()
        v, _ = layer(u, 3)
        grads = torch.autograd.grad(v.pow(3).sum(), (layer.weight, u))
        u_hat = torch.einsum("nkdp,bnp->bknd", layer.weight, u)
        reference = torch.autograd.grad(_route(u_hat, 3)[3][-1].pow(3).sum(), (layer.weight, u))
        for got, want in zip(grads, reference):
            assert torch.allclose(got, want, atol=1e-10)

    def test_bad_input_shape(self) -> None:
        with pytest.raises(ValueError, match="expected child capsules"):
            RoutingCapsules(20, 8, 10, 16)(torch.randn(2, 19, 8), 3)


@pytest.mark.parametrize("iterations", [0, -1, 21, 1_000_000, 2.5, True])
def test_a_routing_count_out_of_bounds_is_one_clear_error(iterations) -> None:
    """The one bound on r (1 to MAX_ROUTING_ITERATIONS), wherever a count enters: routing itself, the forward pass,
    and the evaluation CLI (before anything is loaded)."""
    u_hat = torch.randn(2, 10, 8, 16)
    with pytest.raises(InvalidArgumentError, match="routing iterations must be from 1 to 20"):
        dynamic_routing(u_hat, iterations)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    with pytest.raises(InvalidArgumentError, match="routing iterations must be from 1 to 20"):
        model(torch.rand(1, 1, 28, 28), routing_iterations=iterations)


@pytest.mark.parametrize("value", ["0", "21", "1000000"])
def test_the_evaluation_cli_bounds_the_routing_count(value: str) -> None:
    result = capsnet("evaluate", "checkpoints/mnist.safetensors", "--routing-iterations", value)
    assert result.returncode == 2 and "--routing-iterations: must be from 1 to 20" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
