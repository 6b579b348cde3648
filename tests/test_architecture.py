"""The Architecture view: every stage's shape and parameters from the config, one input stage by stage, the page."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from dashboard_fixtures import APP, app_dirs, app_run, app_with_run, clear_streamlit_caches  # noqa: F401
from streamlit.testing.v1 import AppTest

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.readings import explain as ex
from capsnet.readings import stages as arch
from capsnet.readings.agreement import first_primary, receptive_fields
from dashboard.figures import architecture as arch_fig


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    digit = np.zeros((28, 28), np.float32)
    digit[6:22, 12:16] = 1.0
    digit[6:9, 9:19] = 0.8
    return digit


@pytest.fixture(scope="module")
def reading(model: CapsNet, image: np.ndarray) -> ex.Explanation:
    return ex.explain(model, image)


@pytest.mark.parametrize("preset", ["paper", "tiny", "multimnist", "official"])
def test_the_stages_parameters_add_up_to_the_models(preset: str) -> None:
    config = CapsNetConfig.preset(preset)
    with torch.device("meta"):  # the real layers, no memory: only their sizes are counted
        net = CapsNet(config)
    stages = arch.stages(config)
    assert [s.key for s in stages] == list(arch.STAGE_KEYS)
    assert sum(s.parameters for s in stages) == arch.parameter_count(config) == sum(p.numel() for p in net.parameters())
    assert arch.parameter_count(config, decoder=False) == net.num_parameters(decoder=False)
    by_key = {s.key: s for s in stages}
    assert by_key["conv1"].parameters == sum(p.numel() for p in net.conv1.parameters())
    assert by_key["primary"].parameters == sum(p.numel() for p in net.primary.parameters())
    assert by_key["votes"].parameters == net.digits.weight.numel()
    assert by_key["decoder"].parameters == sum(p.numel() for p in net.decoder.parameters())


@pytest.mark.parametrize(("preset", "size"), [("paper", 28), ("paper-decoder", 28), ("small", 28), ("small-decoder", 28),
                                            ("tiny", 28), ("paper", 32)])  # fmt: skip
def test_the_em_networks_stages_add_up_to_its_parameters_and_shapes(preset: str, size: int) -> None:
    """The EM network's stages: their parameters are its layers', their shapes its forward pass's."""
    config = EMCapsNetConfig.preset(preset, image_size=size)
    net = EMCapsNet(config).eval()
    stages = arch.stages_of(config)
    keys = [s.key for s in stages]
    assert keys == list(arch.EM_STAGE_KEYS if config.decoder else arch.EM_STAGE_KEYS[:-1])
    assert arch.parameter_count(config) == net.num_parameters()
    assert arch.parameter_count(config, decoder=False) == net.num_parameters(decoder=False)
    by_key = {s.key: s for s in stages}
    for key, layer in (("conv1", net.conv1), ("primary", net.primary), ("convcaps1", net.convcaps1),
                       ("convcaps2", net.convcaps2), ("classes", net.classes)):  # fmt: skip
        assert by_key[key].parameters == sum(p.numel() for p in layer.parameters()), key
    with torch.no_grad():
        out = net(torch.zeros(2, 1, size, size), return_primary=True, return_features=True)
    assert by_key["conv1"].shape == tuple(out.features.shape[1:])
    poses, acts = out.primary
    assert by_key["primary"].shape == (acts[0].numel(), 17) and poses.shape[2] == 16
    assert by_key["classes"].shape == (10, 17) == (out.activations.shape[1], out.poses.shape[2] + 1)
    grid = config.convcaps2_grid
    assert by_key["convcaps2"].shape == (config.convcaps2_types * grid * grid, 17)
    if preset == "paper":
        assert arch.parameter_count(config) == 318_964  # the EM paper's "310K"


