"""The run options: one definition for the CLI, the dashboard's form and resume."""

from __future__ import annotations

import dataclasses

import pytest

from capsnet.errors import CapsNetError
from capsnet.nn.config import PRESETS
from capsnet.nn.em_capsnet import EM_PRESETS
from capsnet.nn.registry import NETWORKS
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS
from capsnet.training.options import TrainOptions
from dashboard import train_form


def test_the_command_line_is_generated_from_the_fields_with_their_defaults() -> None:
    parser = TrainOptions.parser()
    flags = {a.dest: a for a in parser._actions if a.dest != "help"}
    fields = {f.name: f for f in dataclasses.fields(TrainOptions)}
    assert set(flags) == set(fields)  # every option on the command line, and nothing else
    for name, action in flags.items():
        assert action.default == fields[name].default, name
        assert action.option_strings[0] == "--" + name.replace("_", "-")
    assert TrainOptions.parse_args([]) == TrainOptions()


@pytest.mark.parametrize(
    "options",
    [
        TrainOptions(),
        TrainOptions(dataset="fashion-mnist", preset="tiny", epochs=3, lr=0.0125, lr_decay=0.9, train_size=500),
        TrainOptions(hflip=False, amp=True, compile=False, progress=False, download=False, seed=-3, out="runs/x"),
        TrainOptions(out="runs/y", resume=True, epochs=7, device="cpu"),
        TrainOptions.from_recipe("fast"),
        TrainOptions.from_recipe("fast", batch_size=128, lr=1e-3, fused_adam=False),  # the paper's values, explicitly
        TrainOptions(schedule="cosine", warmup=0.1),
    ],
)
def test_to_argv_gives_back_the_same_options(options: TrainOptions) -> None:
    argv = options.to_argv()
    assert TrainOptions.parse_args(argv) == options
    assert len(argv) < 2 * len(dataclasses.fields(options))  # defaults are left out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 0}, "--epochs must be at least 1"),
        ({"batch_size": -2}, "--batch-size must be at least 1"),
        ({"lr": 0.0}, "--lr must be greater than 0"),
        ({"lr": float("inf")}, "--lr must be finite"),
        ({"lr": float("nan")}, "--lr must be a number"),
        ({"lr_decay": 1.5}, "--lr-decay must lie in"),
        ({"routing_iterations": 0}, "--routing-iterations must be at least 1"),
        ({"train_size": 0}, "--train-size must be at least 1"),
        ({"dataset": "cifar"}, "unknown --dataset 'cifar'"),
        ({"preset": "mnist"}, "unknown --preset 'mnist'"),
        ({"device": "tpu"}, "unknown --device"),
        ({"epochs": 2.5}, "--epochs must be a whole number"),
        ({"hflip": "yes"}, "--hflip must be true or false"),
        ({"resume": True}, "--resume needs --out"),
        ({"resume": True, "out": "x", "init": "y"}, "choose one"),
        ({"recipe": "slow"}, "unknown --recipe 'slow'"),
        ({"schedule": "step"}, "unknown --schedule 'step'"),
        ({"warmup": 1.0}, "--warmup must lie in"),
        ({"warmup": -0.1}, "--warmup must lie in"),
        ({"fused_adam": "yes"}, "--fused-adam must be true or false"),
        # an option another network reads is refused, not dropped; a preset the network lacks is named
        ({"network": "cnn", "routing_iterations": 5}, r"--routing-iterations applies to the CapsNet only, not the CNN"),
        ({"network": "cnn", "preset": "official"}, "the CNN baseline has no preset 'official'; choose from paper"),
    ],
)
def test_validation_names_the_option(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        TrainOptions(**changes).validate()
    assert isinstance(error.value, CapsNetError)  # a user error: the CLI prints it as one line


def test_resume_keeps_the_fields_that_define_the_run() -> None:
    assert set(TrainOptions.run_fields()) == {
        "dataset", "network", "preset", "batch_size", "lr", "lr_decay", "routing_iterations", "seed", "train_size", "test_size",
        "hflip", "val_size", "recipe", "schedule", "warmup", "beta_lr", "image_size",
    }  # fmt: skip
    stored = TrainOptions(dataset="fashion-mnist", preset="tiny", lr=0.02, batch_size=64, seed=5, epochs=3)
    given = TrainOptions(out="runs/x", resume=True, epochs=9, device="cpu", lr=0.5)
    resumed = given.resumed_from(stored.to_dict())
    assert (resumed.dataset, resumed.preset, resumed.lr, resumed.batch_size, resumed.seed) == (
        "fashion-mnist", "tiny", 0.02, 64, 5,
    )  # fmt: skip
    assert (resumed.epochs, resumed.device, resumed.out, resumed.resume) == (9, "cpu", "runs/x", True)
    # a key the stored file lacks (an older version's) keeps the value given, not the class default
    assert TrainOptions(lr=0.5, seed=3).resumed_from({"dataset": "mnist", "preset": "mnist"}).lr == 0.5


def test_stored_options_are_read_tolerantly() -> None:
    old = {"dataset": "mnist", "preset": "mnist", "epochs": 4, "workers": 2, "started_from": {"checkpoint": "x"}}
    options = TrainOptions.from_dict(old)  # a run begun by an older version: unknown keys, old preset names
    assert options.preset == "paper" and options.epochs == 4
    assert TrainOptions.from_dict({"preset": None}).preset == "paper"
    assert TrainOptions.from_dict(TrainOptions(lr=0.5).to_dict()) == TrainOptions(lr=0.5)
    assert "out" not in TrainOptions(out="x").how_made() and TrainOptions(lr=0.5).how_made()["lr"] == 0.5


def test_the_dashboards_form_starts_from_the_same_defaults() -> None:
    assert train_form.DEFAULTS == TrainOptions()
    assert train_form.form_options() == TrainOptions()  # the form left alone trains exactly the CLI's default run
    assert train_form.form_options(train_size=500, test_size=200).train_size == 500
    # every model the CLI can train
    assert set(train_form.model_labels()) == {(n.name, p) for n in NETWORKS.values() for p in n.presets}
    assert {preset for name, preset in train_form.MODEL_LABELS if name == "capsnet"} == set(PRESETS)
    assert train_form.form_options(network="em", preset="small").network_config() == EM_PRESETS["small"]
    assert train_form.form_options(network="cnn", preset="tiny").to_argv() == ["--network", "cnn", "--preset", "tiny"]
    # the form shows the routing field for every network: a CNN run leaves it at its default instead of failing
    # one bound for the routing iterations: the config's, which the CLI and links use too
    assert train_form.form_options(routing_iterations=MAX_ROUTING_ITERATIONS).routing_iterations == 20
    with pytest.raises(ValueError, match="routing iterations must be a whole number from 1 to 20"):
        train_form.form_options(routing_iterations=MAX_ROUTING_ITERATIONS + 1)
    cnn = train_form.form_options(network="cnn", preset="tiny", routing_iterations=5)
    assert cnn.routing_iterations == TrainOptions().routing_iterations
    assert train_form.form_options(routing_iterations=5).routing_iterations == 5
    with pytest.raises(ValueError, match="model must be one of"):
        train_form.form_options(network="cnn", preset="nonesuch")
    # the EM layers' beta learning-rate multiplier (--beta-lr): an EM run takes it, the others keep the default
    em = train_form.form_options(network="em", preset="tiny", beta_lr=100)
    argv = em.to_argv()
    assert em.beta_lr == 100.0 and "--beta-lr" in argv and argv[argv.index("--beta-lr") + 1] == "100.0"
    assert train_form.form_options(network="capsnet", preset="tiny", beta_lr=100).beta_lr == TrainOptions().beta_lr
    for bad in (0, -1.0, 1e4, float("nan"), True):
        with pytest.raises(ValueError, match="beta learning-rate multiplier must lie between 0.01 and 1000"):
            train_form.form_options(network="em", preset="tiny", beta_lr=bad)


def test_a_recipe_sets_defaults_and_explicit_options_win() -> None:
    fast = TrainOptions.parse_args(["--recipe", "fast"])
    assert fast == TrainOptions.from_recipe("fast")
    assert (fast.schedule, fast.batch_size, fast.lr, fast.warmup) == ("cosine", 64, 2e-3, 0.03)
    assert fast.to_argv() == ["--recipe", "fast"]
    mine = TrainOptions.parse_args(["--lr", "5e-4", "--recipe", "fast", "--batch-size", "128"])
    assert (mine.lr, mine.batch_size, mine.schedule) == (5e-4, 128, "cosine")
    assert TrainOptions.parse_args(mine.to_argv()) == mine
    assert TrainOptions.parse_args(["--recipe", "paper"]) == TrainOptions()
    with pytest.raises(ValueError, match="unknown --recipe"):
        TrainOptions.from_recipe("slow")


def test_a_run_stored_under_the_old_name_resumes_as_its_network() -> None:
    """An args.json written before "model" was renamed "network" resumes the CNN it trained, not a CapsNet."""
    stored = {"dataset": "mnist", "model": "cnn", "preset": "paper", "epochs": 8}
    resumed = TrainOptions(epochs=8).resumed_from(stored)
    assert resumed.network == "cnn" and TrainOptions.from_dict(stored).network == "cnn"
