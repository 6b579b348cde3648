"""How the dashboard words durations and its no-model notice."""

from __future__ import annotations

import math

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from dashboard import claim_texts, novelty_texts, routing_texts, texts, training_texts


def test_format_duration() -> None:
    assert texts.format_duration(0) == "0 s"
    assert texts.format_duration(5) == "5 s"
    assert texts.format_duration(59.6) == "1 min 00 s"  # rounded before splitting
    assert texts.format_duration(125) == "2 min 05 s"
    assert texts.format_duration(3720) == "1 h 02 min"
    for unknown in (None, math.inf, math.nan, -1):
        assert texts.format_duration(unknown) == "—"


def test_no_model_notice_names_the_folder_and_the_command() -> None:
    notice = texts.no_model_notice("/some/checkpoints")
    assert "`/some/checkpoints`" in notice and "python -m capsnet train" in notice


def test_texts_say_what_the_model_in_use_holds() -> None:
    """Numbers the config holds are read from it: a model with other margins or sizes is described as it is."""
    from capsnet.nn.config import CapsNetConfig
    from dashboard import texts

    paper = CapsNetConfig()
    assert "m⁺ = 0.9" in texts.margins(paper) and "0.9 and 0.1" in texts.margins_title(paper)
    assert "176 variants" in texts.figure4(paper, [-0.25, -0.2, -0.15, -0.1, -0.05, 0, 0.05, 0.1, 0.15, 0.2, 0.25])
    assert (
        "1,152" in routing_texts.procedure(paper)
        and "1/10" in routing_texts.procedure(paper)
        and "6x6" in routing_texts.aggregation(paper)
    )
    other = CapsNetConfig(m_plus=0.8, m_minus=0.2, digit_dim=8, primary_types=4, num_classes=5)
    assert "m⁺ = 0.8" in texts.margins(other) and "0.8 and 0.2" in texts.margins_title(other)
    assert "88 variants" in texts.figure4(other, [-0.25, -0.2, -0.15, -0.1, -0.05, 0, 0.05, 0.1, 0.15, 0.2, 0.25])
    assert "144 in this model" in routing_texts.procedure(other) and "1/5" in routing_texts.procedure(other)
    assert "8-dimensional" in texts.capsule(other) and "8 dimensions" in texts.dimensions(other)
    assert "0.0005" in training_texts.training(paper, EMCapsNetConfig(), {}) and "0.0005" in training_texts.loss_help(
        paper
    )
    assert "no usable statistics" in texts.dimension_ranges(False, "3")
    assert "mean ± 2 std" in texts.dimension_ranges(True, "3")


def test_the_votes_reading_never_contradicts_its_own_figure() -> None:
    from capsnet.nn.config import CapsNetConfig

    assert "move little" in routing_texts.votes_reading("3", 0.1, 1152, 10, 3)
    many = routing_texts.votes_reading("3", 0.52, 1152, 10, 3)  # the probe's case: 52% moved, yet "most move little"
    assert "move little" not in many and "52%" in many and "not a mean" in many
    one = routing_texts.votes_reading("3", 0.0, 1152, 10, 1)
    assert "prefer nothing" in one and "not a mean" in one
    assert "sums to 0" in routing_texts.aggregation(CapsNetConfig())


def test_the_robustness_cost_is_said_in_the_units_it_takes() -> None:
    quick = texts.robustness_cost(100, 2, 12.0)
    assert quick.startswith("The first time: about 10 s") and "each of the 2 networks reads 2,200 images" in quick
    assert "Long" not in quick
    slow = texts.robustness_cost(2000, 1, 8 * 60.0)
    assert "about 8 min" in slow and "the network reads 44,000 images" in slow and "**Long:**" in slow


def test_the_transform_lens_says_how_the_open_model_was_trained() -> None:
    """A mnist-40 model was trained for the affine test, on digits anywhere on 40x40; the others on 2-pixel moves."""
    assert "placed anywhere on 40x40 (moved by up to 6 pixels each way)" in texts.robustness("mnist-40")
    assert "moved by up to 2 pixels." in texts.robustness("mnist")
    assert "moved by up to 2 pixels (and mirrored)" in texts.robustness("fashion-mnist")
    assert "both trained for this test" in claim_texts.affnist_claim("mnist-40")
    for name in ("mnist", "fashion-mnist", "unknown"):
        assert "not for this test" in claim_texts.affnist_claim(name)


def test_the_training_intro_says_each_recipes_schedule() -> None:
    """Not "a learning rate that decays every epoch" for the fast recipe, which warms up and decays per batch."""
    from capsnet.nn.config import CapsNetConfig
    from capsnet.training.recipes import RECIPES

    said = training_texts.training(CapsNetConfig(), EMCapsNetConfig(), RECIPES)
    assert "decays every epoch" not in said
    assert "multiplied by 0.96 after every epoch" in said and "cosine decay to zero by the last batch" in said
    assert "`--recipe fast`" in said and "`--recipe paper`" in said


