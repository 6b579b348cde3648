"""The registry is open: a fourth family registered from a test (tests/toy_family.py: a toy capsule network with
routing of its own) is trained for a few batches from the CLI, saved, loaded, and walked through every page of the
app, with no file of the package or the dashboard edited for it: each page shows it or says in one line why not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import toy_family
from cli_support import capsnet
from dashboard_fixtures import APP, app_dirs, clear_streamlit_caches, knobs_payload  # noqa: F401
from streamlit.testing.v1 import AppTest

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.nn.registry import NETWORK_NAMES, network_of
from dashboard import pages


@pytest.fixture
def toy() -> Iterator[None]:
    toy_family.install()
    try:
        yield
    finally:
        toy_family.uninstall()


def test_a_config_belongs_to_its_nearest_family() -> None:
    """A family whose config subclasses another's is its own (it was named after the first match: "capsnet")."""
    from dataclasses import dataclass

    from capsnet.nn.config import CapsNetConfig
    from capsnet.nn.family import NETWORKS, Network, Routing, register

    @dataclass(frozen=True)
    class WiderConfig(CapsNetConfig):
        pass

    base = network_of(CapsNetConfig())
    wider = Network(
        "wider", "Wider", "W", "capsule lengths", "|v|", "margin loss", "a wider CapsNet", WiderConfig,
        base.module_type, ("tiny",), routing=Routing("dynamic", "dynamic routing"), baseline=False, pairs=False,
        pairs_field=None, _loss=base._loss, _redraws=lambda config: True,
    )  # fmt: skip
    register(wider)
    try:
        assert network_of(WiderConfig()) is wider and network_of(CapsNetConfig()) is base
        assert "wider" in NETWORK_NAMES  # registered after the registry was imported, and among its names
    finally:
        NETWORKS.pop("wider")


def test_a_fourth_family_trains_loads_and_opens_on_every_page(toy, app_dirs, data_dir: Path) -> None:  # noqa: F811
    runs_root, checkpoints = app_dirs
    run = runs_root / "toy-run"
    done = capsnet("train", "--network", toy_family.NAME, "--preset", "tiny", "--dataset", "mnist", "--epochs", "1",
                   "--train-size", "200", "--test-size", "100", "--batch-size", "50", "--device", "cpu",
                   "--no-progress", "--out", run, "--data-dir", data_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert toy_family.NAME in done.stdout + done.stderr or (run / "best.safetensors").is_file()
    loaded = load_checkpoint(run / "best.safetensors")
    assert network_of(loaded.model).name == toy_family.NAME and isinstance(loaded.model, toy_family.ToyNet)
    listed = capsnet("train", "--help")
    assert toy_family.NAME in listed.stdout  # the CLI's choices read the registry when it runs

    _walk(
        "toy-run", "mean routing", shown={pages.DRAW.path, pages.EVALUATE.path, pages.TRAINING.path, pages.START.path}
    )


def test_efficient_capsnet_trains_from_the_cli_and_opens_on_every_page(app_dirs, data_dir: Path) -> None:  # noqa: F811
    """The self-attention family, registered like the shipped ones: trained for a few batches from the CLI and read
    on every page that reads any routing's scores and poses; the others say in one line why not."""
    runs_root, _ = app_dirs
    run = runs_root / "efficient-run"
    done = capsnet("train", "--network", "efficient", "--preset", "tiny", "--dataset", "mnist", "--epochs", "1",
                   "--train-size", "200", "--test-size", "100", "--batch-size", "50", "--device", "cpu",
                   "--no-progress", "--out", run, "--data-dir", data_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "efficient" in capsnet("train", "--help").stdout
    _walk("efficient-run", "self-attention routing",
          shown={pages.DRAW.path, pages.EVALUATE.path, pages.TRAINING.path, pages.START.path, pages.DIMENSIONS.path,
                 pages.ROUTING.path, pages.ARCHITECTURE.path}, kind="attention")  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(checkpoint="efficient-run", test="0")
    at.run()
    at.switch_page(pages.ROUTING.path_for("attention")).run()  # served at the Routing page's address
    assert [t.value for t in at.title] == ["Self-attention routing"] and not at.exception
    header, arrays = knobs_payload(at, "attention")  # the one pass runs in the browser, on the class layer's inputs
    k, n = arrays["bias"].shape
    assert arrays["votes"].shape[:3] == (1, k, n) and arrays["weights"].shape == (1, n) and k == len(header["names"])


def _walk(checkpoint: str, routing: str, shown: set[str], kind: str = "") -> None:
    """Every page with the model `checkpoint` open: no error anywhere; the `shown` pages read it, the others say
    in one line that they have no view of `routing`."""
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(checkpoint=checkpoint, test="0")
    at.run()
    for info in [pages.DRAW] + [p for p in pages.PAGES if p is not pages.DRAW]:
        page = info.path
        at.switch_page(info.path_for(kind)).run()  # the page's view for this routing, where it has one
        assert not at.exception, (page, [e.stack_trace for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
        notices = [e.value for e in (*at.info, *at.warning) if routing in e.value or "has no decoder" in e.value]
        if page in shown:
            assert not notices, (page, notices)
        else:  # the page says why not, in one line, once
            assert len(notices) == 1 and "\n" not in notices[0], (page, notices)
        if page == pages.DRAW.path:
            assert [m.label for m in at.metric] == ["Prediction"] and at.session_state["input_label"] == "test image #0"
        if page == pages.EVALUATE.path:
            assert any("accuracy" in m.label.lower() for m in at.metric), [m.label for m in at.metric]
        if page == pages.TRAINING.path:
            assert checkpoint in json.dumps([str(e.value) for e in (*at.markdown, *at.caption, *at.selectbox)])
