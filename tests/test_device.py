"""Device choice and the dashboard's thread count."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
import torch

import capsnet
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


def _huge_pages_kb(address: int) -> int:
    """The kB of transparent huge pages in this process's mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        span = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if span:
            inside = int(span.group(1), 16) <= address < int(span.group(2), 16)
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError(f"no mapping holds address {address:#x}")


def test_large_tensors_live_in_huge_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing capsnet asks torch's allocator for transparent huge pages, and where the kernel gives them on request
    (madvise) a large tensor made after the import, as in this process, lives in them; a user's own setting wins."""
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    asked = os.environ[capsnet.HUGE_PAGES_ENV] == "1"  # not where the user turned them off
    if asked and mode.is_file() and "[madvise]" in mode.read_text():  # "always" gives them to all, "never" to none
        block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MB, touched
        assert _huge_pages_kb(block.data_ptr()) >= 32 << 10, "a 64 MB tensor is not in huge pages"
    monkeypatch.delenv(capsnet.HUGE_PAGES_ENV)
    importlib.reload(capsnet)
    assert os.environ[capsnet.HUGE_PAGES_ENV] == "1"
    monkeypatch.setenv(capsnet.HUGE_PAGES_ENV, "0")
    importlib.reload(capsnet)
    assert os.environ[capsnet.HUGE_PAGES_ENV] == "0"