def test_the_papers_shapes() -> None:
    shapes = {s.key: s.shape for s in arch.stages(CapsNetConfig())}
    assert shapes == {
        "input": (1, 28, 28),
        "conv1": (256, 20, 20),
        "primary": (1152, 8),
        "votes": (10, 1152, 16),
        "routing": (10, 16),
        "decoder": (1, 28, 28),
    }
    assert arch.parameter_count(CapsNetConfig()) == 8_215_568
    steps = dict(next(s for s in arch.stages(CapsNetConfig()) if s.key == "decoder").steps)
    assert [steps[f"layer {i}"] for i in (1, 2, 3)] == [(512,), (1024,), (784,)]
    # MultiMNIST's 36x36 pairs: a 10x10 grid of 32 types, 3,200 primary capsules
    mm = {s.key: s.shape for s in arch.stages(CapsNetConfig.preset("multimnist"))}
    assert mm["conv1"] == (256, 28, 28) and mm["primary"] == (3200, 8) and mm["votes"] == (10, 3200, 16)


@pytest.mark.parametrize("size", [28, 36])
def test_every_stage_outputs_the_shape_it_states(size: int) -> None:
    """The tensors of a real forward pass have the shapes `stages` derives from the config alone."""
    torch.manual_seed(0)
    config = dataclasses.replace(CapsNetConfig.preset("tiny"), image_size=size)
    net = CapsNet(config).eval()
    reading = ex.explain(net, np.random.default_rng(0).random((size, size), dtype=np.float32))
    shapes = {s.key: s.shape for s in arch.stages(config)}
    assert reading.features.shape == shapes["conv1"]
    assert reading.primary.shape == shapes["primary"]
    assert reading.votes.votes.shape == shapes["votes"]
    assert reading.poses.shape == reading.masked.shape == shapes["routing"]
    assert (1, *reading.reconstruction.shape) == shapes["decoder"] == shapes["input"]
    steps = dict(next(s for s in arch.stages(config) if s.key == "primary").steps)
    with torch.no_grad():
        conv = net.primary.conv(torch.from_numpy(reading.features)[None])  # (1, T*P, G, G)
    assert tuple(conv.shape[1:]) == steps["convolution"]


def test_the_forward_pass_can_return_conv1s_feature_maps(model: CapsNet, image: np.ndarray) -> None:
    x = torch.from_numpy(image).view(1, 1, 28, 28)
    with torch.no_grad():
        plain = model(x)
        out = model(x, return_features=True)
        expected = torch.relu(model.conv1(x))
    assert plain.features is None and out.features is not None
    torch.testing.assert_close(out.features, expected)
    torch.testing.assert_close(out.poses, plain.poses)  # the same pass, nothing else changed


