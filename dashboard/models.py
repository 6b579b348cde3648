"""The chosen model, and everything the pages read from it, cached.

The model is loaded once per checkpoint file (path + modification time) with `st.cache_resource` and never
mutated. A page holds a `Model` and asks it for what it shows (`model.explain(image)`, `model.evaluation(1000)`,
...): each reading goes through a bounded `st.cache_data` function keyed by the model's key and the reading's
arguments, so a rerun (a slider move, a page switch) recomputes only what changed. Cached functions hold no
widgets, and cached results are typed.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import streamlit as st
import torch

from capsnet import kept_evaluation
from capsnet.checkpoints.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from capsnet.checkpoints.header import CheckpointInfo
from capsnet.data.datasets import (
    DATASETS,
    as_tensors,
    dataset_info,
    load_dataset,
    stored_tensors,
)
from capsnet.data.tasks import Task, task
from capsnet.errors import CapsNetError
from capsnet.evaluation import Evaluation, evaluate, merge_evaluations
from capsnet.files import file_sha256
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.family import Network, RoutingKind
from capsnet.nn.registry import NETWORKS, network_of
from capsnet.nn.routing import CouplingScores
from capsnet.readings import coupling_rules as cr
from capsnet.readings import decoding, reconstruction
from capsnet.readings import equivariance as eq
from capsnet.readings import explain as ex
from capsnet.readings import playground as pg
from capsnet.readings import routing_matters as rm
from capsnet.readings import stages as arch
from capsnet.readings.agreement import Votes
from capsnet.readings.em_layers import ConvLayerRouting
from capsnet.readings.equivariance import Transform, TransformedReading
from capsnet.readings.explain_em import EMExplanation
from capsnet.readings.novelty import NoveltyThresholds, thresholds_for
from capsnet.readings.reading import Reading, read
from capsnet.runs import catalog
from dashboard import state

MNIST_DIGITS = [str(d) for d in range(10)]
# what the picker lists, the networks that route capsules: the baselines are there to be compared with


def capsule_networks() -> tuple[str, ...]:
    """The registered networks that route capsules (a family registered after the app started among them)."""
    return tuple(name for name, net in NETWORKS.items() if net.routing is not None)


EVALUATION_CHUNK = 1000


@dataclass(frozen=True)
class Loaded:
    """A loaded checkpoint of any network and a cache key that changes when its file does: what every handle has."""

    checkpoint: Checkpoint
    key: str

    @property
    def net(self) -> Any:
        return self.checkpoint.model

    @property
    def info(self) -> CheckpointInfo:
        return self.checkpoint.info

    @property
    def class_names(self) -> list[str]:
        return self.checkpoint.class_names

    @property
    def dataset(self) -> str:
        return self.info.dataset_name


@dataclass(frozen=True)
class Model(Loaded):
    """The chosen capsule network's checkpoint and its cached readings (the CNN's handle, `baselines.Baseline`, is a
    sibling). Pages ask its `network` what it can do (`capsnet.nn.family`): how it routes (`routing`), whether it
    redraws, what its scores are; a page says which routings it reads (`dashboard.guards.require_model`)."""

    @property
    def config(self) -> CapsNetConfig:
        # the EM network's is an EMCapsNetConfig: the pages that read it (`em`) read it as one, the others never see it
        return cast(CapsNetConfig, self.checkpoint.config)

    @property
    def network(self) -> Network:
        """The network's family and what it can do."""
        return network_of(self.checkpoint.config)

    @property
    def routing(self) -> RoutingKind:
        """How it routes: "dynamic" (the CapsNet) or "em" (matrix capsules); the picker lists only networks that route."""
        routing = self.network.routing
        assert routing is not None  # capsule_networks() route
        return routing.kind

    @property
    def redraws(self) -> bool:
        """Whether it redraws its input from a class capsule (has a decoder)."""
        return self.network.redraws(self.checkpoint.config)

    def reading(
        self, image: np.ndarray, iterations: int | None = None, decode_class: int | None = None, layers: bool = False
    ) -> Reading:
        """`capsnet.readings.reading.read` of one input, whatever the network: one forward pass per input, kept
        (with `layers`, every capsule layer's routing from that same pass)."""
        return _reading(self.key, image, iterations, decode_class, layers, self.net)

    def explain(
        self, image: np.ndarray, iterations: int | None = None, decode_class: int | None = None
    ) -> ex.Explanation:
        """Dynamic routing's account of `reading` (votes, couplings, stages), for the views of a CapsNet."""
        routing = self.reading(image, iterations, decode_class).routing
        assert isinstance(routing, ex.Explanation), "a view of dynamic routing opened with another network"
        return routing

    def explain_em(
        self, image: np.ndarray, iterations: int | None = None, decode_class: int | None = None, layers: bool = False
    ) -> EMExplanation:
        """EM routing's account of `reading` (activations, the class layer's routing), for the views of EM."""
        routing = self.reading(image, iterations, decode_class, layers).routing
        assert isinstance(routing, EMExplanation), "a view of EM routing opened with another network"
        return routing

    def em_layers(self, image: np.ndarray, iterations: int | None = None) -> tuple[ConvLayerRouting, ...]:
        """ConvCaps1's and ConvCaps2's EM routing of one input, from the forward pass of `reading(..., layers=True)`."""
        return self.reading(image, iterations, layers=True).layers

    def votes(self, image: np.ndarray, iterations: int | None = None) -> Votes:
        """Every vote u_hat_{j|i} and coupling of one input: the trace of `explain`'s one forward pass."""
        return self.explain(image, iterations).votes

    def transformed(
        self, image: np.ndarray, transforms: tuple[Transform, ...], capsule: int | None
    ) -> TransformedReading:
        """The input under each transform, read in one batch, following `capsule` (default: the first's winner)."""
        return _transformed(self.key, image, transforms, capsule, self.net)

    def rotation_sweep(self, image: np.ndarray, base: Transform, capsule: int) -> TransformedReading:
        """`base` at each of the 37 sweep angles, in one batch."""
        return _rotation_sweep(self.key, image, dataclasses.replace(base, rotation=0.0), capsule, self.net)

    def sensitivity(self, image: np.ndarray, base: Transform, capsule: int) -> dict[str, np.ndarray]:
        """How much each pose dimension moves per kind of transform, around `base`."""
        return _sensitivity(self.key, image, base, capsule, self.net)

    def decode(self, vector: np.ndarray, class_index: int) -> np.ndarray:
        """One decode of a 16-D vector placed in `class_index`'s capsule (a slider move)."""
        return _decoded(self.key, tuple(float(v) for v in vector), class_index, self.net)

    @property
    def perturbation_steps(self) -> np.ndarray:
        """Figure 4's 11 steps for this model: the paper's +/- 0.25, narrower where its capsules spread less."""
        return decoding.perturbation_steps(self.info.dimension_std)

    def perturbations(self, vector: np.ndarray, class_index: int) -> np.ndarray:
        """Figure 4's grid (D, 11, H, W[, 3]) around one capsule vector, at `perturbation_steps`."""
        steps = tuple(float(s) for s in self.perturbation_steps)
        return _perturbations(self.key, tuple(float(v) for v in vector), class_index, steps, self.net)

    def evaluation(self, limit: int, on_chunk: Callable[[int, int], None] | None = None) -> Evaluation:
        """The model on the first `limit` images of its test set (the set must be available: `try_test_set`).

        Evaluated EVALUATION_CHUNK images at a time, each chunk cached (the first 1,000 serve the
        quick view and the start of the full one); `on_chunk(done, limit)` after each, for a progress bar.
        The first chunk is kept once per checkpoint (`capsnet.kept_evaluation`): a shipped model carries its own,
        and one measured here is kept in the user's store, so the quick view opens at once the next time.
        """
        parts = []
        path = str(self.checkpoint.path)
        for start in range(0, limit, EVALUATION_CHUNK):
            stop = min(start + EVALUATION_CHUNK, limit)
            parts.append(_evaluation(self.key, path, self.dataset, start, stop, self.net))
            if on_chunk is not None:
                on_chunk(min(start + EVALUATION_CHUNK, limit), limit)
        return merge_evaluations(parts)

    def evaluation_seconds(self, limit: int) -> float:
        """About how long `evaluation(limit)` measures on this machine: 0 for what is kept (the first chunk, where its
        entry is), else the images left at the rate of one batch of 16 test images, timed once per model."""
        kept = kept_evaluation.read_kept(self.checkpoint.path, self.dataset, min(limit, EVALUATION_CHUNK))
        left = max(limit - EVALUATION_CHUNK, 0) if kept is not None else limit
        return left * _seconds_per_image(self.key, self.dataset, self.net) if left else 0.0

    @property
    def task(self) -> Task:
        """What one input of this model is (`capsnet.data.tasks.Task`): its size, whether it is a pair or a drawing."""
        known = self.dataset in DATASETS
        return task(self.dataset) if known else Task("image", self.config.image_size, self.config.in_channels)

    @property
    def reads_pairs(self) -> bool:
        """A MultiMNIST model: it reads two overlapping digits on 36x36, on the Overlapping digits page only."""
        return self.task.pairs

    def explain_pair(self, image: np.ndarray) -> ex.PairExplanation:
        """The two longest capsules of an overlay, and each digit redrawn from its own capsule."""
        return _pair(self.key, image, self.net)

    @property
    def noun(self) -> str:
        """What one example is: "digit" (MNIST), "item" (Fashion-MNIST), "image" (a colour folder of one's own)."""
        other = "image" if self.task.channels > 1 else "item"
        return dataset_info(self.dataset).noun if self.dataset in DATASETS else other

    def novelty(self) -> tuple[NoveltyThresholds | None, str]:
        """The not-like-any-class thresholds (the header's, else computed once on the test set), or why not."""
        stored = NoveltyThresholds.from_dict(self.info.novelty)
        if stored is not None:
            return stored, ""
        try:
            return _novelty(self.key, self.checkpoint), ""
        except CapsNetError as error:  # among them: the test set is missing or damaged
            return None, str(error)

    def reconstructions(self, indices: tuple[int, ...]) -> reconstruction.Reconstructions:
        """Predictions and reconstructions (from the predicted capsule) of some test images."""
        return _reconstructions(self.key, self.dataset, indices, self.net)

    def stages(
        self, image: np.ndarray, capsule: int | None, digit: int | None
    ) -> tuple[ex.Explanation, arch.CapsuleView]:
        """Every stage's output for one input (its explanation: the Routing page's own cached forward pass), and what
        passes between primary capsule `capsule` (None: a long one where the ink is, moved by routing) and digit capsule `digit`
        (None: the prediction): no new pass."""
        reading = self.explain(image)
        return reading, arch.capsule_view(self.net, reading, capsule, digit)

    def routing_matters(
        self, measure: bool = False, on_chunk: Callable[[int, int], None] | None = None
    ) -> tuple[rm.RoutingMatters | None, str]:
        """The test set under each coupling rule and where the answer changes with r = 1..5 (`rm.RoutingMatters`).

        The summary kept beside the checkpoint, else (`measure`) measured now, EVALUATION_CHUNK images at a time,
        each chunk cached, `on_chunk(done, total)` after each, and kept; (None, "") when not kept and not asked to
        measure. The second value says why a measured summary could not be kept ("" when it was).
        """
        images, labels = test_set(self.dataset)
        try:
            return _routing_kept(self.key, str(self.checkpoint.path), len(labels), len(self.class_names)), ""
        except LookupError:  # not kept (never cached: a summary kept later is read)
            if not measure:
                return None, ""
        parts = []
        for start in range(0, len(labels), EVALUATION_CHUNK):
            stop = min(start + EVALUATION_CHUNK, len(labels))
            parts.append(_routing_chunk(self.key, self.dataset, start, stop, self.net))
            if on_chunk is not None:
                on_chunk(stop, len(labels))
        readings = CouplingScores(*(torch.cat(column) for column in zip(*parts)))  # the chunks' (n, R + 1, K), ..
        result = rm.summarise(readings, labels.numpy(), rm.ITERATIONS, self.dataset, self.config.routing_iterations,
                              file_sha256(self.checkpoint.path), rm.SEED)  # fmt: skip
        try:
            rm.keep(self.checkpoint.path, result)
        except CapsNetError as error:  # a read-only folder: shown, measured again in a new session
            return result, str(error)
        return result, ""

    def input_rules(self, image: np.ndarray, iterations: int) -> cr.InputRules:
        """The input with uniform, routed (`iterations` times) and random couplings (`cr.read_input`)."""
        return _input_rules(self.key, image, iterations, self.net)

    def vote_plane(self, image: np.ndarray, iterations: int, digit: int) -> pg.Plane:
        """Digit capsule `digit`'s votes and routing in 2-D (`capsnet.readings.playground.real_plane`), from the cached reading."""
        return _vote_plane(self.key, image, iterations, digit, self.net)


