"""The training window's cost: one snapshot against one epoch of training, and the page's render server-side.

    python benchmarks/bench_watch.py                 # the paper's CapsNet and the tiny one, CPU
    python benchmarks/bench_watch.py --device cuda

Trainer: a snapshot (`capsnet.training.watch.Watcher.snapshot`: the window's 10 images through the network in eval
mode, their reconstructions, and the file rewritten atomically with its last snapshots) is timed against
training steps (batch 128, as the paper); an epoch is the median step times the 469 batches of the whole
MNIST training set, since one snapshot is taken per epoch. Random weights cost what trained ones do.

Page: a window of `KEEP` snapshots (the most a run keeps), read from its file, drawn as the page draws it
(the figure and its JSON), and one move of the snapshot slider through `streamlit.testing.v1.AppTest`
(the whole Training runs page, a rerun's server time). Medians over --repeats after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from timing import median_s

from capsnet.data.datasets import dataset_info
from capsnet.data.tasks import LabelledSet
from capsnet.device import describe_device
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.losses import capsule_loss
from capsnet.training.folder import RunFolder
from capsnet.training.options import TrainOptions
from capsnet.training.watch import KEEP, Watcher, read_window

REPO = Path(__file__).resolve().parents[1]
EPOCH_BATCHES = 469  # MNIST's 60,000 training images in batches of 128


def window_set() -> LabelledSet:
    generator = torch.Generator().manual_seed(0)
    return LabelledSet(dataset_info("mnist"), torch.rand(100, 1, 28, 28, generator=generator), torch.arange(100) % 10)


def trainer_cost(preset: str, device: torch.device, repeats: int, folder: Path) -> None:
    torch.manual_seed(0)
    config = CapsNetConfig.preset(preset)
    model = CapsNet(config).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.rand(128, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (128,), device=device)

    def step() -> None:
        out = model(images, labels)
        loss = capsule_loss(out.lengths, out.reconstruction, images, labels, config)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    step_s = median_s(step, max(3, repeats // 2))
    watcher = Watcher(RunFolder(folder), model, window_set(), EPOCH_BATCHES)
    for epoch in range(KEEP):  # a full history: the file at its largest
        watcher.epoch_done(epoch + 1)
    snapshot_s = median_s(lambda: watcher.epoch_done(KEEP), repeats)
    epoch_s = step_s * EPOCH_BATCHES
    size = RunFolder(folder).file(RunFolder.WATCH).stat().st_size
    print(
        f"  {preset:6s} step {1000 * step_s:8.1f} ms  epoch ~{epoch_s:8.1f} s  snapshot {1000 * snapshot_s:6.1f} ms"
        f"  = {100 * snapshot_s / epoch_s:.4f}% of an epoch  (file {size / 1e3:.0f} kB with {KEEP} snapshots)"
    )


def page_cost(folder: Path, repeats: int) -> None:
    from streamlit.testing.v1 import AppTest

    from capsnet.data.datasets import dataset_info as info
    from dashboard.figures import training as training_figures

    history = read_window(folder)
    assert history is not None and len(history) == KEEP
    read_s = median_s(lambda: read_window(folder), repeats)
    names = list(info("mnist").classes)

    def draw(s: int) -> str:
        fig = training_figures.training_window(
            history.images, history.scores[s], history.reconstructions[s], history.labels,
            history.predictions(s), names, (history.m_plus, history.m_minus),
        )  # fmt: skip
        return fig.to_json()

    figure_s = median_s(lambda: draw(len(history) - 1), repeats)
    print(f"  read the window file ({len(history)} snapshots)   {1000 * read_s:7.1f} ms")
    print(f"  the figure and its JSON ({len(draw(0)) / 1e3:.0f} kB)       {1000 * figure_s:7.1f} ms")

    os.environ["CAPSNET_RUNS_DIR"] = str(folder.parent)
    os.environ.setdefault("CAPSNET_CHECKPOINTS_DIR", str(folder.parent / "checkpoints"))
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/training.py").run()
    assert not at.exception, at.exception
    labels = at.select_slider(key="watch_step").options
    moves = []
    for n in range(repeats + 1):
        start = time.perf_counter()
        at.select_slider(key="watch_step").set_value(labels[(n * 7) % len(labels)]).run()
        moves.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    print(f"  one slider move (AppTest, the whole page)   {1000 * statistics.median(moves[1:]):7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"{platform.node()}: {describe_device(device)}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory() as root:
        print("Trainer: one snapshot against one epoch (469 batches of 128)")
        for preset in ("paper", "tiny"):
            folder = Path(root) / f"20250101-00000{len(preset)}-mnist"
            folder.mkdir()
            RunFolder(folder).write_args(TrainOptions(preset=preset).to_dict())
            trainer_cost(preset, device, args.repeats, folder)
        print("Page: a window of the most snapshots kept")
        folder = Path(root) / "20250101-000000-mnist"
        folder.mkdir()
        RunFolder(folder).write_args(TrainOptions(preset="tiny").to_dict())
        watcher = Watcher(RunFolder(folder), CapsNet(CapsNetConfig.preset("tiny")), window_set(), EPOCH_BATCHES)
        for epoch in range(KEEP - 1):
            watcher.epoch_done(epoch + 1)
        page_cost(folder, args.repeats)


if __name__ == "__main__":
    main()