def test_a_reading_is_one_forward_pass(model: CapsNet, image: np.ndarray, reading: ex.Explanation) -> None:
    x = torch.from_numpy(image).view(1, 1, 28, 28)
    with torch.no_grad():
        out = model(x, return_primary=True, return_features=True)
    np.testing.assert_allclose(reading.features, out.features[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(reading.primary, out.primary.poses[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(reading.lengths, out.lengths[0].numpy(), atol=1e-6)
    assert reading.prediction == int(out.prediction[0])
    np.testing.assert_allclose(reading.reconstruction, out.reconstruction[0, 0].numpy(), atol=1e-6)
    # the decoder's input: the prediction's capsule alone
    kept = np.flatnonzero(np.abs(reading.masked).sum(axis=1))
    assert kept.tolist() == [reading.prediction]
    np.testing.assert_allclose(reading.masked[reading.prediction], reading.poses[reading.prediction])
    with pytest.raises(ValueError, match="28x28"):
        ex.explain(model, np.zeros((20, 20), np.float32))
    model.train()
    try:
        with pytest.raises(ValueError, match="eval mode"):
            ex.explain(model, image)
    finally:
        model.eval()


def test_a_capsules_view_is_its_matrix_its_vote_and_its_field(model: CapsNet, reading: ex.Explanation) -> None:
    config = model.config
    i, j = 2 * config.primary_grid**2 + 3 * config.primary_grid + 4, 7  # type 2, (3, 4): 0-based type index 2
    view = arch.capsule_view(model, reading, i, j)
    assert (view.primary.index, view.primary.kind, view.primary.y, view.primary.x, view.digit) == (i, 2, 3, 4, j)
    np.testing.assert_array_equal(view.weight, model.digits.weight[i, j].detach().numpy())
    np.testing.assert_allclose(view.weight @ view.pose, view.vote, atol=1e-5)  # u_hat_{j|i} = W_ij u_i
    np.testing.assert_allclose(view.pose, reading.primary[i])
    assert view.primary.length == pytest.approx(float(np.linalg.norm(reading.primary[i])))
    np.testing.assert_array_equal(view.field, receptive_fields(config)[3, 4])
    assert view.field.sum() == 17 * 17 and view.window == (6, 8)
    assert view.field[6:23, 8:25].all()  # the 17x17 square that starts at the Conv1 window's corner
    np.testing.assert_allclose(view.primary.coupling.sum(axis=1), 1.0, atol=1e-5)
    assert (
        view.primary.coupling.shape == view.primary.agreement.shape == (config.routing_iterations, config.num_classes)
    )
    np.testing.assert_allclose(view.vote_lengths[j], np.linalg.norm(view.vote), rtol=1e-5)
    # by default: a long primary capsule where the ink is, whose couplings moved; and the prediction
    default = arch.capsule_view(model, reading, None, None)
    assert (
        default.primary.index == first_primary(reading.votes, reading.image, config)
        and default.digit == reading.prediction
    )
    assert (default.field & (reading.image > 0)).any()  # it sees some of the digit
    fields, g = receptive_fields(config), config.primary_grid
    ink = [float(reading.image[fields[divmod(i % g**2, g)]].sum()) for i in range(config.num_primary)]
    moved = [np.abs(reading.votes.coupling[-1, i] - 1 / config.num_classes).max() for i in range(config.num_primary)]
    score = np.linalg.norm(reading.primary, axis=1) * np.asarray(ink) * (np.asarray(moved) + 1e-9)  # the slow way
    assert default.primary.index == int(np.argmax(score))
    with pytest.raises(ValueError, match="primary capsule"):
        arch.capsule_view(model, reading, config.num_primary, 0)
    with pytest.raises(ValueError, match="class index"):
        arch.capsule_view(model, reading, 0, 10)


def test_the_strongest_feature_maps_come_first(reading: ex.Explanation) -> None:
    order = arch.strongest_maps(reading.features, 5)
    means = reading.features.mean(axis=(1, 2))
    assert len(order) == 5 and np.all(np.diff(means[order]) <= 0)
    assert means[order[-1]] >= np.sort(means)[-5]


def test_the_figures(model: CapsNet, reading: ex.Explanation) -> None:
    stages = arch.stages(model.config)
    fig = arch_fig.diagram_figure(stages, "votes")
    bars = fig.data[0]
    assert list(bars.customdata) == list(arch.STAGE_KEYS)
    assert "32 x 20 x 20" in bars.text[1] and "2,624<br>parameters" in bars.text[1]  # Conv1 of the tiny network
    assert [c == arch_fig.CHOSEN for c in bars.marker.color] == [k == "votes" for k in arch.STAGE_KEYS]
    with pytest.raises(ValueError, match="unknown stage"):
        arch_fig.diagram_figure(stages, "pooling")
    view = arch.capsule_view(model, reading, 5, 1)
    product = arch_fig.matrix_product_figure(view.weight, view.pose, view.vote)
    np.testing.assert_allclose(np.asarray(product.data[2].z).ravel(), view.vote, rtol=1e-6)
    with pytest.raises(ValueError, match="needs u"):
        arch_fig.matrix_product_figure(view.weight, view.vote, view.vote)
    maps = arch_fig.feature_maps_figure(reading.features[:4], [0, 1, 2, 3], view.window, model.config.primary_kernel)
    outline = maps.data[1]  # the capsule's Conv1 window, outlined on each map: 4 closed squares
    assert np.isnan(np.asarray(outline.x, dtype=float)).sum() == 4
    corner = np.asarray(outline.x[:5], dtype=float), np.asarray(outline.y[:5], dtype=float)
    assert (corner[0].min(), corner[1].min()) == (view.window[1] - 0.5, view.window[0] - 0.5)
    assert corner[0].max() - corner[0].min() == model.config.primary_kernel
    hover = np.asarray(maps.data[0].customdata)  # each map's number on its own pixels
    assert hover[0, 0] == 1 and hover[-1, -1] == 4
    grid = arch_fig.grid_lengths_figure(np.zeros((6, 6)), 4, 3, "type 1, every position")
    assert list(grid.layout.yaxis.range) == [5.5, -0.5] and list(grid.layout.xaxis.range) == [-0.5, 5.5]
    # square cells in any plot's shape: the plot shrinks, neither axis stretches past the grid
    assert grid.layout.xaxis.constrain == grid.layout.yaxis.constrain == "domain"


# ---------------------------------------------------------------- the page


def new_app() -> AppTest:
    clear_streamlit_caches()
    return AppTest.from_file(APP, default_timeout=180)


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.stack_trace for e in at.exception]


def chart(at: AppTest, key: str) -> dict:
    for element in at.get("plotly_chart"):
        if element.key == key:
            return json.loads(element.proto.spec)
    raise AssertionError(f"no chart {key!r}; have {[e.key for e in at.get('plotly_chart')]}")


def values(array: list | dict) -> np.ndarray:
    """A plotly JSON data array: a list, or base64 with its dtype."""
    if isinstance(array, dict):
        import base64

        data = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        return data  # flat: the caller reshapes
    return np.asarray(array, dtype=float)


def open_page(at: AppTest) -> AppTest:
    at.run()
    at.segmented_control(key="input_source").set_value("Test image").run()
    at.switch_page("app_pages/architecture.py").run()
    no_exception(at)
    return at


def test_the_page_shows_each_stage_of_the_chosen_model(app_with_run, app_run) -> None:  # noqa: F811
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.datasets import as_tensors, load_dataset

    at = open_page(new_app())
    assert not at.error, [e.value for e in at.error]
    assert at.radio(key="arch_stage").value == "primary"
    diagram = chart(at, "arch_diagram_primary")["data"][0]
    assert diagram["customdata"] == list(arch.STAGE_KEYS) and "288 x 8" in diagram["text"][2]  # the tiny model's
    assert {"arch_field", "arch_grid", "arch_pose"} <= {c.key for c in at.get("plotly_chart")}
    assert any("656,976 parameters in all" in c.value for c in at.main.caption)
    # a capsule chosen by type, row and column is the one selected on every page
    at.number_input(key="primary_type").set_value(2).run()
    at.number_input(key="primary_row").set_value(3).run()
    at.number_input(key="primary_col").set_value(4).run()
    no_exception(at)
    index = 1 * 36 + 3 * 6 + 4
    assert at.session_state["selected_primary"] == index
    # its vote for digit capsule 5 is W_ij u_i of the checkpoint's own weights
    at.radio(key="arch_stage").set_value("votes").run()
    at.selectbox(key="arch_digit").set_value(5).run()
    no_exception(at)
    net = load_checkpoint(app_run / "best.safetensors").model
    images, _ = as_tensors(load_dataset("mnist", train=False))
    expected = arch.capsule_view(net, ex.explain(net, images[0, 0].numpy()), index, 5)
    product = chart(at, "arch_product")["data"]
    np.testing.assert_allclose(values(product[0]["z"]).reshape(16, 8), expected.weight, rtol=1e-5)
    np.testing.assert_allclose(values(product[2]["z"]).ravel(), expected.vote, rtol=1e-4, atol=1e-6)
    for stage, key in (("decoder", "arch_masked"), ("conv1", "arch_conv1"), ("routing", "arch_routing")):
        at.radio(key="arch_stage").set_value(stage).run()
        no_exception(at)
        assert key in {c.key for c in at.get("plotly_chart")}, stage
        if stage == "decoder":  # the decoder's input: the predicted capsule alone
            masked = values(chart(at, "arch_masked")["data"][0]["z"]).reshape(10, 16)
            assert np.count_nonzero(np.abs(masked).sum(axis=1)) == 1
        else:  # the capsule chosen stays chosen, also across a stage that does not show it
            assert (at.number_input(key="primary_type").value, at.number_input(key="primary_col").value) == (2, 4)
    at.radio(key="arch_stage").set_value("votes").run()
    assert at.selectbox(key="arch_digit").value == 5  # kept while another stage was shown


@pytest.mark.slow
def test_a_multimnist_model_is_drawn_with_its_own_shapes(app_dirs, tiny_multimnist) -> None:  # noqa: F811
    _, checkpoints = app_dirs
    shutil.copy(tiny_multimnist, checkpoints / "multimnist.safetensors")
    at = new_app().run()
    at.switch_page("app_pages/architecture.py").run()
    no_exception(at)
    text = chart(at, "arch_diagram_primary")["data"][0]["text"]
    assert "1 x 36 x 36" in text[0] and "800 x 8" in text[2]  # 8 types on a 10x10 grid
    assert any("MultiMNIST" in i.value for i in at.info)
    assert not {"arch_field", "arch_pose"} & {c.key for c in at.get("plotly_chart")}


def test_without_a_model_the_papers_network_is_drawn(app_dirs) -> None:  # noqa: F811
    at = new_app().run()
    at.switch_page("app_pages/architecture.py").run()
    no_exception(at)
    text = chart(at, "arch_diagram_primary")["data"][0]["text"]
    assert "256 x 20 x 20" in text[1] and "1,152 x 8" in text[2]
    assert any("8,215,568 parameters in all" in c.value for c in at.main.caption)
    assert at.latex  # the stage's formula, even without a model


@pytest.mark.slow
def test_the_em_networks_stages_are_drawn_on_the_current_input(app_dirs, tiny_em) -> None:  # noqa: F811
    """The EM network's Architecture page reads the current input at every stage, as the CapsNet's
    does: Conv1's maps, each capsule grid's activations (the forward pass's own), the class activations, the redraw."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.datasets import as_tensors, load_dataset
    from capsnet.readings.explain_em import explain_em_with_layers

    _, checkpoints = app_dirs
    shutil.copy(tiny_em, checkpoints / "mnist-em.safetensors")
    at = new_app()
    at.query_params.update(checkpoint="mnist-em", test="0")
    at.run()
    at.switch_page("app_pages/architecture.py").run()
    no_exception(at)
    net = load_checkpoint(checkpoints / "mnist-em.safetensors", networks=("em",)).model
    images, _ = as_tensors(load_dataset("mnist", train=False))
    em, (first, second) = explain_em_with_layers(net, images[0, 0].numpy())
    expected = {"primary": first.child_activations, "convcaps1": first.parent_activations[-1],
                "convcaps2": second.parent_activations[-1]}  # fmt: skip
    for stage in arch.EM_STAGE_KEYS:
        if stage == "decoder" and not net.config.decoder:
            continue
        at.radio(key="arch_stage").set_value(stage).run()
        no_exception(at)
        assert not any("is on the **Draw** page" in i.value for i in at.info), stage
        if stage in expected:  # the most active types' maps, tiled: their largest activation is the grid's
            tiles = values(chart(at, f"arch_em_{stage}")["data"][0]["z"])
            assert np.nanmax(tiles) == pytest.approx(float(expected[stage].max()), rel=1e-4), stage
        elif stage == "classes":
            bars = chart(at, "arch_em_classes")["data"][0]
            np.testing.assert_allclose(values(bars["y"]), em.activations, rtol=1e-5)
        elif stage == "conv1":
            assert "arch_em_conv1" in {c.key for c in at.get("plotly_chart")}
        elif stage == "input":
            assert any(c.startswith("x: 28x28") for im in at.get("image") for c in im.captions)


@pytest.mark.parametrize("preset", ["paper", "tiny"])
def test_efficient_capsnets_stages_add_up_to_its_parameters_and_shapes(preset: str) -> None:
    """Efficient-CapsNet's stages: their parameters are its layers' (161,824 without the decoder for the paper's),
    their shapes its forward pass's."""
    from capsnet.nn.efficient_capsnet import EfficientCapsNet, EfficientCapsNetConfig

    config = EfficientCapsNetConfig.preset(preset)
    net = EfficientCapsNet(config).eval()
    stages = arch.stages_of(config)
    assert [s.key for s in stages] == list(arch.EFFICIENT_STAGE_KEYS)
    assert arch.parameter_count(config) == net.num_parameters()
    assert arch.parameter_count(config, decoder=False) == net.num_parameters(decoder=False)
    assert preset != "paper" or arch.parameter_count(config, decoder=False) == 161_824
    by_key = {s.key: s for s in stages}
    assert by_key["convs"].parameters == sum(p.numel() for p in net.features.parameters())
    assert by_key["primary"].parameters == sum(p.numel() for p in net.primary.parameters())
    assert (by_key["votes"].parameters, by_key["routing"].parameters) == (net.W.numel(), net.b.numel())
    x = torch.rand(1, 1, 28, 28)
    with torch.no_grad():
        out = net(x)
        assert by_key["convs"].shape == tuple(net.features(x).shape[1:]) and out.features is None  # only where asked
        kept = net(x, return_features=True).features
        assert kept is not None and torch.equal(kept, net.features(x))  # the pass's own maps
        assert by_key["votes"].shape == tuple(net.votes(out.primary).shape[1:])
    assert by_key["primary"].shape == tuple(out.primary.shape[1:]) and by_key["routing"].shape == tuple(
        out.poses.shape[1:]
    )
    no_decoder = dataclasses.replace(config, decoder_hidden=())
    assert [s.key for s in arch.stages_of(no_decoder)] == list(arch.EFFICIENT_STAGE_KEYS[:-1])


def test_efficient_capsnets_stages_are_drawn_on_the_current_input(app_dirs) -> None:  # noqa: F811
    """The shipped Efficient-CapsNet on the Architecture page: its own diagram, formulas and words, and each stage on
    the current input from its forward pass: the last convolution's maps, the primary capsules' lengths, the longest
    one's votes and attention, the redraw."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.data.datasets import as_tensors, load_dataset
    from capsnet.readings.explain_attention import explain_attention

    _, checkpoints = app_dirs
    shipped = Path(APP).parents[1] / "checkpoints" / "mnist-efficient.safetensors"
    shutil.copy(shipped, checkpoints / "mnist-efficient.safetensors")
    at = new_app()
    at.query_params.update(checkpoint="mnist-efficient", test="0")
    at.run()
    at.switch_page("app_pages/architecture.py").run()
    no_exception(at)
    assert any("161,824 without the decoder" in c.value for c in at.main.caption)
    text = chart(at, "arch_diagram_primary")["data"][0]["text"]
    assert "128 x 9 x 9" in text[1] and "16 x 8" in text[2]
    net = load_checkpoint(shipped).model.eval()
    images, _ = as_tensors(load_dataset("mnist", train=False))
    reading = explain_attention(net, images[0, 0].numpy())
    longest = int(reading.primary_lengths.argmax())
    for stage in arch.EFFICIENT_STAGE_KEYS:
        at.radio(key="arch_stage").set_value(stage).run()
        no_exception(at)
        assert at.latex and not any("no view" in i.value for i in at.info), stage
        if stage == "convs":
            tiles = values(chart(at, "arch_eff_convs")["data"][0]["z"])
            assert np.nanmax(tiles) == pytest.approx(float(reading.features.max()), rel=1e-4)
        elif stage == "primary":
            np.testing.assert_allclose(values(chart(at, "arch_eff_primary")["data"][0]["y"]), reading.primary_lengths,
                                       rtol=1e-5)  # fmt: skip
        elif stage == "votes":
            np.testing.assert_allclose(values(chart(at, "arch_eff_votes")["data"][0]["y"]),
                                       reading.vote_lengths[longest], rtol=1e-5)  # fmt: skip
        elif stage == "routing":
            assert "arch_eff_routing" in {c.key for c in at.get("plotly_chart")}
        elif stage == "decoder":
            assert any(c.startswith("x̂ from class capsule 7") for im in at.get("image") for c in im.captions)
