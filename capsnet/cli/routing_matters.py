"""`python -m capsnet routing-matters`: the command line of `capsnet.readings.routing_matters`."""

from __future__ import annotations

import functools
import sys

from capsnet.checkpoints import measurements
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.tasks import read_test_set
from capsnet.device import pick_device
from capsnet.errors import ArgumentParser, CapsNetError, run_cli
from capsnet.nn.registry import network_of
from capsnet.readings.routing_matters import KIND, describe, kept_or_measured


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m capsnet routing-matters",
        description="Accuracy at r = 1..5 routing iterations on the whole test set, kept beside the checkpoint.",
    )
    parser.add_argument("checkpoints", nargs="+", help="CapsNet or EM network checkpoints (.safetensors)")
    parser.add_argument("--data-dir", default=None, help="the datasets' folder (default: $CAPSNET_DATA_DIR, ...)")
    parser.add_argument(
        "--device", default="auto",
        help="auto, cpu, cuda or mps: where the network runs (the paper's EM network: seconds on a GPU, "
        "about 5 minutes on a 2-core CPU)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    def measure(path: str) -> int:
        checkpoint = load_checkpoint(path, device=pick_device(args.device))
        net = network_of(checkpoint.config)
        if net.routing is None:
            raise CapsNetError(f"{path} holds {net.described}, which does not route: nothing to measure")
        test = read_test_set(checkpoint.info.dataset_name, args.data_dir)
        if test.task.pairs:
            raise CapsNetError(f"{path} reads pairs of digits: this measure is for single images")

        def progress(done: int, total: int, name: str = str(path)) -> None:
            print(f"\r{name}: {done:,}/{total:,}", end="", flush=True)

        result = kept_or_measured(checkpoint, test, progress)
        kept = measurements.where(path, KIND)  # the file it is in: a stale one beside the checkpoint is not it
        print(f"\n{describe(result)}\nkept in {kept}")
        return 0

    def check_device() -> int:  # a device that does not exist: one line before any file
        pick_device(args.device)
        return 0

    if code := run_cli(check_device, parser.prog):
        return code
    # each file on its own: a bad one is its line on stderr, and the others are measured all the same
    return max(run_cli(functools.partial(measure, path), parser.prog) for path in args.checkpoints)


if __name__ == "__main__":
    sys.exit(main())
