"""Server-side cost of each interaction on the Architecture page, on the CPU, against the 50 ms target.

    python benchmarks/bench_architecture.py                     # the paper's model, random weights
    python benchmarks/bench_architecture.py --checkpoint checkpoints/mnist.safetensors

What a rerun of the page computes, without Streamlit around it: a new input is one forward pass
that keeps every stage (`capsnet.readings.explain.explain`) plus the shown stage's figures; a click
on a stage or a new capsule reads the cached pass back (`st.cache_data` unpickles a copy: timed
here as a pickle round trip) and builds that stage's view and figures. Figures are timed to their
JSON, as Streamlit serialises them. Median and best of `--repeats` after a warm-up, on the dashboard's
torch threads ($CAPSNET_DASHBOARD_THREADS, default 1).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from timing import timed_ms

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.device import describe_device, inference_threads
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import explain as ex
from capsnet.readings import stages as arch
from dashboard.figures import architecture as arch_fig

NAMES = [str(d) for d in range(10)]
TARGET_MS = 50


def a_seven() -> np.ndarray:
    digit = np.zeros((28, 28), np.float32)
    digit[6:9, 8:21] = 1.0
    for row in range(9, 23):  # the stroke down to the left
        col = 20 - (row - 9) * 8 // 14
        digit[row, col - 1 : col + 2] = 1.0
    return digit


def stage_figures(model: CapsNet, reading: ex.Explanation, view: arch.CapsuleView, stage: str) -> list[str]:
    """The JSON of every figure the page draws for `stage` (the diagram included)."""
    c = model.config
    stages = arch.stages(c)
    figures = [arch_fig.diagram_figure(stages, stage)]
    if stage == "conv1":
        channels = arch.strongest_maps(reading.features, 16)
        figures.append(
            arch_fig.feature_maps_figure(reading.features[channels], channels, view.window, c.primary_kernel)
        )
    elif stage == "primary":
        lengths = reading.votes.primary_lengths.reshape(c.primary_types, c.primary_grid, c.primary_grid)[
            view.primary.kind
        ]
        figures += [
            arch_fig.receptive_field_figure(reading.image, view.field, "field"),
            arch_fig.grid_lengths_figure(lengths, view.primary.y, view.primary.x, "lengths"),
            arch_fig.pose_figure(view.pose, "pose"),
        ]
    elif stage == "votes":
        figures += [
            arch_fig.matrix_product_figure(view.weight, view.pose, view.vote),
            arch_fig.vote_lengths_figure(view.vote_lengths, NAMES, view.digit),
        ]
    elif stage == "routing":
        figures.append(arch_fig.routing_figure(view.primary.coupling, reading.votes.lengths, NAMES))
    elif stage == "decoder":
        figures.append(arch_fig.masked_figure(reading.masked, NAMES, reading.prediction))
    return [f.to_json() for f in figures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="a .safetensors file (default: random paper model)"
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per interaction (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the dashboard's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or inference_threads())
    threadpool_limits(torch.get_num_threads(), user_api="blas")  # NumPy's BLAS too, as the dashboard does
    if args.checkpoint is not None:
        model, what = load_checkpoint(args.checkpoint, networks=("capsnet",)).model.eval(), str(args.checkpoint)
    else:
        torch.manual_seed(0)
        model, what = CapsNet(CapsNetConfig.preset("paper")).eval(), "the paper's CapsNet, random weights"
    c = model.config
    digit = a_seven()
    reading = ex.explain(model, digit)
    cached = pickle.dumps(reading)
    rng = np.random.default_rng(0)

    def new_input(stage: str) -> Callable[[], object]:
        def run() -> object:
            fresh = ex.explain(model, digit + np.float32(rng.random() * 1e-3))
            return stage_figures(model, fresh, arch.capsule_view(model, fresh, None, None), stage)

        return run

    def click(stage: str) -> Callable[[], object]:
        def run() -> object:
            back = pickle.loads(cached)  # what a cache hit costs
            return stage_figures(model, back, arch.capsule_view(model, back, None, None), stage)

        return run

    def new_capsule() -> object:
        back = pickle.loads(cached)
        view = arch.capsule_view(model, back, int(rng.integers(c.num_primary)), int(rng.integers(c.num_classes)))
        return stage_figures(model, back, view, "votes")

    rows: list[tuple[str, tuple[float, float]]] = [
        (
            "one forward pass keeping every stage (explain)",
            timed_ms(lambda: ex.explain(model, digit), args.repeats),
        ),
        ("cache hit: the reading unpickled", timed_ms(lambda: pickle.loads(cached), args.repeats)),
        ("new input: forward + the PrimaryCaps view (JSON)", timed_ms(new_input("primary"), args.repeats)),
    ]
    rows += [(f"click on {s.title}: its view and the diagram (JSON)", timed_ms(click(s.key), args.repeats))
             for s in arch.stages(c)]  # fmt: skip
    rows.append(("new capsule i and digit j: W_ij, vote, figures (JSON)", timed_ms(new_capsule, args.repeats)))

    print(f"Architecture page on {describe_device(torch.device('cpu'))}, {torch.get_num_threads()} torch thread(s)")
    print(f"model: {what} ({c.num_primary} primary capsules); {len(cached) / 1e6:.1f} MB cached per input")
    print(f"median and best of {args.repeats}; the target is on the median\n")
    print(f"| {'interaction':<56} | {'median':>10} | {'best':>10} | {'target':>8} |    |")
    print(f"|{'-' * 58}|{'-' * 12}|{'-' * 12}|{'-' * 10}|----|")
    for name, (ms, best) in rows:
        verdict = "ok" if ms <= TARGET_MS else "!!"
        print(f"| {name:<56} | {ms:>7.1f} ms | {best:>7.1f} ms | {TARGET_MS:>5} ms | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
