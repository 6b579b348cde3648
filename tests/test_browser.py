"""End-to-end: the real app (`streamlit run`) in headless Chromium, driven with the mouse and the keyboard.

The app runs on a tiny model trained on real MNIST (the session's `tiny_checkpoint`),
shipped to it as `mnist.safetensors` in a temporary checkpoints folder; its runs go
to a temporary runs folder. Each test opens its own browser session. Full-page
screenshots of the pages go to $CAPSNET_SCREENSHOTS_DIR when it is set (`make screenshots` retakes the README's
in docs/), and are not taken otherwise.

Needs Chromium (Debian: `apt-get install chromium`): skipped without it, except in CI
(`CI` set), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from browser_support import (
    CURRENT,
    NARROW,
    PAGE_LOAD_MS,
    RERUN_MS,
    VIEWPORT,
    App,
    Screenshots,
    canvas_box,
    choose_option,
    click_until,
    draw_one,
    draw_zero,
    go_to,
    knob_values,
    knobs,
    overflowing_text,
    sidebar,
    streamlit_app,
    wait_idle,
    wait_rendered,
    watch_run_requests,
)
from dashboard_fixtures import ship_affine_pair

from capsnet.checkpoints.checkpoint import read_checkpoint_info

try:
    from playwright.sync_api import expect
except ImportError:  # pragma: no cover - the dev extra installs it (browser_fixtures says so)
    expect = None  # type: ignore[assignment]

pytestmark = pytest.mark.browser

TRAINING_S = 240  # the quick run started from the sidebar must finish within this


@pytest.fixture(scope="module")
def app(chromium: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The dashboard, served from a subprocess on a free port, with its own runs and checkpoints folders.

    It shows the tiny model trained for the tests, or $CAPSNET_SCREENSHOTS_CHECKPOINT (the README's
    screenshots show the shipped model: CAPSNET_SCREENSHOTS_CHECKPOINT=checkpoints/mnist.safetensors).
    """
    chosen = os.environ.get("CAPSNET_SCREENSHOTS_CHECKPOINT")
    checkpoint = Path(chosen).resolve() if chosen else request.getfixturevalue("tiny_checkpoint")
    folder = Path(__file__).resolve().parents[1] / "checkpoints"
    shipped = folder / "multimnist.safetensors"
    pairs = shipped if chosen and shipped.is_file() else request.getfixturevalue("tiny_multimnist")
    cnns = {d: folder / "baselines" / f"{d}-cnn.safetensors" for d in ("mnist", "multimnist")}
    if not (chosen and all(p.is_file() for p in cnns.values())):
        cnns = request.getfixturevalue("tiny_baselines")
    em = folder / "mnist-em.safetensors"
    em = em if chosen and em.is_file() else request.getfixturevalue("tiny_em")
    with streamlit_app(tmp_path_factory.mktemp("browser-app"), checkpoint, multimnist=pairs, baselines=cnns,
                       em=em) as running:  # fmt: skip
        yield running


def open_app(page, app: App, path: str = "/") -> None:
    page.goto(app.url + path)
    expect(page.get_by_test_id("stSidebarNav")).to_be_visible(timeout=PAGE_LOAD_MS)


def prediction(page):
    return page.get_by_test_id("stMetric").filter(has_text="Prediction").get_by_test_id("stMetricValue")


def draw_and_predict(page, draw=draw_one) -> str:
    """Draw on the Draw page's canvas (a first visit opens on test image #0: choose Draw first); the predicted class
    shown once the network has read it."""
    draw_radio = page.get_by_role("radio", name="Draw")
    if not draw_radio.is_checked():
        draw_radio.click()
        expect(page.get_by_text("Draw a digit on the canvas: the prediction appears here.")).to_be_visible(
            timeout=RERUN_MS
        )
    wait_idle(page)  # after a Clear the canvas is drawn anew: a stroke on the old one would be lost
    draw(page)
    value = prediction(page)
    expect(value).to_have_text(re.compile(r"^\s*\d\s*$"), timeout=RERUN_MS)
    return value.inner_text().strip()


# ---------------------------------------------------------------- Draw


