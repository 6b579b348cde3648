"""Every figure builder: the right traces and marks, and no Streamlit involved."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from capsnet.readings.decoding import PERTURBATION_STEPS
from dashboard import figures, texts

NAMES = [str(d) for d in range(10)]


def test_lengths_bar_highlights_the_winner_and_marks_the_margins() -> None:
    lengths = np.linspace(0.05, 0.5, 10)
    lengths[7] = 0.95
    fig = figures.lengths_bar(lengths, NAMES)
    bar = fig.data[0]
    assert isinstance(bar, go.Bar) and list(bar.x) == NAMES
    assert bar.marker.color[7] == figures.WINNER and bar.marker.color.count(figures.WINNER) == 1
    lines = sorted(shape.y0 for shape in fig.layout.shapes)
    assert lines == [0.1, 0.9]
    assert fig.layout.yaxis.range == (0, 1.08)
    _assert_margin_labels_outside(fig, "")
    compact = figures.lengths_bar(lengths, NAMES, prediction=2, compact=True, height=150)
    assert compact.data[0].marker.color[2] == figures.WINNER and not compact.layout.shapes
    with pytest.raises(ValueError, match="class names"):
        figures.lengths_bar(lengths, NAMES[:3])


def _assert_margin_labels_outside(fig: go.Figure, axis: str) -> None:
    """The m+ / m- labels sit right of the plot area (where no bar label can reach), in a margin wide enough."""
    labels = [a for a in fig.layout.annotations if a.text and a.text.startswith("m")]
    assert sorted(a.text for a in labels) == ["m⁺ = 0.9", "m⁻ = 0.1"]
    for label in labels:
        assert label.xref == f"x{axis} domain" and label.x == 1 and label.xanchor == "left", label
    assert fig.layout.margin.r >= figures.MARGIN_LABEL_SPACE


@pytest.mark.parametrize("iterations", [1, 3, 5])
def test_coupling_by_type_draws_the_iteration_the_page_chose(iterations: int) -> None:
    """The page's stepper owns the iteration: the figure draws that one, names it, and has no Play
    of its own; one colour scale for every iteration, so stepping compares like with like."""
    rng = np.random.default_rng(0)
    by_type = rng.dirichlet(np.ones(10), size=(iterations, 32)).astype(np.float32)  # (r, 32, 10)
    lengths = rng.uniform(0, 1, size=(iterations, 10))
    change = by_type - 0.1  # couplings are shown as their change from uniform, 1/K
    reach = np.abs(change).max()
    for step in range(iterations):
        fig = figures.coupling_by_type_figure(by_type, lengths, NAMES, step=step)
        assert isinstance(fig.data[0], go.Heatmap) and isinstance(fig.data[1], go.Bar)
        np.testing.assert_allclose(np.asarray(fig.data[0].z), change[step], atol=1e-6)
        np.testing.assert_allclose(np.asarray(fig.data[0].customdata), by_type[step], atol=1e-6)  # c itself on hover
        np.testing.assert_allclose(np.asarray(fig.data[1].y), lengths[step])
        assert fig.data[0].zmid == 0.0 and fig.data[0].zmin == pytest.approx(-reach)
        assert fig.data[0].zmax == pytest.approx(reach)
        assert not fig.frames and not fig.layout.sliders and not fig.layout.updatemenus
        titles = [a.text for a in fig.layout.annotations if a.yref == "paper"]
        named = f", iteration {step + 1} of {iterations}" if iterations > 1 else ""
        assert titles == ["Coupling per type, c − 1/K" + named, "Capsule lengths |v|" + named]
    default = figures.coupling_by_type_figure(by_type, lengths, NAMES)  # the last iteration unless told
    np.testing.assert_allclose(np.asarray(default.data[0].z), change[-1], atol=1e-6)
    # the heatmap, its colour bar and the bars in bands of their own: the bar's ticks end before the bars begin
    colorbar = default.data[0].colorbar
    assert default.layout.xaxis.domain[1] <= colorbar.x and colorbar.xanchor == "left"
    assert default.layout.xaxis2.domain[0] - colorbar.x >= 0.15
    _assert_margin_labels_outside(default, "2")
    with pytest.raises(ValueError, match="shapes"):
        figures.coupling_by_type_figure(by_type, lengths[:, :5], NAMES)


def test_coupling_maps_figure_tiles_every_primary_capsule() -> None:
    maps = np.random.default_rng(1).uniform(0, 1, size=(3, 32, 6, 6)).astype(np.float32)
    fig = figures.coupling_maps_figure(maps, "7")
    assert not fig.frames and not fig.layout.sliders  # the page's stepper chooses the iteration
    assert fig.layout.title.text == "Coupling to 7, c − 1/K, iteration 3 of 3"
    np.testing.assert_allclose(np.asarray(figures.coupling_maps_figure(maps, "7", step=0).data[0].z)[:6, :6],
                               maps[0, 0] - 0.1, atol=1e-6)  # fmt: skip
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (4 * 7 - 1, 8 * 7 - 1)
    assert np.isfinite(z).sum() == 32 * 36  # all 1152 capsules, NaN gaps between the blocks
    np.testing.assert_allclose(z[:6, :6], maps[-1, 0] - 0.1, atol=1e-6)  # the change from uniform, 1/K
    custom = np.asarray(fig.data[0].customdata)
    assert custom.shape == (*z.shape, 3) and custom[8, 15, 0] == 11  # block row 1, column 2: type 8 + 2 + 1 (1-based)
    assert tuple(custom[8, 15, 1:]) == (1, 1)  # position (y, x) inside the block


def _plot_height(fig: go.Figure) -> float:
    return fig.layout.height - fig.layout.margin.t - fig.layout.margin.b


@pytest.mark.parametrize("types", [8, 32])
def test_coupling_maps_figure_is_as_tall_as_its_tiles(types: int) -> None:
    """No empty band: the plot area's height follows the tiles' aspect (the tiny model's 8 types, the paper's 32)."""
    maps = np.random.default_rng(4).uniform(0, 1, size=(3, types, 6, 6)).astype(np.float32)
    width = 560
    fig = figures.coupling_maps_figure(maps, "3", width=width)
    rows, cols = np.asarray(fig.data[0].z).shape
    assert (rows, cols) == ((2 * 7 - 1, 4 * 7 - 1) if types == 8 else (4 * 7 - 1, 8 * 7 - 1))  # 2 x 4 or 4 x 8 blocks
    tiles_height = (width - figures.TILE_SIDES) * rows / cols  # square cells across the plot's width
    assert abs(_plot_height(fig) - tiles_height) <= 1
    strip = figures.coupling_maps_figure(maps[:, :8], "3", columns=8, width=width)  # one row of 8 blocks: a low figure
    assert _plot_height(strip) < 0.5 * _plot_height(fig) and strip.layout.height < fig.layout.height - 100
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.xaxis.constrain == "domain"


def test_iteration_lengths_figure() -> None:
    lengths = np.array([[0.2] * 10, [0.3] * 9 + [0.8]])
    fig = figures.iteration_lengths_figure(lengths, NAMES)
    assert len(fig.data) == 10 and list(fig.data[9].x) == [1, 2]
    assert fig.data[9].line.width == 4  # the final winner
    with pytest.raises(ValueError):
        figures.iteration_lengths_figure(lengths, NAMES[:2])


def test_primary_lengths_figure() -> None:
    fig = figures.primary_lengths_figure(np.random.default_rng(2).uniform(size=(8, 6, 6)), columns=8)
    assert np.asarray(fig.data[0].z, dtype=float).shape == (6, 8 * 7 - 1)
    assert "288" in fig.layout.title.text
    blocks = figures.primary_lengths_figure(np.random.default_rng(2).uniform(size=(8, 6, 6)), width=900)
    assert np.asarray(blocks.data[0].z, dtype=float).shape == (2 * 7 - 1, 4 * 7 - 1)  # 2 rows of 4 by default
    assert abs(_plot_height(blocks) - (900 - figures.TILE_SIDES) * 13 / 27) <= 1
    assert _plot_height(fig) < 0.3 * _plot_height(blocks)  # one row of 8: a low figure, no empty band


def test_perturbation_figure_is_one_image_with_labelled_axes() -> None:
    grid = np.random.default_rng(3).uniform(size=(16, 11, 28, 28)).astype(np.float32)
    fig = figures.perturbation_figure(grid, PERTURBATION_STEPS.tolist())
    assert len(fig.data) == 1 and isinstance(fig.data[0], go.Image)
    assert fig.data[0].source.startswith("data:image/png;base64,")
    assert list(fig.layout.xaxis.ticktext) == [f"{s:+.2f}" for s in PERTURBATION_STEPS]
    named = figures.perturbation_figure(
        grid, [s / 4 for s in PERTURBATION_STEPS.tolist()], [f"Pose entry {d}" for d in range(len(grid))]
    )
    assert list(named.layout.yaxis.ticktext)[:2] == [
        "Pose entry 0",
        "Pose entry 1",
    ]  # the rows named as the page names them
    assert list(named.layout.xaxis.ticktext)[-1] == "+0.062"  # a narrow range keeps its third decimal
    assert len(fig.layout.yaxis.ticktext) == 16 and fig.layout.yaxis.ticktext[0] == "dim 1"
    with pytest.raises(ValueError, match="steps"):
        figures.perturbation_figure(grid, [0.0, 0.1])


def test_image_rows_figure() -> None:
    rows = [np.zeros((12, 28, 28)), np.ones((12, 28, 28))]
    fig = figures.image_rows_figure(rows, ["original", "reconstruction"])
    assert isinstance(fig.data[0], go.Image) and list(fig.layout.yaxis.ticktext) == ["original", "reconstruction"]
    with pytest.raises(ValueError):
        figures.image_rows_figure(rows, ["only one"])


def test_dimension_profile_figure() -> None:
    base = np.zeros(16)
    edited = base.copy()
    edited[3] = 0.2
    fig = figures.dimension_profile_figure(base, edited, base - 0.5, base + 0.5)
    assert [t.name for t in fig.data] == ["slider range", "from the input", "edited"]
    assert fig.data[2].y[3] == pytest.approx(0.2)


def test_training_curves_draw_each_run_side_by_side() -> None:
    record = {"train_loss": 0.3, "test_loss": 0.2, "train_accuracy": 0.9, "test_accuracy": 0.95}
    runs = {"run-a": [{"epoch": e, **record} for e in (1, 2, 3)], "run-b": [{"epoch": 1, **record}]}
    fig = figures.training_curves(runs)
    assert len(fig.data) == 8  # 2 runs x (train, test) x (loss, accuracy)
    assert {t.legendgroup for t in fig.data} == {"run-a", "run-b"}
    assert fig.data[0].line.color != fig.data[4].line.color
    assert list(fig.data[1].x) == [1, 2, 3]
    assert fig.layout.annotations[0].text == "Loss" and fig.layout.annotations[1].text == "Accuracy"
    # the legend says which line is which: per run, a "test" entry drawn solid and a "train" entry drawn dotted
    for run in runs:
        entries = [t for t in fig.data if t.legendgroup == run and t.showlegend is not False]
        assert sorted((t.name, t.line.dash) for t in entries) == [("test", "solid"), ("train", "dot")]
        assert {t.legendgrouptitle.text for t in fig.data if t.legendgroup == run} == {run}
    for trace in fig.data:  # every line is drawn like its legend entry
        assert trace.line.dash == ("dot" if trace.name == "train" else "solid")
        assert ("train" in trace.hovertemplate) == (trace.name == "train")


def test_training_curves_mark_short_runs_and_draw_long_ones_as_lines() -> None:
    record = {"train_loss": 0.3, "test_loss": 0.2, "train_accuracy": 0.9, "test_accuracy": 0.95}
    short = figures.training_curves({"short": [{"epoch": e, **record} for e in range(1, 6)]})
    assert {t.mode for t in short.data} == {"lines+markers"}
    assert short.layout.xaxis.dtick == 1 and short.layout.xaxis.tick0 == 1  # a tick on every epoch
    long = figures.training_curves({"long": [{"epoch": e, **record} for e in range(1, 151)]})
    assert {t.mode for t in long.data} == {"lines"}
    assert long.layout.xaxis.dtick is None  # plotly's own round-number ticks


def test_confusion_figure() -> None:
    confusion = np.diag(np.full(10, 90)) + 1
    confusion[3, 5] = 0  # one empty cell among the mistakes
    fig = figures.confusion_figure(confusion, NAMES)
    right, wrong = (np.asarray(trace.z, dtype=float) for trace in fig.data)
    assert right.shape == (10, 10) and right[0, 0] == pytest.approx(91 / 100)
    assert np.asarray(fig.data[0].text)[0, 0] == "91" and np.asarray(fig.data[1].text)[0, 1] == "1"
    assert np.isnan(right[0, 1]) and np.isnan(wrong[0, 0])  # each cell on one scale only
    assert wrong[0, 1] >= fig.data[1].zmin  # a single mistake gets a visible colour...
    assert np.isnan(wrong[3, 5])  # ...an empty cell none, so the two never look alike
    with pytest.raises(ValueError):
        figures.confusion_figure(confusion[:5], NAMES)


def test_per_class_accuracy_figure() -> None:
    acc = [0.99] * 10
    acc[4] = 0.8
    fig = figures.per_class_accuracy_figure(acc, NAMES)
    assert fig.data[0].marker.color[4] == figures.WINNER
    assert fig.layout.yaxis.range[1] == 1.0  # no 102% on the axis
    with pytest.raises(ValueError):
        figures.per_class_accuracy_figure(acc[:3], NAMES)


def test_pixel_image_is_sharp_and_uint8() -> None:
    image = np.zeros((28, 28), np.float32)
    image[0, 0] = 1.0
    big = figures.pixel_image(image, 4)
    assert big.shape == (112, 112) and big.dtype == np.uint8
    assert (big[:4, :4] == 255).all() and big[4, 4] == 0


def test_figures_module_does_not_use_streamlit() -> None:
    """Figure builders are pure: no module of the package imports or mentions streamlit."""
    modules = sorted(Path(figures.__file__).parent.glob("*.py"))
    assert len(modules) >= 7
    for path in modules:
        assert "streamlit" not in path.read_text(encoding="utf-8"), path.name


def test_tile_columns_lays_blocks_out_about_twice_as_wide_as_tall() -> None:
    assert figures.tile_columns(32) == 8  # the paper's 32 types: 4 rows of 8
    assert figures.tile_columns(8) == 4  # the tiny model's 8: 2 rows of 4, not a thin strip of 8
    assert figures.tile_columns(1) == 1 and figures.tile_columns(3) == 3
    for count in range(1, 65):
        columns = figures.tile_columns(count)
        rows = -(-count // columns)
        assert 1 <= columns <= count and rows * columns - count < rows  # no empty row or column of blocks
        assert columns >= rows


def test_tile_maps_lays_out_blocks_with_gaps() -> None:
    maps = np.arange(32 * 36, dtype=np.float32).reshape(32, 6, 6)
    tiled = figures.tile_maps(maps, columns=8)
    assert tiled.shape == (4 * 7 - 1, 8 * 7 - 1)
    np.testing.assert_array_equal(tiled[:6, :6], maps[0])
    np.testing.assert_array_equal(tiled[7:13, 14:20], maps[10])  # row 1, column 2
    assert np.isnan(tiled[6]).all() and np.isnan(tiled[:, 6]).all()
    framed = figures.tile_maps(np.zeros((3, 5, 6, 6)), columns=8)  # leading axes are kept; 5 maps fit one row
    assert framed.shape == (3, 6, 5 * 7 - 1)


def test_the_votes_axes_hold_every_iteration_and_two_plots_can_share_a_colour_scale() -> None:
    """Stepping must not rescale the axes (s_j grows far beyond the votes as couplings concentrate), and the
    winner's and runner-up's plots compare on one colour scale."""
    rng = np.random.default_rng(0)
    n, r, k = 8 * 6 * 6, 3, 10
    points = rng.normal(size=(n, 2)).astype(np.float32) * 0.3
    coupling = np.full((r, n), 1 / k, dtype=np.float32)
    coupling[1:] += rng.uniform(-0.05, 0.2, size=(r - 1, n)).astype(np.float32)
    sums = np.array([[0.2, 0.0], [2.0, 0.1], [4.75, -0.2]], dtype=np.float32)  # s_j far outside the votes later
    poses = np.array([[0.1, 0.0], [0.8, 0.0], [0.95, 0.0]], dtype=np.float32)
    agreement = rng.normal(size=(r, n)).astype(np.float32)
    for step in range(r):
        fig = figures.votes_figure(points, coupling, agreement, sums, poses, "3", k, 6, step, reach=0.5)
        x_range, y_range = fig.layout.xaxis.range, fig.layout.yaxis.range
        assert x_range[0] < points[:, 0].min() and x_range[1] > 4.75  # the last s_j is inside from the first frame
        assert y_range[0] < points[:, 1].min() and y_range[1] > points[:, 1].max()
        assert fig.layout.xaxis.autorange is False
        assert fig.data[0].marker.cmax == 0.5 and fig.data[0].marker.cmin == -0.5
        if step == 0:
            first = (x_range, y_range)
    assert (x_range, y_range) == first  # the same axes on every iteration
    own = figures.votes_figure(points, coupling, agreement, sums, poses, "3", k, 6, 0)
    assert own.data[0].marker.cmax == pytest.approx(float(np.abs(coupling - 1 / k).max()))


@pytest.mark.parametrize("iterations", [3, 5])
def test_the_votes_figure_draws_one_iteration_and_sends_it_compactly(iterations: int) -> None:
    """The votes figure is redrawn on every click of the Routing page's stepper: it carries the chosen iteration's
    sizes, colours and hover numbers (float32), s_j, v_j and a label naming it, no frames and no Play of its own."""
    rng = np.random.default_rng(3)
    n, r, k = 32 * 6 * 6, iterations, 10
    points = rng.normal(size=(n, 2)) * 0.3
    coupling = rng.dirichlet(np.ones(k), size=(r, n))[..., 0]  # (r, N), float64 in: the figure sends float32
    agreement, sums, poses = rng.normal(size=(r, n)), rng.normal(size=(r, 2)), rng.normal(size=(r, 2)) * 0.3
    for step in (0, r - 1):
        fig = figures.votes_figure(points, coupling, agreement, sums, poses, "3", k, 6, step=step)
        assert not fig.frames and not fig.layout.updatemenus and not fig.layout.sliders
        votes = fig.data[0]
        assert np.asarray(votes.customdata).dtype == np.float32 and np.asarray(votes.customdata).shape == (n, 3)
        np.testing.assert_allclose(np.asarray(votes.customdata)[:, 0], coupling[step], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(votes.marker.size), 3 + 60 * coupling[step], rtol=1e-5)
        assert fig.data[1].x == (pytest.approx(sums[step, 0]),) and fig.data[2].y == (pytest.approx(poses[step, 1]),)
        assert fig.data[3].text == (f"iteration {step + 1} of {r}",)  # inside the fixed axes, top left
        assert fig.layout.xaxis.range[0] == fig.data[3].x[0] and fig.layout.yaxis.range[1] == fig.data[3].y[0]
    assert fig.data[0].text[0] == "type 1, position (0, 0)" and fig.data[0].text[-1] == "type 32, position (5, 5)"
    # float32 in base64 (4/3 bytes a byte): x, y and five numbers a vote, each vote's label, some 20 kB of layout
    size = len(fig.to_json())
    assert size <= 6 * n * 7 + 30 * n + 20_000, size
    single = figures.votes_figure(points, coupling[:1], agreement[:1], sums[:1], poses[:1], "3", k, 6, step=0)
    assert len(single.data) == 3  # one iteration: no label


def test_the_selected_votes_ring_shows_on_white_points() -> None:
    """The ring was white, on votes coloured white where couplings are uniform; now yellow (a colour
    the diverging scale never takes) on a dark edge."""
    from plotly.colors import get_colorscale, hex_to_rgb

    from dashboard.figures import agreement

    rng = np.random.default_rng(0)
    points, k = rng.normal(size=(72, 2)), 10
    coupling = np.full((3, 72), 1 / k)  # uniform: every vote white
    agreement_ = np.zeros((3, 72))
    sums, poses = np.zeros((3, 2)), np.zeros((3, 2))
    fig = figures.votes_figure(points, coupling, agreement_, sums, poses, "3", k, 6, 2, selected=5)
    rings = [t for t in fig.data if t.name == "the selected capsule's vote"]
    assert [t.marker.color for t in rings] == [agreement.RING_EDGE, agreement.RING]
    assert all(t.x[0] == pytest.approx(points[5, 0], rel=1e-6) and t.marker.symbol == "circle-open" for t in rings)
    ring = np.array(hex_to_rgb(agreement.RING))
    scale = [np.array([int(v) for v in c.strip("rgb()").split(",")]) for _, c in get_colorscale("RdBu_r")]
    assert min(np.abs(ring - c).sum() for c in scale) > 150  # far from every colour a vote can take


def test_the_coupling_maps_outline_the_selected_capsules_cell() -> None:
    """The linked views: the outline sits on the one cell of the tiled heatmap that holds that capsule's coupling."""
    rng = np.random.default_rng(0)
    maps = rng.uniform(0, 1, size=(2, 8, 3, 3)).astype(np.float32)  # (r, types, G, G), every value distinct
    for kind, y, x in [(0, 0, 0), (5, 1, 2), (7, 2, 2)]:
        fig = figures.coupling_maps_figure(maps, "7", num_classes=10, selected=(kind, y, x))
        (box,) = fig.layout.shapes
        col, row = int(box.x0 + 0.5), int(box.y0 + 0.5)
        assert (box.x1 - box.x0, box.y1 - box.y0) == (1, 1)
        z = np.asarray(fig.data[0].z, dtype=np.float32)
        np.testing.assert_allclose(z[row, col], maps[-1, kind, y, x] - 0.1, rtol=1e-6)
    assert not figures.coupling_maps_figure(maps, "7", num_classes=10).layout.shapes


