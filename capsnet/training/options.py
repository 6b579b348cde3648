"""The options of a training run: one typed class with its defaults, validation and command line.

`TrainOptions` is the only place a training option is defined. The trainer's command line
(`python -m capsnet train --help`) is generated from its fields, the dashboard's training form
takes its defaults from it, and the process manager starts the trainer with `to_argv()`.
Each field's metadata says how it appears on the command line and whether it *defines the
run* (a resumed run keeps the stored value of those: its data, model and schedule).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from capsnet.data import image_folder
from capsnet.data.datasets import DATASETS, dataset_info
from capsnet.data.tasks import Task
from capsnet.device import DEVICE_CHOICES
from capsnet.errors import ArgumentParser, CapsNetError, InvalidArgumentError
from capsnet.nn.registry import NETWORK_NAMES, NETWORKS, AnyConfig, network
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS
from capsnet.training.acceleration import Acceleration, choose_acceleration
from capsnet.training.folder_defaults import default_recipe, recipe_values
from capsnet.training.recipes import RECIPES
from capsnet.training.schedule import SCHEDULES

MAX_SEED = 2**32 - 1  # NumPy's seeds
COMPUTE_CHOICES = ("amp", "fused_adam", "compile")  # None: chosen for the machine (capsnet.training.acceleration)

# options renamed since runs were first stored (args.json, headers' recipes), and the old flags still accepted
RENAMED = {"model": "network"}  # one name for the network: --network, a header's "network", capsnet.nn.registry
# the model presets of runs begun before the presets were named after the network rather than the dataset
LEGACY_PRESETS = {"mnist": "paper", "fashion-mnist": "paper", None: "paper"}


def option(
    help: str,
    *,
    choices: Sequence[str] | None = None,
    positive: bool = False,
    defines_run: bool = False,
    recipe: bool = True,
) -> dict[str, Any]:
    """A field's metadata: its --help text, its allowed values, and its role.

    positive: must be > 0 (at least 1 for whole numbers); defines_run: a resumed run keeps the
    stored value; recipe: recorded in the checkpoints' header as part of how the model was made.
    """
    return {"help": help, "choices": choices, "positive": positive, "defines_run": defines_run, "recipe": recipe}


@dataclass
class TrainOptions:
    """Everything a training run needs. Defaults are the paper's recipe (section 4 and the official code)."""

    dataset: str = field(
        default="mnist",
        metadata=option(f"dataset: {', '.join(DATASETS)}, or a folder of labelled pictures (one sub-folder per class)",
                        defines_run=True),
    )  # fmt: skip
    image_size: int | None = field(
        default=None,
        metadata=option("a folder's pictures read at N x N (default: their median shorter side, 28 to 64)",
                        positive=True, defines_run=True),
    )  # fmt: skip
    recipe: str = field(
        default="paper",
        metadata=option("a named set of defaults for the options below (capsnet.training.recipes): paper, fast for a short "
                        "CPU budget, folder (a folder's default: chosen from its size); options given explicitly still "
                        "win", choices=tuple(RECIPES), defines_run=True),
    )  # fmt: skip
    network: str = field(
        default="capsnet",
        metadata=option("network: the paper's Capsule Network, or its CNN baseline (capsnet.nn.cnn)",
                        choices=NETWORK_NAMES, defines_run=True),
    )  # fmt: skip
    preset: str = field(
        default="paper",
        metadata=option("model preset: the paper's network (on MultiMNIST's pairs; no-routing: its couplings left "
                        "uniform), or a tiny one for tests and demos; the EM network's: paper, paper-decoder, small, "
                        "small-decoder, tiny; Efficient-CapsNet's: paper, tiny",
                        choices=tuple(dict.fromkeys(p for n in NETWORKS.values() for p in n.presets)), defines_run=True),
    )  # fmt: skip
    epochs: int = field(default=10, metadata=option("total epochs (also when resuming)", positive=True))
    batch_size: int = field(default=128, metadata=option("images per batch", positive=True, defines_run=True))
    lr: float = field(default=1e-3, metadata=option("Adam learning rate", positive=True, defines_run=True))
    lr_decay: float = field(
        default=0.96, metadata=option("learning-rate factor after every epoch, in (0, 1]", positive=True,
                                      defines_run=True)
    )  # fmt: skip
    schedule: str = field(
        default="exponential",
        metadata=option("learning-rate schedule: exponential (x lr-decay after every epoch) or cosine (warm-up, "
                        "then a cosine decay to zero by the last batch)", choices=SCHEDULES, defines_run=True),
    )  # fmt: skip
    warmup: float = field(
        default=0.0,
        metadata=option("cosine schedule: the fraction of the run's batches spent warming up, in [0, 1)",
                        defines_run=True),
    )  # fmt: skip
    beta_lr: float = field(
        default=1.0,
        metadata=option("EM network: the learning-rate multiplier of the per-type costs beta_u and beta_a (one number "
                        "per capsule type, which Adam moves by about lr a step however far they must go)",
                        positive=True, defines_run=True),
    )  # fmt: skip
    routing_iterations: int = field(default=3, metadata=option("routing iterations r", positive=True, defines_run=True))
    seed: int = field(default=0, metadata=option("seed of the weights, the order and the shifts", defines_run=True))
    device: str = field(default="auto", metadata=option("auto: CUDA, else Apple MPS, else CPU", choices=DEVICE_CHOICES))
    train_size: int | None = field(
        default=None, metadata=option("train on a random subset of N images", positive=True, defines_run=True)
    )
    val_size: int | None = field(
        default=None,
        metadata=option(
            "hold out N training images as a validation set: the best epoch is chosen on it, not on the test set",
            positive=True, defines_run=True,
        ),
    )  # fmt: skip
    test_size: int | None = field(
        default=None, metadata=option("evaluate on a random subset of N images", positive=True, defines_run=True)
    )
    hflip: bool | None = field(
        default=None, metadata=option("random horizontal flips (default: on for Fashion-MNIST)", defines_run=True)
    )
    amp: bool | None = field(
        default=None,
        metadata=option(
            "bf16 autocast (default: on CUDA, and on a CPU that computes bf16 natively: AVX512-BF16 or AMX)"
        ),
    )
    fused_adam: bool | None = field(
        default=None, metadata=option("Adam fused into one kernel (default: on a CPU, where it is faster)")
    )
    compile: bool | None = field(
        default=None,
        metadata=option(
            "torch.compile (default: on for CUDA, and on a CPU for a network that trains faster compiled there, the "
            "EM network, in a run of at least 10,000 training images)"
        ),
    )
    data_dir: str | None = field(
        default=None, metadata=option("dataset root (default: $CAPSNET_DATA_DIR, else ./data)", recipe=False)
    )
    download: bool = field(
        default=True, metadata=option("fetch a missing dataset from torchvision's mirrors", recipe=False)
    )
    out: str | None = field(
        default=None,
        metadata=option("run folder (default: <timestamp>-<dataset> in $CAPSNET_RUNS_DIR, else runs/)", recipe=False),
    )
    resume: bool = field(default=False, metadata=option("continue the run in --out from its last state", recipe=False))
    init: str | None = field(
        default=None,
        metadata=option(
            "start from this checkpoint's weights, with a fresh optimizer (the EM network's spread margin starts "
            "at its end, 0.9: the checkpoint is past the ramp)"
        ),
    )
    progress: bool = field(default=True, metadata=option("the progress bar on stderr", recipe=False))

    # ------------------------------------------------------------ validation

    def __post_init__(self) -> None:
        """A folder dataset named with the side it is read at (`photos@32`): a run's args.json and its checkpoints'
        headers then say which pictures at which size, whatever the folder's default later becomes (`sized`)."""
        if self.image_size is not None:
            if self.dataset in DATASETS:
                raise InvalidArgumentError(f"--image-size applies to a folder of pictures, not to {self.dataset}")
            self.dataset = image_folder.with_side(self.dataset, self.image_size)

    def sized(self) -> TrainOptions:
        """These options with a folder dataset's side chosen (`--image-size`, else the folder's default)."""
        if self.image_size is not None or self.dataset in DATASETS:
            return self
        return dataclasses.replace(self, image_size=dataset_info(self.dataset).image_size)

    def validate(self) -> TrainOptions:
        """Raise InvalidArgumentError (a ValueError) naming the option and the value; return self when fine."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value, meta, flag = getattr(self, f.name), f.metadata, _flag(f.name)
            kind = _base_type(hints[f.name])
            if value is None and _optional(hints[f.name]):
                continue
            if kind is bool:
                if not isinstance(value, bool):
                    raise InvalidArgumentError(f"{flag} must be true or false, got {value!r}")
                continue
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgumentError(f"{flag} must be a whole number, got {value!r}")
            if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)):
                raise InvalidArgumentError(f"{flag} must be a number, got {value!r}")
            if kind is str and not isinstance(value, str):
                raise InvalidArgumentError(f"{flag} must be text, got {value!r}")
            if meta["choices"] is not None and value not in meta["choices"]:
                raise InvalidArgumentError(f"unknown {flag} {value!r}; choose from {', '.join(meta['choices'])}")
            if meta["positive"] and not value > 0:
                least = "at least 1" if kind is int else "greater than 0"
                raise InvalidArgumentError(f"{flag} must be {least}, got {value}")
        if not math.isfinite(self.lr):
            raise InvalidArgumentError(f"--lr must be finite, got {self.lr}")
        if not 0 <= self.seed <= MAX_SEED:
            raise InvalidArgumentError(f"--seed must lie in 0..{MAX_SEED}, got {self.seed}")
        if self.routing_iterations > MAX_ROUTING_ITERATIONS:
            raise InvalidArgumentError(
                f"--routing-iterations must be at most {MAX_ROUTING_ITERATIONS}, got {self.routing_iterations}"
            )
        if not (isinstance(self.warmup, (int, float)) and 0 <= self.warmup < 1):
            raise InvalidArgumentError(f"--warmup must lie in [0, 1), got {self.warmup}")
        if not math.isfinite(self.beta_lr):
            raise InvalidArgumentError(f"--beta-lr must be finite, got {self.beta_lr}")
        if not 0 < self.lr_decay <= 1:
            raise InvalidArgumentError(f"--lr-decay must lie in (0, 1], got {self.lr_decay}")
        if self.dataset not in DATASETS and image_folder.parse(self.dataset) is None:
            raise InvalidArgumentError(f"unknown --dataset {self.dataset!r}; choose from {', '.join(DATASETS)}, or name "
                                       "a folder of labelled pictures")  # fmt: skip
        chosen = network(self.network)
        if self.preset not in chosen.presets:
            raise InvalidArgumentError(
                f"the {chosen.title} has no preset {self.preset!r}; choose from {', '.join(chosen.presets)}"
            )
        if not chosen.pairs and Task.of(dataset_info(self.dataset)).pairs:
            raise InvalidArgumentError(f"the {chosen.title} reads one digit per image, not {self.dataset}'s pairs")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for other in NETWORKS.values():  # an option of another network is refused, not dropped
            for name in set(other.run_options) - set(chosen.run_options):
                if getattr(self, name) != defaults[name]:
                    raise InvalidArgumentError(
                        f"{_flag(name)} applies to the {other.title} only, not the {chosen.title} (--network {self.network})"
                    )
        self._check_buildable()
        if self.resume and not self.out:
            raise InvalidArgumentError("--resume needs --out, the run folder to continue")
        if self.resume and self.init:
            raise InvalidArgumentError("--init starts a new run from weights; --resume continues a run: choose one")
        return self

    def _check_buildable(self) -> None:
        """The network's config is built here, before anything else is: a size its kernels and strides cannot read
        is one line naming --image-size and the smallest side that works, not a traceback from deep in the run."""
        try:
            self.network_config()
        except CapsNetError:
            raise  # the dataset's own one-line errors
        except ValueError as error:
            title = network(self.network).title
            if self.image_size is None:
                raise InvalidArgumentError(f"the {title} cannot be built for {self.dataset}: {error}") from None
            fits = next(
                (side for side in range(self.image_size, image_folder.MAX_SIDE + 1) if self._builds_at(side)), None
            )
            reads = (
                f"the smallest side it reads is {fits}" if fits else f"it reads no side up to {image_folder.MAX_SIDE}"
            )
            raise InvalidArgumentError(
                f"--image-size {self.image_size} is too small for the {title} ({error}): {reads}"
            ) from None

    def _builds_at(self, side: int) -> bool:
        try:
            dataclasses.replace(self, image_size=side).network_config()
        except ValueError:
            return False
        return True

    def cpu_compile_pays(self) -> bool:
        """Whether compiling wins back its time on a CPU: the network trains faster compiled there (and has no faster
        kernel of its own: `Network.cpu_compile_needed`) and the run trains at least `Network.cpu_compile_from` images
        (the whole training set, or epochs x --train-size)."""
        chosen = network(self.network)
        fewest = chosen.cpu_compile_from
        if fewest is None or not chosen.cpu_compile_needed():
            return False
        return self.train_size is None or self.epochs * self.train_size >= fewest

    def acceleration(self, device: torch.device) -> Acceleration:
        """How the run computes on `device`: --amp, --fused-adam and --compile as given, else as the hardware (and for
        compiling on a CPU, the network and the run's length) suggest."""
        return choose_acceleration(device, self.amp, self.fused_adam, self.compile, cpu_compile=self.cpu_compile_pays())

    def network_config(self) -> AnyConfig:
        """The config of this run's network: its preset at the dataset's input size and number of classes, with the
        options it reads."""
        chosen, info = network(self.network), dataset_info(self.dataset)
        configured = {f.name for f in dataclasses.fields(chosen.config_type)}
        own = {name: getattr(self, name) for name in chosen.run_options if name in configured}
        read = Task.of(info)
        fields = {"num_classes": info.num_classes, "in_channels": info.channels, **own}
        return chosen.config_for(self.preset, read.input_size, read.pairs, **fields)

    # ------------------------------------------------------------ stored forms

    @staticmethod
    def run_fields() -> tuple[str, ...]:
        """The fields that define a run: a resumed run takes these from its args.json, whatever is given."""
        return tuple(f.name for f in dataclasses.fields(TrainOptions) if f.metadata["defines_run"])

    def to_dict(self) -> dict[str, Any]:
        """All fields, for the run folder's args.json."""
        return dataclasses.asdict(self)

    def how_made(self) -> dict[str, Any]:
        """The fields that say how a model was made (for a checkpoint's header): no paths, no switches."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["recipe"]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainOptions:
        """Options from a stored args.json: unknown keys (older or newer versions) are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        data = {**{new: data[old] for old, new in RENAMED.items() if old in data and new not in data}, **data}
        values = {k: v for k, v in data.items() if k in known}
        if (
            "preset" in values
            and isinstance(values["preset"], (str, type(None)))
            and values["preset"] in LEGACY_PRESETS
        ):
            values["preset"] = LEGACY_PRESETS[values["preset"]]
        return cls(**values)

    def resumed_from(self, stored: dict[str, Any], given: Collection[str] = ()) -> TrainOptions:
        """These options with the run-defining fields that `stored` (a resumed run's args.json) holds, and its explicit
        choices of how to compute (--amp, --fused-adam, --compile and their --no- forms) where none is given now.

        A run-defining option `given` on the command line with another value than the run's is refused in one line
        (never ignored without a word).
        """
        stored = {**{new: stored[old] for old, new in RENAMED.items() if old in stored}, **stored}  # older names
        known = TrainOptions.from_dict(stored)
        kept = {name: getattr(known, name) for name in self.run_fields() if name in stored}
        clash = [
            name for name in self.run_fields() if name in given and name in kept and getattr(self, name) != kept[name]
        ]
        if clash:
            asked = " ".join(f"{_flag(name)} {getattr(self, name)}" for name in clash)
            begun = " ".join(f"{_flag(name)} {kept[name]}" for name in clash)
            raise InvalidArgumentError(
                f"--resume continues the run as it was begun ({begun}): leave out {asked}, or start a new run"
            )
        kept |= {name: getattr(known, name) for name in COMPUTE_CHOICES if getattr(self, name) is None}
        return dataclasses.replace(self, **kept)

    # ------------------------------------------------------------ the command line

    def to_argv(self) -> list[str]:
        """The trainer's arguments that give these options: every field that differs from its recipe's default."""
        argv: list[str] = []
        recipe = recipe_values(self.recipe, self.dataset, self.network) if self.recipe in RECIPES else {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == recipe.get(f.name, f.default) and f.name != "recipe":
                continue
            if f.name == "recipe" and value == default_recipe(self.dataset):  # what the command line takes unasked
                continue
            if isinstance(value, bool):
                argv.append(_flag(f.name) if value else "--no-" + _flag(f.name)[2:])
            elif value is not None:
                argv += [_flag(f.name), repr(float(value)) if isinstance(value, float) else str(value)]
        return argv

    @classmethod
    def parser(cls, prog: str = "python -m capsnet train", defaults: bool = True) -> ArgumentParser:
        """The command line, generated from the fields: one flag each, with the field's default and help (without
        defaults, what it parses holds the flags given only)."""
        parser = ArgumentParser(prog=prog, description="Train a Capsule Network (Sabour, Frosst & Hinton 2017).")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            meta, kind = f.metadata, _base_type(hints[f.name])
            shown = "" if f.default is None else f" (default: {f.default})"
            if kind is bool:
                parser.add_argument(
                    _flag(f.name),
                    action=argparse.BooleanOptionalAction,
                    default=f.default if defaults else argparse.SUPPRESS,
                    help=meta["help"],
                )
                continue
            convert: Any = {int: int, float: float, str: str}[kind]
            if meta["positive"]:
                convert = ArgumentParser.positive_int if kind is int else ArgumentParser.positive_float
            elif kind is int:
                convert = ArgumentParser.whole_number
            names = [_flag(f.name), *(_flag(old) for old, new in RENAMED.items() if new == f.name)]
            parser.add_argument(
                *names,
                dest=f.name,
                type=convert,
                default=f.default if defaults else argparse.SUPPRESS,
                choices=meta["choices"],
                help=meta["help"] + shown,
            )
        return parser

    @classmethod
    def from_recipe(cls, recipe: str = "paper", **values: Any) -> TrainOptions:
        """Options with `recipe`'s defaults, then `values` (explicit choices win over the recipe)."""
        base = recipe_values(recipe, values.get("dataset", cls.dataset), values.get("network", cls.network))
        return cls(**{**base, **values, "recipe": recipe})

    @classmethod
    def parse_args(cls, argv: Sequence[str] | None = None) -> TrainOptions:
        """Options from a command line (argument errors exit with one line, as argparse does).

        The recipe's values replace the defaults, so that a flag given explicitly still wins; without --recipe, a
        folder of pictures takes the folder recipe (`capsnet.training.folder_defaults`).
        """
        parser = cls.parser()
        known, _ = parser.parse_known_args(argv)
        if "recipe" not in cls.given(argv):
            known.recipe = default_recipe(known.dataset)
            parser.set_defaults(recipe=known.recipe)
        if known.recipe in RECIPES:
            parser.set_defaults(**recipe_values(known.recipe, known.dataset, known.network))
        return cls(**vars(parser.parse_args(argv)))

    @classmethod
    def given(cls, argv: Sequence[str] | None = None) -> frozenset[str]:
        """The fields a command line sets explicitly (a flag given, whatever its value)."""
        return frozenset(vars(cls.parser(defaults=False).parse_known_args(argv)[0]))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _base_type(hint: Any) -> type:
    """int for `int | None`, and so on."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def stored_network(args: dict[str, Any]) -> str:
    """The network a stored args.json names ("network", or "model" before it was renamed; a CapsNet before both)."""
    return str(args.get("network") or args.get("model") or "capsnet")