def test_draw_a_digit_and_see_the_prediction(page, app: App, screenshots: Screenshots, tmp_path: Path) -> None:
    runs = watch_run_requests(page)
    open_app(page, app)
    # a first visit opens on test image #0, read at once; the canvas is one click away
    expect(page.get_by_text("input: test image #0")).to_be_visible(timeout=PAGE_LOAD_MS)
    expect(prediction(page)).to_have_text(re.compile(r"^\s*\d\s*$"), timeout=PAGE_LOAD_MS)
    page.get_by_role("radio", name="Draw").click()
    empty_notice = page.get_by_text("Draw a digit on the canvas: the prediction appears here.")
    expect(empty_notice).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    expect(page.get_by_test_id("stMetricValue")).to_have_count(0)  # an empty canvas predicts nothing

    one = draw_and_predict(page, draw_one)
    # a vertical bar is the easiest "1": the tiny model (about 90% on the test set) reads it right
    assert one == "1", f"a vertical stroke was read as {one}"
    expect(empty_notice).to_be_hidden()
    expect(page.get_by_text("input: your drawing")).to_be_visible()
    redraw = knobs(page, "dimensions")  # the input and its redraw from any capsule, in the browser
    expect(redraw.get_by_text("reconstruction from capsule 1 (the prediction)")).to_be_visible()
    expect(page.locator(".st-key-lengths_chart .main-svg").first).to_be_visible()
    images = page.get_by_test_id("stMain").get_by_test_id("stImage").locator("img")
    expect(images).to_have_count(1)  # the 28x28 preview
    wait_rendered(page)
    sizes = images.evaluate_all("imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert all(w == h and w >= 28 for w, h in sizes), sizes
    runs.start()
    redraw.locator('.segmented[aria-label="capsule to redraw"] button').nth(7).click()  # what if it were a 7?
    expect(redraw.get_by_text("reconstruction from capsule 7")).to_be_visible()
    assert knob_values(redraw)["capsule"] == 7
    page.wait_for_timeout(300)
    assert runs.count == 0, "another capsule's redraw ran the server"
    redraw.locator('.segmented[aria-label="capsule to redraw"] button').nth(1).click()
    screenshots.take(page, "draw.png")

    # the pen lifted once is one server run; Undo takes the stroke back (the canvas empty: nothing is read)
    runs.start()
    page.get_by_role("button", name="Undo").click()
    expect(empty_notice).to_be_visible(timeout=RERUN_MS)
    expect(page.get_by_test_id("stMetricValue")).to_have_count(0, timeout=RERUN_MS)
    wait_idle(page)
    assert runs.count == 1, runs.count
    assert canvas_box(page)["width"] == 280
    draw_one(page)
    expect(prediction(page)).to_have_text("1", timeout=RERUN_MS)
    page.get_by_role("button", name="Clear").click()
    expect(empty_notice).to_be_visible(timeout=RERUN_MS)
    expect(page.get_by_test_id("stMetricValue")).to_have_count(0, timeout=RERUN_MS)

    zero = draw_and_predict(page, draw_zero)
    print(f"vertical stroke read as {one}, loop read as {zero}")
    expect(redraw.get_by_text(f"reconstruction from capsule {zero} (the prediction)")).to_be_visible(timeout=RERUN_MS)
    expect(page.get_by_text("input: your drawing")).to_be_visible()
    expect(images).to_have_count(1)
    wait_rendered(page)

    # to Upload, an upload, and back: the drawing is still there, and still read
    page.get_by_role("radio", name="Upload").click()
    expect(page.get_by_text("Upload a PNG or JPEG image of a digit.")).to_be_visible(timeout=RERUN_MS)
    from PIL import Image

    upload = tmp_path / "one.png"
    paper = Image.new("L", (90, 120), 255)
    paper.paste(0, (40, 20, 50, 100))  # a dark 1 on white paper
    paper.save(upload)
    page.locator("[data-testid=stFileUploaderDropzoneInput]").set_input_files(str(upload))
    expect(page.get_by_text("input: upload one.png")).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    page.get_by_role("radio", name="Draw").click()
    expect(page.get_by_text("input: your drawing")).to_be_visible(timeout=RERUN_MS)
    expect(prediction(page)).to_have_text(zero, timeout=RERUN_MS)
    page.get_by_role("radio", name="Test image").click()
    page.get_by_role("radio", name="Draw").click()
    expect(prediction(page)).to_have_text(zero, timeout=RERUN_MS)


def test_offline_formula_and_upload_errors(page, app: App, tmp_path: Path) -> None:
    """Nothing is fetched from outside this machine; the margin formula fits its column; an upload's error goes."""
    from urllib.parse import urlparse

    outside: list[str] = []
    page.on(
        "request", lambda r: urlparse(r.url).hostname not in (None, "127.0.0.1", "localhost") and outside.append(r.url)
    )
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, app, "/?test=0")
    expect(prediction(page)).to_have_text(re.compile(r"^\s*\d\s*$"), timeout=RERUN_MS)
    expect(page.locator(".st-key-lengths_chart .main-svg").first).to_be_visible(timeout=RERUN_MS)
    # a first visit's answer (the prediction, the capsule lengths) is above the fold of a 1440x900 window
    for answer in (page.get_by_test_id("stMetric").first, page.locator(".st-key-lengths_chart")):
        box = answer.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, box
    page.set_viewport_size(VIEWPORT)
    wait_rendered(page)
    assert not outside, outside  # the icon, the fonts, the scripts: all served by the app itself
    assert page.evaluate(
        "() => [...document.querySelectorAll('link[rel*=icon]')].every(l => l.href.startsWith(location.origin))"
    )

    page.get_by_text(re.compile("What do the lines at")).click()
    formula = page.locator(".katex-display").last
    expect(formula).to_be_visible(timeout=RERUN_MS)
    # the formula sits in a box that scrolls what does not fit: nothing of it may be hidden there (KaTeX's own
    # rounding leaves up to 2 px), nor stick out of its column
    fits = formula.evaluate(
        """e => { const k = e.querySelector('.katex').getBoundingClientRect();
                  const column = e.closest('[data-testid=stMarkdown]').getBoundingClientRect();
                  return [e.scrollWidth - e.clientWidth, k.right - column.right, k.width]; }"""
    )
    assert fits[0] <= 2 and fits[1] <= 1, f"the margin-loss formula is cut off: {fits}"

    page.get_by_role("radio", name="Upload").click()
    chooser = page.locator("[data-testid=stFileUploaderDropzoneInput]")
    bad, good = tmp_path / "bad.png", tmp_path / "one.png"
    bad.write_bytes(b"not an image at all")
    from PIL import Image

    paper = Image.new("L", (90, 120), 255)
    paper.paste(0, (40, 20, 50, 100))  # a dark 1 on white paper
    paper.save(good)
    chooser.set_input_files(str(bad))
    error = page.get_by_text("bad.png is not a readable image")
    expect(error).to_be_visible(timeout=RERUN_MS)
    chooser.set_input_files(str(good))
    expect(page.get_by_text("input: upload one.png")).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    expect(error).to_have_count(0)  # the earlier upload's error does not stay
    # a phone's photo of a few megabytes is read like any other (the uploader's limit is no longer 2 MB)
    import numpy as np

    grain = np.random.default_rng(0).integers(100, 256, (2000, 1500), dtype=np.uint8)
    grain[400:1600, 700:820] = 0
    photo = tmp_path / "photo.png"
    Image.fromarray(grain).save(photo)
    assert photo.stat().st_size > 2_000_000
    chooser.set_input_files(str(photo))
    expect(page.get_by_text("input: upload photo.png")).to_be_visible(timeout=RERUN_MS)
    assert not outside, outside


def overlap(a: dict[str, float] | None, b: dict[str, float] | None) -> bool:
    assert a and b
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


# ---------------------------------------------------------------- Capsule dimensions


def test_moving_a_dimension_slider_redraws_in_the_browser_without_a_server_run(page, app: App, screenshots) -> None:
    """The knobs: a pose slider moved by the keyboard redraws at once in the browser, as the decoder does in
    PyTorch, and the server does not run; choosing another capsule reports it back (the link and Figure 4 follow)."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.readings.decoding import decode_vector

    runs = watch_run_requests(page)
    open_app(page, app)
    digit = draw_and_predict(page)
    go_to(page, "Capsule dimensions")
    root = knobs(page, "dimensions")
    expect(root).to_have_attribute("data-settled", re.compile(r"^\d+$"), timeout=RERUN_MS)
    expect(root.locator("input[type=range]")).to_have_count(16)
    expect(root.get_by_text("No dimension moved yet")).to_be_visible()
    expect(root.get_by_text(f"from capsule {digit}")).to_be_visible()
    wait_idle(page)
    runs.start()
    slider = root.locator('input[data-dim="0"]')
    before = float(slider.input_value())
    slider.focus()
    for _ in range(15):
        page.keyboard.press("ArrowRight")
    expect(root.get_by_text("1 of 16 dimensions moved.")).to_be_visible()
    assert float(slider.input_value()) > before
    shown = knob_values(root)
    model = load_checkpoint(app.checkpoints_dir / "mnist.safetensors").model.eval()
    expected = decode_vector(model, np.asarray(shown["pose"], dtype=np.float32), shown["capsule"]).ravel()
    assert np.abs(np.asarray(shown["reconstruction"]) - expected).max() <= 1e-4  # the decoder's redraw, in the browser
    page.wait_for_timeout(500)
    assert runs.count == 0, "a slider move ran the server"
    screenshots.take(page, "dimensions.png")

    other = (int(digit) + 1) % 10
    root.locator('.segmented[aria-label="capsule to edit"] button').nth(other).click()
    expect(root.get_by_text(f"from capsule {other}")).to_be_visible()  # the view at once, then the server
    expect(page.get_by_text(f"Each dimension of capsule {other}, perturbed")).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    assert f"capsule={other}" in page.url  # the link follows the capsule in focus
    assert knob_values(root)["capsule"] == other
    assert runs.count >= 1  # the capsule was reported back: the count sees the runs the page asks for


# ---------------------------------------------------------------- Routing


def iteration_shown(page) -> dict[str, str]:
    """What each routing chart says it draws: the vote plots' corner label, the per-type chart's two titles."""
    return {
        "votes_chosen": page.locator(f".st-key-votes_chosen{CURRENT} .scatterlayer .trace").nth(3).text_content(),
        "votes_other": page.locator(f".st-key-votes_other{CURRENT} .scatterlayer .trace").nth(3).text_content(),
        "by_type": " / ".join(
            page.locator(f".st-key-coupling_by_type{CURRENT} .annotation-text").all_text_contents()[:2]
        ),
    }


def expect_step(page, shown: str, timeout: float = RERUN_MS) -> None:
    """The page's one stepper shows `shown` (e.g. "iteration 2 of 3"). While a rerun is under way Streamlit may keep
    the last run's stepper beside the new one for a moment; once the run ends there must be exactly one."""
    steppers = page.locator(".st-key-routing_step")
    expect(steppers.filter(has_text=f"Showing {shown}")).to_have_count(1, timeout=timeout)
    expect(steppers).to_have_count(1, timeout=timeout)