def test_the_claim_figure_puts_each_kept_file_at_the_examples_it_had_seen() -> None:
    """The shipped MultiMNIST pair: each run's curve, then a diamond at the table's figure where the kept epoch
    stood (epoch 8 of both; an epoch before the last, 7, where a run kept one), and the paper's figures as dashed
    lines."""
    from capsnet.readings.claims import verdict

    root = Path(__file__).resolve().parents[1] / "checkpoints"
    v = verdict("multimnist", root / "multimnist.safetensors", root / "baselines" / "multimnist-cnn.safetensors")
    fig = figures.claim_figure(v)
    traces = {t.name: t for t in fig.data}
    lines = [traces["CapsNet here"], traces["CNN baseline here"]]
    assert len(lines[0].x) == 8
    kept = [traces["CapsNet, the kept file"], traces["CNN baseline, the kept file"]]
    assert [t.x[0] for t in kept] == [64_000, 64_000]
    assert [t.y[0] for t in kept] == pytest.approx([100 * r.error for r in v.rows])
    earlier = dataclasses.replace(v, rows=(v.rows[0], dataclasses.replace(v.rows[1], chosen_epoch=7)))
    moved = {t.name: t for t in figures.claim_figure(earlier).data}
    assert [moved[name].x[0] for name in ("CapsNet, the kept file", "CNN baseline, the kept file")] == [64_000, 56_000]
    paper = [traces["CapsNet, paper: 5.2%"], traces["CNN baseline, paper: 8.1%"]]
    assert [tuple(t.y) for t in paper] == [(5.2, 5.2), (8.1, 8.1)] and paper[0].line.dash == "dash"
    assert fig.layout.yaxis.type == "log"  # 2% and 35% both readable
    labels = list(fig.layout.yaxis.ticktext)
    assert "20" in labels and len(set(labels)) == len(labels)  # each tick in full: 20 is not a second "2"


