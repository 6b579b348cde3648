"""What a folder learns: each network family trained on folders this package makes, with the folder's own defaults.

    python benchmarks/bench_folder.py                          # the 4-class shapes folder, every family
    python benchmarks/bench_folder.py --folders shapes digits fashion --networks capsnet cnn

Each folder is written here (`capsnet.data.made_folders`): "shapes", 440 coloured shapes (circle, cross, square,
triangle) on noisy coloured grounds, PNG and JPEG, 48x48 and 64x48; "digits" and "fashion", MNIST's and
Fashion-MNIST's test pictures in colour on random grounds, `--per-class` of each class, at 32 and at 48 pixels. Each
family trains as a user's command line does, `python -m capsnet train --dataset <folder> --network <family>` with no
other option but where its run goes (`--out`) and a quiet bar (`--no-progress`): the folder recipe
(`capsnet.training.folder_defaults`). The figures are the run's wall time (start-up and data included) and its
test accuracy, last and best epoch, beside the sidebar form's estimate of its time (a few steps timed first); the
machine is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from capsnet.data.datasets import DATASETS, load_dataset, stored_tensors
from capsnet.data.made_folders import shapes_folder, tinted_folder
from capsnet.device import describe_device
from capsnet.runs import estimate
from capsnet.training.options import TrainOptions


def make(kind: str, root: Path, per_class: int, data_dir: str | None) -> list[Path]:
    """The folders of one kind: the shapes folder, or a dataset's test pictures tinted, at 32 and at 48 pixels."""
    if kind == "shapes":
        return [shapes_folder(root / "shapes")]
    name = {"digits": "mnist", "fashion": "fashion-mnist"}[kind]
    images, labels = stored_tensors(load_dataset(name, train=False, data_dir=data_dir, download=False))
    keep = torch.cat([torch.nonzero(labels == k).flatten()[:per_class] for k in range(10)])
    classes = DATASETS[name].classes
    return [tinted_folder(root / f"{kind}-{side}", images[keep], labels[keep], classes, side) for side in (32, 48)]


def form_estimate(folder: Path, network: str) -> float:
    """The sidebar form's estimate of the run (`capsnet.runs.estimate`), from a few steps timed now: no run of this
    network on this folder is recorded yet."""
    options = TrainOptions.parse_args(["--dataset", str(folder), "--network", network])
    return estimate.estimate_seconds(options, *estimate.run_examples(options), estimate.measure_speed(options))


def train_once(folder: Path, network: str, out: Path) -> dict[str, object]:
    """One run of the trainer's command line on `folder`: its wall time and test accuracies, last and best, and the
    form's estimate of its time, made before it."""
    argv = [sys.executable, "-m", "capsnet", "train", "--dataset", str(folder), "--network", network,
            "--no-progress", "--out", str(out)]  # fmt: skip
    estimated = form_estimate(folder, network)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:] or done.returncode, "seconds": seconds}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    args = json.loads((out / "args.json").read_text())
    return {
        "seconds": seconds,
        "estimated": estimated,
        "last": records[-1]["test_accuracy"],
        "best": max(r["test_accuracy"] for r in records),
        "epochs": len(records),
        "setting": f"{args['preset']}, batch {args['batch_size']}, lr {args['lr']:g}, {args['image_size']} px",
        "warning": next((r["warning"] for r in records if "warning" in r), ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folders", nargs="+", default=["shapes"], choices=("shapes", "digits", "fashion"))
    parser.add_argument("--networks", nargs="+", default=["capsnet", "cnn", "em"])
    parser.add_argument("--per-class", type=int, default=100, help="pictures of each class in a tinted folder")
    parser.add_argument("--data-dir", default=None, help="MNIST's folder (default: $CAPSNET_DATA_DIR)")
    args = parser.parse_args()
    print(f"{describe_device(torch.device('cpu'))}, {torch.get_num_threads()} threads of {os.cpu_count()} cores, "
          f"{platform.python_version()}, torch {torch.__version__}", flush=True)  # fmt: skip
    print("| folder | network | setting | epochs | test accuracy, last (best) | wall time | form's estimate |\n"
          "|---|---|---|---|---|---|---|")  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        for kind in args.folders:
            for folder in make(kind, Path(scratch), args.per_class, args.data_dir):
                for network in args.networks:
                    got = train_once(folder, network, Path(scratch) / f"run-{folder.name}-{network}")
                    if "failed" in got:
                        print(f"| {folder.name} | {network} | failed: {got['failed']} | | | {got['seconds']:.0f} s |")
                        continue
                    print(f"| {folder.name} | {network} | {got['setting']} | {got['epochs']} | "
                          f"{100 * float(got['last']):.1f}% ({100 * float(got['best']):.1f}%) | "  # type: ignore[arg-type]
                          f"{got['seconds']:.0f} s | {got['estimated']:.0f} s |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
