"""The Routing playground's toy in a real browser, held to PyTorch's: both routings of every preset at r = 1..5 and of
moved votes (typed and dragged), the words beside them and the curves, within 1e-4.

The ES modules of dashboard/knobs/js are served as they are (a loopback HTTP server, as Streamlit serves them) with
the payload the page sends (`dashboard.knobs.playground.toy`); headless Chromium mounts the component's entry point
(`main.js`), the test works its controls, and what the view shows (`root.values` and the drawn text) is compared with
`capsnet.readings.playground`'s `route` and `em_route`, and with `dashboard.routing_texts`' words.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capsnet.nn.config import CapsNetConfig
from capsnet.readings import playground as pg
from dashboard import routing_texts
from dashboard.knobs import playground as toy_knobs

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
HELP = {name: f"What to look for in {name}." for name in pg.PRESETS}
LEAD = "Drag a vote and watch both routings."
NAMES = toy_knobs.names()
K, N = pg.PARENTS, pg.CHILDREN
PAGE = "<!doctype html><meta charset=utf-8><title>playground</title><div id=host><div class=knobs></div></div>"

# Mount the component as Streamlit does (main.js's default export, with the payload's bytes); every report back to
# the server is counted, so a test can say that the toy asked for no rerun.
MOUNT = """
async () => {
  const { default: knobs } = await import("./js/main.js");
  const bytes = new Uint8Array(await (await fetch("./toy.bin")).arrayBuffer());
  window.reports = [];
  window.mountToy = () => knobs({ data: bytes, parentElement: document.getElementById("host"),
                                  setStateValue: (name, value) => window.reports.push([name, value]) });
  await window.mountToy();
}
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the test's output is the comparison, not the requests
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The knobs' modules under js/ and the page's payload beside them, served on loopback: the URL."""
    root = tmp_path_factory.mktemp("playground-served")
    shutil.copytree(REPO / "dashboard" / "knobs" / "js", root / "js")
    (root / "index.html").write_text(PAGE)
    (root / "toy.bin").write_bytes(toy_knobs.toy(HELP, LEAD))
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Toy:
    """The mounted toy in one tab: its controls, and what it shows after each change has been drawn."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        page.goto(f"{url}/index.html")
        page.evaluate(MOUNT)
        self.root = page.locator(".knobs")
        self.root.locator('[data-role="dynamic-plane"]').wait_for()

    def role(self, name: str) -> Any:
        return self.root.locator(f'[data-role="{name}"]')

    def settled(self) -> int:
        return int(self.root.get_attribute("data-settled") or 0)

    def act(self, action: Callable[[], Any]) -> dict:
        """Do `action` and wait until the view has drawn what it changed: its values then."""
        before = self.settled()
        action()
        self.page.wait_for_function(f"Number(document.querySelector('.knobs').dataset.settled) > {before}")
        return self.values()

    def values(self) -> dict:
        return self.page.evaluate("document.querySelector('.knobs').values")

    def preset(self, p: int) -> dict:
        return self.act(lambda: self.role("preset").select_option(str(p)))

    def iterations(self, r: int) -> dict:
        return self.act(lambda: self.role("iterations").locator(f'button[data-index="{r - 1}"]').click())

    def next(self) -> dict:
        return self.act(lambda: self.role("next").click())

    def choose(self, parent: int, child: int) -> dict:
        self.act(lambda: self.role("parent").select_option(str(parent)))
        return self.act(lambda: self.role("child").select_option(str(child)))

    def type_vote(self, x: float, y: float) -> dict:
        """Say where the chosen vote points, in the x and y fields (each a change of its own)."""
        for axis, value in (("x", x), ("y", y)):
            field = self.role(axis)
            field.fill(str(value))
            self.act(lambda field=field: field.dispatch_event("change"))
        return self.values()


@pytest.fixture
def toy(page: Any, served: str) -> Toy:
    return Toy(page, served)