def test_robustness_points_carry_their_sampling_interval() -> None:
    """At 100 images a point, gaps of 2-7 points between the networks need their interval."""
    fig = figures.robustness_figure([0, 10], {"CapsNet": [0.5, 0.9], "CNN": [0.4, 1.0]}, "rotation", examples=100)
    np.testing.assert_allclose(fig.data[0].error_y.array, [9.8, 100 * 1.96 * (0.09 / 100) ** 0.5])
    assert list(fig.data[1].error_y.array)[1] == 0.0
    assert "±9.8 points" in texts.robustness_interval(100)


def test_a_one_epoch_run_shows_its_splits_apart() -> None:
    """Two lone dots of one colour would say nothing: test and train differ by marker."""
    record = {"epoch": 1, "train_loss": 0.4, "test_loss": 0.3, "train_accuracy": 0.9, "test_accuracy": 0.92}
    fig = figures.training_curves({"one": [record]})
    symbols = {t.name: t.marker.symbol for t in fig.data}
    assert "markers" in fig.data[0].mode and symbols == {"test": "circle", "train": "circle-open"}


def test_no_length_label_sits_on_the_m_minus_line() -> None:
    """Labels of 0.01-0.08 were struck through by the dashed m- = 0.1 line."""
    lengths = np.array([0.01, 0.03, 0.05, 0.07, 0.08, 0.09, 0.1, 0.2, 0.5, 0.95])
    fig = figures.lengths_bar(lengths, [str(k) for k in range(10)], m_minus=0.1)
    (labels,) = [t for t in fig.data if getattr(t, "mode", None) == "text"]
    assert list(labels.text) == [f"{v:.2f}" for v in lengths]
    for value, start in zip(lengths, labels.y):
        assert start >= value  # above its bar
        assert not 0.1 - 0.05 < start < 0.1 + 0.01 - 1e-9, (value, start)  # its text starts at or above the line


