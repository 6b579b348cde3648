"""`python -m capsnet export`: the command line of `capsnet.runs.export`."""

from __future__ import annotations

import json
import sys

from capsnet.errors import ArgumentParser, run_cli
from capsnet.runs.export import calibrate_checkpoint, export_checkpoint, record_lr_search


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m capsnet export", description="Export a run's checkpoint for shipping.")
    parser.add_argument("source", help="a run's checkpoint, e.g. runs/x/best.safetensors")
    parser.add_argument("target", nargs="?", help="where to write, e.g. checkpoints/mnist.safetensors")
    parser.add_argument(
        "--calibrate", action="store_true", help="only add the not-like-any-class thresholds to SOURCE's header"
    )
    parser.add_argument("--float32", action="store_true", help="keep float32 weights (default: float16)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--test-examples", "--test-pairs", dest="first", type=parser.positive_int, default=None, metavar="N",
        help="measure on the first N test examples (MultiMNIST: pairs) for a quicker look; the header says how many "
        "(default: the whole test set, as a shipped file is measured)",
    )  # fmt: skip
    parser.add_argument(
        "--lr-search", default=None, metavar="LR,LR,...",
        help="only record in SOURCE's header that its learning rate was the best of these on its validation split",
    )  # fmt: skip
    args = parser.parse_args(argv)

    def body() -> int:
        if args.lr_search is not None:
            try:
                candidates = [float(v) for v in args.lr_search.split(",")]
            except ValueError:
                parser.error(f"--lr-search takes learning rates separated by commas, got {args.lr_search!r}")
            info = record_lr_search(args.source, candidates, args.data_dir)
            print(json.dumps({"checkpoint": args.source, "lr_candidates": info.extra["lr_candidates"]}))
            return 0
        if args.calibrate:
            info = calibrate_checkpoint(args.source, args.data_dir, args.device)
            print(json.dumps({"checkpoint": args.source, "novelty": info.novelty}))
            return 0
        if not args.target:
            parser.error("the target checkpoint is needed (or --calibrate)")
        info = export_checkpoint(args.source, args.target, not args.float32, args.data_dir, args.device, args.first,
                                 on_note=lambda line: print(line, file=sys.stderr))  # fmt: skip
        keys = ("dataset", "epochs", "best_epoch", "test_accuracy", "test_accuracy_before_export", "weights_dtype")
        facts = info.to_dict()
        print(json.dumps({k: facts.get(k) for k in keys}))
        return 0

    return run_cli(body, prog="python -m capsnet export")


if __name__ == "__main__":
    sys.exit(main())
