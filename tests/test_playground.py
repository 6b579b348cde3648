"""The routing playground: the toy's routing (the Python reference the browser's is held to) against a hand-written
Procedure 1 and the package's EM routing, points on the squash and margin curves, the real model's plane and its
figure, and the page."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dashboard_fixtures import (  # noqa: F401
    APP,
    app_dirs,
    app_run,
    app_with_run,
    chart,
    clear_streamlit_caches,
    knobs_payload,
    plotly_values,
)
from streamlit.testing.v1 import AppTest

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_routing import em_routing
from capsnet.readings import playground as pg
from capsnet.readings.agreement import vote_view
from capsnet.readings.explain import explain
from dashboard import routing_texts
from dashboard.figures import playground as figs

PAGE = "app_pages/playground.py"


def reference_routing(votes: np.ndarray, iterations: int) -> dict[str, np.ndarray]:
    """Procedure 1 written out slowly, child by child and parent by parent, in float64."""
    k, n, d = votes.shape
    b = np.zeros((n, k))
    out: dict[str, list] = {"coupling": [], "logits": [], "sums": [], "poses": [], "agreement": []}
    for _ in range(iterations):
        c = np.zeros((n, k))
        for i in range(n):
            e = [np.exp(b[i, j]) for j in range(k)]
            for j in range(k):
                c[i, j] = e[j] / sum(e)
        s, v, a = np.zeros((k, d)), np.zeros((k, d)), np.zeros((n, k))
        for j in range(k):
            for i in range(n):
                s[j] += c[i, j] * votes[j, i]
            norm2 = float(s[j] @ s[j])
            v[j] = norm2 / (1 + norm2) * s[j] / np.sqrt(norm2) if norm2 > 0 else 0.0
        for i in range(n):
            for j in range(k):
                a[i, j] = votes[j, i] @ v[j]
        out["coupling"].append(c), out["logits"].append(b.copy()), out["sums"].append(s)
        out["poses"].append(v), out["agreement"].append(a)
        b = b + a
    return {name: np.array(values) for name, values in out.items()}


# ---------------------------------------------------------------- the toy's routing


@pytest.mark.parametrize("preset", pg.PRESETS)
@pytest.mark.parametrize("iterations", [1, 3, 5])
def test_route_is_procedure_1(preset: str, iterations: int) -> None:
    votes = pg.preset_votes(preset)
    got = pg.route(votes, iterations)
    want = reference_routing(votes.astype(np.float64), iterations)
    assert got.iterations == iterations and got.coupling.shape == (iterations, pg.CHILDREN, pg.PARENTS)
    for name, expected in want.items():
        np.testing.assert_allclose(getattr(got, name), expected, atol=2e-5, err_msg=name)
    np.testing.assert_allclose(got.lengths, np.linalg.norm(want["poses"], axis=-1), atol=2e-5)
    np.testing.assert_allclose(got.coupling.sum(axis=-1), 1.0, atol=1e-6)  # each child splits one unit of weight
    np.testing.assert_allclose(got.coupling[0], 1.0 / pg.PARENTS, atol=1e-7)  # b = 0: uniform at first
    assert np.all(got.lengths < 1.0)


def test_the_agreeing_cluster_wins_its_parent() -> None:
    routing = pg.route(pg.preset_votes("agreeing cluster plus outliers"), 4)
    to_first = routing.coupling[:, :, 0]  # (r, N)
    assert np.all(np.diff(to_first[:, :8], axis=0) > 0)  # the eight agreeing children: more weight every iteration
    assert np.all(to_first[-1, :8] > 0.7) and np.all(to_first[-1, 8:] < 1 / 3)  # the outliers take theirs away
    assert routing.lengths[-1, 0] > 0.95 > 0.6 > routing.lengths[-1, 1:].max()  # parent 1 is the one present


def test_two_clusters_compete_and_the_larger_wins() -> None:
    routing = pg.route(pg.preset_votes("two competing clusters"), 3)
    to_first = routing.coupling[-1, :, 0]
    assert np.all(to_first[:7] > 0.55) and np.all(to_first[7:] < 0.2)
    assert np.all(routing.agreement[-1, :7, 0] > 0) and np.all(routing.agreement[-1, 7:, 0] < 0)


def test_without_agreement_the_couplings_stay_near_uniform() -> None:
    routing = pg.route(pg.preset_votes("no agreement"), 3)
    assert np.abs(routing.coupling - 1.0 / 3).max() < 0.1 and np.all(routing.lengths < 0.3)


def test_presets_are_seeded_and_checked() -> None:
    for name in pg.PRESETS:
        votes = pg.preset_votes(name)
        assert votes.shape == (pg.PARENTS, pg.CHILDREN, 2) and votes.dtype == np.float32
        np.testing.assert_array_equal(votes, pg.preset_votes(name))
        assert not np.array_equal(votes, pg.preset_votes(name, seed=1))
    with pytest.raises(ValueError, match="unknown preset"):
        pg.preset_votes("chaos")
    with pytest.raises(ValueError, match="iterations"):
        pg.route(pg.preset_votes("no agreement"), 0)


def test_moving_a_vote_away_from_the_cluster_loses_it_the_parent() -> None:
    votes = pg.preset_votes("agreeing cluster plus outliers")
    moved = pg.move_vote(votes, 0, 2, (-1.2, -0.6))
    assert not np.array_equal(votes, moved) and np.array_equal(votes[0, 3:], moved[0, 3:])
    np.testing.assert_allclose(moved[0, 2], [-1.2, -0.6])
    assert pg.route(votes, 3).coupling[-1, 2, 0] > 0.7 > 0.3 > pg.route(moved, 3).coupling[-1, 2, 0]
    np.testing.assert_allclose(pg.move_vote(votes, 1, 0, (9.0, -9.0))[1, 0], [pg.MAX_COORDINATE, -pg.MAX_COORDINATE])
    for parent, child, xy in ((3, 0, (0, 0)), (0, 12, (0, 0)), (0, 0, (float("nan"), 0))):
        with pytest.raises(ValueError):
            pg.move_vote(votes, parent, child, xy)


# ---------------------------------------------------------------- EM routing


@pytest.mark.parametrize("preset", pg.PRESETS)
def test_em_route_is_the_packages_em_routing(preset: str) -> None:
    votes = pg.preset_votes(preset)
    em = pg.em_route(votes, 3)
    assert em.assignments.shape == (3, pg.CHILDREN, pg.PARENTS) and em.means.shape == (3, pg.PARENTS, 2)
    np.testing.assert_allclose(em.assignments.sum(axis=-1), 1.0, atol=1e-5)  # each child's one unit of data
    np.testing.assert_allclose(em.assignments[0], 1 / pg.PARENTS, atol=1e-6)  # a uniform start
    v = torch.from_numpy(votes).view(1, 1, pg.PARENTS, pg.CHILDREN, 2)
    zeros = torch.zeros(pg.PARENTS)
    mean, act, _ = em_routing(v, torch.ones(1, 1, pg.CHILDREN), torch.arange(pg.CHILDREN).view(1, -1), pg.CHILDREN,
                              zeros, zeros, 3)  # fmt: skip
    np.testing.assert_allclose(em.means[-1], mean[0, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(em.activations[-1], act[0, 0].numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="iterations"):
        pg.em_route(votes, 0)


def test_the_presets_show_where_the_two_algorithms_differ() -> None:
    spread = pg.preset_votes("clusters of unequal spread")
    dyn, em = pg.route(spread, 3), pg.em_route(spread, 3)
    assert dyn.lengths[-1].argmax() == 1 and em.activations[-1].argmax() == 0  # the long sum against the tight one
    assert dyn.coupling[-1, :, 1].mean() > 0.7 and em.assignments[-1, :, 0].mean() > 0.8

    outlier = pg.preset_votes("a lone outlier")
    dyn, em = pg.route(outlier, 3), pg.em_route(outlier, 3)
    assert dyn.coupling[-1, 11, 0] > 0.9 and em.assignments[-1, 11, 0] < 0.05  # child 12's far, long vote

    shared = pg.preset_votes("two parents wanting one cluster")
    dyn, em = pg.route(shared, 3), pg.em_route(shared, 3)
    assert min(dyn.lengths[-1, :2]) > 0.9  # dynamic routing: both parents keep the cluster
    assert em.assignments[-1, :8, 0].mean() > 2 * em.assignments[-1, :8, 1].mean()  # EM: parent 1 takes it
    assert em.activations[-1, 0] > em.activations[-1, 1]


def test_the_comparison_says_what_the_charts_show() -> None:
    votes = pg.preset_votes("clusters of unequal spread")
    dyn, em = pg.route(votes, 3), pg.em_route(votes, 3)
    names = ["parent 1", "parent 2", "parent 3"]
    first = routing_texts.routing_comparison(dyn.coupling, dyn.lengths, em.assignments, em.activations, names, 1)
    assert "evenly, 1/3 = 0.33 to each parent" in first
    last = routing_texts.routing_comparison(dyn.coupling, dyn.lengths, em.assignments, em.activations, names, 3)
    assert "They disagree" in last and "**parent 2**'s (|v| = 0.99" in last and "**parent 1** (a = 0.68" in last
    outlier = pg.preset_votes("a lone outlier")
    dyn, em = pg.route(outlier, 3), pg.em_route(outlier, 3)
    text = routing_texts.routing_comparison(dyn.coupling, dyn.lengths, em.assignments, em.activations, names, 3)
    assert (
        "Both favour **parent 1**" in text
        and "child 12's for parent 1: c = 0.99 under dynamic routing, R = 0.00" in text
    )


def test_the_comparison_names_no_winner_within_its_tolerance_and_no_parent_where_none_is_present() -> None:
    """Three activations within 0.01 are a tie, not "EM's most active parent"; |v| = 0.16 is no
    parent present, not "Both favour"; two |v| within 0.05 tie; the general sentences are said once, apart."""
    names = ["parent 1", "parent 2", "parent 3"]

    def said(preset: str, step: int) -> str:
        votes = pg.preset_votes(preset)
        dyn, em = pg.route(votes, 3), pg.em_route(votes, 3)
        return routing_texts.routing_comparison(dyn.coupling, dyn.lengths, em.assignments, em.activations, names, step)

    tie = said("two competing clusters", 3)  # a = 0.520, 0.517, 0.511
    assert "EM makes no parent stand out: all 3 parents have a within 0.01 of each other (0.511 to 0.520)" in tie
    assert "EM's most active" not in tie and "disagree" not in tie and "Both favour" not in tie
    none = said("no agreement", 3)
    assert "no parent is present: no v_j reaches |v| = 0.5 (the longest, **parent 1**'s, is 0.16)" in none
    assert "favour" not in none and "longest v_j is" not in none
    shared = said("two parents wanting one cluster", 3)
    assert "**parent 1** and **parent 2** have |v| within 0.05 of each other (0.94 to 0.97)" in shared
    assert "EM's most active parent is **parent 1** (a = 0.59)" in shared
    for preset in pg.PRESETS:
        assert routing_texts.CONTRAST not in said(preset, 3) and "dot product" not in said(preset, 3)


# ---------------------------------------------------------------- points on the curves


def test_the_squash_length() -> None:
    assert pg.squash_length(0.0) == 0
    for s in (0.5, 1.0, 2.0, 3.0):  # |v| = |s|^2 / (1 + |s|^2)
        np.testing.assert_allclose(pg.squash_length(s), s * s / (1 + s * s), atol=1e-7)
    assert pg.squash_length(1e3) < 1.0
    with pytest.raises(ValueError):
        pg.squash_length(-1.0)


def test_the_margin_loss_at_a_point() -> None:
    config = CapsNetConfig()
    np.testing.assert_allclose(pg.margin_point(config, 0.0), (0.81, 0.0), atol=1e-9)  # (0.9 - 0)^2, 0 below m-
    np.testing.assert_allclose(pg.margin_point(config, 0.5), (0.16, 0.5 * 0.16), atol=1e-9)
    np.testing.assert_allclose(pg.margin_point(config, 1.0), (0.0, 0.5 * 0.81), atol=1e-9)
    np.testing.assert_allclose(pg.margin_point(config, 0.3), (0.36, 0.5 * 0.04), atol=1e-9)
    assert pg.margin_point(config, 0.95)[0] == 0 and pg.margin_point(config, 0.05)[1] == 0
    with pytest.raises(ValueError):
        pg.margin_point(config, 1.5)
    other = CapsNetConfig(m_plus=0.8, m_minus=0.2, down_weight=1.0)
    np.testing.assert_allclose([pg.margin_point(other, 0.0)[0], pg.margin_point(other, 1.0)[1]], 0.64)  # 0.8^2


# ---------------------------------------------------------------- the real model's votes


def test_the_real_plane_is_the_routing_pages_view(model) -> None:
    image = np.zeros((28, 28), np.float32)
    image[6:22, 12:16] = 1.0
    votes = explain(model, image, 3).votes
    plane = pg.real_plane(votes, 4)
    view = vote_view(votes, 4)
    n = model.config.num_primary
    assert plane.points.shape == (1, n, 2) and plane.coupling.shape == (3, n, 1) and plane.iterations == 3
    np.testing.assert_allclose(plane.points[0], view.points)
    np.testing.assert_allclose(plane.coupling[:, :, 0], votes.coupling[:, :, 4])
    np.testing.assert_allclose(plane.lengths[:, 0], votes.lengths[:, 4])
    np.testing.assert_allclose(plane.poses[:, 0], view.poses)
    np.testing.assert_allclose(pg.coupling_change(plane)[:, 0], votes.coupling[-1, :, 4] - 0.1, atol=1e-6)


def test_the_plane_figure_draws_the_weights() -> None:
    routing = pg.route(pg.preset_votes("agreeing cluster plus outliers"), 3)
    names, parents = ["a", "b", "c"], np.arange(pg.PARENTS)
    first, last = (
        figs.plane_figure(routing.votes, routing.coupling, routing.agreement, routing.sums, routing.poses, parents,
                          names, step)
        for step in (0, 2)
    )  # fmt: skip
    assert len(first.data) == len(last.data) == 3 + 3 + 1  # votes, v arrows, s
    assert np.ptp(first.data[0].marker.size) < 1e-4  # uniform couplings: one size
    sizes = np.asarray(last.data[0].marker.size)
    assert sizes[:8].min() > sizes[8:].max()  # the cluster's votes weigh most
    np.testing.assert_array_equal(np.asarray(last.data[1].customdata)[:, :2], [[i, 1] for i in range(12)])
    np.testing.assert_allclose(last.data[3].x, [0.0, routing.poses[2, 0, 0]], atol=1e-6)  # v_1's arrow, from 0
    s_mark = last.data[6]
    reach = last.layout.xaxis.range[1]
    assert np.all(np.hypot(s_mark.x, s_mark.y) < reach)  # a far sum is drawn at the edge...
    assert s_mark.text is None and "|s| = " in last.layout.title.text  # ...its length said in the title, over no vote


# ---------------------------------------------------------------- the page


def new_page() -> AppTest:
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    return at


def test_the_page_sends_the_toy_every_presets_votes(app_dirs) -> None:  # noqa: F811
    """The toy runs in the browser (tests/test_playground_knobs_browser.py): the page leads with it and sends every
    preset's votes at once, with their help, the iteration bound and the margin loss's constants; its explanations
    stay folded below it, and a rerun sends the same payload (the browser keeps where the hand left the toy)."""
    at = new_page()
    header, arrays = knobs_payload(at, "playground")
    assert header["presets"] == list(pg.PRESETS) and header["parents"] == ["parent 1", "parent 2", "parent 3"]
    np.testing.assert_array_equal(arrays["votes"], np.stack([pg.preset_votes(name) for name in pg.PRESETS]))
    assert arrays["votes"].dtype == np.float32
    assert "seven against five" in header["help"][pg.PRESETS.index("two competing clusters")]
    assert (header["r"], header["max_r"], header["bound"]) == (3, 5, pg.MAX_COORDINATE)
    assert (header["m_plus"], header["m_minus"], header["down_weight"]) == (0.9, 0.1, 0.5)
    assert header["lead"].startswith("Drag a vote") and header["contrast"] == routing_texts.CONTRAST
    assert not [c for c in at.get("plotly_chart") if not c.key.startswith("playground_real")]  # no toy chart here
    assert [e.label for e in at.expander][0].startswith("How the toy routes")
    assert any("No trained model" in w.value for w in at.warning)  # the real model's part says why it is missing
    at.run()
    assert knobs_payload(at, "playground")[0]["identity"] == header["identity"]
    assert not at.exception


def test_the_page_steps_through_the_real_models_votes(app_with_run) -> None:  # noqa: F811
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=120)
    image = np.zeros((28, 28), np.float32)
    image[5:23, 13:16] = 1.0  # a "1"
    at.run()
    at.session_state["input_image"] = image  # after the Draw page's first run, which sets its own
    at.switch_page(PAGE).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    real = chart(at, "playground_real_chart")
    config = CapsNetConfig.preset("tiny")
    assert (
        len(plotly_values(real["data"][0]["x"])) == config.num_primary
    )  # every primary capsule's vote for one capsule
    assert any("Iteration **1 of 3**" in m.value for m in at.markdown)
    first = plotly_values(real["data"][0]["marker"]["size"])
    at.button(key="playground_real_next").click().run()
    assert not at.exception
    second = plotly_values(chart(at, "playground_real_chart")["data"][0]["marker"]["size"])
    assert np.abs(second - first).max() > 0.1  # the weights of iteration 2
    assert sum("Iteration **2 of 3**" in m.value for m in at.markdown) == 1  # the toy stays on its own iteration
    at.selectbox(key="playground_real_parent").set_value(7).run()
    assert chart(at, "playground_real_chart")["data"][0]["name"] == "votes for capsule 7"