def test_the_pair_stroke_map_leans_red_or_green_and_leaves_ties_grey() -> None:
    """An argmax over nearly uniform couplings painted strokes for the wrong digit; the map now
    shows how much more each stroke votes for the first digit than the second, in the redraw's colours."""
    image = np.zeros((4, 4), np.float32)
    image[0, :] = image[3, :] = 1.0  # two strokes
    votes = np.full((4, 4, 10), 0.1)
    votes[0, :, 7] += 0.02  # the top stroke leans to capsule 7
    votes[3, :, 0] += 0.01  # the bottom one to capsule 0
    fig = figures.vote_overlay_figure(image, votes, [str(k) for k in range(10)], pair=(7, 0))
    z = np.asarray(fig.data[1].z, dtype=float)
    assert (z[0] > 0).all() and (z[3] < 0).all() and np.isnan(z[1]).all()  # red, green, and no ink
    assert fig.data[1].zmid == 0 and "(red)" in fig.layout.title.text and "(green)" in fig.layout.title.text
    assert "no stroke leans" not in fig.layout.title.text
    # leans of a thousandth were stretched over the whole scale, one saturated colour; they now
    # sit near its grey middle, and the title says why
    faint = np.full((4, 4, 10), 0.1)
    faint[0, :, 7] += 0.0004
    fig = figures.vote_overlay_figure(image, faint, [str(k) for k in range(10)], pair=(7, 0))
    assert fig.data[1].zmax == figures.agreement.LEAN_SCALE and np.nanmax(np.abs(fig.data[1].z)) < 0.001
    assert "no stroke leans by 0.5% of its votes" in fig.layout.title.text


