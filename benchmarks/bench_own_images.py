"""Training on your own pictures: each network family's images/s on a colour 32x32 folder, in one run.

    python benchmarks/bench_own_images.py                       # MNIST digits tinted per class, 32x32 colour
    python benchmarks/bench_own_images.py --images 1024 --em-images 128 --threads 2

The folder is made here from real pictures: MNIST's test digits, each class's ground its own colour and the ink
white over it, saved as 32x32 PNG files in ten class folders (held-out fifth by the reader). Each family trains one
epoch of `--images` pictures (the EM network `--em-images`: it is slower) through the real trainer
(`capsnet.training.trainer.train`: the folder read, the batches augmented, forward, loss, backward, Adam), uncompiled,
at the trainer's choice of precision for this machine; the figure is the trainer's own `images_per_s` of that epoch.
Rows: the CapsNet paper's network at 32x32x3 (`paper` preset, its input from the data), the CNN baseline (`paper`),
the EM network (`paper-decoder`, the shipped EM model's network), and each one's ratio to the CapsNet.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from capsnet.data.datasets import load_dataset, stored_tensors
from capsnet.device import describe_device
from capsnet.training.options import TrainOptions
from capsnet.training.trainer import train

GROUNDS = np.random.default_rng(0).integers(30, 220, (10, 3))  # a ground colour per class


def make_folder(root: Path, per_class: int, data_dir: str | None) -> Path:
    """MNIST test digits as colour 32x32 PNG files, `per_class` in each class's folder."""
    images, labels = stored_tensors(load_dataset("mnist", train=False, data_dir=data_dir))
    for k in range(10):
        folder = root / f"class {k}"
        folder.mkdir(parents=True)
        for n, index in enumerate(torch.nonzero(labels == k).flatten()[:per_class].tolist()):
            ink = np.pad(images[index, 0].numpy(), 2).astype(np.float32)[..., None] / 255  # (32, 32, 1)
            picture = GROUNDS[k] * (1 - ink) + 255 * ink
            Image.fromarray(picture.round().astype(np.uint8), mode="RGB").save(folder / f"{n}.png")
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024, help="training pictures an epoch (CapsNet, CNN)")
    parser.add_argument("--em-images", type=int, default=128, help="training pictures an epoch for the EM network")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--data-dir", default=None, help="MNIST's folder (default: $CAPSNET_DATA_DIR)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = (("capsnet", "paper", args.images), ("cnn", "paper", args.images), ("em", "paper-decoder", args.em_images))
    per_class = max(args.images, args.em_images) * 5 // 4 // 10 + 1  # a fifth more: the reader holds a fifth out
    speeds = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = make_folder(Path(scratch) / "tinted", per_class, args.data_dir)
        print(f"{describe_device(torch.device('cpu'))}, {torch.get_num_threads()} threads of {os.cpu_count()} cores; "
              f"a colour 32x32 folder of {10 * per_class:,} MNIST digits on coloured grounds")  # fmt: skip
        for network, preset, count in rows:
            options = TrainOptions(dataset=str(folder), image_size=32, network=network, preset=preset, epochs=1,
                                   train_size=count, test_size=64, batch_size=args.batch_size, compile=False,
                                   progress=False, device="cpu", out=str(Path(scratch) / f"run-{network}"))  # fmt: skip
            record = train(options)[-1]
            speeds[network] = float(record["images_per_s"])
            print(f"{network:8s} {preset:14s} {count:6d} pictures  {speeds[network]:8.1f} images/s  "
                  f"{speeds[network] / speeds['capsnet']:.2f}x the CapsNet", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
