"""The compiled EM routing kernel (`capsnet.nn.em_native`, `em_kernel.c` in `em_kernel.cpp`) against the PyTorch path
it replaces in a CPU reading: the same poses and activations for every layer kind, every r, an even or a random start;
the fallback where no compiler works; the build kept in the cache, named by what it was built from. Where the kernel
cannot be built here (no C++ compiler, $CXX a missing one) the tests that need it skip, saying so: the kernel's side
of a comparison would be the PyTorch path compared with itself."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import pytest
import torch

from capsnet.files import CACHE_ENV, cache_dir
from capsnet.nn import em_native, em_native_training
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
# rounding difference to a few parts in 10^4 of a pose entry or an activation at most
POSES = dict(rtol=1e-3, atol=1e-4)
ACTIVATIONS = dict(rtol=1e-3, atol=1e-5)


NO_COMPILER = f"no C++ compiler here (${em_native.COMPILER_ENV}, c++, g++ or clang++): nothing is built"
NO_KERNEL = "no EM kernel here (no working C++ compiler): its side would be the PyTorch path compared with itself"


def _needs_kernel() -> em_native.Kernel:
    """The kernel, or the test skipped with the reason."""
    library = em_native.kernel()
    if library is None:
        pytest.skip(NO_KERNEL)
    return library


def _both(monkeypatch: pytest.MonkeyPatch, read):  # type: ignore[no-untyped-def]
    """`read()` with the kernel, then with PyTorch alone ($CAPSNET_NATIVE=0)."""
    _needs_kernel()
    with torch.no_grad():
        native = read()
        monkeypatch.setenv(em_native.NATIVE_ENV, "0")
        plain = read()
        monkeypatch.delenv(em_native.NATIVE_ENV)
    return native, plain


def test_the_kernel_is_built_on_this_machine() -> None:
    # CI's machine has a C++ compiler: the reading path the benchmarks measure is the one the tests hold
    if em_native._compiler() is None:
        pytest.skip(NO_COMPILER)
    library = em_native.kernel()
    assert library is not None and library.block in (8, 16)
    from capsnet.training.acceleration import choose_acceleration

    assert em_native.routing_path() == choose_acceleration(torch.device("cpu")).em_routing == "kernel"  # recorded
    assert library.library.is_relative_to(cache_dir() / "native")  # the user's cache: one build the tests share


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


def test_a_reading_is_one_kernel_call_training_its_passes_and_a_trace_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_kernel()
    layer = ConvCapsules(2, 4, kernel=3, stride=1, in_size=4)
    poses, activations = _grid(2, 2, 4, seed=0)
    calls: list[str] = []
    route, passes = em_native.route, em_native_training.route
    monkeypatch.setattr(em_native, "route", lambda *a, **k: calls.append("kernel") or route(*a, **k))
    monkeypatch.setattr(em_native_training, "route", lambda *a: calls.append("passes") or passes(*a))
    with torch.no_grad():
        layer(poses, activations, 2)
    assert calls == ["kernel"]
    out, _, _ = layer(poses, activations, 2)  # gradients wanted: the kernel's passes, with their backward
    out.sum().backward()
    assert calls == ["kernel", "passes"] and layer.weight.grad is not None
    calls.clear()
    with torch.no_grad():
        _, _, trace = layer(poses, activations, 2, trace=True)  # a trace keeps every vote: the PyTorch path
    assert calls == [] and trace is not None


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
        assert em_native.routing_path() == "pytorch"  # what a run records
        assert not (tmp_path / "native").exists() or not any((tmp_path / "native").iterdir())
    finally:
        em_native._load.cache_clear()


def test_the_build_is_kept_in_the_cache_and_named_by_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    library = _needs_kernel()  # the build the tests share, in the user's cache
    builds: list[str] = []
    monkeypatch.setattr(em_native, "_build", lambda c, f, name, folder: builds.append(name) or False)
    em_native._load.cache_clear()
    try:
        again = em_native.kernel()  # a second process loads what the first built
        assert again is not None and again.library == library.library and builds == []
        changed = cache_dir() / "native" / "changed-em_kernel.c"  # never built: _build only records the name
        changed.write_text(em_native.SOURCES[1].read_text() + "\n/* changed */\n")
        monkeypatch.setattr(em_native, "SOURCES", (em_native.SOURCES[0], changed))
        em_native._load.cache_clear()
        assert em_native.kernel() is None and builds and library.name not in builds
        changed.unlink()
    finally:
        em_native._load.cache_clear()


def _gradients(
    monkeypatch: pytest.MonkeyPatch,
    layer: torch.nn.Module,
    shape: tuple[int, ...],
    iterations: int,  # type: ignore[no-untyped-def]
    absent: bool = False,
):
    """The layer's outputs and the gradients of a fixed loss of them, with the kernel's passes, then with PyTorch."""
    _needs_kernel()
    results = []
    for native in ("1", "0"):
        monkeypatch.setenv(em_native.NATIVE_ENV, native)
        g = torch.Generator().manual_seed(1)
        poses = torch.randn(*shape, generator=g).requires_grad_()
        activations = torch.rand(shape[0], shape[1], shape[3], shape[4], generator=g)
        if absent:  # children that are not there, beside ones that are (the E-step takes two children at a time)
            activations[0, 0] = 0.0
        activations.requires_grad_()
        layer.zero_grad()
        out, out_a, _ = layer(poses, activations, iterations)
        loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + (out_a * out_a.detach()).sum()
        loss.backward()
        grads = [poses.grad, activations.grad, layer.weight.grad, layer.beta_u.grad, layer.beta_a.grad]
        results.append([out.detach(), out_a.detach(), *grads])
    monkeypatch.delenv(em_native.NATIVE_ENV)
    return results


LAYERS = [  # (a layer, its input's shape)
    (lambda: ConvCapsules(4, 5, kernel=3, stride=2, in_size=9), (3, 4, 16, 9, 9)),  # J padded, stride 2
    (lambda: ConvCapsules(3, 16, kernel=3, stride=1, in_size=5), (2, 3, 16, 5, 5)),  # a child in 9 windows
    (lambda: ClassCapsules(6, 10, in_size=3), (4, 6, 16, 3, 3)),  # coordinate addition
    # two blocks of types, and 72 slots a position: more than the votes' gradient takes at a time (SLOT_BLOCK)
    (lambda: ConvCapsules(8, 20, kernel=3, stride=2, in_size=7), (3, 8, 16, 7, 7)),
    (lambda: ConvCapsules(2, 40, kernel=2, stride=1, in_size=3), (3, 2, 16, 3, 3)),  # three: Jp not a constant
]


def _assert_gradients_equal(native: list[torch.Tensor], plain: list[torch.Tensor]) -> None:
    names = ("poses", "activations", "d/dposes", "d/dactivations", "d/dW", "d/dbeta_u", "d/dbeta_a")
    for name, got, want in zip(names, native, plain):
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * scale + 1e-7, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(("layer", "shape"), LAYERS)
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_training_gradients_through_the_kernel_equal_the_pytorch_paths(
    monkeypatch: pytest.MonkeyPatch,
    layer,
    shape: tuple[int, ...],
    iterations: int,  # type: ignore[no-untyped-def]
) -> None:
    torch.manual_seed(0)
    _assert_gradients_equal(*_gradients(monkeypatch, layer(), shape, iterations))


@pytest.mark.parametrize(("layer", "shape"), LAYERS)
@pytest.mark.parametrize("iterations", [1, 2])
def test_children_that_are_not_there_train_as_the_pytorch_path(
    monkeypatch: pytest.MonkeyPatch,
    layer,
    shape: tuple[int, ...],
    iterations: int,  # type: ignore[no-untyped-def]
) -> None:
    """A type of child absent from the first image (activation 0) beside present ones: the E-step, which takes two
    children of a cell at a time, adds the votes of the one that is there. (At r = 3 the kernel's gradient for an
    absent child can differ from the PyTorch path's by a few parts in 10^4 of the largest gradient, more than the
    test above allows, from float32 sums taken in another order.)"""
    torch.manual_seed(0)
    _assert_gradients_equal(*_gradients(monkeypatch, layer(), shape, iterations, absent=True))


def test_two_forwards_before_one_backward_keep_their_own_assignments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each forward's assignments are its own, whatever runs between it and its backward."""
    _needs_kernel()
    torch.manual_seed(0)
    layer = ConvCapsules(3, 20, kernel=3, stride=2, in_size=7)
    inputs = [_grid(3, 3, 7, seed=seed) for seed in (1, 2)]
    inputs = [(p.requires_grad_(), a) for p, a in inputs]

    def loss(poses: torch.Tensor, activations: torch.Tensor) -> torch.Tensor:
        out, out_a, _ = layer(poses, activations, 3)
        return (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + out_a.square().sum()

    alone = []
    for poses, activations in inputs:  # one step at a time
        layer.zero_grad()
        loss(poses, activations).backward()
        alone.append((poses.grad.clone(), layer.weight.grad.clone()))  # type: ignore[union-attr]
        poses.grad = None
    layer.zero_grad()
    both = loss(*inputs[0]) + loss(*inputs[1])  # the second forward runs while the first's graph is alive
    both.backward()
    for (poses, _), (want, _) in zip(inputs, alone):
        torch.testing.assert_close(poses.grad, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.weight.grad, alone[0][1] + alone[1][1], rtol=1e-4, atol=1e-6)


def test_training_takes_the_kernels_passes_up_to_four_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_kernel()
    calls: list[int] = []
    route = em_native_training.route
    monkeypatch.setattr(em_native_training, "route", lambda *a: calls.append(a[-1]) or route(*a))
    layer = ConvCapsules(2, 4, kernel=3, stride=1, in_size=4)
    poses, activations = _grid(2, 2, 4, seed=0)
    poses.requires_grad_()
    for iterations in (2, 4, 5):  # five iterations make nine factors a vote: more than the kernel keeps
        out, _, _ = layer(poses, activations, iterations)
        out.sum().backward()
    assert calls == [2, 4]


def test_a_reading_refuses_what_the_pytorch_path_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel trusts its shapes and counts, so the layer checks them first, in one line, on either path
    from capsnet.errors import InvalidArgumentError

    layer = ConvCapsules(2, 4, kernel=3, stride=1, in_size=4)
    poses, activations = _grid(2, 2, 4, seed=0)
    for native in ("1", "0"):
        monkeypatch.setenv(em_native.NATIVE_ENV, native)
        with torch.no_grad(), pytest.raises(InvalidArgumentError, match="routing iterations"):
            layer(poses, activations, 0)
        wider, wider_a = _grid(2, 2, 5, seed=0)
        with torch.no_grad(), pytest.raises(ValueError, match=r"reads poses \(B, 2, 16, 4, 4\)"):
            layer(wider, wider_a, 2)


def test_trainable_costs_alone_still_get_their_gradients() -> None:
    # W frozen and the inputs fixed, beta_u and beta_a learnt: a step must not take the reading path (no gradients)
    layer = ClassCapsules(3, 10, in_size=3)
    layer.weight.requires_grad_(False)
    poses, activations = _grid(2, 3, 3, seed=4)
    _, out_a, _ = layer(poses, activations, 2)
    out_a.sum().backward()
    assert layer.beta_a.grad is not None and layer.beta_a.grad.abs().sum() > 0


def test_a_cache_that_cannot_be_written_builds_in_a_private_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cache folder that cannot be made: the build goes to a private folder of the process's (loaded from there)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocked))  # cache_dir()/native cannot be made
    folder = em_native._folder()
    assert folder.name.startswith("capsnet-native-") and (folder.stat().st_mode & 0o077) == 0
    assert blocked.read_text() == "not a folder"


def test_the_child_grid_is_the_same_from_a_channels_last_bf16_convolution() -> None:
    """PrimaryCaps' poses under autocast are a channels-last convolution's bf16 output, made float32 where they lie
    before the grid's copy: the same grid as from the same values laid out plainly."""
    torch.manual_seed(0)
    plain = torch.randn(3, 5, 16, 4, 6).to(torch.bfloat16)  # (B, T, 16, H, W)
    lying = plain.reshape(3, 80, 4, 6).contiguous(memory_format=torch.channels_last).view(3, 5, 16, 4, 6)
    assert lying.permute(0, 3, 4, 1, 2).is_contiguous()
    grid = em_native.child_rows(lying)
    assert grid.dtype == torch.float32 and grid.shape == (3, 4, 4 * 6 * 5, 4)
    assert torch.equal(grid, em_native.child_rows(plain.float()))
    # row r of child (cell, type) at [:, r, cell * T + type]
    assert torch.equal(grid[:, 2, 7 * 5 + 3], plain[:, 3, 8:12].flatten(2)[..., 7].float())


def test_the_kernel_splits_a_batch_on_torchs_own_openmp_threads() -> None:
    """Where torch runs on libgomp (its Linux wheels), the kernel is built with OpenMP and bound to that one runtime:
    its at::parallel_for runs on the threads torch's operations ran on, not on threads of a second runtime."""
    _needs_kernel()
    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").is_file() else ""
    runtimes = {line.split()[-1] for line in maps.splitlines() if "libgomp" in line or "libomp" in line}
    assert len(runtimes) <= 1, runtimes


def test_the_kernel_refuses_what_it_cannot_read() -> None:
    """The operators check their arguments (TORCH_CHECK): a wrong dtype or shape is an error, not a crash."""
    library = _needs_kernel()
    rows, tiles = torch.zeros(2, 4, 3, 4), torch.zeros(2, 4, 4, library.block)
    child, centre = torch.zeros(1, 2, dtype=torch.long), torch.zeros(2, 1, 16, library.block)
    out, amount = torch.zeros(2, 1, 2, 16, library.block), torch.zeros(2, 1, library.block)
    weights = torch.zeros(1, 1, 2, library.block)
    library.ops.moments(child, rows, tiles, None, centre, weights, None, None, None, out, amount)
    with pytest.raises(RuntimeError, match="weights"):
        library.ops.moments(child, rows, tiles, None, centre, weights.double(), None, None, None, out, amount)
    with pytest.raises(RuntimeError, match="centre"):
        library.ops.moments(child, rows, tiles, None, centre[:1], weights, None, None, None, out, amount)


def test_the_portable_build_reads_and_trains_as_the_pytorch_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The build without the machine's own instructions (the second flag set, as on a CPU without AVX-512: blocks of
    8 parent types, two vectors or one a block) holds the same values and gradients as the PyTorch path."""
    _needs_kernel()
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(em_native, "FLAG_SETS", em_native.FLAG_SETS[1:])
    em_native._load.cache_clear()
    try:
        library = em_native.kernel()
        assert library is not None
        if platform.machine() in ("x86_64", "AMD64"):
            assert library.block == 8  # x86-64 without -march: no AVX-512
        torch.manual_seed(0)
        layers = [
            (ConvCapsules(4, 11, kernel=3, stride=2, in_size=9), (3, 4, 16, 9, 9)),  # J padded to 16
            (ClassCapsules(6, 10, in_size=3), (4, 6, 16, 3, 3)),  # coordinate addition
        ]
        for made, shape in layers:
            poses, activations = _grid(shape[0], shape[1], shape[3], seed=3)
            native, plain = _both(monkeypatch, lambda m=made, p=poses, a=activations: m(p, a, 3))
            torch.testing.assert_close(native[0], plain[0], **POSES)
            torch.testing.assert_close(native[1], plain[1], **ACTIVATIONS)
            for got, want in zip(*_gradients(monkeypatch, made, shape, 2)):
                torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * want.abs().max().item() + 1e-7)
    finally:
        em_native._load.cache_clear()


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_a_compiler_that_cannot_build_the_kernel_leaves_pytorch_to_route(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """$CXX with an unbalanced quote, a "compiler" that exits 0 and builds a library without the kernel's operators,
    and one that hangs: each leaves the kernel None (every reading routes with PyTorch) with the build's announcement
    and one line more at most, not a traceback in every EM reading; a hanging build is waited for once, not once per
    set of flags."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # whatever a "compiler" writes where it runs stays out of the working tree
    empty = tmp_path / "empty.c"
    empty.write_text("int nothing(void) { return 0; }\n")
    gcc = shutil.which("cc") or shutil.which("gcc")
    if gcc is None:
        pytest.skip("no C compiler here to make the impostor's library with")
    impostor = _script(tmp_path / "impostor", f'case " $* " in *" -o "*) ;; *) exit 0;; esac; exec {gcc} -shared -fPIC -o "$(echo "$@" | sed "s/.* -o //;s/ .*//")" '
                                             f"{empty}")  # fmt: skip
    hangs = _script(tmp_path / "hangs", "sleep 30")
    builds: list[str] = []
    build = em_native._build
    monkeypatch.setattr(em_native, "_build", lambda *a: builds.append(a[2]) or build(*a))
    for compiler, said in (
        ('g++ "unbalanced', "is not a command"),
        (impostor, "did not build"),
        (hangs, "ran past 1 s"),
    ):
        monkeypatch.setenv(em_native.COMPILER_ENV, compiler)
        monkeypatch.setattr(em_native, "BUILD_SECONDS", 1 if compiler == hangs else 300)
        monkeypatch.setattr(em_native, "_ANNOUNCED", [])
        em_native._load.cache_clear()
        builds.clear()
        try:
            assert em_native.kernel() is None, compiler
        finally:
            em_native._load.cache_clear()
        err = capfd.readouterr().err.strip()
        assert said in err and "Traceback" not in err and err.count("\n") <= 1, (compiler, err)
        if compiler == hangs:
            assert len(builds) == 1, builds  # waited for once