def test_the_em_class_routing_figure_draws_each_class_per_iteration() -> None:
    names = [str(k) for k in range(10)]
    activations = np.linspace(0.1, 0.9, 30, dtype=np.float32).reshape(3, 10)
    shares = np.full((3, 10), 0.1, np.float32)
    shares[1:] = 0.0625
    shares[1:, 4], shares[1:, 5] = 0.5, 0.0  # class 4 gathers the data in the later iterations
    fig = figures.em_class_routing_figure(activations, shares, names, prediction=4)
    left = [t for t in fig.data if t.xaxis == "x"]
    right = [t for t in fig.data if t.xaxis == "x2"]
    assert len(left) == len(right) == 10 and left[-1].name == "4" and left[-1].line.color == figures.WINNER
    assert list(left[-1].y) == pytest.approx(activations[:, 4].tolist()) and list(right[-1].x) == [1, 2, 3]
    assert [a.text for a in fig.layout.annotations if a.text in names] == ["4", "4"]  # the winner named on both
    with pytest.raises(ValueError, match="activations and shares"):
        figures.em_class_routing_figure(activations, shares[:, :5], names, prediction=4)


def test_the_activations_bar_marks_the_winner_and_says_each_value() -> None:
    fig = figures.activations_bar(np.array([0.2, 0.91, 0.4]), ["a", "b", "c"], prediction=1)
    bar = fig.data[0]
    assert list(bar.marker.color) == [figures.OTHER, figures.WINNER, figures.OTHER]
    assert list(bar.text) == ["0.20", "0.91", "0.40"] and "a = " in bar.hovertemplate
    with pytest.raises(ValueError, match="class names"):
        figures.activations_bar(np.ones(3), ["a"], prediction=0)


