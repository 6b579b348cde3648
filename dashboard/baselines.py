"""The CNN beside the CapsNet: the baseline for the open model's dataset, and robustness curves of both.

The baseline is the shipped `checkpoints/baselines/<dataset>-cnn.safetensors`, else the newest
CNN run on that dataset (`capsnet.runs.catalog.baseline_for`), loaded once per file with
`st.cache_resource`. Robustness is the test accuracy with every test image turned (or scaled)
alike, measured a point at a time under a progress bar and kept as the checkpoint's "robustness"
entry in the measurement store (`capsnet.checkpoints.measurements`), so each model's curves are
measured once per machine and then read back at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import streamlit as st
import torch

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from capsnet.data.pictures import as_inputs, picture_of
from capsnet.errors import CapsNetError
from capsnet.nn.cnn import CNNConfig
from capsnet.readings import affnist, claims
from capsnet.runs import catalog
from dashboard import models, state

ROBUSTNESS = "robustness"  # the measurement store's name for a checkpoint's robustness curves


@dataclass(frozen=True)
class Baseline(models.Loaded):
    """A loaded CNN baseline (checkpoint, cache key: a sibling of the CapsNet's `models.Model`): class scores."""

    @property
    def config(self) -> CNNConfig:
        return cast(CNNConfig, self.checkpoint.config)  # loaded only as a CNN (networks=("cnn",))

    @property
    def accuracy(self) -> float | None:
        return self.info.test_accuracy

    def scores(self, image: np.ndarray) -> np.ndarray:
        """The class scores (K,) of one input (H, W) in [0, 1]: softmax probabilities, or a sigmoid per class."""
        return _scores(self.key, image, self.net)


@st.cache_data(ttl=3, max_entries=4, show_spinner=False)
def baseline_entries(checkpoints: str, root: str) -> list[catalog.CheckpointEntry]:
    """The CNN baselines (headers only), refreshed at most every 3 seconds."""
    return catalog.list_checkpoints(checkpoints, root, network="cnn")


@st.cache_resource(max_entries=4, show_spinner="Loading the CNN baseline...")
def _load(path: str, mtime: float) -> Checkpoint:
    return load_checkpoint(path, device="cpu", networks=("cnn",))


def open_baseline(dataset: str) -> tuple[Baseline | None, str]:
    """The CNN to compare with on `dataset`, or None: with why it cannot be read ("" when there is none)."""
    entries = baseline_entries(str(state.checkpoints_dir()), str(state.runs_root()))
    entry = catalog.baseline_for(dataset, entries)
    if entry is None:
        return None, ""
    try:
        mtime = os.path.getmtime(entry.path)
        return Baseline(_load(str(entry.path), mtime), key=f"{entry.path}@{mtime}"), ""
    except (OSError, CheckpointError) as error:
        return None, str(error)


def claim_verdict(model: models.Model) -> claims.Verdict | None:
    """The MultiMNIST claim's verdict for the open CapsNet and its CNN baseline (None without a baseline)."""
    cnn, _ = open_baseline(model.dataset)
    if cnn is None:
        return None
    return _verdict("multimnist", str(model.checkpoint.path), str(cnn.checkpoint.path), model.key, cnn.key)


def affine_verdict() -> claims.Verdict | None:
    """The affine claim's verdict, whichever model is open: the CapsNet and the CNN trained on MNIST digits moved
    on 40x40 (`capsnet.readings.affnist.TRAINING_SET`), the shipped ones else the newest runs; None without both."""
    checkpoints, root = str(state.checkpoints_dir()), str(state.runs_root())
    capsnet = catalog.trained_on(affnist.TRAINING_SET, models.checkpoint_entries(checkpoints, root))
    cnn = catalog.baseline_for(affnist.TRAINING_SET, baseline_entries(checkpoints, root))
    if capsnet is None or cnn is None:
        return None
    try:
        keys = [f"{entry.path}@{os.path.getmtime(entry.path)}" for entry in (capsnet, cnn)]
    except OSError:
        return None
    return _verdict("affnist", str(capsnet.path), str(cnn.path), *keys)


def start_free_verdict(claim: str) -> claims.Verdict | None:
    """The start-free pair's verdict on `claim`, from its record among the shipped checkpoints (None if none is
    there or it cannot be read: the page then shows the warm-started pair alone)."""
    path = state.checkpoints_dir() / "claims" / claims.START_FREE.format(claim=claim)
    try:
        return _record(str(path), os.path.getmtime(path))
    except (OSError, CapsNetError):
        return None


@st.cache_data(max_entries=4, show_spinner=False)
def _record(path: str, mtime: float) -> claims.Verdict:
    return claims.read_record(path)


@st.cache_data(max_entries=8, show_spinner=False)
def _verdict(claim: str, capsnet: str, cnn: str, capsnet_key: str, cnn_key: str) -> claims.Verdict | None:
    try:
        return claims.verdict(claim, capsnet, cnn)
    except CheckpointError:
        return None


@st.cache_data(max_entries=64, show_spinner=False)
def _scores(key: str, image: np.ndarray, _net: Any) -> np.ndarray:
    c = _net.config
    x = as_inputs(picture_of(image, c.in_channels, c.image_size)[None])  # (1, C, H, W): grey or colour, as read
    with torch.no_grad():
        return _net.eval()(x).scores[0].numpy()


# ---------------------------------------------------------------- robustness


def robustness(
    handle: models.Loaded,
    dataset: str,
    kind: str,
    limit: int,
    on_step: Callable[[int, int], None] | None = None,
) -> affnist.Sweep:
    """Accuracy on the first `limit` test images, all turned (kind "rotation") or scaled alike, per sweep setting:
    kept in the measurement store, else measured a point at a time (`on_step(done, total)`) and kept."""
    values = tuple(float(v) for v in (affnist.ANGLES if kind == "rotation" else affnist.SCALES))
    name = f"{kind}@{limit}"
    path = handle.checkpoint.path
    kept = measurements.read(path, ROBUSTNESS) or {}
    try:
        sweep = affnist.Sweep.from_dict(kept[name])
        if sweep.values == values and sweep.examples == limit:
            return sweep
    except (KeyError, TypeError, ValueError):
        pass
    points = []
    for k, value in enumerate(values):
        points.append(_point(handle.key, dataset, kind, value, limit, handle.net))
        if on_step is not None:
            on_step(k + 1, len(values))
    sweep = affnist.Sweep(kind, values, tuple(points), limit)
    try:
        measurements.write(path, ROBUSTNESS, {**kept, name: sweep.to_dict()})
    except CapsNetError:  # a read-only home: measured again in the next session
        pass
    return sweep


def robustness_curves(
    networks: dict[str, models.Loaded], dataset: str, limit: int, on_progress: Callable[[float, str], object]
) -> dict[str, dict[str, affnist.Sweep]]:
    """{"rotation": {name: Sweep}, "scale": {...}} for each named network; `on_progress(fraction, what)`."""
    jobs = [(kind, name) for kind in ("rotation", "scale") for name in networks]
    curves: dict[str, dict[str, affnist.Sweep]] = {"rotation": {}, "scale": {}}
    for k, (kind, name) in enumerate(jobs):

        def step(done: int, total: int, k: int = k, what: str = f"{name}, {kind}") -> None:
            on_progress((k + done / total) / len(jobs), what)

        curves[kind][name] = robustness(networks[name], dataset, kind, limit, step)
    return curves


@st.cache_data(max_entries=16, show_spinner=False)
def reading_rate(key: str, _net: Any) -> float:
    """Images this network reads per second on this machine: one warm batch of 64, timed once per model."""
    channels, size = _net.config.in_channels, _net.config.image_size
    batch = torch.rand(64, channels, size, size, generator=torch.Generator().manual_seed(0))  # (64, C, H, W)
    with torch.no_grad():
        _net.eval()(batch[:8])  # the first call pays for allocation and kernel choice
        start = time.perf_counter()
        _net(batch)
    return len(batch) / max(time.perf_counter() - start, 1e-6)


def robustness_seconds(networks: dict[str, models.Loaded], limit: int) -> float:
    """How long the robustness curves of `networks` take to measure from scratch, `limit` images a point, here."""
    return sum(affnist.sweep_images(limit) / reading_rate(h.key, h.net) for h in networks.values())


@st.cache_data(max_entries=512, show_spinner=False)
def _point(key: str, dataset: str, kind: str, value: float, limit: int, _net: Any) -> float:
    images, labels = models.test_set(dataset)
    return affnist.accuracy_sweep(_net, images[:limit], labels[:limit], kind, [value]).accuracy[0]