def test_one_iteration_for_the_whole_routing_page(page, app: App, screenshots: Screenshots) -> None:
    """The page's stepper drives every chart: no chart has a Play of its own that would leave the
    others behind, and each chart names the iteration the header shows."""
    open_app(page, app)
    draw_and_predict(page)
    go_to(page, "Routing")
    expect_step(page, "iteration 3 of 3")  # the tiny model's r, the paper's 3
    wait_rendered(page)
    assert page.locator(".updatemenu-button").count() == 0 and page.locator("g.slider-group").count() == 0
    shown = iteration_shown(page)
    assert shown["votes_chosen"] == shown["votes_other"] == "iteration 3 of 3", shown
    assert shown["by_type"].count("iteration 3 of 3") == 2, shown
    bars = page.locator(f".st-key-coupling_by_type{CURRENT} text.bartext").all_text_contents()
    screenshots.take(page, "routing.png")  # the last iteration: routing done
    for t in (2, 1):
        shown_t = f"iteration {t} of 3"
        click_until(page, page.get_by_role("button", name="◀ Previous"), lambda ms, s=shown_t: expect_step(page, s, ms))
        expect_step(page, shown_t)
        wait_rendered(page)
        shown = iteration_shown(page)
        assert shown["votes_chosen"] == shown["votes_other"] == f"iteration {t} of 3", shown
        assert shown["by_type"].count(f"iteration {t} of 3") == 2, shown
    assert page.locator(f".st-key-coupling_by_type{CURRENT} text.bartext").all_text_contents() != bars  # routing moved
    expect(page.get_by_role("button", name="◀ Previous")).to_be_disabled()

    root = knobs(page, "routing")
    root.locator('.segmented[aria-label="routing iterations"] button').nth(4).click()  # r = 5
    expect(page.get_by_role("heading", name="Every vote, at r = 5")).to_be_visible(timeout=RERUN_MS)
    expect_step(page, "iteration 5 of 5")  # a new r opens on its last
    wait_rendered(page)
    assert iteration_shown(page)["votes_chosen"] == "iteration 5 of 5"
    assert knob_values(root)["r"] == 5 and "iterations=5" in page.url


def test_no_text_overflows_its_box_at_1100_px(page, app: App) -> None:
    """At 1,100 px (a laptop window) no title, label, button, formula or table is cut, and no chart text overprints
    another: Start here, Draw, Routing (every view open), Evaluate and the Architecture's stages."""
    page.set_viewport_size(NARROW)
    for path in ("/start", "/?test=3", "/routing?test=3", "/evaluate", "/architecture?test=3"):
        open_app(page, app, path)
        expect(page.get_by_test_id("stMain").locator("h1").first).to_be_visible(timeout=PAGE_LOAD_MS)
        if path.startswith("/routing"):
            page.get_by_text("Every primary capsule's coupling to the capsule looked at").click()
            expect(page.locator(f".st-key-coupling_maps{CURRENT}")).to_be_visible(timeout=RERUN_MS)
        if path == "/evaluate":
            expect(page.get_by_test_id("stDataFrame")).to_be_visible(timeout=PAGE_LOAD_MS)
        wait_rendered(page, timeout_ms=PAGE_LOAD_MS)
        assert overflowing_text(page) == [], path
    for stage in ("Input", "Conv1", "Votes", "DigitCaps", "Decoder"):  # the page opens on PrimaryCaps
        page.locator(f".st-key-arch_stage{CURRENT}").get_by_text(stage, exact=True).click()
        expect(page.get_by_test_id("stMain").get_by_role("heading", name=stage, exact=True)).to_be_visible(
            timeout=RERUN_MS
        )
        wait_rendered(page)
        assert overflowing_text(page) == [], stage


def test_a_link_to_no_page_says_so(page, app: App) -> None:
    """/no-such-page shows the Draw page with a notice, not silently."""
    open_app(page, app, "/no-such-page")
    expect(page.get_by_text("The link's page no-such-page does not exist here")).to_be_visible(timeout=PAGE_LOAD_MS)
    open_app(page, app, "/routing?test=3")
    expect(page.get_by_text(re.compile(r"Input: test image #3"))).to_be_visible(timeout=PAGE_LOAD_MS)
    assert page.get_by_text("does not exist here").count() == 0  # a real page: no notice
    # a link's values are text: no live link of the link's making, no outside image fetched on opening
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    open_app(
        page, app, "/?checkpoint=%5Bsign%20in%5D(http://evil.example/login)&test=!%5B%5D(http://127.0.0.1:9/t.png)"
    )
    expect(page.get_by_text("is not on this server")).to_be_visible(timeout=PAGE_LOAD_MS)
    wait_idle(page)
    assert page.locator("a[href*='evil.example']").count() == 0 and page.locator("img[src*='127.0.0.1:9']").count() == 0
    hosts = {urlparse(url).netloc for url in fetched}
    assert not hosts & {"127.0.0.1:9", "evil.example"}, hosts


def test_a_shared_link_opens_the_view_and_the_votes_step(page, app: App) -> None:
    open_app(page, app, "/routing?checkpoint=mnist&test=3&iterations=2")
    expect_step(page, "iteration 2 of 2", timeout=PAGE_LOAD_MS)  # the buttons, and what they set
    expect(page.locator(".st-key-routing_step")).to_contain_text("step every chart below")
    expect(page.get_by_text(re.compile(r"Input: test image #3"))).to_be_visible()
    assert knob_values(knobs(page, "routing"))["r"] == 2
    wait_rendered(page)
    assert "test=3" in page.url and "iterations=2" in page.url and "checkpoint=mnist" in page.url  # still shareable

    votes = page.locator(f".st-key-votes_chosen{CURRENT}")
    points = votes.locator(".scatterlayer .trace").first.locator(".point")
    config, _ = read_checkpoint_info(app.checkpoints_dir / "mnist.safetensors")
    expect(points).to_have_count(config.num_primary)  # every primary capsule casts a vote
    sizes = points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))")
    label = votes.locator(".scatterlayer .trace").nth(3).locator("text")  # the chart names the iteration it shows
    expect(label).to_have_text("iteration 2 of 2")
    previous = page.get_by_role("button", name="◀ Previous")
    click_until(page, previous, lambda ms: expect_step(page, "iteration 1 of 2", ms))
    wait_rendered(page)
    expect(label).to_have_text("iteration 1 of 2")
    assert points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))") != sizes  # the weights of iteration 1
    expect(page.get_by_role("button", name="◀ Previous")).to_be_disabled()
    expect(page.locator(f".st-key-votes_other{CURRENT} .scatterlayer .trace").nth(3)).to_have_text("iteration 1 of 2")


