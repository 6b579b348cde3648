"""The network: the paper's parameter count, shapes, decoder masking, config presets."""

from __future__ import annotations

import pytest
import torch

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import PRESETS, CapsNetConfig


@pytest.fixture(scope="module")
def tiny() -> CapsNet:
    torch.manual_seed(0)
    return CapsNet(CapsNetConfig.preset("tiny")).eval()


def test_paper_parameter_count() -> None:
    model = CapsNet(CapsNetConfig.preset("paper"))
    assert model.num_parameters() == 8_215_568
    assert model.num_parameters(decoder=False) == 6_804_224
    assert model.config.num_primary == 1152 and model.config.primary_grid == 6
    assert model.digits.weight.shape == (1152, 10, 16, 8)  # one 16x8 W_ij per (i, j)


def test_forward_shapes(tiny: CapsNet) -> None:
    c = tiny.config
    out = tiny(torch.rand(3, 1, 28, 28), return_trace=True, return_primary=True, routing_iterations=4)
    assert out.poses.shape == (3, 10, 16)
    assert out.lengths.shape == (3, 10) and ((out.lengths >= 0) & (out.lengths < 1)).all()
    assert out.reconstruction.shape == (3, 1, 28, 28)
    assert ((out.reconstruction >= 0) & (out.reconstruction <= 1)).all()
    assert torch.equal(out.prediction, out.lengths.argmax(dim=1))
    assert out.trace.coupling.shape == (3, 4, 10, c.num_primary)
    assert out.trace.poses.shape == (3, 4, 10, 16)
    assert out.primary.poses.shape == (3, c.num_primary, c.primary_dim)
    # capsule i is (type, y, x) in row-major order: the PrimaryCaps convolution's channel block, row and column
    assert c.primary_position(1 * 36 + 2 * 6 + 3) == (1, 2, 3) and c.primary_position(c.num_primary - 1) == (
        c.primary_types - 1, 5, 5,
    )  # fmt: skip
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        u = tiny.primary.conv(torch.relu(tiny.conv1(x)))  # (3, types * P, 6, 6)
        s = tiny.primary(torch.relu(tiny.conv1(x)))  # (3, N, P): squashed
    grid = u.view(3, c.primary_types, c.primary_dim, 6, 6)  # (3, types, P, 6, 6)
    norms = s[:, 1 * 36 + 2 * 6 + 3].norm(dim=-1)
    raw = grid[:, 1, :, 2, 3] * c.primary_scale  # the pre-squash vector of type 1 at (2, 3)
    torch.testing.assert_close(norms, raw.norm(dim=-1) ** 2 / (1 + raw.norm(dim=-1) ** 2), atol=1e-4, rtol=1e-4)


def test_no_trace_unless_asked(tiny: CapsNet) -> None:
    out = tiny(torch.rand(2, 1, 28, 28))
    assert out.trace is None and out.primary is None


def test_decoder_uses_true_label_in_training_and_longest_capsule_at_inference(tiny: CapsNet) -> None:
    images = torch.rand(4, 1, 28, 28)
    out = tiny(images)
    wrong = (out.prediction + 1) % 10
    assert torch.allclose(out.reconstruction, tiny.decode(out.poses, out.prediction))
    tiny.train()
    try:
        trained = tiny(images, wrong)
        assert torch.allclose(trained.reconstruction, tiny.decode(trained.poses, wrong), atol=1e-6)
        assert not torch.allclose(trained.reconstruction, tiny.decode(trained.poses, trained.prediction), atol=1e-4)
        with pytest.raises(ValueError, match="needs labels"):
            tiny(images)
    finally:
        tiny.eval()


def test_decode_any_class_and_vector(tiny: CapsNet) -> None:
    poses = torch.randn(2, 10, 16) * 0.2
    named = tiny(torch.rand(2, 1, 28, 28), decode_class=7)
    assert torch.allclose(named.reconstruction, tiny.decode(named.poses, 7))
    # only the chosen capsule reaches the decoder
    other = poses.clone()
    other[:, [0, 1, 2]] = 5.0
    assert torch.allclose(tiny.decode(poses, 3), tiny.decode(other, 3))
    assert not torch.allclose(tiny.decode(poses, 3), tiny.decode(poses, 4))
    assert tiny.decode(poses, torch.tensor([1, 2])).shape == (2, 1, 28, 28)


@pytest.mark.parametrize(
    "poses, cls, message",
    [
        (torch.zeros(2, 9, 16), 0, "expected poses"),
        (torch.zeros(2, 10, 16), 10, r"\[0, 10\)"),
        (torch.zeros(2, 10, 16), torch.tensor([1, 2, 3]), "int or shape"),
    ],
)
def test_decode_rejects_bad_input(tiny: CapsNet, poses: torch.Tensor, cls: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny.decode(poses, cls)


def test_bad_image_shape(tiny: CapsNet) -> None:
    with pytest.raises(ValueError, match="expected images"):
        tiny(torch.rand(2, 28, 28))


def test_config_round_trip_and_presets() -> None:
    for name, config in PRESETS.items():
        assert CapsNetConfig.from_dict(config.to_dict()) == config, name
    assert CapsNetConfig.preset("paper", routing_iterations=5).routing_iterations == 5
    with pytest.raises(ValueError, match="unknown preset"):
        CapsNetConfig.preset("cifar")
    with pytest.raises(ValueError, match="unknown config keys"):
        CapsNetConfig.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="routing_iterations"):
        CapsNetConfig(routing_iterations=0)
    with pytest.raises(ValueError, match="too small"):
        CapsNetConfig(image_size=16)


def test_other_input_sizes_come_from_the_config() -> None:
    config = CapsNetConfig(
        in_channels=3, image_size=32, num_classes=5, conv1_channels=16, primary_types=4, decoder_hidden=(32,)
    )
    model = CapsNet(config).eval()
    out = model(torch.rand(2, 3, 32, 32))
    assert config.primary_grid == 8 and config.num_primary == 256
    assert out.lengths.shape == (2, 5) and out.reconstruction.shape == (2, 3, 32, 32)


def test_bf16_autocast_keeps_routing_in_float32() -> None:
    """The mixed-precision path that CUDA training takes by default, run here on the CPU."""
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny")).train()
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 3, 7, 9])
    reference = model(images, labels, return_trace=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(images, labels, return_trace=True)
    # the child-to-parent predictions come from a bf16 product, but softmax and squash ran in float32
    assert out.poses.dtype == torch.float32 and out.trace.coupling.dtype == torch.float32
    assert torch.allclose(out.trace.coupling.sum(dim=2), torch.ones(()), atol=1e-6)
    assert torch.allclose(out.lengths, reference.lengths, atol=0.02)
    (out.lengths.sum() + out.reconstruction.float().sum()).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_half_precision_model_routes_in_float32() -> None:
    """model.half() (float16 inference, as on a GPU) agrees with float32 and has no NaN, even on a blank image."""
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    images = torch.cat([torch.zeros(1, 1, 28, 28), torch.rand(3, 1, 28, 28)])  # (4, 1, 28, 28)
    with torch.no_grad():
        reference = model(images, return_trace=True)
        out = model.half()(images.half(), return_trace=True)
    assert out.poses.dtype == torch.float16 and out.trace.coupling.dtype == torch.float32
    assert torch.isfinite(out.lengths).all() and torch.isfinite(out.reconstruction).all()
    assert torch.allclose(out.lengths.float(), reference.lengths, atol=2e-3)
    assert torch.equal(out.prediction, reference.prediction)
