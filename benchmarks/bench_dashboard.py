"""Server-side cost of each dashboard interaction on the CPU, against its targets (50 ms an interaction).

    python benchmarks/bench_dashboard.py                     # the paper's model, random weights
    python benchmarks/bench_dashboard.py --checkpoint checkpoints/mnist.safetensors

Random weights cost exactly what trained ones do (same shapes, same operations),
so the default needs no trained model. Each interaction is timed `--repeats`
times after a warm-up and the median is reported. Cold start (imports plus
checkpoint load) runs in a fresh Python process each time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from threadpoolctl import threadpool_limits
from timing import median_ms

from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from capsnet.data.preprocess import preprocess_canvas
from capsnet.device import describe_device, inference_threads
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings.agreement import pixel_votes, primary_reading, vote_mass, vote_view
from capsnet.readings.decoding import PERTURBATION_STEPS, decode_vector, perturbation_grid
from capsnet.readings.equivariance import Transform, read_transforms, rotation_sweep
from capsnet.readings.explain import coupling_by_type, coupling_maps, explain
from dashboard import figures

NAMES = [str(d) for d in range(10)]

COLD_START = """
import time
start = time.perf_counter()
import streamlit, plotly.graph_objects, torch
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.readings import explain
from capsnet.data import preprocess
from dashboard import figures, models, sidebar, state
imported = time.perf_counter()
load_checkpoint({path!r})
print(imported - start, time.perf_counter() - start)
"""


def drawn_canvas() -> np.ndarray:
    """A '7' drawn off-centre on a 280x280 canvas, as the browser sends it (RGBA)."""
    image = Image.new("RGBA", (280, 280), (0, 0, 0, 255))
    draw = ImageDraw.Draw(image)
    draw.line([(40, 40), (220, 40)], fill="white", width=18)
    draw.line([(220, 40), (110, 250)], fill="white", width=18)
    return np.asarray(image)


def cold_start(path: Path, repeats: int) -> tuple[float, float, float]:
    """Median seconds of (whole process, imports, imports + load) in fresh interpreters."""
    walls, imports, loads = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", COLD_START.format(path=str(path))], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        if out.returncode != 0:
            raise SystemExit(f"cold start failed:\n{out.stderr}")
        a, b = map(float, out.stdout.split())
        imports.append(a)
        loads.append(b)
    return statistics.median(walls), statistics.median(imports), statistics.median(loads)


def interactions(model: CapsNet, repeats: int) -> list[tuple[str, float, float | None]]:
    """Each interaction's median time (ms) over `repeats` runs, with its target (ms, or None).

    Long: one table, read top to bottom, of what each page does for one model and one input, each a small closure
    over the same reading."""
    model.eval()
    rgba = drawn_canvas()
    digit = preprocess_canvas(rgba)
    result = explain(model, digit)
    klass = result.prediction
    vector = result.poses[klass].copy()
    c = model.config

    def draw() -> object:
        e = explain(model, preprocess_canvas(rgba))
        return figures.lengths_bar(e.lengths, NAMES, e.prediction).to_json()

    def routing() -> object:
        e = explain(model, digit, routing_iterations=3)
        by_type = coupling_by_type(e.coupling, e.primary_lengths, e.primary_types, e.primary_grid)
        maps = coupling_maps(e.coupling, e.prediction, e.primary_types, e.primary_grid)
        return (
            figures.coupling_by_type_figure(by_type, e.iteration_lengths, NAMES).to_json(),
            figures.coupling_maps_figure(maps, NAMES[e.prediction]).to_json(),
        )

    def slider() -> object:
        vector[3] += 0.01
        return decode_vector(model, vector, klass)

    def grid_figure() -> object:
        grid = perturbation_grid(model, vector, klass)
        return figures.perturbation_figure(grid, PERTURBATION_STEPS.tolist()).to_json()

    def votes() -> object:
        v = explain(model, digit, 3).votes
        view = vote_view(v, klass)
        return view, pixel_votes(v.coupling[-1], v.primary_lengths, c), vote_mass(v.coupling)

    def votes_figures() -> object:
        v, pixels, mass = votes()
        return (
            figures.votes_figure(
                v.points, v.coupling, v.agreement, v.sums, v.poses, "7", c.num_classes, c.primary_grid, 2
            ).to_json(),
            figures.vote_overlay_figure(digit, pixels, NAMES).to_json(),
            figures.vote_share_figure(mass, NAMES).to_json(),
        )

    read = explain(model, digit, 3)  # the page's cached reading: a selection reads nothing again

    def select_primary() -> object:
        """The linked views after a click on a vote: that capsule ringed, outlined, and its couplings drawn."""
        v = read.votes
        index = (select_primary.calls * 37) % c.num_primary  # another capsule each time
        select_primary.calls += 1
        one = primary_reading(v, c, index)
        views = [vote_view(v, j) for j in (read.prediction, read.runner_up)]
        pixels = pixel_votes(v.coupling[-1], v.primary_lengths, c)
        return (
            *(
                figures.votes_figure(
                    w.points,
                    w.coupling,
                    w.agreement,
                    w.sums,
                    w.poses,
                    "7",
                    c.num_classes,
                    c.primary_grid,
                    2,
                    selected=index,
                ).to_json()
                for w in views
            ),  # fmt: skip
            figures.vote_overlay_figure(digit, pixels, NAMES, box=one.box).to_json(),
            figures.primary_coupling_figure(one.coupling, one.agreement, NAMES, "t", 2).to_json(),
        )

    select_primary.calls = 0  # type: ignore[attr-defined]
    turned = Transform(rotation=20.0, scale=1.1, thickness=0.5)

    rows: list[tuple[str, float, float | None]] = [
        (
            "preprocess a drawing (280x280 RGBA -> 28x28)",
            median_ms(lambda: preprocess_canvas(rgba), repeats),
            50,
        ),
        (
            "draw: preprocess + predict + reconstruct (+ trace)",
            median_ms(lambda: explain(model, preprocess_canvas(rgba)), repeats),
            50,
        ),
        ("draw: the above + lengths chart (to JSON)", median_ms(draw, repeats), 50),
        ("routing trace (r = 3) + its per-type and per-capsule figures", median_ms(routing, repeats), 50),
        ("slider move: one decode", median_ms(slider, repeats), 50),
        (
            "Figure 4 grid: 16 x 11 decodes in one batch",
            median_ms(lambda: perturbation_grid(model, vector, klass), repeats),
            150,
        ),
        ("Figure 4 grid + its figure (PNG, JSON)", median_ms(grid_figure, repeats), 150),
        ("votes (r = 3): read, 2-D view, input overlay, vote mass", median_ms(votes, repeats), 50),
        ("votes: the above + its three figures (JSON)", median_ms(votes_figures, repeats), None),
        ("select a primary capsule: its views + 4 figures (JSON)", median_ms(select_primary, repeats), 50),
        (
            "transform lens: one step (original + transformed)",
            median_ms(lambda: read_transforms(model, digit, [Transform(), turned], klass), repeats),
            50,
        ),
        (
            "transform lens: rotation sweep, 37 angles (batches of 13)",
            median_ms(lambda: rotation_sweep(model, digit, turned, klass), repeats),
            150,
        ),
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="a .safetensors checkpoint (default: random paper model)"
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per interaction (median reported)")
    parser.add_argument("--cold-repeats", type=int, default=3, help="fresh processes for the cold start")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: what the dashboard uses, $CAPSNET_DASHBOARD_THREADS or 1)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or inference_threads())
    threadpool_limits(torch.get_num_threads(), user_api="blas")  # NumPy's BLAS too, as the dashboard does

    with tempfile.TemporaryDirectory() as tmp:
        if args.checkpoint is not None:
            checkpoint = load_checkpoint(args.checkpoint, networks=("capsnet",))
            model, path, what = checkpoint.model, args.checkpoint, str(args.checkpoint)
        else:
            torch.manual_seed(0)
            model = CapsNet(CapsNetConfig.preset("paper")).eval()
            path = Path(tmp) / "random-paper.safetensors"
            save_checkpoint(path, model, {"dataset": "mnist"})
            what = "the paper's CapsNet, random weights"
        model.eval()
        rows = interactions(model, args.repeats)
        wall, imports, loaded = cold_start(path, args.cold_repeats)

    print(f"Dashboard interactions on {describe_device(torch.device('cpu'))}; model: {what}")
    c = model.config
    print(
        f"({c.num_primary} primary capsules, {c.num_classes}x{c.digit_dim}-D digit capsules; median of {args.repeats})\n"
    )
    print(f"| {'interaction':<52} | {'median':>10} | {'target':>8} |    |")
    print(f"|{'-' * 54}|{'-' * 12}|{'-' * 10}|----|")
    for name, ms, target in rows:
        if target is None:
            print(f"| {name:<52} | {ms:>7.1f} ms | {'':>8} |    |")
        else:
            print(f"| {name:<52} | {ms:>7.1f} ms | {target:>5} ms | {'ok' if ms <= target else '!!'} |")
    print(f"| {'cold start: imports':<52} | {imports:>8.2f} s | {'':>8} |    |")
    print(
        f"| {'cold start: imports + checkpoint load':<52} | {loaded:>8.2f} s | {5:>6} s | {'ok' if loaded <= 5 else '!!'} |"
    )
    print(f"| {'cold start: whole fresh process':<52} | {wall:>8.2f} s | {5:>6} s | {'ok' if wall <= 5 else '!!'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