def close(browser_values: Any, torch_values: Any, what: str) -> float:
    """Assert the browser's numbers are PyTorch's within TOLERANCE; the largest difference."""
    got, want = np.asarray(browser_values, dtype=np.float64), np.asarray(torch_values, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    worst = float(np.abs(got - want).max())
    assert worst <= TOLERANCE, f"{what}: the browser is {worst:.2e} from PyTorch"
    return worst


def parents_first(x: np.ndarray) -> np.ndarray:
    """(r, N, K) -> (r, K*N), the browser's layout (parents first)."""
    return np.ascontiguousarray(x.transpose(0, 2, 1)).reshape(x.shape[0], -1)


def routed_as_pytorch(got: dict, votes: np.ndarray, r: int, what: str) -> float:
    """Every iteration of both routings the view computed for `votes` (K, N, 2) with r iterations, against
    `pg.route` and `pg.em_route`: the largest difference."""
    dynamic, em = pg.route(votes, r), pg.em_route(votes, r)
    assert len(got["dynamic"]) == len(got["em"]) == r, what
    d = {key: np.array([step[key] for step in got["dynamic"]]) for key in got["dynamic"][0]}
    e = {key: np.array([step[key] for step in got["em"]]) for key in got["em"][0]}
    return max(
        close(d["coupling"], parents_first(dynamic.coupling), f"{what}: c_ij"),
        close(d["lengths"], dynamic.lengths, f"{what}: |v_j|"),
        close(d["sums"], dynamic.sums.reshape(r, -1), f"{what}: s_j"),
        close(d["poses"], dynamic.poses.reshape(r, -1), f"{what}: v_j"),
        close(d["agreement"], parents_first(dynamic.agreement), f"{what}: u_hat . v_j"),
        close(e["assignments"], parents_first(em.assignments), f"{what}: R_ij"),
        close(e["activations"], em.activations, f"{what}: a_j"),
        close(e["means"], em.means.reshape(r, -1), f"{what}: mu_j"),
        close(e["stds"], em.stds.reshape(r, -1), f"{what}: sigma_j"),
        close(e["lambda"], em.inverse_temperatures, f"{what}: lambda"),
    )


NUMBER = re.compile(r"[-+]?\d+\.\d+")


def says(got: str, want: str) -> None:
    """The same words, and each number within one unit of its last digit shown (the browser rounds float64 sums,
    PyTorch float32 ones, so a number on a rounding edge may show its last digit apart)."""
    assert NUMBER.sub("#", got) == NUMBER.sub("#", want), f"\n{got}\n{want}"
    for a, b in zip(NUMBER.findall(got), NUMBER.findall(want)):
        decimals = len(b.split(".")[1])
        assert abs(float(a) - float(b)) <= 1.01 * 10.0**-decimals, f"{a} against {b} in\n{got}\n{want}"


def child_reading(routing: pg.Routing, step: int, child: int) -> str:
    """What a child sends under dynamic routing, in the page's words, from PyTorch's numbers."""
    c, a = routing.coupling[step - 1, child], routing.agreement[step - 1, child]
    shares = ", ".join(f"**{c[j]:.3f}** to {NAMES[j]}" for j in range(K))
    agree = ", ".join(f"{a[j]:+.2f}" for j in range(K))
    return f"Child {child + 1} sends {shares}. Its agreements û·v_j after this iteration: {agree}."


def em_reading(em: pg.EMRouting, step: int, child: int) -> str:
    """What a child gives under EM, and the Gaussians' spreads, in the page's words, from PyTorch's numbers."""
    r, std = em.assignments[step - 1, child], em.stds[step - 1]
    shares = ", ".join(f"**{r[j]:.3f}** to {NAMES[j]}" for j in range(K))
    spreads = ", ".join(f"σ = {std[j].mean():.2f}" for j in range(K))
    return (f"Under EM, child {child + 1} gives {shares}. The Gaussians this M-step fitted: {spreads} "
            f"(λ = {em.inverse_temperatures[step - 1]:.3f} in this iteration).")  # fmt: skip


def compared(votes: np.ndarray, r: int, step: int) -> str:
    dynamic, em = pg.route(votes, r), pg.em_route(votes, r)
    return routing_texts.routing_comparison(dynamic.coupling, dynamic.lengths, em.assignments, em.activations, NAMES,
                                            step)  # fmt: skip


# ---------------------------------------------------------------- the numbers


def test_every_preset_at_every_r_is_pytorchs(toy: Toy) -> None:
    """Each preset's votes come from the payload, and both routings of every r = 1..5 equal PyTorch's; stepping
    through r = 5 shows each iteration's comparison and readings as Python words them."""
    worst = 0.0
    for p, name in enumerate(pg.PRESETS):
        got = toy.preset(p)
        votes = pg.preset_votes(name)
        assert got["presetName"] == name and got["step"] == 1 and got["moved"] == 0
        np.testing.assert_array_equal(np.asarray(got["votes"], np.float32), votes.ravel())
        assert toy.role("help").inner_text() == HELP[name]
        for r in range(1, 6):
            got = toy.iterations(r)
            assert got["r"] == r
            worst = max(worst, routed_as_pytorch(got, votes, r, f"{name}, r = {r}"))
        for step in range(1, 6):
            if step > 1:
                got = toy.next()
            assert got["step"] == step and toy.role("step").inner_text() == f"iteration {step} of 5"
            says(got["comparison"], compared(votes, 5, step))
            says(got["childReading"], child_reading(pg.route(votes, 5), step, got["child"]))
            says(got["emReading"], em_reading(pg.em_route(votes, 5), step, got["child"]))
        assert toy.role("next").is_disabled() and not toy.role("prev").is_disabled()
        toy.iterations(3)  # the next preset opens at iteration 1 of 3
    assert worst <= TOLERANCE
    assert toy.page.evaluate("window.reports") == []  # nothing asked the server for a rerun


def test_what_the_view_draws_is_pytorchs(toy: Toy) -> None:
    """The numbers drawn, not only those kept: the readings' text, each bar's tip, the comparison paragraph and the
    step shown, at iteration 2 of 3 of "two competing clusters" for child 9's vote for parent 1."""
    p = pg.PRESETS.index("two competing clusters")
    toy.preset(p)
    toy.next()
    toy.choose(0, 8)
    votes = pg.preset_votes(pg.PRESETS[p])
    dynamic, em = pg.route(votes, 3), pg.em_route(votes, 3)
    assert toy.role("step").inner_text() == "iteration 2 of 3"
    says(toy.role("child-reading").inner_text(), child_reading(dynamic, 2, 8).replace("**", ""))
    says(toy.role("em-reading").inner_text(), em_reading(em, 2, 8).replace("**", ""))
    says(toy.role("comparison").inner_text(), compared(votes, 3, 2).replace("**", ""))
    for role, symbol, weights in (("dynamic-bars", "c", dynamic.coupling[1]), ("em-bars", "R", em.assignments[1])):
        tips = toy.role(role).locator("rect title").all_text_contents()
        want = [f"child {i + 1}: {symbol} to {NAMES[j]} = {weights[i, j]:.3f}" for i in range(N) for j in range(K)]
        assert len(tips) == len(want)
        for got_tip, want_tip in zip(tips, want):
            says(got_tip, want_tip)
    assert "child 9 ◀" in toy.role("dynamic-bars").inner_text()
    ninth = dynamic.coupling[1, 8, 0]
    assert ninth < 1 / 3  # the smaller cluster loses parent 1, as the help says


def test_a_typed_vote_routes_as_pytorch_and_reset_puts_it_back(toy: Toy) -> None:
    """Child 3's vote for parent 1, typed to the other side: both routings equal PyTorch's on `pg.move_vote`'s
    votes, child 3 loses parent 1 and no other child much; a coordinate past the bound is clipped; the reset
    brings the preset back and keeps the iteration shown."""
    votes = pg.preset_votes(pg.PRESETS[0])
    toy.next()
    toy.next()
    before = toy.choose(0, 2)
    assert (toy.role("x").input_value(), toy.role("y").input_value()) == tuple(f"{v:.2f}" for v in votes[0, 2])
    got = toy.type_vote(-1.2, -0.6)
    moved = pg.move_vote(votes, 0, 2, (-1.2, -0.6))
    np.testing.assert_array_equal(np.asarray(got["votes"], np.float32), moved.ravel())
    routed_as_pytorch(got, moved, 3, "a moved vote")
    c_before, c_after = np.array(before["dynamic"][2]["coupling"]), np.array(got["dynamic"][2]["coupling"])
    assert c_after[2] < c_before[2] - 0.3  # parent 1's row: child 3 left its cluster
    assert np.abs(np.delete(c_after, [2, N + 2, 2 * N + 2]) - np.delete(c_before, [2, N + 2, 2 * N + 2])).max() < 0.1
    assert got["moved"] == 1 and toy.role("moved").inner_text() == "1 vote moved from the preset."

    got = toy.type_vote(7.0, -0.6)  # past the bound: clipped to 3, as the server clips
    np.testing.assert_array_equal(np.asarray(got["votes"], np.float32), pg.move_vote(votes, 0, 2, (7.0, -0.6)).ravel())
    routed_as_pytorch(got, pg.move_vote(votes, 0, 2, (7.0, -0.6)), 3, "a vote at the bound")

    got = toy.act(lambda: toy.role("reset").click())
    np.testing.assert_array_equal(np.asarray(got["votes"], np.float32), votes.ravel())
    assert got["step"] == 3 and got["moved"] == 0 and toy.role("moved").inner_text() == "No vote moved yet."
    routed_as_pytorch(got, votes, 3, "the reset preset")


def test_a_dragged_vote_follows_the_pointer_and_routes_as_pytorch(toy: Toy) -> None:
    """Child 9's vote for parent 1, dragged in the EM plane: it is chosen, it ends under the pointer, no other vote
    moves, both routings of the votes the view shows equal PyTorch's, and nothing asked the server for a rerun."""
    toy.preset(pg.PRESETS.index("two competing clusters"))
    votes = pg.preset_votes("two competing clusters")
    dot = toy.role("em-plane").locator('[data-role="vote"][data-parent="0"][data-child="8"] circle').nth(1)
    dot.scroll_into_view_if_needed()
    box = dot.bounding_box()
    assert box is not None
    start = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    end = (start[0] + 60, start[1] - 40)
    toy.page.mouse.move(*start)
    toy.page.mouse.down()
    toy.page.mouse.move(*end, steps=6)
    ring = toy.role("em-plane").locator('[data-role="chosen"]').bounding_box()  # the ring round the chosen vote
    assert ring is not None  # under the pointer while it drags (the plane keeps its scale until the drop)
    assert abs(ring["x"] + ring["width"] / 2 - end[0]) < 2 and abs(ring["y"] + ring["height"] / 2 - end[1]) < 2
    toy.page.mouse.up()
    got = toy.values()
    assert (got["parent"], got["child"]) == (0, 8)
    shown = np.asarray(got["votes"], np.float32).reshape(K, N, 2)
    assert not np.array_equal(shown[0, 8], votes[0, 8])
    others = np.ones((K, N), bool)
    others[0, 8] = False
    np.testing.assert_array_equal(shown[others], votes[others])
    dx, dy = shown[0, 8] - votes[0, 8]
    assert dx > 0 and dy > 0  # right and up on the screen: x and y grow
    routed_as_pytorch(got, shown, 3, "a dragged vote")
    assert got["moved"] == 1 and toy.page.evaluate("window.reports") == []


def test_the_curves_are_pytorchs(toy: Toy) -> None:
    """|s| = 2 on the slider: |squash(s)| and the margin loss as `pg.squash_length` and `pg.margin_point` give them."""
    got = toy.act(lambda: toy.role("norm").fill("2"))
    length = pg.squash_length(2.0)
    close(got["squash"], length, "|squash(s)|")
    close(got["loss"], pg.margin_point(CapsNetConfig(), length), "the margin loss")
    text = toy.role("curve-reading").inner_text()
    assert "squashes to |v_j| = 0.800" in text and "cost 0.010" in text and "0.245 if absent" in text


def test_a_remount_of_the_same_payload_keeps_the_hand_s_work(toy: Toy) -> None:
    """A rerun that sends the same payload (the page's real-model part, another widget) keeps the preset, the
    iteration and the moved vote."""
    toy.preset(4)
    toy.next()
    toy.choose(2, 5)
    got = toy.type_vote(0.5, 0.25)
    toy.act(lambda: toy.page.evaluate("window.mountToy()"))
    kept = toy.values()
    assert (kept["preset"], kept["step"], kept["parent"], kept["child"]) == (4, 2, 2, 5)
    assert kept["votes"] == got["votes"] and kept["moved"] == 1