def test_the_training_page_speaks_of_each_network_as_it_is_trained() -> None:
    """The Training runs page lists the runs of every network: its introduction names each one's loss (the EM
    network's margin schedule from its config), and a run's window says what its bars are."""
    em = EMCapsNetConfig(margin_start=0.3, margin_end=0.8, margin_anneal=0.25)
    said = training_texts.training(CapsNetConfig(), em, {})
    assert "*margin loss*" in said and "*spread loss*" in said and "cross-entropy" in said
    assert "from 0.3 to 0.8 over the first 25% of the run" in said
    capsnet = training_texts.training_window("capsnet", 0.85, 0.15, em)
    assert "length of each class capsule" in capsnet and "m⁺ = 0.85" in capsnet and "m⁻ = 0.15" in capsnet
    em_window = training_texts.training_window("em", float("nan"), float("nan"), em)
    assert "activation a_j" in em_window and "from 0.3 to 0.8" in em_window
    assert "length" not in em_window and "m⁺" not in em_window and "nan" not in em_window
    cnn = training_texts.training_window("cnn", float("nan"), float("nan"), em)
    assert "probability of each class" in cnn and "capsule" in cnn and "m⁺" not in cnn


def test_the_novelty_promise_says_what_it_cannot_tell_from_a_digit() -> None:
    """Flagged, as measured: a dot, a scribble, grey noise, X and H; not always: an A, a bar, a photo of noise
    (the promise changed to what the shipped model does)."""
    assert "many letters (an X, an H)" in novelty_texts.NOVELTY
    assert "an A\ncan pass as a 4 and a bar as a 7 (the EM model: as a 1)" in novelty_texts.NOVELTY
    assert (
        "a photo of noise" in novelty_texts.NOVELTY
        and "the shipped EM model also\nflags a smiley" in novelty_texts.NOVELTY
    )
    assert "a letter." not in novelty_texts.NOVELTY


def test_a_capsule_that_barely_moved_is_said_so() -> None:
    """10% against 1/10 = 10% is no favourite."""
    import numpy as np

    names = [str(k) for k in range(10)]
    still = routing_texts.primary_coupling(0.02, np.array([0.1004] + [0.09996] * 9), names, 3)
    assert "barely moved" in still and "sends" not in still
    leaning = routing_texts.primary_coupling(0.8, np.array([0.3] + [0.7 / 9] * 9), names, 3)
    assert "sends 30.0% of its vote to capsule 0" in leaning
    mass = np.array([[1.0] * 10, [1.3] + [1.0] * 9])
    said = routing_texts.vote_share(mass, names, 0)
    assert "|u_i|" in said and "Capsule 0's share grows" in said and "10.00% -> 12.62%" in said


def test_the_live_loss_of_an_em_run_says_why_it_rises() -> None:
    """The spread loss's margin ramps from 0.2 to 0.9, so an EM run's live loss rises (0.49 to 5.2
    in a demo) while it learns: the sidebar's Loss says so; a CapsNet's margin loss, a CNN's, a warm start's and an
    unknown network's say nothing."""
    said = training_texts.running_loss_help({"network": "em", "preset": "tiny"})
    assert said is not None and "spread loss's margin grows from 0.2 to 0.9 over the first 50% of the run" in said
    assert "the loss can rise while the accuracy rises too" in said
    for args in (
        {"network": "capsnet", "preset": "paper"},
        {"network": "cnn", "preset": "tiny"},
        {"network": "em", "preset": "tiny", "init": "checkpoints/mnist-em.safetensors"},
        {"network": "em", "preset": "huge"},
        {"network": "capsule-forest", "preset": "tiny"},
        {},
    ):
        assert training_texts.running_loss_help(args) is None, args


def test_the_lens_names_the_open_network_and_the_pair_its_verdict_is_of() -> None:
    """The EM model's figure beside the CNN's is the EM CapsNet's, not "CapsNet"'s; the affine
    claim's verdict says it is the paper's pair whatever model is open."""
    said = texts.baseline_result("MNIST", "EM CapsNet", 0.9935, 0.9959, pairs=False)
    assert said == "On MNIST's test set: EM CapsNet 99.35% accuracy, CNN baseline 99.59% accuracy."
    assert "whatever model is open: a CapsNet against a CNN" in claim_texts.affnist_claim("mnist")


def test_the_evaluate_page_speaks_of_each_networks_own_score() -> None:
    """The EM network's class scores are activations: its Evaluate page never calls them lengths."""
    em = texts.evaluate("digit", "a")
    assert "activations (a)" in em and "length" not in em and "long at once" not in em
    assert "lengths (|v|)" in texts.evaluate("digit", "|v|")