def test_the_routing_knobs_step_and_switch_couplings_in_the_browser(page, app: App, data_dir: Path) -> None:
    """The knobs: stepping the iterations and switching the coupling rule recompute in the browser, with
    PyTorch's numbers (the model read at that r, and the server's uniform and random couplings), and no server run."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.datasets import as_tensors, load_dataset
    from capsnet.readings import coupling_rules as cr
    from capsnet.readings.reading import read

    runs = watch_run_requests(page)
    open_app(page, app, "/routing?checkpoint=mnist&test=3&iterations=3")
    root = knobs(page, "routing")
    expect(root.locator("[data-role=step]")).to_have_text("iteration 3 of 3", timeout=PAGE_LOAD_MS)
    wait_idle(page)
    runs.start()
    model = load_checkpoint(app.checkpoints_dir / "mnist.safetensors").model.eval()
    image = as_tensors(load_dataset("mnist", train=False))[0][3, 0].numpy()

    def shown_close_to(expected: np.ndarray) -> None:
        assert np.abs(np.asarray(knob_values(root)["scores"]) - expected).max() <= 1e-4

    shown_close_to(read(model, image, 3).scores)
    root.get_by_role("button", name="previous iteration").click()
    expect(root.locator("[data-role=step]")).to_have_text("iteration 2 of 3")
    shown_close_to(read(model, image, 2).scores)  # iteration 2 of routing 3 times: routing twice
    rules = root.locator('.segmented[aria-label="couplings"] button')
    rules.filter(has_text="uniform").click()
    expect(root.locator("[data-role=summary]")).to_contain_text("uniform couplings")
    expected = cr.read_input(model, image, 3, draws=2)
    shown_close_to(expected.uniform)
    rules.filter(has_text="random").click()
    expect(root.locator("[data-role=summary]")).to_contain_text("random couplings, draw 1")
    shown_close_to(expected.random[0])
    root.get_by_role("spinbutton", name="random draw").fill("2")
    expect(root.locator("[data-role=summary]")).to_contain_text("random couplings, draw 2")
    shown_close_to(expected.random[1])
    root.get_by_text("Does routing matter for this input?").click()  # every rule at once, as the server reads them
    expect(root.locator("[data-role=experiment] table tr")).to_have_count(4)
    experiment = root.evaluate("el => el.experiment")
    every = cr.read_input(model, image, 3)  # 20 random draws
    for rule in ("uniform", "routed", "random"):
        assert np.abs(np.asarray(experiment[rule]) - getattr(every, rule)).max() <= 1e-4, rule
    assert abs(experiment["randomEntropy"] - every.entropy[2]) <= 1e-4
    page.wait_for_timeout(500)
    assert runs.count == 0, "a step, a coupling rule or the experiment ran the server"


def test_a_click_on_a_vote_selects_its_primary_capsule_in_every_view(page, app: App) -> None:
    """The linked views in the real app: clicking a vote in a vote plot selects that primary capsule: the picker
    names it, both plots ring its vote, and the input outlines its receptive field."""
    open_app(page, app, "/routing?checkpoint=mnist&test=3")
    votes = page.locator(f".st-key-votes_other{CURRENT}")
    points = votes.locator(".scatterlayer .trace").first.locator(".point")
    config, _ = read_checkpoint_info(app.checkpoints_dir / "mnist.safetensors")
    expect(points).to_have_count(config.num_primary, timeout=PAGE_LOAD_MS)
    wait_rendered(page)
    expect(page.locator(f".st-key-vote_overlay{CURRENT} .shapelayer path")).to_have_count(
        1
    )  # a capsule is selected at first
    votes.scroll_into_view_if_needed()  # a click lands only on what the window shows
    boxes = points.evaluate_all(
        "ps => ps.map(p => { const b = p.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; })"
    )
    index = max(range(len(boxes)), key=lambda i: boxes[i][0])  # the rightmost vote: nothing lies over it
    g = config.primary_grid
    kind, cell = divmod(index, g * g)
    picker = [page.locator(f".st-key-{key}").get_by_role("spinbutton") for key in ("primary_type", "primary_row",
                                                                                  "primary_col")]  # fmt: skip
    before = [p.input_value() for p in picker]
    page.mouse.click(*boxes[index])
    expected = [str(kind + 1), *map(str, divmod(cell, g))]
    assert expected != before, "choose a point other than the first selection"
    for field, value in zip(picker, expected):
        expect(field).to_have_value(value, timeout=RERUN_MS)
    wait_rendered(page)
    ring = page.locator(f".st-key-votes_chosen{CURRENT} .scatterlayer .trace").last.locator(".point")
    expect(ring).to_have_count(1)
    title = page.locator(f".st-key-primary_coupling{CURRENT} .gtitle")
    expect(title).to_contain_text(f"type {kind + 1} at ({cell // g}, {cell % g})")


# ---------------------------------------------------------------- Transform lens


def test_turning_the_input_in_the_transform_lens(page, app: App, screenshots: Screenshots) -> None:
    ship_affine_pair(app.checkpoints_dir, capsnet=0.62, cnn=0.7)  # the pair the affine claim's verdict reads
    shipped = Path(__file__).resolve().parents[1] / "checkpoints"
    if os.environ.get("CAPSNET_SCREENSHOTS_CHECKPOINT") and (shipped / "mnist-40.safetensors").is_file():
        for model in (Path("mnist-40.safetensors"), Path("baselines/mnist-40-cnn.safetensors")):  # the real pair
            for path in (model, model.with_suffix(".metrics.jsonl")):
                shutil.copy(shipped / path, app.checkpoints_dir / path)
    open_app(page, app, "/transform?test=1")
    transformed = (
        page.get_by_test_id("stMain")
        .locator("[data-testid=stImage]")
        .filter(has_text="transformed")
        .locator("img")
        .nth(1)
    )  # original, transformed, redrawn
    expect(transformed).to_be_visible(timeout=PAGE_LOAD_MS)
    wait_rendered(page)
    before = page.request.get(transformed.get_attribute("src")).body()
    slider = page.locator(".st-key-lens_rotation").get_by_role("slider")
    slider.focus()
    for _ in range(20):
        page.keyboard.press("ArrowRight")
    expect(page.locator(".st-key-lens_rotation")).to_contain_text("+20°", timeout=RERUN_MS)
    wait_rendered(page)
    after = page.request.get(transformed.get_attribute("src")).body()
    assert after[:8] == b"\x89PNG\r\n\x1a\n" and after != before  # the input turned
    sweep = page.locator(".st-key-lens_sweep .js-plotly-plot")
    assert sweep.evaluate("p => p.layout.shapes[0].x0") == 20  # the sweep marks the current angle
    # bursts of presses, one way then the other: the page ends on the slider's angle every time
    thumb = page.locator(".st-key-lens_rotation [data-testid=stSliderThumbValue]")
    for presses, key in ((12, "ArrowLeft"), (17, "ArrowRight"), (9, "ArrowLeft")):
        slider.focus()
        for _ in range(presses):
            page.keyboard.press(key)
        wait_rendered(page)
        shown = float(thumb.inner_text().replace("°", ""))
        page.wait_for_function(
            "a => document.querySelector('.st-key-lens_sweep .js-plotly-plot').layout.shapes[0].x0 === a",
            arg=shown, timeout=RERUN_MS,
        )  # fmt: skip
    assert shown == 16  # 20 - 12 + 17 - 9
    cnn = page.get_by_test_id("stMetric").filter(has_text="CNN baseline on the transformed input")
    expect(cnn.get_by_test_id("stMetricValue")).to_have_text(re.compile(r"^\s*\d\s*$"))  # the CNN's answer beside
    page.locator(".st-key-lens_robustness label").click()  # measure both networks as the test set turns and scales
    rotation = page.locator(".st-key-lens_robustness_rotation .js-plotly-plot")
    expect(rotation).to_be_visible(timeout=300_000)
    assert rotation.evaluate("p => p.data.map(t => t.name)") == ["CapsNet", "CNN"]
    assert rotation.evaluate("p => p.layout.shapes[0].x0") == 16  # the current angle, marked
    # the verdict on the affine claim, from the 40x40 pair: said plainly, with its curve
    verdict = re.compile(
        r"^Here (the (CNN baseline|CapsNet)|neither network) is ahead, with the same budget of [\d,]+ training examples each"
    )
    expect(page.get_by_text(verdict)).to_be_visible(timeout=RERUN_MS)
    claim = page.locator(".st-key-lens_claim .js-plotly-plot")
    expect(claim).to_be_visible()
    assert claim.evaluate("p => p.data.map(t => t.name)")[:4] == [
        "CapsNet here",
        "CNN baseline here",
        "CapsNet, the kept file",
        "CNN baseline, the kept file",
    ]  # then the paper's figures, dashed
    assert claim.evaluate("p => p.layout.yaxis.type") == "log"
    wait_rendered(page)
    screenshots.take(page, "transform.png")


# ---------------------------------------------------------------- Overlapping digits


def test_overlapping_digits_from_a_link(page, app: App, screenshots: Screenshots) -> None:
    open_app(page, app, "/overlap?checkpoint=multimnist")
    answer = page.get_by_test_id("stMetric").filter(has_text="CapsNet: the two longest capsules")
    expect(answer).to_be_visible(timeout=PAGE_LOAD_MS)
    cnn = page.get_by_test_id("stMetric").filter(has_text="CNN baseline: the two highest scores")
    expect(cnn.get_by_test_id("stMetricValue")).to_have_text(re.compile(r"^\s*\d and \d\s*$"))
    expect(page.get_by_text("True digits:")).to_be_visible()
    # the verdict on the paper's claim: which network is ahead here, after how many pairs each
    expect(
        page.get_by_text(re.compile(r"^Here (the (CNN baseline|CapsNet)|neither network) is ahead, with"))
    ).to_be_visible()
    claim = page.locator(".st-key-overlap_claim .js-plotly-plot")
    expect(claim).to_be_visible()
    assert claim.evaluate("p => p.data.map(t => t.name)")[:4] == [
        "CapsNet here",
        "CNN baseline here",
        "CapsNet, the kept file",
        "CNN baseline, the kept file",
    ]  # then the paper's figures, dashed
    assert claim.evaluate("p => p.layout.yaxis.type") == "log"
    table = page.get_by_test_id("stTable")  # a column per network: the whole table in view, no sideways scroll
    assert table.evaluate("t => t.scrollWidth <= t.clientWidth + 1"), table.evaluate(
        "t => [t.scrollWidth, t.clientWidth]"
    )
    pictures = page.get_by_test_id("stMain").locator("[data-testid=stImage] img")
    boxes = [pictures.nth(n).bounding_box() for n in range(pictures.count())]
    assert len(boxes) == 4 and not any(overlap(a, b) for n, a in enumerate(boxes) for b in boxes[n + 1 :]), boxes
    segmented = page.get_by_test_id("stMain").locator("[data-testid=stImage]").filter(has_text="red: from capsule")
    expect(segmented.locator("img")).to_be_visible()
    wait_rendered(page)
    before = page.request.get(segmented.locator("img").get_attribute("src")).body()
    page.get_by_role("button", name="Random pair").click()
    wait_idle(page)
    wait_rendered(page)
    after = page.request.get(segmented.locator("img").get_attribute("src")).body()
    assert after[:8] == b"\x89PNG\r\n\x1a\n" and after != before  # another pair, redrawn in red and green
    screenshots.take(page, "overlap.png")
    shift_keys = ("first_dy", "first_dx", "second_dy", "second_dx")

    def shifts() -> list[int]:
        return [int(page.locator(f".st-key-overlap_{k}").get_by_role("slider").input_value()) for k in shift_keys]

    def digits() -> list[str]:
        return [page.locator(f".st-key-overlap_{k}").locator("input").input_value() for k in ("first", "second")]

    kept_shifts, kept_digits = shifts(), digits()

    # or draw the two digits on the canvas in turn
    page.locator(".st-key-overlap_source").get_by_text("Draw two", exact=True).click()
    use_first = page.get_by_role("button", name="Use as the first digit")
    expect(use_first).to_be_disabled(timeout=RERUN_MS)
    draw_one(page)
    expect(use_first).to_be_enabled(timeout=RERUN_MS)
    use_first.click()
    expect(page.get_by_text("the first digit", exact=True)).to_be_visible(timeout=RERUN_MS)
    # the canvas is given back empty for the second digit
    expect(page.get_by_test_id("stMain").get_by_role("button", name="Undo")).to_be_disabled(timeout=RERUN_MS)
    wait_idle(page)
    draw_zero(page)
    use_second = page.get_by_role("button", name="Use as the second digit")
    expect(use_second).to_be_enabled(timeout=RERUN_MS)
    use_second.click()
    answer = page.get_by_test_id("stMetric").filter(has_text="CapsNet: the two longest capsules")
    expect(answer.get_by_test_id("stMetricValue")).to_have_text(re.compile(r"^\s*\d and \d\s*$"), timeout=RERUN_MS)
    expect(page.get_by_text("True digits:")).to_have_count(0)  # drawings have no known classes
    drawn = page.get_by_test_id("stMain").locator("[data-testid=stImage]").filter(has_text="red: from capsule")
    expect(drawn.locator("img")).to_be_visible()
    assert shifts() == kept_shifts  # the drawings take the shifts the test pair had

    # and back to the test digits: the pair, its shifts and its reading as they were
    page.locator(".st-key-overlap_source").get_by_text("Test digits", exact=True).click()
    expect(page.get_by_text("True digits:")).to_be_visible(timeout=RERUN_MS)
    wait_idle(page)
    assert shifts() == kept_shifts and digits() == kept_digits


# ---------------------------------------------------------------- Training from the sidebar


def no_runs(app: App) -> None:
    """Empty the app's runs folder: a rerun of a test that failed after its Start finds that attempt's run there
    (stopped first if it is still training), and would never see "No training runs yet"."""
    import time

    from capsnet.runs import processes

    processes.cancel_run(app.runs_dir)
    deadline = time.monotonic() + 60
    while processes.active_run(app.runs_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    shutil.rmtree(app.runs_dir)
    app.runs_dir.mkdir()


def test_train_from_the_sidebar_and_pick_the_new_model(page, app: App, screenshots: Screenshots) -> None:
    no_runs(app)  # the first test to train here: empty already, unless this is its rerun
    open_app(page, app, "/training")
    bar = sidebar(page)
    expect(page.get_by_text("No training runs yet")).to_be_visible(timeout=PAGE_LOAD_MS)
    wait_idle(page)  # the first script run (which loads the model) is over: no rerun replaces the form mid-click
    bar.get_by_text("Train a model").click()
    preset = bar.locator(".st-key-train_preset").get_by_role("combobox")
    expect(preset).to_be_visible()
    choose_option(page, preset, re.compile(r"^Tiny CapsNet \("))
    expect(preset).to_have_value(re.compile("Tiny CapsNet"))
    # 60 batches an epoch: the progress shows for about 4 s on an idle core (15 batches left it under 1 s, which a
    # one-second refresh could miss)
    for key, value in (("train_epochs", "2"), ("train_batch", "20"), ("train_size", "1200"), ("test_size", "200")):
        field = bar.locator(f".st-key-{key} input")
        field.fill(value)
        field.press("Tab")
        expect(field).to_have_value(value)

    # Enter in a number field of the form starts nothing (it once started a run with the rest of
    # the form at its defaults)
    epochs = bar.locator(".st-key-train_epochs input")
    epochs.focus()
    epochs.press("Enter")
    wait_idle(page)
    expect(bar.get_by_text(re.compile(r"Started \S+ \(pid"))).to_have_count(0)
    assert not app.runs_dir.exists() or not any(app.runs_dir.iterdir()), "Enter started a run"
    expect(epochs).to_have_value("2")

    bar.get_by_role("button", name="Start training").click()
    started = bar.get_by_text(re.compile(r"Started \S+ \(pid \d+\)\."))
    expect(started).to_be_visible(timeout=RERUN_MS)
    name = re.search(r"Started (\S+) \(pid", started.inner_text()).group(1)  # type: ignore[union-attr]
    assert re.fullmatch(r"\d{8}-\d{6}-mnist(-\d+)?", name), name

    # live progress in the sidebar: the progress bar, then epoch and batch
    expect(bar.get_by_test_id("stProgress")).to_be_visible(timeout=RERUN_MS)
    expect(bar.get_by_text(re.compile(r"Epoch [12]/2 · batch \d+/60"))).to_be_visible(timeout=TRAINING_S * 1000)
    finished = bar.get_by_text(re.compile(rf"{name} finished\. Test accuracy \d+\.\d\d%\."))
    expect(finished).to_be_visible(timeout=TRAINING_S * 1000)
    accuracy = re.search(r"Test accuracy (\d+\.\d\d)%", finished.inner_text()).group(1)  # type: ignore[union-attr]
    expect(bar.get_by_test_id("stProgress")).to_have_count(0, timeout=RERUN_MS)

    # the run is on the Training runs page, with its curves
    # during a rerun Streamlit keeps a stale copy of an element beside the new one: look at live ones only
    live = CURRENT  # not the last run's copy of a chart a fragment is redrawing
    expect(page.locator(f".st-key-compare_runs{live}")).to_contain_text(name, timeout=RERUN_MS)
    expect(page.locator(f".st-key-training_curves{live} .main-svg").first).to_be_visible(timeout=RERUN_MS)
    expect(page.locator(f".st-key-training_curves{live}")).to_contain_text(name, timeout=RERUN_MS)

    # and its model is in the checkpoint picker
    picker = bar.locator(".st-key-checkpoint_picker").get_by_role("combobox")
    listed = choose_option(page, picker, re.compile(rf"run {re.escape(name)}, 2 epochs"))
    assert any(text.endswith("· shipped") for text in listed), listed  # short enough for the sidebar's box
    expect(picker).to_have_value(re.compile(rf"{accuracy}% · run {re.escape(name)}"), timeout=RERUN_MS)
    expect(bar.get_by_text(f"test accuracy {accuracy}% · 2 epochs")).to_be_visible(timeout=RERUN_MS)
    screenshots.take(page, "training.png")


FAKE_TRAINER = """
import json, os, sys, time
run, epochs = sys.argv[1], int(sys.argv[2])

