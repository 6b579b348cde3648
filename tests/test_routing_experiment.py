"""Does routing matter? On the same trained weights, the couplings routed r = 1..5 times,
uniform (r = 1) and random (seeded per image, not routed); per input and on the test set, with the coupling entropy,
McNemar's test and a verdict that follows the numbers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dashboard_fixtures import APP, app_dirs, app_run, clear_streamlit_caches, knobs_payload  # noqa: F401
from streamlit.testing.v1 import AppTest

import capsnet.nn.matrix_capsules as mc
from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.tasks import LabelledSet, read_test_set
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.nn.routing import CouplingScores, RandomCouplings, coupling_entropy
from capsnet.nn.squash import squash
from capsnet.readings import coupling_rules as cr
from capsnet.readings import routing_matters as rm
from dashboard import routing_texts

SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def test_images(data_dir: Path) -> LabelledSet:
    return read_test_set("mnist").first(120)


def test_random_couplings_are_each_images_own_draw_and_uniform_on_the_simplex() -> None:
    """Image n's draw depends on (seed, n, layer) alone: the same in any batch or chunk; another seed, image or layer
    draws anew; softmax over the parents is Dirichlet(1): mean 1/K, variance (K - 1) / (K^2 (K + 1))."""
    whole = RandomCouplings(7, torch.arange(10, 18)).logits((8, 10, 400), torch.device("cpu"))  # (B, K, N)
    part = RandomCouplings(7, torch.arange(13, 15)).logits((2, 10, 400), torch.device("cpu"))
    torch.testing.assert_close(part, whole[3:5], rtol=0, atol=0)
    torch.testing.assert_close(RandomCouplings(7, torch.arange(10, 18)).rows(3, 5).logits((2, 10, 400), "cpu"), part)
    assert not torch.equal(RandomCouplings(8, torch.arange(13, 15)).logits((2, 10, 400), "cpu"), part)
    assert not torch.equal(RandomCouplings(7, torch.arange(13, 15), layer=1).logits((2, 10, 400), "cpu"), part)
    assert not torch.equal(whole[0], whole[1])
    c = torch.softmax(whole.double(), dim=1)  # (B, K, N), each child's couplings
    k = 10
    assert abs(c.mean().item() - 1 / k) < 1e-9  # they sum to 1 over the parents
    assert c.var().item() == pytest.approx((k - 1) / (k * k * (k + 1)), rel=0.05)
    expected = (sum(1 / n for n in range(1, k + 1)) - 1) / math.log(k)  # E[entropy] of Dirichlet(1), over log K
    assert coupling_entropy(c).mean().item() == pytest.approx(expected, rel=0.01)
    assert coupling_entropy(torch.full((3, k, 5), 1 / k)).tolist() == pytest.approx([1.0] * 3)
    assert coupling_entropy(torch.eye(k)[:, :4].unsqueeze(0)).tolist() == [0.0]  # every child on one parent
    with pytest.raises(ValueError, match="for 8 images, asked for 2"):
        RandomCouplings(7, torch.arange(8)).logits((2, 10, 4), "cpu")


def test_the_capsnets_random_rule_is_one_weighted_sum_with_those_couplings(app_run: Path, test_images) -> None:  # noqa: F811
    """Slow reference: the random column is squash(sum_i c_ij u_hat_{j|i}) with c = softmax of the drawn logits, and
    no update of them; uniform's entropy is 1; the routed columns are the forward pass at each r."""
    net = load_checkpoint(app_run / "best.safetensors").model
    images = test_images.images[:40]
    read = cr.read_rules(net, images, rm.ITERATIONS, seed=3, first_index=100, batch_size=16)
    assert read.scores.shape == (40, 6, 10) and read.entropy.shape == (40, 6)
    with torch.inference_mode():
        primary, _, _ = net.encode(images, routing_iterations=1)
        votes = net.digits.predictions(primary).double()  # (B, K, N, D)
        logits = RandomCouplings(3, torch.arange(100, 140)).logits(tuple(votes.shape[:3]), votes.device).double()
        c = torch.softmax(logits, dim=1)  # over the parents
        v = squash(torch.einsum("bkn,bknd->bkd", c, votes))  # (B, K, D)
        routed = torch.stack([net(images, routing_iterations=r).lengths for r in rm.ITERATIONS], 1)
    torch.testing.assert_close(read.scores[:, -1], v.norm(dim=-1).float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(read.scores[:, :-1], routed, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(read.entropy[:, -1], coupling_entropy(c).float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(read.entropy[:, 0], torch.ones(40))  # r = 1: uniform
    assert (read.entropy[:, 1:-1] <= 1 + 1e-6).all() and (read.entropy[:, 1:-1] < 1).any()  # routing moves them
    chunk = cr.read_rules(net, images[8:24], rm.ITERATIONS, seed=3, first_index=108)  # the same images, alone
    torch.testing.assert_close(chunk.scores, read.scores[8:24])


def test_the_em_networks_random_rule_draws_in_every_layer_whatever_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every capsule layer starts from its own random assignments and routes once; a batch routed in chunks of one
    image draws what it draws at once; the uniform column's entropy is 1 and matches the forward pass at r = 1."""
    torch.manual_seed(0)
    net = EMCapsNet(EMCapsNetConfig.preset("tiny")).eval()
    images = torch.rand(5, 1, 28, 28)
    ids = torch.arange(5)
    with torch.inference_mode():
        whole = net.scores_by_coupling(images, (1, 2), RandomCouplings(0, ids))
        monkeypatch.setattr(mc, "CPU_CHUNK_BYTES", 1)  # one image a chunk
        chunked = net.scores_by_coupling(images, (1, 2), RandomCouplings(0, ids))
        monkeypatch.undo()
        alone = net.scores_by_coupling(images[2:4], (1, 2), RandomCouplings(0, ids[2:4]))
        forward = torch.stack([net(images, routing_iterations=r).activations for r in (1, 2)], 1)
    torch.testing.assert_close(chunked.scores, whole.scores)
    torch.testing.assert_close(alone.scores, whole.scores[2:4])
    torch.testing.assert_close(whole.scores[:, :2], forward)
    torch.testing.assert_close(whole.entropy[:, 0], torch.ones(5))
    assert (whole.scores[:, 2] - whole.scores[:, 0]).abs().max() > 1e-3  # random is not uniform
    assert (whole.entropy[:, 2] < 0.95).all()


def test_mcnemar_p_is_the_exact_binomial_test() -> None:
    assert cr.mcnemar_p(0, 0) == 1.0
    assert cr.mcnemar_p(5, 0) == cr.mcnemar_p(0, 5) == pytest.approx(2 / 32)
    assert cr.mcnemar_p(2, 10) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert cr.mcnemar_p(7, 7) == 1.0
    assert cr.mcnemar_p(5000, 5000) == 1.0 and cr.mcnemar_p(0, 2000) < 1e-300  # exact at any size
    assert cr.mcnemar_p(4900, 5100) == pytest.approx(0.0466, rel=2e-3)  # the normal approximation: 0.0466
    with pytest.raises(ValueError):
        cr.mcnemar_p(-1, 3)


def _result(routed_wrong: int, uniform_wrong: int, random_wrong: int, n: int = 10_000) -> rm.RoutingMatters:
    """A summary of n images (label 0) where the trained r (3) is wrong on the first `routed_wrong`, r = 1 on the
    `uniform_wrong` after them and random couplings on the `random_wrong` after those."""
    scores = torch.zeros(n, 6, 10)
    scores[:, :, 0] = 1.0
    scores[:routed_wrong, 1:5, 0] = 0.0  # r = 2..5 (r = 3 trained) wrong
    scores[:routed_wrong, 1:5, 1] = 1.0
    scores[routed_wrong : routed_wrong + uniform_wrong, 0, 0] = 0.0  # r = 1 wrong
    scores[routed_wrong : routed_wrong + uniform_wrong, 0, 2] = 1.0
    first = routed_wrong + uniform_wrong
    scores[first : first + random_wrong, 5, 0] = 0.0
    scores[first : first + random_wrong, 5, 3] = 1.0
    entropy = torch.ones(n, 6)
    entropy[:, 1:5], entropy[:, 5] = 0.97, 0.84
    return rm.summarise(CouplingScores(scores, entropy), np.zeros(n), rm.ITERATIONS, "mnist", 3, "", rm.SEED)


def test_the_verdict_follows_the_numbers() -> None:
    matters = _result(routed_wrong=10, uniform_wrong=300, random_wrong=900)
    said = cr.verdict(matters.rules())
    assert "routing matters, clearly" in said and "2.90 points ahead of uniform couplings" in said
    assert "300 right only when routed, 10 only with uniform couplings; p < 0.001" in said
    assert "stay close to uniform (mean entropy 0.970" in said and "Paik, Kwak & Kim (2019)" in said

    level = _result(routed_wrong=20, uniform_wrong=20, random_wrong=25)
    said = cr.verdict(level.rules())
    assert "routing adds nothing measurable" in said and "no different beyond chance" in said
    assert "ahead" not in said and "matters" not in said

    assert "routing matters, by little" in cr.verdict(_result(0, 30, 40).rules())
    assert "Routing beats random couplings, but uniform couplings do as well" in cr.verdict(_result(5, 5, 400).rules())
    worse = cr.verdict(_result(routed_wrong=200, uniform_wrong=0, random_wrong=0).rules())
    assert "routing does worse than uniform couplings and random couplings" in worse

    assert "caution" not in said
    few = cr.verdict(_result(routed_wrong=2, uniform_wrong=9, random_wrong=20, n=88).rules())
    assert "A caution: 88 test images are few (one image is 1.14 points)" in few  # a folder's small test set

    rules = matters.rules()
    assert [r.name for r in rules] == ["uniform", "routed", "routed", "routed", "routed", "random"]
    assert [r.trained for r in rules] == [False, False, True, False, False, False]
    assert (rules[0].gains, rules[0].losses) == (10, 300) and (rules[-1].gains, rules[-1].losses) == (10, 900)
    rows = routing_texts.experiment_rows(matters)
    assert rows[2]["Couplings"] == "Routed, r = 3 (trained)" and rows[2]["p"] == "" and rows[2]["Gained"] == ""
    assert rows[0] == {"Couplings": "Uniform (r = 1, not routed)", "Test accuracy": "97.00%", "Gained": "10",
                       "Lost": "300", "p": "< 0.001", "Entropy": "1.000"}  # fmt: skip
    assert rows[-1]["Couplings"] == "Random (seeded, not routed)" and rows[-1]["Entropy"] == "0.840"


def test_a_summary_without_the_coupling_rules_is_measured_again() -> None:
    """A summary of the first format (r = 1..5 only) or with an entropy beyond [0, 1] is not trusted."""
    data = _result(10, 300, 900).to_dict()
    assert rm.RoutingMatters.from_dict(json.loads(json.dumps(data))) == _result(10, 300, 900)
    with pytest.raises(ValueError, match="format 1"):
        rm.RoutingMatters.from_dict(data | {"format": 1})
    with pytest.raises(ValueError, match="entropy must lie from 0 to 1"):
        rm.RoutingMatters.from_dict(data | {"entropy": [1.5, 1, 1, 1, 1]})
    old = {k: v for k, v in data.items() if k not in ("entropy", "seed", "random_correct")}
    with pytest.raises(ValueError, match="not a routing summary"):
        rm.RoutingMatters.from_dict(old | {"format": rm.FORMAT})


def test_one_input_under_each_rule(app_run: Path, test_images) -> None:  # noqa: F811
    net = load_checkpoint(app_run / "best.safetensors").model
    image = test_images.images[0]
    reading = cr.read_input(net, image.numpy(), 3, draws=12)
    whole = cr.read_rules(net, image.unsqueeze(0).expand(12, -1, -1, -1), (1, 3), rm.SEED)
    np.testing.assert_allclose(reading.uniform, whole.scores[0, 0].numpy())
    np.testing.assert_allclose(reading.routed, whole.scores[0, 1].numpy())
    np.testing.assert_allclose(reading.random, whole.scores[:, 2].numpy())
    assert reading.entropy[0] == pytest.approx(1.0) and reading.random.shape == (12, 10)
    names = [str(n) for n in range(10)]
    rows = routing_texts.input_rules_rows(reading, names, "|v|")
    assert [r["Couplings"] for r in rows] == ["Uniform (r = 1, not routed)", "Routed, r = 3",
                                              "Random, 12 draws (not routed)"]  # fmt: skip
    common = np.bincount(reading.random_predictions, minlength=10).argmax()
    assert rows[2]["Answer"] == f"{common} (in {(reading.random_predictions == common).sum()} of the 12 draws)"
    said = routing_texts.input_rules_summary(reading, names)
    assert f"{reading.random_agreeing()} of 12" in said or "every one of 12" in said or "none of 12" in said
    with pytest.raises(ValueError, match="one image of 1x28x28 pixels"):
        cr.read_input(net, np.zeros(10), 3)


def _table(at: AppTest, column: str) -> Any:
    """The page's table with this column (AppTest does not keep a dataframe's key)."""
    return next(frame.value for frame in at.dataframe if column in frame.value.columns)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist", "mnist-em"])
def test_the_experiment_of_each_shipped_mnist_model_is_shown(app_dirs, name: str) -> None:  # noqa: F811
    """Where routing matters shows the shipped model's kept experiment: its table, one row per rule, and a verdict
    that follows the kept numbers; the Routing page reads the current input under each rule when asked."""
    _, checkpoints = app_dirs
    for suffix in (".safetensors", ".routing.json"):
        shutil.copy(SHIPPED / f"{name}{suffix}", checkpoints)
    kept = rm.read_kept(SHIPPED / f"{name}.safetensors", 10_000)
    assert kept is not None, "the shipped summary holds the coupling rules"
    clear_streamlit_caches()
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(checkpoint=name, test="7")
    at.run()
    at.switch_page("app_pages/routing_matters.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    table = _table(at, "Test accuracy")
    assert list(table["Couplings"]) == [routing_texts.rule_name(rule) for rule in kept.rules()]
    assert list(table["Test accuracy"]) == [f"{100 * rule.accuracy:.2f}%" for rule in kept.rules()]
    assert any(m.value == cr.verdict(kept.rules()) for m in at.markdown)

    if name == "mnist":  # the CapsNet's Routing page reads the input under each rule in the browser (the knobs)
        at.switch_page("app_pages/routing.py").run()
        assert not at.exception, [e.stack_trace for e in at.exception]
        header = knobs_payload(at, "routing")[0]
        assert (header["seed"], header["draws"]) == (cr.SEED, cr.DRAWS)  # the draws the server's experiment reads
        return
    at.session_state["input_rules_open"] = True
    at.switch_page("app_pages/em_routing.py").run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    rows = _table(at, "Answer")
    assert list(rows["Couplings"])[0] == "Uniform (r = 1, not routed)" and "20 draws" in list(rows["Couplings"])[-1]
    assert any("random couplings" in m.value for m in at.markdown)
