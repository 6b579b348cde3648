"""Server-side cost of each Routing playground interaction on one CPU thread, against the 50 ms target.

    python benchmarks/bench_playground.py                     # the real-model part on the paper's model, random weights
    python benchmarks/bench_playground.py --checkpoint checkpoints/mnist.safetensors

Each interaction is what the page's fragment does on a click: the routing (the project's
`dynamic_routing` on the toy's 3 x 12 votes), the figures, and their JSON (what `st.plotly_chart`
serialises). The real model's reading and its 2-D view of one capsule are made once per input, iteration count
and capsule (cached by `dashboard.models`), so a step there costs its two figures only; those first
readings are reported too.
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

NAMES = [f"parent {j + 1}" for j in range(pg.PARENTS)]
TARGET_MS = 50.0


def toy_view(votes: np.ndarray, iterations: int, step: int) -> int:
    """What the toy's fragment computes and sends on one click: routing, three figures and their JSON; bytes sent."""
    routing = pg.route(votes, iterations)
    plane = pg.toy_plane(routing)
    built = [
        figs.plane_figure(plane.points, plane.coupling, plane.agreement, plane.sums, plane.poses, plane.parents,
                          NAMES, step, selected=(0, 0)),
        figs.coupling_bars_figure(plane.coupling[step], plane.parents, NAMES, selected=0),
        figs.lengths_figure(routing.lengths, plane.parents, NAMES, step),
    ]  # fmt: skip
    return sum(len(fig.to_json()) for fig in built)


def curves_view(norm: float) -> int:
    """What the curves' fragment does when |s| moves: the squash and the loss at that point, two figures, JSON."""
    length = pg.squash_length(norm)
    pg.margin_point(CapsNetConfig(), length)
    norms, lengths = pg.squash_curve()
    axis, present, absent = pg.margin_curves(CapsNetConfig())
    built = [
        figs.squash_figure(norms, lengths, np.array([[norm, length]]), [0], ["v"]),
        figs.margin_figure(axis, present, absent, 0.9, 0.1, np.array([length]), ["|v|"]),
    ]
    return sum(len(fig.to_json()) for fig in built)


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

    presets = {name: pg.preset_votes(name) for name in pg.PRESETS}
    moved = pg.move_vote(presets[pg.PRESETS[0]], 0, 2, (-1.2, -0.6))
    image = np.zeros((28, 28), np.float32)
    image[5:23, 13:16] = 1.0
    votes = explain(model, image, 3).votes
    plane = pg.real_plane(votes, 1)
    rows = [
        ("toy: Previous / Next (r = 3)", lambda: toy_view(presets[pg.PRESETS[0]], 3, 1)),
        ("toy: iterations slider to 5", lambda: toy_view(presets[pg.PRESETS[0]], 5, 4)),
        ("toy: move a vote", lambda: toy_view(pg.move_vote(moved, 0, 2, (-1.0, -0.5)), 3, 2)),
        ("toy: choose a preset", lambda: toy_view(pg.preset_votes(pg.PRESETS[1]), 3, 0)),
        ("curves: move |s|", lambda: curves_view(2.3)),
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