# ---------------------------------------------------------------- choosing and loading


@st.cache_data(ttl=3, max_entries=4, show_spinner=False)
def checkpoint_entries(checkpoints: str, root: str) -> list[catalog.CheckpointEntry]:
    """The picker's list (headers only) of both capsule networks, refreshed at most every 3 seconds."""
    return catalog.list_checkpoints(checkpoints, root, network=capsule_networks())


@st.cache_resource(max_entries=4, show_spinner="Loading the model...")
def load_model(path: str, mtime: float) -> Checkpoint:
    """The checkpoint at `path` as it was at `mtime`, loaded once and shared by every session (read-only)."""
    return load_checkpoint(path, device="cpu", networks=capsule_networks())


def open_current() -> tuple[Model | None, str]:
    """The model chosen in the sidebar, or None with why it cannot be read ("" when none is chosen)."""
    path = state.chosen_path()
    if not path:
        return None, ""
    try:
        mtime = os.path.getmtime(path)
        checkpoint = load_model(path, mtime)
    except (OSError, CheckpointError) as error:  # said by the file's name: not the server's folders
        return None, str(error).replace(str(path), Path(path).name)
    return Model(checkpoint=checkpoint, key=f"{path}@{mtime}"), ""


def class_names(model: Model | None) -> list[str]:
    return model.class_names if model is not None else MNIST_DIGITS


