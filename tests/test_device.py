"""Device choice and the dashboard's thread count."""

from __future__ import annotations

import pytest
import torch

from capsnet.device import THREADS_ENV, exact_float32, inference_threads, pick_device


def test_inference_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert inference_threads() == 1
    monkeypatch.setenv(THREADS_ENV, "4")
    assert inference_threads() == 4
    monkeypatch.setenv(THREADS_ENV, "lots")
    assert inference_threads() == 1


def test_pick_device() -> None:
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is available"):
            pick_device("cuda")


def flags() -> tuple[bool, bool]:
    """Whether TF32 is allowed: in cuDNN's convolutions, in matrix products."""
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


@pytest.fixture
def tf32_allowed():
    """TF32 allowed for cuDNN and matrix products, as a GPU run might have it; the process's flags restored after."""
    saved = flags()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_exact_float32_turns_tf32_off_within_and_restores_it(tf32_allowed) -> None:
    with exact_float32():
        assert flags() == (False, False)
    assert flags() == (True, True)
    with pytest.raises(RuntimeError, match="inside"), exact_float32():
        raise RuntimeError("inside")
    assert flags() == (True, True)  # restored after an error too


def test_the_measurements_run_the_network_without_tf32(tf32_allowed, monkeypatch: pytest.MonkeyPatch) -> None:
    """`evaluate` (the evaluate command, the export's header) and Where routing matters: on a GPU their answers are
    the CPU's (capsnet.device.exact_float32 says what TF32 changed)."""
    from capsnet.evaluation import evaluate
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig
    from capsnet.readings.routing_matters import iteration_lengths

    torch.manual_seed(0)
    net = CapsNet(CapsNetConfig.preset("tiny"))
    seen: list[tuple[bool, bool]] = []
    for name in ("forward", "encode"):
        original = getattr(net, name)

        def recording(*args, original=original, **kwargs):
            seen.append(flags())
            return original(*args, **kwargs)

        monkeypatch.setattr(net, name, recording)
    images, labels = torch.rand(4, 1, 28, 28), torch.arange(4)
    evaluate(net, images, labels)
    assert seen and set(seen) == {(False, False)}
    seen.clear()
    iteration_lengths(net, images, (1, 2))
    assert seen and set(seen) == {(False, False)}
    assert flags() == (True, True)
