"""The training window (`capsnet.training.watch`): snapshots a real run writes, the same images after --resume, a damaged
file read as none, and the Training runs page showing it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from dashboard_fixtures import APP, app_dirs, clear_streamlit_caches  # noqa: F401
from streamlit.testing.v1 import AppTest

from capsnet.data.datasets import dataset_info
from capsnet.data.tasks import LabelledSet
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.training.folder import RunFolder
from capsnet.training.options import TrainOptions
from capsnet.training.trainer import train
from capsnet.training.watch import (
    KEEP,
    WINDOW_SIZE,
    Watcher,
    WindowHistory,
    look,
    read_window,
    thinned,
    window_examples,
)

RUN_NAME = "20250101-000000-mnist"


def tiny_options(out: Path, data_dir: Path, epochs: int, **extra: object) -> TrainOptions:
    return TrainOptions(dataset="mnist", epochs=epochs, batch_size=50, preset="tiny", train_size=300, test_size=200,
                        device="cpu", out=str(out), progress=False, data_dir=str(data_dir), **extra)  # fmt: skip


@pytest.fixture(scope="module")
def watched_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WindowHistory]:
    """A tiny CapsNet trained for 1 epoch on 300 MNIST images, then resumed for a 2nd: its folder, window included,
    and its window as it was before the resume."""
    run_dir = tmp_path_factory.mktemp("watch") / RUN_NAME
    train(tiny_options(run_dir, data_dir, epochs=1))
    first = read_window(run_dir)
    assert first is not None
    train(tiny_options(run_dir, data_dir, epochs=2, resume=True))
    return run_dir, first


def test_window_choice_is_one_per_class_and_seeded() -> None:
    info = dataset_info("mnist")
    labels = torch.tensor([3, 3, 1, 0, 1, 2, 3, 0, 2, 1] * 5)  # classes 0-3 only: the rest are filled with others
    images = torch.rand(len(labels), 1, 28, 28)
    test = LabelledSet(info, images, labels)
    chosen, chosen_labels = window_examples(test, count=6, seed=1)
    assert chosen.shape == (6, 1, 28, 28) and chosen_labels.shape == (6, 1)
    assert chosen_labels[:4, 0].tolist() == [0, 1, 2, 3]  # one of each class present first, by class
    again, _ = window_examples(test, count=6, seed=1)
    assert torch.equal(chosen, again)
    assert not torch.equal(window_examples(test, count=6, seed=2)[0], chosen)
    with pytest.raises(ValueError, match="at least one"):
        window_examples(test, count=0)


def test_thinning_keeps_the_first_and_newest_and_stays_bounded() -> None:
    assert thinned(KEEP).tolist() == list(range(KEEP))
    kept = thinned(KEEP + 1)
    assert kept[0] == 0 and kept[-1] == KEEP and len(kept) <= KEEP and (np.diff(kept) > 0).all()
    count = 0
    for _ in range(500):  # a long run: never more than KEEP
        count = len(thinned(count + 1))
        assert count <= KEEP


def test_look_restores_the_training_mode(model: CapsNet) -> None:
    images = torch.rand(3, 1, 28, 28)
    model.train()
    scores, redrawn = look(model, images, present=2)
    assert model.training and scores.shape == (3, 10) and redrawn.shape == (3, 28, 28)
    assert redrawn.min() >= 0 and redrawn.max() <= 1
    with torch.no_grad():
        out = model.eval()(images)
        top = out.lengths.topk(2, dim=1).indices  # each image redrawn from its two longest capsules, merged
        merged = (model.decode(out.poses, top[:, 0]) + model.decode(out.poses, top[:, 1])).clamp(max=1)[:, 0]
    assert np.allclose(scores, out.lengths.numpy(), atol=1e-6) and np.allclose(redrawn, merged.numpy(), atol=1e-6)


@pytest.mark.slow
def test_a_run_writes_its_window_every_epoch(watched_run: tuple[Path, WindowHistory]) -> None:
    run_dir, _ = watched_run
    history = read_window(run_dir)
    assert history is not None and len(history) == 3 and history.redrawn and history.dataset == "mnist"
    assert [history.label(s) for s in range(3)] == ["before training", "epoch 1", "epoch 2"]
    assert history.images.shape == (WINDOW_SIZE, 28, 28) and history.labels.shape == (WINDOW_SIZE, 1)
    assert sorted(history.labels[:, 0].tolist()) == list(range(10))  # one test image of each digit
    assert history.scores.shape == (3, WINDOW_SIZE, 10) and history.reconstructions.shape == (3, WINDOW_SIZE, 28, 28)
    assert (history.scores >= 0).all() and (history.scores <= 1).all()  # capsule lengths
    assert (history.m_plus, history.m_minus) == (0.9, 0.1)
    # what the trainer saw is what the saved model answers now: the last snapshot is the last epoch's model
    from capsnet.checkpoints.checkpoint import load_checkpoint

    model = load_checkpoint(run_dir / "last.safetensors").model.eval()
    with torch.no_grad():
        lengths = model(torch.from_numpy(history.images)[:, None]).lengths.numpy()
    assert np.allclose(lengths, history.scores[-1], atol=1e-4)
    # it learned: the right capsules are longer after two epochs than before training
    rows, truth = np.arange(WINDOW_SIZE), history.labels[:, 0]
    assert history.scores[-1][rows, truth].mean() > history.scores[0][rows, truth].mean()


@pytest.mark.slow
def test_a_resumed_run_keeps_the_same_window(watched_run: tuple[Path, WindowHistory]) -> None:
    run_dir, first = watched_run
    resumed = read_window(run_dir)
    assert resumed is not None and len(first) == 2 and len(resumed) == 3
    assert np.array_equal(resumed.images, first.images) and np.array_equal(resumed.labels, first.labels)
    assert np.array_equal(resumed.scores[:2], first.scores)  # the snapshots before the stop are kept as they were
    assert not np.array_equal(resumed.scores[2], first.scores[1])  # and the new epoch's is its own


def test_a_damaged_or_missing_window_reads_as_none(tmp_path: Path, model: CapsNet) -> None:
    folder = RunFolder(tmp_path)
    assert read_window(folder) is None  # none yet
    info = dataset_info("mnist")
    test = LabelledSet(info, torch.rand(20, 1, 28, 28), torch.arange(20) % 10)
    Watcher(folder, model, test, batches=7)
    path = folder.file(RunFolder.WATCH)
    good = path.read_bytes()
    assert read_window(folder) is not None and read_window(folder).label(0) == "before training"
    for damaged in (good[: len(good) // 2], b"", b"\xff" * 100, good[:8] + b"{not json" + good[17:]):
        path.write_bytes(damaged)
        assert read_window(folder) is None
    header = json.loads(good[8 : 8 + int.from_bytes(good[:8], "little")])
    header["scores"]["shape"] = [1, 5, 20]  # tensors that do not fit one another
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + good[8 + int.from_bytes(good[:8], "little") :])
    assert read_window(folder) is None
    path.unlink()
    path.mkdir()  # a folder where the file should be
    assert read_window(folder) is None


def test_a_cnn_window_has_probabilities_and_no_reconstructions(tmp_path: Path) -> None:
    from capsnet.nn.cnn import BaselineCNN, CNNConfig

    torch.manual_seed(0)
    cnn = BaselineCNN(CNNConfig.preset("tiny")).train()
    test = LabelledSet(dataset_info("mnist"), torch.rand(12, 1, 28, 28), torch.arange(12) % 10)
    Watcher(RunFolder(tmp_path), cnn, test, batches=3).epoch_done(1)
    history = read_window(tmp_path)
    assert cnn.training and history is not None and not history.redrawn and history.reconstructions is None
    assert len(history) == 2 and np.allclose(history.scores.sum(axis=2), 1, atol=1e-5)  # softmax probabilities


def test_an_em_window_keeps_redraws_and_a_window_written_before_the_name_still_reads(tmp_path: Path) -> None:
    """An EM network with a decoder redraws in its window, and says so under both keys; a file from before
    "redraws" (its "capsules" key alone, no network) reads as it did."""
    from safetensors.numpy import load, save

    from capsnet.nn.registry import network

    torch.manual_seed(0)
    em = network("em").build(network("em").preset("tiny", decoder_hidden=(16,))).train()
    test = LabelledSet(dataset_info("mnist"), torch.rand(12, 1, 28, 28), torch.arange(12) % 10)
    Watcher(RunFolder(tmp_path), em, test, batches=3).epoch_done(1)
    history = read_window(tmp_path)
    assert history is not None and history.redrawn and history.network == "em" and history.margins is None
    assert history.reconstructions is not None and history.reconstructions.shape == (2, 10, 28, 28)
    path = RunFolder(tmp_path).file(RunFolder.WATCH)
    data = path.read_bytes()
    meta = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    assert meta["redraws"] == meta["capsules"] == "true"
    old = {k: v for k, v in meta.items() if k not in ("redraws", "network")}  # as a file before the names
    path.write_bytes(save(load(data), metadata=old))
    before = read_window(tmp_path)
    assert before is not None and before.redrawn and before.network == "capsnet" and before.reconstructions is not None


def test_a_capsnet_of_another_config_is_rebuilt_fine(tmp_path: Path) -> None:
    """A resumed run whose window does not fit its test set (another image size) starts a new window."""
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.preset("tiny")).eval()
    info = dataset_info("mnist")
    Watcher(RunFolder(tmp_path), model, LabelledSet(info, torch.rand(10, 1, 28, 28), torch.arange(10)), batches=2)
    path = RunFolder(tmp_path).file(RunFolder.WATCH)
    before = read_window(tmp_path)
    Watcher(RunFolder(tmp_path), model, LabelledSet(info, torch.rand(4, 1, 28, 28), torch.arange(4)), 2, (1, 0))
    after = read_window(tmp_path)
    assert path.is_file() and before is not None and after is not None
    assert after.images.shape == (4, 28, 28) and len(after) == 1


# ---------------------------------------------------------------- the page


@pytest.mark.slow
def test_the_training_page_shows_the_window(watched_run: tuple[Path, WindowHistory], app_dirs) -> None:  # noqa: F811
    run_dir, _ = watched_run
    runs_root, _ = app_dirs
    shutil.copytree(run_dir, runs_root / run_dir.name)
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert any(s.value == "Watch the capsules learn" for s in at.subheader)
    said = " ".join(m.value for m in at.markdown)
    assert "How the networks are trained" in said and "the length of each class capsule" in said  # a CapsNet run
    slider = at.select_slider(key="watch_step")
    assert slider.options == ["before training", "epoch 1", "epoch 2"] and slider.value == "epoch 2"
    charts = {e.key: json.loads(e.proto.spec) for e in at.get("plotly_chart")}
    window = charts["training_window"]
    assert [t["type"] for t in window["data"]] == ["image", "bar", "scatter"]  # images, lengths, what each says
    history_right = read_window(run_dir).right(2)  # type: ignore[union-attr]
    assert [text.startswith("✓") for text in window["data"][2]["text"]] == history_right.tolist()
    history = read_window(run_dir)
    assert history is not None

    def bars(spec: dict) -> np.ndarray:
        y = spec["data"][1]["y"]
        if isinstance(y, dict):  # numbers packed as base64
            import base64

            return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"])
        return np.asarray(y)

    assert np.allclose(bars(window), history.scores[-1].ravel(), atol=1e-6)
    slider.set_value("before training").run()
    assert not at.exception
    first = {e.key: json.loads(e.proto.spec) for e in at.get("plotly_chart")}["training_window"]
    assert np.allclose(bars(first), history.scores[0].ravel(), atol=1e-6)
    assert any("before training" in c.value and "right" in c.value for c in at.caption)
