"""`python -m capsnet compare-routings`: the command line of `capsnet.runs.compare`."""

from __future__ import annotations

import sys
from pathlib import Path

from capsnet.errors import ArgumentParser, InvalidArgumentError, run_cli
from capsnet.runs import compare, comparison

MOST_SEEDS = 20


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m capsnet compare-routings",
        description="Train each routing from the same seed, data and budget, and print one table: test accuracy "
        "(mean and spread over the seeds), accuracy on the affNIST-like digits, how many drawn non-digits each flags as "
        "not like any class, parameters, images per second in training and reading. Each run is a "
        "resumable run folder under --out; a finished one is read again, not trained again.",
    )
    parser.add_argument("--out", required=True, type=Path, help="the comparison's folder (a run folder per run)")
    parser.add_argument("--routings", nargs="+", default=list(comparison.CONTENDERS), choices=list(comparison.CONTENDERS),
                        help="the routings compared (default: all)")  # fmt: skip
    parser.add_argument("--seeds", type=_positive, default=3, help=f"seeds 0..N-1 (default 3, at most {MOST_SEEDS})")
    parser.add_argument("--dataset", default="mnist", help="the dataset every routing trains on (default mnist)")
    parser.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="each network's preset")
    parser.add_argument("--epochs", type=_positive, default=1)
    parser.add_argument("--train-size", type=_positive, default=2_000, help="training images (default 2,000)")
    parser.add_argument("--test-size", type=_positive, default=1_000, help="test images (default 1,000)")
    parser.add_argument("--batch-size", type=_positive, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto")
    parser.add_argument("--data-dir", default=None, help="the datasets' folder (default: $CAPSNET_DATA_DIR, ...)")
    args = parser.parse_args(argv)

    def run() -> int:
        if args.seeds > MOST_SEEDS:
            raise InvalidArgumentError(f"--seeds must be at most {MOST_SEEDS}, got {args.seeds}")
        if not 0 < args.lr <= 1:
            raise InvalidArgumentError(f"--lr must lie in (0, 1], got {args.lr}")
        budget = compare.Budget(args.dataset, args.size, args.epochs, args.train_size, args.test_size,
                                args.batch_size, args.lr)  # fmt: skip

        def said(result: compare.Result) -> None:
            print(f"{result.routing}, seed {result.seed}: {100 * result.test_accuracy:.2f}%", file=sys.stderr)

        record = compare.compare(args.routings, range(args.seeds), budget, args.out, args.device, args.data_dir, said)
        print(comparison.table(record))
        print()
        print(comparison.verdict(record))
        print(f"\nkept in {args.out / comparison.FILE}")
        return 0

    return run_cli(run, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
