"""Server-side cost of the Routing playground's real-model part on one CPU thread, against the 50 ms target.

    python benchmarks/bench_playground.py                     # the paper's model, random weights
    python benchmarks/bench_playground.py --checkpoint checkpoints/mnist.safetensors

The toy (3 parents, 12 children, both routings and the curves) runs in the browser and runs no server: it is
measured by `bench_knobs.py`. What is left on the server is the real model's fragment: its reading and its 2-D view
of one capsule are made once per input, iteration count and capsule (cached by `dashboard.models`), so a step there
costs its two figures and their JSON (what `st.plotly_chart` serialises) only; those first readings are reported too.
Medians of `--repeats` after a warm-up.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from timing import median_ms

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.device import describe_device, inference_threads
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import playground as pg
from capsnet.readings.explain import explain
from dashboard.figures import playground as figs

TARGET_MS = 50.0


def real_view(plane: pg.Plane, lengths: np.ndarray, step: int, names: list[str]) -> int:
    """What the real model's fragment does on a step (its 2-D view cached per input, r and capsule): two figures, JSON."""
    built = [
        figs.plane_figure(plane.points, plane.coupling, plane.agreement, plane.sums, plane.poses, plane.parents,
                          [names[int(plane.parents[0])]], step, label_children=False),
        figs.lengths_figure(lengths, range(len(names)), names, step),
    ]  # fmt: skip
    return sum(len(fig.to_json()) for fig in built)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a CapsNet checkpoint (default: the paper's model, random weights)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(inference_threads())  # the dashboard's setting: 1 unless CAPSNET_DASHBOARD_THREADS
    threadpool_limits(torch.get_num_threads(), user_api="blas")  # NumPy's BLAS too, as the dashboard does
    model = (load_checkpoint(args.checkpoint, device="cpu", networks=("capsnet",)).model if args.checkpoint else
             CapsNet(CapsNetConfig()).eval())  # fmt: skip
    names = [str(d) for d in range(model.config.num_classes)]
    print(f"machine: {describe_device(torch.device('cpu'))}; torch threads: {torch.get_num_threads()}")
    print(f"model: {args.checkpoint or 'the paper CapsNet, random weights'}; {args.repeats} repeats, medians\n")

    image = np.zeros((28, 28), np.float32)
    image[5:23, 13:16] = 1.0
    votes = explain(model, image, 3).votes
    plane = pg.real_plane(votes, 1)
    rows = [
        ("real: Previous / Next (its 2-D view cached)", lambda: real_view(plane, votes.lengths, 1, names)),
        ("real: first reading of an input (cached after)", lambda: explain(model, image, 3)),
        ("real: first 2-D view of a capsule (cached after)", lambda: pg.real_plane(votes, 2)),
    ]
    print(f"{'interaction':50s} {'ms':>8s} {'JSON kB':>8s}  target {TARGET_MS:.0f} ms")
    for label, fn in rows:
        ms = median_ms(fn, args.repeats)
        size = fn()
        kb = f"{size / 1000:.0f}" if isinstance(size, int) else "-"
        cached = "(cached after)" in label
        verdict = "(once per input)" if cached else ("ok" if ms < TARGET_MS else "OVER")
        print(f"{label:50s} {ms:8.1f} {kb:>8s}  {verdict}")


if __name__ == "__main__":
    main()