def write(name, data):
    with open(os.path.join(run, name + ".tmp"), "w") as handle:
        json.dump(data, handle)
    os.replace(os.path.join(run, name + ".tmp"), os.path.join(run, name))

os.makedirs(run)
write("args.json", {"dataset": "mnist", "preset": "tiny", "epochs": epochs})
progress = {"status": "running", "pid": os.getpid(), "dataset": "mnist", "epochs": epochs, "batches": 10,
            "started": time.time()}
for epoch in range(1, epochs + 1):
    write("progress.json", dict(progress, epoch=epoch, batch=5))
    time.sleep(2)
    with open(os.path.join(run, "metrics.jsonl"), "a") as handle:
        handle.write(json.dumps({"epoch": epoch, "train_loss": 1 / epoch, "train_accuracy": 0.5 + epoch / 20,
                                 "test_loss": 1 / epoch, "test_accuracy": 0.5 + epoch / 10}) + "\\n")
write("progress.json", dict(progress, status="finished", epoch=epochs, batch=10))
"""


def test_a_run_started_elsewhere_is_followed_live_on_the_training_page(page, app: App, tmp_path: Path) -> None:
    """Opened before the run exists, the page lists it, adds it to the comparison and draws its epochs by itself."""
    import subprocess
    import sys

    open_app(page, app, "/training")
    wait_idle(page)
    name = "20300101-000000-mnist"
    script = (
        tmp_path / "capsnet.training.trainer-stand-in.py"
    )  # its command line names capsnet.training.trainer, as a trainer's does
    script.write_text(FAKE_TRAINER)
    trainer = subprocess.Popen([sys.executable, str(script), str(app.runs_dir / name), "3"])
    try:
        live = CURRENT  # not the last run's copy of a chart a fragment is redrawing
        expect(page.locator(f".st-key-compare_runs{live}")).to_contain_text(name, timeout=30_000)
        curves = page.locator(f".st-key-training_curves{live}")
        expect(curves).to_contain_text(name, timeout=30_000)  # its first epoch, drawn without a click
        assert trainer.wait(timeout=60) == 0
        # the last epoch too: the page followed the run to its end on its own
        epochs_drawn = f"""() => Math.max(0, ...[...document.querySelectorAll('.st-key-training_curves{live} .js-plotly-plot')]
            .flatMap(plot => plot.data.filter(t => t.legendgroup === '{name}').map(t => t.x.length)))"""
        page.wait_for_function(f"() => ({epochs_drawn})() === 3", timeout=30_000, polling=250)
    finally:
        trainer.kill()


# ---------------------------------------------------------------- Evaluate


def test_evaluate_the_model_on_the_test_set(page, app: App, screenshots: Screenshots) -> None:
    open_app(page, app, "/evaluate")
    metric = page.get_by_test_id("stMetric").filter(has_text="Test accuracy").get_by_test_id("stMetricValue")
    expect(metric).to_have_text(re.compile(r"^\d{1,3}\.\d\d%$"), timeout=PAGE_LOAD_MS)
    assert float(metric.inner_text().rstrip("%")) > 50  # a trained model, not chance
    expect(page.get_by_text("Mistakes (of 1,000)")).to_be_visible()  # the quick default
    first_1000 = page.locator(".st-key-eval_size").get_by_role("radio", name=re.compile("first 1,000"))
    expect(first_1000).to_be_checked()
    expect(page.locator(".st-key-confusion .main-svg").first).to_be_visible(timeout=RERUN_MS)
    expect(page.get_by_text(re.compile(r"^Predicted: "))).to_be_visible(timeout=RERUN_MS)
    screenshots.take(page, "evaluate.png")

    everything = page.locator(".st-key-eval_size").get_by_role("radio", name=re.compile("all 10,000"))
    expect(everything).to_contain_text("takes a while on a CPU")
    everything.click()
    expect(everything).to_be_checked(timeout=RERUN_MS)
    expect(page.get_by_text("Mistakes (of 10,000)")).to_be_visible(timeout=RERUN_MS)


# ---------------------------------------------------------------- Architecture


def test_clicking_a_stage_of_the_architecture_shows_its_computation(page, app: App, screenshots: Screenshots) -> None:
    page.goto(app.url + "/architecture?test=0", timeout=PAGE_LOAD_MS)
    # the primary capsules first: the chosen capsule's receptive field, its type's lengths and its pose
    expect(page.locator(f".st-key-arch_field{CURRENT} .main-svg").first).to_be_visible(timeout=PAGE_LOAD_MS)
    expect(page.locator(f".st-key-arch_product{CURRENT}")).to_have_count(0)
    wait_rendered(page)
    boxes = page.locator(f".st-key-arch_diagram_primary{CURRENT} .js-plotly-plot .bars .point")
    expect(boxes).to_have_count(6)
    box = boxes.nth(3).bounding_box()  # the votes: W_ij u_i
    assert box is not None
    # a real click where the box is drawn (plotly's drag layer above the bars takes it and finds the bar)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    product = page.locator(f".st-key-arch_product{CURRENT} .main-svg").first
    expect(product).to_be_visible(timeout=RERUN_MS)
    expect(page.locator(f".st-key-arch_field{CURRENT}")).to_have_count(0)
    expect(page.get_by_role("radio", name="Votes")).to_be_checked()
    expect(page.locator(".katex-display").first).to_contain_text("W")
    wait_rendered(page)
    screenshots.take(page, "architecture.png")
    # and back by the keyboard-reachable radio: the decoder's masked input
    page.locator(f".st-key-arch_stage{CURRENT}").get_by_text("Decoder", exact=True).click()
    expect(page.locator(f".st-key-arch_masked{CURRENT} .main-svg").first).to_be_visible(timeout=RERUN_MS)
    expect(page.locator(f".st-key-arch_diagram_decoder{CURRENT} .bars .point")).to_have_count(6)


# ---------------------------------------------------------------- Routing playground


def test_step_the_routing_playground_and_drag_a_vote(page, app: App, screenshots: Screenshots) -> None:
    """The toy runs in the browser: a preset, a step, a click on a vote and a drag recompute both routings with no
    script run; the real model's votes below step on the server, each on its own iteration."""
    runs = watch_run_requests(page)
    page.goto(app.url + "/playground?checkpoint=mnist&test=3")
    root = knobs(page, "playground")
    expect(root).to_have_attribute("data-settled", re.compile(r"^\d+$"), timeout=PAGE_LOAD_MS)
    shown = root.locator('[data-role="step"]')
    expect(shown).to_have_text("iteration 1 of 3")
    reading = root.locator('[data-role="child-reading"]')
    expect(reading).to_contain_text("Child 1 sends 0.333 to parent 1")
    wait_idle(page)
    runs.start()

    root.locator('[data-role="preset"]').select_option(label="two competing clusters")
    expect(root.locator('[data-role="help"]')).to_contain_text("seven against five")
    root.locator('[data-role="next"]').click()
    expect(shown).to_have_text("iteration 2 of 3")
    expect(reading).not_to_contain_text("0.333")  # routing moved child 1's weight
    first = float(re.search(r"sends ([0-9.]+) to parent 1", reading.inner_text()).group(1))
    assert first > 0.4, reading.inner_text()

    # a click on child 9's vote for parent 1 (one of the five outvoted) chooses it
    vote = root.locator('[data-role="dynamic-plane"] [data-role="vote"][data-parent="0"][data-child="8"] circle').nth(1)
    vote.scroll_into_view_if_needed()
    vote.click()
    expect(reading).to_contain_text("Child 9 sends")
    ninth = float(re.search(r"sends ([0-9.]+) to parent 1", reading.inner_text()).group(1))
    assert ninth < 1 / 3, reading.inner_text()  # the smaller cluster loses parent 1
    expect(root.locator('[data-role="child"]')).to_have_value("8")
    # dragged over to the larger cluster, it gains parent 1 back: both routings follow the pointer
    box, target = (
        vote.bounding_box(),
        root.locator('[data-role="dynamic-plane"] [data-role="vote"][data-parent="0"][data-child="0"] circle')
        .nth(1)
        .bounding_box(),
    )
    assert box is not None and target is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(target["x"] + target["width"] / 2, target["y"] + target["height"] / 2, steps=10)
    page.mouse.up()
    expect(root.locator('[data-role="moved"]')).to_have_text("1 vote moved from the preset.")
    moved = float(re.search(r"sends ([0-9.]+) to parent 1", reading.inner_text()).group(1))
    assert moved > 0.4, reading.inner_text()
    values = knob_values(root)
    assert (values["parent"], values["child"], values["step"]) == (0, 8, 2)
    page.wait_for_timeout(500)
    assert runs.count == 0, "the toy ran the server"

    real = page.locator(f".st-key-playground_real_chart{CURRENT}")  # the real model's votes, below, stepped alike
    points = real.locator(".scatterlayer .trace").first.locator(".point")
    points.first.scroll_into_view_if_needed(timeout=RERUN_MS)
    wait_rendered(page)
    sizes = points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))")
    page.locator(f".st-key-playground_real_next{CURRENT}").get_by_role("button").click()
    expect(page.locator(f".st-key-playground_real_shown{CURRENT}")).to_contain_text(
        "Iteration 2 of 3", timeout=RERUN_MS
    )
    wait_rendered(page)
    assert points.evaluate_all("ps => ps.map(p => p.getAttribute('d'))") != sizes  # iteration 2's weights
    expect(shown).to_have_text("iteration 2 of 3")  # the toy keeps its own iteration and its moved vote
    assert knob_values(root)["moved"] == 1
    root.scroll_into_view_if_needed()
    screenshots.take(page, "playground.png")

    # the same votes routed by EM beside dynamic routing, one stepper for both
    root.locator('[data-role="preset"]').select_option(label="a lone outlier")
    comparison = root.locator('[data-role="comparison"]')
    expect(comparison).to_contain_text("evenly, 1/3 = 0.33 to each parent")
    em_title = root.locator('[data-role="em-title"]')
    expect(em_title).to_contain_text("Iteration 1 of 3")
    for iteration in (2, 3):  # one stepper drives both planes
        root.locator('[data-role="next"]').click()
        expect(shown).to_have_text(f"iteration {iteration} of 3")
        expect(em_title).to_contain_text(f"Iteration {iteration} of 3")
        expect(root.locator('[data-role="dynamic-title"]')).to_contain_text(f"Iteration {iteration} of 3")
    # the far, long vote of child 12: dynamic routing keeps it, EM lets it go; the paragraph says what the planes show
    expect(comparison).to_contain_text("child 12's for parent 1: c = 0.99 under dynamic routing, R = 0.00")
    root.locator('[data-role="child"]').select_option(label="child 12")
    expect(root.locator('[data-role="em-reading"]')).to_contain_text("Under EM, child 12 gives 0.000 to parent 1")
    expect(reading).to_contain_text("Child 12 sends 0.99")