def display_path(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


# ---------------------------------------------------------------- the test set


@st.cache_resource(max_entries=2, show_spinner="Loading the test digits...")
def test_digits(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The test digits as stored, uint8 (N, 1, 28, 28), and their labels: what MultiMNIST overlays are made of."""
    return stored_tensors(load_dataset(name, train=False))


@st.cache_resource(max_entries=2, show_spinner="Loading the test set...")
def test_set(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The test images (N, 1, H, W) and labels of a dataset as its networks read them, shared read-only.

    Raises DatasetNotFoundError or DatasetDamagedError (not cached) when it cannot be read.
    """
    return as_tensors(load_dataset(name, train=False), dataset_info(name).image_size)


# ---------------------------------------------------------------- cached readings (arguments after `_` are not hashed)


@st.cache_data(max_entries=32, show_spinner=False)
def _pair(model_key: str, image: np.ndarray, _model: Any) -> ex.PairExplanation:
    return ex.explain_pair(_model, image)


@st.cache_data(max_entries=32, show_spinner=False)
def _reading(
    model_key: str, image: np.ndarray, iterations: int | None, decode_class: int | None, layers: bool, _model: Any
) -> Reading:
    return read(_model, image, iterations, decode_class, layers)


@st.cache_data(max_entries=64, show_spinner=False)
def _transformed(
    model_key: str, image: np.ndarray, transforms: tuple[Transform, ...], capsule: int | None, _model: Any
) -> TransformedReading:
    return eq.read_transforms(_model, image, list(transforms), capsule)


@st.cache_data(max_entries=16, show_spinner=False)
def _rotation_sweep(
    model_key: str, image: np.ndarray, base: Transform, capsule: int, _model: Any
) -> TransformedReading:
    return eq.rotation_sweep(_model, image, base, capsule)


@st.cache_data(max_entries=16, show_spinner=False)
def _sensitivity(
    model_key: str, image: np.ndarray, base: Transform, capsule: int, _model: Any
) -> dict[str, np.ndarray]:
    return eq.sensitivity(_model, image, base, capsule)


@st.cache_data(max_entries=256, show_spinner=False)
def _decoded(model_key: str, vector: tuple[float, ...], class_index: int, _model: Any) -> np.ndarray:
    return decoding.decode_vector(_model, np.asarray(vector, dtype=np.float32), class_index)


@st.cache_data(max_entries=8, show_spinner=False)
def _seconds_per_image(model_key: str, dataset: str, _model: Any) -> float:
    """A reading's seconds per test image here: 16 images evaluated, after one warm-up pass."""
    images, labels = test_set(dataset)
    evaluate(_model, images[:16], labels[:16], batch_size=16)
    start = time.perf_counter()
    evaluate(_model, images[:16], labels[:16], batch_size=16)
    return (time.perf_counter() - start) / 16


@st.cache_data(max_entries=16, show_spinner=False)
def _perturbations(
    model_key: str, vector: tuple[float, ...], class_index: int, steps: tuple[float, ...], _model: Any
) -> np.ndarray:
    return decoding.perturbation_grid(
        _model, np.asarray(vector, dtype=np.float32), class_index, np.asarray(steps, dtype=np.float32)
    )


@st.cache_data(max_entries=40, show_spinner=False)
def _evaluation(model_key: str, path: str, dataset: str, start: int, stop: int, _model: Any) -> Evaluation:
    if start == 0 and (kept := kept_evaluation.read_kept(path, dataset, stop)) is not None:
        return kept
    images, labels = test_set(dataset)
    result = evaluate(_model, images[start:stop], labels[start:stop])  # 500 a batch, fewer where memory is short
    if start == 0:
        try:
            kept_evaluation.keep(path, result, dataset)
        except CapsNetError:  # a store that cannot be written: measured again in a new session
            pass
    return result


@st.cache_data(max_entries=4, show_spinner="Calibrating on the test set, once for this model...")
def _novelty(model_key: str, _checkpoint: Checkpoint) -> NoveltyThresholds:
    return thresholds_for(_checkpoint)


@st.cache_data(max_entries=16, show_spinner=False)
def _reconstructions(
    model_key: str, dataset: str, indices: tuple[int, ...], _model: Any
) -> reconstruction.Reconstructions:
    images, _ = test_set(dataset)
    return reconstruction.reconstruct(_model, images[list(indices)])


@st.cache_data(max_entries=8, show_spinner=False)
def _routing_kept(model_key: str, path: str, total: int, classes: int) -> rm.RoutingMatters:
    """The summary kept beside the checkpoint at `path`; LookupError (not cached) when there is none to trust."""
    kept = rm.read_kept(path, total, classes=classes)
    if kept is None:
        raise LookupError(f"no routing summary kept for {path}")
    return kept


@st.cache_data(max_entries=24, show_spinner=False)
def _routing_chunk(model_key: str, dataset: str, start: int, stop: int, _model: Any) -> CouplingScores:
    images, _ = test_set(dataset)
    return cr.read_rules(_model, images[start:stop], rm.ITERATIONS, rm.SEED, first_index=start)  # (n, R + 1, K), ..


@st.cache_data(max_entries=16, show_spinner="Reading the input with uniform, routed and random couplings...")
def _input_rules(model_key: str, image: np.ndarray, iterations: int, _model: Any) -> cr.InputRules:
    return cr.read_input(_model, image, iterations)


@st.cache_data(max_entries=32, show_spinner=False)
def _vote_plane(model_key: str, image: np.ndarray, iterations: int, digit: int, _model: Any) -> pg.Plane:
    routing = _reading(model_key, image, iterations, None, False, _model).routing
    assert isinstance(routing, ex.Explanation)  # the plane of dynamic routing's votes
    return pg.real_plane(routing.votes, digit)