def test_without_a_home_folder_the_build_goes_to_a_private_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not to a /tmp name another user can create first and fill."""

    def no_home() -> Path:
        raise RuntimeError("no home")

    folders: list[Path] = []
    monkeypatch.setattr(em_native, "cache_dir", no_home)
    monkeypatch.setattr(em_native, "FLAG_SETS", (("-O1",),))  # a name no build of this process has
    monkeypatch.setattr(em_native, "_build", lambda c, f, name, folder: folders.append(folder) or False)
    em_native._load.cache_clear()
    try:
        if em_native._compiler() is None:
            pytest.skip(NO_COMPILER)
        assert em_native.kernel() is None
    finally:
        em_native._load.cache_clear()
    private = folders[0].parent
    assert private.name.startswith("capsnet-native-") and (private.stat().st_mode & 0o077) == 0
    assert all(f.parent == private for f in folders)


def test_a_damaged_build_is_built_again_not_loaded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A build's folder whose library is not one (a build stopped midway) is built again, never loaded."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(em_native, "FLAG_SETS", (("-O1",),))  # a name no build of this process has
    builds: list[tuple[str, Path]] = []
    monkeypatch.setattr(em_native, "_build", lambda c, f, name, folder: builds.append((name, folder)) or False)
    em_native._load.cache_clear()
    try:
        if em_native._compiler() is None:
            pytest.skip(NO_COMPILER)
        assert em_native.kernel() is None and builds  # learns the names without building
        name, folder = builds[0]
        (folder / f"{name}.so").write_bytes(b"\x7fELF" + bytes(64))  # truncated
        (folder / em_native.BUILT).write_text("")
        builds.clear()
        em_native._load.cache_clear()
        assert em_native.kernel() is None and builds[0] == (name, folder)  # built again
    finally:
        em_native._load.cache_clear()


def test_a_build_killed_midway_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    """A process killed while the kernel builds leaves nothing in the shared temporary folder: the build's files
    live in the cache's own folder."""
    import signal
    import subprocess
    import sys
    import time

    cache, shared = tmp_path / "cache", tmp_path / "tmp"
    shared.mkdir()
    hangs = _script(tmp_path / "hangs", '[ "$1" = --version ] && exit 0; sleep 30')
    env = dict(os.environ, **{CACHE_ENV: str(cache), em_native.COMPILER_ENV: hangs, "TMPDIR": str(shared)})
    env.pop(em_native.NATIVE_ENV, None)
    child = subprocess.Popen([sys.executable, "-c", "from capsnet.nn import em_native; em_native.kernel()"],
                             env=env, start_new_session=True)  # fmt: skip
    native = cache / "native"
    deadline = time.monotonic() + 120
    while not list(native.glob("em_kernel_*")) and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.1)
    time.sleep(1.0)  # the build under way
    os.killpg(child.pid, signal.SIGKILL)  # the process, mid-build
    child.wait()
    assert list(native.glob("em_kernel_*")) and not list(shared.iterdir()), list(shared.iterdir())
