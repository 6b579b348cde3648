"""`python -m capsnet affnist`: the command line of `capsnet.readings.affnist`."""

from __future__ import annotations

import json
import sys
from typing import Any

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.tasks import read_test_set
from capsnet.device import pick_device
from capsnet.errors import ArgumentParser, CapsNetError, run_cli
from capsnet.nn.registry import NETWORK_NAMES
from capsnet.readings.affnist import accuracy_sweep, affine_test_set, measure, refuse_other_sizes


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m capsnet affnist",
        description="Accuracy of mnist-40 models on the MNIST test set moved on 40x40 and on the affNIST-like set.",
    )
    parser.add_argument("checkpoints", nargs="+", help="checkpoints of any network trained on mnist-40")
    parser.add_argument(
        "--sweep", action="store_true",
        help="instead: each checkpoint's accuracy on its own test set with every image turned alike, then scaled alike",
    )  # fmt: skip
    parser.add_argument("--limit", type=parser.positive_int, default=None, help="the first N test digits")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="one JSON object per checkpoint")
    args = parser.parse_args(argv)

    def body() -> int:

        device = pick_device(args.device)
        models = [load_checkpoint(p, device=device, networks=NETWORK_NAMES) for p in args.checkpoints]
        if args.sweep:
            return _sweeps(models, args.limit, args.data_dir, args.json)
        for checkpoint in models:  # every one refused before any work, and by its path
            refuse_other_sizes(checkpoint.model, str(checkpoint.path))
        test = affine_test_set(args.data_dir, args.limit)  # built once for all the checkpoints
        for checkpoint in models:
            result = measure(checkpoint.model, test=test)
            facts: dict[str, Any] = {"checkpoint": str(checkpoint.path), "network": checkpoint.network,
                     "moved_mnist_accuracy": result.moved_mnist_accuracy,
                     "affnist_like_accuracy": result.affnist_like_accuracy, "examples": result.examples}  # fmt: skip
            if args.json:
                print(json.dumps(facts))
            else:
                print(f"{facts['checkpoint']} ({facts['network']}): {100 * facts['moved_mnist_accuracy']:.2f}% on "
                      f"MNIST moved on 40x40, {100 * facts['affnist_like_accuracy']:.2f}% on the affNIST-like set "
                      f"({facts['examples']} digits)")  # fmt: skip
        return 0

    return run_cli(body, prog="python -m capsnet affnist")


def _sweeps(models: list, limit: int | None, data_dir: str | None, as_json: bool) -> int:
    """Print each checkpoint's rotation and scale sweeps on the first `limit` images of its own test set."""
    for checkpoint in models:
        test = read_test_set(checkpoint.info.dataset_name, data_dir).first(limit)
        info = test.info
        if test.task.pairs:
            raise CapsNetError(f"{checkpoint.path}: a sweep reads one {info.noun} per image, not MultiMNIST's pairs")
        images, labels = test.images, test.labels
        sweeps = [accuracy_sweep(checkpoint.model, images, labels, kind) for kind in ("rotation", "scale")]
        if as_json:
            print(json.dumps({"checkpoint": str(checkpoint.path), "network": checkpoint.network,
                              **{s.kind: s.to_dict() for s in sweeps}}))  # fmt: skip
            continue
        print(f"{checkpoint.path} ({checkpoint.network}), {len(labels)} {info.title} test images:")
        for sweep in sweeps:
            unit = "°" if sweep.kind == "rotation" else "x"
            cells = "  ".join(f"{v:+g}{unit} {100 * a:.1f}%" if unit == "°" else f"{v:g}{unit} {100 * a:.1f}%"
                              for v, a in zip(sweep.values, sweep.accuracy))  # fmt: skip
            print(f"  {sweep.kind}: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
