"""Device choice and the dashboard's thread count."""

from __future__ import annotations

import pytest
import torch

from capsnet.device import THREADS_ENV, inference_threads, pick_device


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