def test_the_em_assignment_map_lays_children_out_by_type_and_position() -> None:
    shares = np.arange(2 * 9, dtype=np.float32) / 18  # two types on a 3x3 grid, i = (type, y, x)
    fig = figures.em_assignment_figure(shares, np.full(18, 0.5), (2, 3), "7")
    heat = fig.data[0]
    assert np.asarray(heat.z).shape == (2, 9) and float(np.asarray(heat.z)[1, 0]) == pytest.approx(9 / 18)
    assert list(heat.x)[:2] == ["(0,0)", "(0,1)"] and list(heat.y) == ["type 1", "type 2"]
    assert "class 7" in fig.layout.title.text and (heat.zmin, heat.zmax) == (0, 1)


def test_the_em_fit_figure_shows_activations_and_spreads_of_each_class() -> None:
    fig = figures.em_fit_figure(np.array([0.1, 0.8, 0.3]), np.array([1.0, 0.2, 0.6]), ["a", "b", "c"], chosen=1)
    left, right = fig.data
    assert list(left.y) == [0.1, 0.8, 0.3] and list(right.y) == [1.0, 0.2, 0.6]
    assert list(left.marker.color) == [figures.OTHER, figures.WINNER, figures.OTHER] and right.xaxis == "x2"


def test_the_em_layer_map_circles_the_parents_a_child_was_given_to() -> None:
    acts = np.arange(3 * 4, dtype=np.float32).reshape(3, 2, 2) / 12  # 3 parent types on a 2x2 grid
    shares = np.array([[0.5, 0.0, 0.001], [0.0, 0.3, 0.199]], np.float32)  # the child is in windows 1 and 2
    fig = figures.em_layer_figure(acts, np.array([1, 2]), shares, "ConvCaps2", "child type 1 at (0, 1)")
    heat, circles = fig.data
    assert np.asarray(heat.z).shape == (3, 4) and list(heat.x) == ["(0,0)", "(0,1)", "(1,0)", "(1,1)"]
    assert float(np.asarray(heat.z)[1, 2]) == pytest.approx(acts[1, 1, 0])  # type 2 at (1, 0)
    # one circle per parent given more than half a percent, at its position and type, the largest the largest share
    assert list(circles.x) == ["(0,1)", "(1,0)", "(1,0)"] and list(circles.y) == ["type 1", "type 2", "type 3"]
    assert list(np.asarray(circles.customdata)) == pytest.approx([0.5, 0.3, 0.199])
    assert np.argmax(np.asarray(circles.marker.size)) == 0
    alone = figures.em_layer_figure(acts, np.array([], int), np.zeros((0, 3)), "ConvCaps1", "child")
    assert len(alone.data) == 1  # a child under no window: no circles