# ---------------------------------------------------------------- Start here


def test_a_first_visit_walks_the_whole_path_without_a_dead_end(page, app: App, screenshots: Screenshots) -> None:
    """A first contact: from a first visit, every step of Start here opens its page (and is ticked on the
    way back), and the page shows something (an input, or a one-click way to a model that reads it), never only
    "No input yet" or "Pick a ... model". With r = 4 chosen for the CapsNet on the Routing step, the
    EM step opens the EM model at its own trained r, and the CapsNet's 4 is there again after it."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from dashboard import guided_path, pages

    em_r = load_checkpoint(app.checkpoints_dir / "mnist-em.safetensors", networks=("em",)).config.routing_iterations
    capsnet_r = em_r + 1  # another r than the EM model's own, for the CapsNet

    def routing_r() -> int:
        root = knobs(page, "routing")
        expect(root).to_have_attribute("data-settled", re.compile(r"^\d+$"), timeout=RERUN_MS)
        return int(knob_values(root)["r"])

    open_app(page, app, "/start")
    expect(page.get_by_text("What is a capsule?")).to_be_visible(timeout=PAGE_LOAD_MS)
    steps = len(guided_path.GUIDED_PATH)
    expect(page.locator("[class*='st-key-step_']")).to_have_count(steps)
    expect(page.get_by_text(f"0 of {steps} steps visited")).to_be_visible()  # the page it opened on is no step
    expect(page.locator(".st-key-step_1")).to_contain_text("See the whole network and its shapes")
    main = page.get_by_test_id("stMain")
    for number, step in enumerate(guided_path.GUIDED_PATH, start=1):
        if step.network == "em":  # the second algorithm: the page opens with the shipped EM network
            page.locator(f".st-key-open_step_{number}").get_by_role("button").click()
            expect(page.get_by_role("heading", name="EM routing")).to_be_visible(timeout=PAGE_LOAD_MS)
            expect(page.locator(".st-key-switch_back")).to_be_visible(timeout=RERUN_MS)  # one click back
            # a click on the chosen layer leaves it chosen (a segmented control would otherwise clear the choice)
            chosen = page.get_by_role("radiogroup", name="Layer").get_by_role("radio", name="class capsules")
            expect(chosen).to_be_checked(timeout=RERUN_MS)
            chosen.click()
            wait_idle(page)
            expect(chosen).to_be_checked()
            expect(page.locator(".st-key-em_assignments")).to_be_visible()
            assert routing_r() == em_r, "the EM model opens at its own r, not the CapsNet's"
        else:
            page.locator(f".st-key-step_{number}").get_by_role("link", name=f"Open {step.page.title}").click()
        expect(page.get_by_role("heading", name=step.page.title).first).to_be_visible(timeout=PAGE_LOAD_MS)
        wait_idle(page)
        assert main.get_by_text("No input yet").count() == 0, step.page.title
        if step.page is pages.ROUTING and step.network is None:  # the CapsNet at another r than the EM model's
            knobs(page, "routing").locator('.segmented[aria-label="routing iterations"] button').nth(
                capsnet_r - 1
            ).click()
            expect(page.get_by_role("heading", name=f"Every vote, at r = {capsnet_r}")).to_be_visible(timeout=RERUN_MS)
        if step.page.url_path == "overlap":  # a page for another kind of model: one click away, and it opens
            expect(page.locator(".st-key-switch_model")).to_be_visible(timeout=RERUN_MS)
            page.locator(".st-key-switch_model").get_by_role("button").click()
            expect(main.get_by_text("CapsNet: the two longest capsules")).to_be_visible(timeout=PAGE_LOAD_MS)
            page.locator(".st-key-switch_back").get_by_role("button").click()
            wait_idle(page)
        page.get_by_test_id("stSidebarNav").get_by_role("link", name="Start here").click()
        expect(page.locator(f".st-key-step_{number}")).to_contain_text("visited", timeout=RERUN_MS)
        if number == 1:
            wait_rendered(page)
            screenshots.take(page, "start.png")
    expect(page.get_by_text(f"{steps} of {steps} steps visited")).to_be_visible()
    page.locator(".st-key-step_4").get_by_role("link", name="Open Routing").click()  # the EM model's, still chosen
    expect(page.get_by_role("heading", name="EM routing")).to_be_visible(timeout=PAGE_LOAD_MS)
    page.locator(".st-key-switch_back").get_by_role("button").click()  # one click back to the CapsNet
    expect(page.get_by_role("heading", name="Routing by agreement")).to_be_visible(timeout=PAGE_LOAD_MS)
    wait_idle(page)
    assert routing_r() == capsnet_r, "the CapsNet's r, kept while the EM model was read"


# ---------------------------------------------------------------- the server, after every page above


def test_the_server_logged_no_traceback(app: App) -> None:
    """The last test of this module: while the pages above ran, the server printed no traceback through the app's
    own code (a dataframe that pyarrow cannot convert, an exception in a fragment) that a page swallowed. A
    traceback only through the web server's own modules (a websocket closed twice as a tab closes) is
    Streamlit's, not the app's."""
    log = app.log.read_text(errors="replace")
    blocks = ["Traceback" + block for block in log.split("Traceback")[1:]]
    ours = [b for b in blocks if "/dashboard/" in b.split("\n\n")[0] or "/capsnet/" in b.split("\n\n")[0]]
    assert not ours, ours[0][:3000]
