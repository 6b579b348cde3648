"""The compiled EM routing kernel (`capsnet.nn.em_native`, `em_kernel.c`) against the PyTorch path it replaces in a
CPU reading: the same poses and activations for every layer kind, every r, an even or a random start; the fallback
where no compiler works; the build kept in the cache, named by what it was built from."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from capsnet.files import CACHE_ENV
from capsnet.nn import em_native
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.nn.matrix_capsules import ClassCapsules, ConvCapsules
from capsnet.nn.routing import RandomCouplings


def _grid(batch: int, types: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    poses = torch.randn(batch, types, 16, size, size, generator=g)
    activations = torch.rand(batch, types, size, size, generator=g)
    activations[0, 0] = 0.0  # children that are not there: nothing assigned from them
    return poses, activations


# both paths are float32 with their sums in different orders; three iterations of sharpening assignments carry a
# rounding difference to a few parts in 10^4 of a pose entry at most
POSES = dict(rtol=1e-3, atol=1e-4)
ACTIVATIONS = dict(rtol=1e-4, atol=1e-6)


def _both(monkeypatch: pytest.MonkeyPatch, read):  # type: ignore[no-untyped-def]
    """`read()` with the kernel, then with PyTorch alone ($CAPSNET_NATIVE=0)."""
    with torch.no_grad():
        native = read()
        monkeypatch.setenv(em_native.NATIVE_ENV, "0")
        plain = read()
        monkeypatch.delenv(em_native.NATIVE_ENV)
    return native, plain


def test_the_kernel_is_built_on_this_machine() -> None:
    # CI's machine has a C compiler: the reading path the benchmarks measure is the one the tests hold
    assert em_native.kernel() is not None
    assert em_native.kernel().em_block() in (8, 16)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("in_types", "out_types", "stride", "size"),
    [(4, 5, 2, 9), (3, 16, 1, 5), (2, 33, 2, 7)],  # J below, at and above a block of 16; both strides
)
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_a_convolutional_layer_reads_as_the_pytorch_path(
    monkeypatch: pytest.MonkeyPatch, in_types: int, out_types: int, stride: int, size: int, iterations: int
) -> None:
    torch.manual_seed(0)
    layer = ConvCapsules(in_types, out_types, kernel=3, stride=stride, in_size=size)
    with torch.no_grad():
        layer.beta_u.normal_()
        layer.beta_a.normal_()
    poses, activations = _grid(3, in_types, size, seed=iterations)
    native, plain = _both(monkeypatch, lambda r=iterations: layer(poses, activations, r))
    assert native[0].shape == plain[0].shape == (3, out_types, 16, layer.out_size, layer.out_size)
    torch.testing.assert_close(native[0], plain[0], **POSES)
    torch.testing.assert_close(native[1], plain[1], **ACTIVATIONS)


@pytest.mark.parametrize("coordinate_addition", [True, False])
def test_the_class_layer_reads_as_the_pytorch_path(monkeypatch: pytest.MonkeyPatch, coordinate_addition: bool) -> None:
    torch.manual_seed(1)
    layer = ClassCapsules(6, 10, in_size=3, coordinate_addition=coordinate_addition)
    poses, activations = _grid(4, 6, 3, seed=5)
    for iterations in (1, 3):
        native, plain = _both(monkeypatch, lambda r=iterations: layer(poses, activations, r))
        assert native[0].shape == (4, 10, 16)
        torch.testing.assert_close(native[0], plain[0], **POSES)
        torch.testing.assert_close(native[1], plain[1], **ACTIVATIONS)


def test_every_r_and_random_starts_read_as_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where routing matters: a layer's results at r = 1..4 from one run, and routing from random assignments
    torch.manual_seed(2)
    layer = ConvCapsules(3, 8, kernel=3, stride=2, in_size=7)
    poses, activations = _grid(5, 3, 7, seed=9)
    native, plain = _both(monkeypatch, lambda: layer.by_iterations(poses, activations, 4))
    assert native[0].shape == (4, 5, 8, 16, 3, 3)
    torch.testing.assert_close(native[0], plain[0], **POSES)
    torch.testing.assert_close(native[1], plain[1], **ACTIVATIONS)
    random = RandomCouplings(11, torch.arange(5))
    native, plain = _both(monkeypatch, lambda: layer(poses, activations, 2, random=random))
    torch.testing.assert_close(native[0], plain[0], **POSES)
    even, _ = _both(monkeypatch, lambda: layer(poses, activations, 2))
    assert not torch.allclose(even[0], native[0])  # the random start was used


def test_the_paper_network_reads_as_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(3)
    net = EMCapsNet(EMCapsNetConfig.preset("paper-decoder", routing_iterations=2)).eval()
    images = torch.rand(3, 1, 28, 28)
    native, plain = _both(monkeypatch, lambda: net(images))
    torch.testing.assert_close(native.scores, plain.scores, **ACTIVATIONS)
    torch.testing.assert_close(native.poses, plain.poses, **POSES)
    by_r = _both(monkeypatch, lambda: net.scores_by_iterations(images, [1, 2, 3]))
    torch.testing.assert_close(by_r[0], by_r[1], **ACTIVATIONS)


def test_a_reading_routes_with_the_kernel_and_training_with_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = ConvCapsules(2, 4, kernel=3, stride=1, in_size=4)
    poses, activations = _grid(2, 2, 4, seed=0)
    calls: list[str] = []
    route = em_native.route
    monkeypatch.setattr(em_native, "route", lambda *a, **k: calls.append("kernel") or route(*a, **k))
    with torch.no_grad():
        layer(poses, activations, 2)
    assert calls == ["kernel"]
    out, _, _ = layer(poses, activations, 2)  # gradients wanted: the PyTorch path, with its hand-written backward
    out.sum().backward()
    assert calls == ["kernel"] and layer.weight.grad is not None
    with torch.no_grad():
        _, _, trace = layer(poses, activations, 2, trace=True)  # a trace keeps every vote: PyTorch too
    assert calls == ["kernel"] and trace is not None


def test_without_a_compiler_every_layer_routes_with_pytorch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(em_native.COMPILER_ENV, "no-such-compiler-here")
    em_native._load.cache_clear()
    try:
        assert em_native.kernel() is None
        layer = ConvCapsules(2, 4, kernel=3, stride=1, in_size=4)
        poses, activations = _grid(2, 2, 4, seed=0)
        with torch.no_grad():
            fallback = layer(poses, activations, 2)
        monkeypatch.setenv(em_native.NATIVE_ENV, "0")
        with torch.no_grad():
            plain = layer(poses, activations, 2)
        torch.testing.assert_close(fallback[0], plain[0], rtol=0, atol=0)
        assert not (tmp_path / "native").exists() or not any((tmp_path / "native").iterdir())
    finally:
        em_native._load.cache_clear()


def test_the_build_is_kept_in_the_cache_and_named_by_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    builds: list[Path] = []
    build = em_native._build
    monkeypatch.setattr(em_native, "_build", lambda c, f, t: builds.append(t) or build(c, f, t))
    em_native._load.cache_clear()
    try:
        assert em_native.kernel() is not None
        assert len(builds) == 1 and builds[0].parent == tmp_path / "native"
        assert [p.name for p in (tmp_path / "native").iterdir()] == [builds[0].name]  # no temporaries left
        em_native._load.cache_clear()
        assert em_native.kernel() is not None and len(builds) == 1  # a second process loads what the first built
        changed = tmp_path / "em_kernel.c"
        changed.write_text(em_native.SOURCE.read_text() + "\n/* changed */\n")
        monkeypatch.setattr(em_native, "SOURCE", changed)
        em_native._load.cache_clear()
        assert em_native.kernel() is not None and len(builds) == 2 and builds[1] != builds[0]
    finally:
        em_native._load.cache_clear()