def test_the_child_windows_map_outlines_each_window_and_the_child() -> None:
    fig = figures.em_child_windows_figure(np.zeros((5, 5)), 2, 3, [(0, 2, 3), (2, 2, 3)], "type 1")
    boxes = fig.layout.shapes
    assert len(boxes) == 3 and (boxes[0].x0, boxes[0].x1, boxes[0].y0, boxes[0].y1) == (1.5, 4.5, -0.5, 2.5)
    assert (boxes[-1].x0, boxes[-1].y0) == (2.5, 1.5)  # the child's own cell, last (on top)


def test_the_routing_matters_chart_stays_within_0_and_100_percent_with_every_label_shown() -> None:
    """The EM model's accuracies (10.09% to 99.35%) once set the axis from -43% to 100%, with
    the best point's label cut off at the top; now the axis stays within [0, 1] and a label near the top sits under
    its point. A CapsNet's close accuracies still get a narrow axis, so a change of a few images shows."""
    from dashboard.figures import routing_matters as rmf

    em = rmf.accuracy_figure([1, 2, 3, 4, 5], [0.1009, 0.9935, 0.8375, 0.2847, 0.1659], [0, 8991, 9220, 9987, 10_000],
                             trained=2, total=10_000)  # fmt: skip
    bottom, top = em.layout.yaxis.range
    assert bottom == 0.0 and top == 1.0
    line = em.data[1]
    assert line.cliponaxis is False and list(line.textposition)[1] == "bottom center"
    assert list(line.textposition)[0] == "top center"
    caps = rmf.accuracy_figure([1, 2, 3], [0.9950, 0.9962, 0.9960], [0, 20, 25], trained=3, total=10_000)
    bottom, top = caps.layout.yaxis.range
    assert 0.99 < bottom < 0.995 and 0.9962 < top <= 1.0


def test_the_routing_matters_charts_labels_never_meet() -> None:
    """Each r's accuracy label and its bar's count keep apart: at the EM model's r = 4 (28.47% over a bar of 9,987)
    the count above the bar sat on the accuracy's label. Heights as fractions of the plot; a label is about 6% of it."""
    from dashboard.figures import routing_matters as rmf

    acc, differs = [0.1009, 0.9935, 0.8375, 0.2847, 0.1659], [0, 8991, 9220, 9987, 10_000]
    fig = rmf.accuracy_figure([1, 2, 3, 4, 5], acc, differs, trained=2, total=10_000)
    bars, line = fig.data
    bottom, top = fig.layout.yaxis.range
    ceiling = fig.layout.yaxis2.range[1]
    label = 0.06
    for n, (a, d) in enumerate(zip(acc, differs)):
        if not d:
            continue
        point = (a - bottom) / (top - bottom)
        said = (point, point + label) if list(line.textposition)[n] == "top center" else (point - label, point)
        inside = bars.textposition == "inside" and bars.insidetextanchor == "start"
        count = (0.0, label) if inside else (d / ceiling, d / ceiling + label)
        assert said[1] <= count[0] or count[1] <= said[0], (n + 1, said, count)


def test_where_the_evidence_goes_shows_how_far_nearly_uniform_shares_moved() -> None:
    """A trained network's shares stay near 10% at every iteration, and the stacked chart was ten
    equal bands in every column; then the chart shows each share's change since iteration 1, in points."""
    mass = np.full((3, 10), 1.0)
    mass[1, 7], mass[2, 7] = 1.02, 1.05  # capsule 7 gains a little
    fig = figures.vote_share_figure(mass, NAMES)
    assert fig.layout.barmode == "group" and len(fig.data) == 2  # iterations 2 and 3
    share = mass / mass.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(fig.data[1].y, 100 * (share[2] - share[0]))
    assert fig.data[1].y[7] > 0.3 and "change since iteration 1" in fig.layout.title.text
    moved = mass.copy()
    moved[2, 7] = 3.0  # a share that moves by more than two points: the stacked shares show it
    stacked = figures.vote_share_figure(moved, NAMES)
    assert stacked.layout.barmode == "stack" and len(stacked.data) == 10
    assert figures.vote_share_figure(mass[:1], NAMES).layout.barmode == "stack"  # one iteration: the shares
