"""The contract every network family keeps: what it is, and what it can do, declared by the family itself.

In the spirit of timm's model registry: each family registers one `Network` from its own module (`register`), and
every caller asks it what the network can do instead of testing its name or class: whether it routes (`routing`:
none, dynamic routing, EM routing, with the options that come with each), whether it redraws its input
(`redraws`), what its class scores are (`scores`, `score_symbol`), the margins they are trained toward
(`score_margins`), its loss, and its parameter groups for the optimizer (`parameter_groups`). The registry is open:
a new family is one module that calls `register`, and `capsnet.nn.registry` imports the shipped ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from capsnet.nn.losses import CapsuleLoss

RoutingKind = str  # "dynamic", "em", "attention", or a kind a family registered later names


@dataclass(frozen=True)
class Routing:
    """How a network routes its capsules, and the run options that come with it."""

    kind: RoutingKind  # "dynamic": routing by agreement (Sabour et al. 2017); "em": EM routing (Hinton et al. 2018)
    title: str  # for people: "dynamic routing", "EM routing" (a page's notice names the routing it shows)
    # `TrainOptions` fields it reads: those that are fields of the config (routing_iterations) set the config, the
    # others (EM's beta_lr) the training
    options: tuple[str, ...] = ("routing_iterations",)


def one_group(model: nn.Module, lr: float, beta_lr: float) -> list[dict[str, Any]]:
    """Every parameter in one group at the run's rate: a network with no parameters of its own pace."""
    if beta_lr != 1.0:
        raise ValueError(f"--beta-lr {beta_lr}: this network has no beta_u or beta_a to apply it to")
    return [{"params": list(model.parameters())}]


def no_margins(config: Any) -> tuple[float, float] | None:
    """A network whose loss sets no margins for its class scores."""
    return None


@dataclass(frozen=True)
class Network:
    """What one network family is and can do: "network" is the one name for it, in the CLI (`--network`), the
    checkpoint header and the code."""

    name: str  # the registry key, stored in checkpoint headers and run arguments: "capsnet", "cnn", "em"
    title: str  # for people: "CapsNet", "CNN baseline", "EM CapsNet"
    short: str  # before a preset's name in a table: "" (the CapsNet's presets stand alone), "CNN", "EM"
    scores: str  # what its class scores are, for people: "capsule lengths", "class probabilities", ...
    score_symbol: str  # the scores' symbol in a chart: "|v|", "p", "a"
    loss_name: str  # what its loss is, for people: "margin loss", "cross-entropy", "spread loss"
    described: str  # in a sentence: "a Capsule Network", "a CNN baseline"
    config_type: type[Any]
    module_type: type[Any]
    presets: tuple[str, ...]
    routing: Routing | None  # None: no capsules are routed (the CNN)
    baseline: bool  # a baseline the capsule networks are compared with (shipped in checkpoints/baselines/)
    pairs: bool  # can read a task with several labels per example (MultiMNIST's pairs)
    pairs_field: str | None  # the config field that a task with several labels per example sets, if any
    _loss: Callable[..., CapsuleLoss]
    _redraws: Callable[[Any], bool]  # config -> whether the network redraws its input (has a decoder)
    _score_margins: Callable[[Any], tuple[float, float] | None] = no_margins
    _parameter_groups: Callable[[nn.Module, float, float], list[dict[str, Any]]] = one_group
    # the fewest training images from which `torch.compile` pays for itself on a CPU (its half a minute of compiling
    # won back by faster steps), None where it never does: measured in benchmarks/README.md
    cpu_compile_from: int | None = None
    # whether compiling still makes it faster on this CPU: False where it trains by a compiled kernel of its own that
    # `torch.compile` would replace with slower code (the EM network's routing: `capsnet.nn.em_native_training`)
    cpu_compile_needed: Callable[[], bool] = lambda: True
    # whether a GPU evaluates with the compiled module: False where a compiled pass routes the whole evaluation batch
    # at once and the eager one bounds its memory (the EM network: 21.6 GB against 1.35 GB at 500 images on an H100)
    judges_compiled: bool = True
    extra_options: tuple[str, ...] = field(default=())  # run options it reads beyond its routing's

    @property
    def run_options(self) -> tuple[str, ...]:
        """The `TrainOptions` fields that only this network reads (its routing's, then its own)."""
        return (self.routing.options if self.routing else ()) + self.extra_options

    def routes(self) -> Routing:
        """Its routing; ValueError (one line) for a network that does not route, where a routing count was asked."""
        if self.routing is None:
            raise ValueError(f"routing iterations apply to a network that routes, not a {self.title}")
        return self.routing

    def redraws(self, config: Any) -> bool:
        """Whether a network of `config` redraws its input from a class capsule (and has poses to summarise)."""
        return self._redraws(config)

    def score_margins(self, config: Any) -> tuple[float, float] | None:
        """(m+, m-), the margins its loss trains the true and the other classes' scores toward; None without."""
        return self._score_margins(config)

    def parameter_groups(self, model: nn.Module, lr: float, beta_lr: float = 1.0) -> list[dict[str, Any]]:
        """Adam's parameter groups for `model` at `lr`; `beta_lr` multiplies the rate of parameters kept apart
        (the EM layers' learned costs). ValueError where the network has none to apply it to."""
        return self._parameter_groups(model, lr, beta_lr)

    def preset(self, name: str, **overrides: Any) -> Any:
        """The named preset, with field overrides (ValueError for an unknown name or field)."""
        return self.config_type.preset(name, **overrides)

    def config_for(self, preset: str, image_size: int, pairs: bool, **overrides: Any) -> Any:
        """The preset for a task: its input size and, where the network has the field, several labels per example."""
        fields = {"image_size": image_size, **({self.pairs_field: pairs} if self.pairs_field else {}), **overrides}
        return self.preset(preset, **fields)

    def from_dict(self, data: dict[str, Any]) -> Any:
        """A stored config; unknown keys are a ValueError."""
        return self.config_type.from_dict(data)

    def build(self, config: Any) -> Any:
        """A freshly initialised network for `config`."""
        if not isinstance(config, self.config_type):
            raise ValueError(f"a {self.title} needs a {self.config_type.__name__}, got {type(config).__name__}")
        return self.module_type(config)

    def loss(self, out: Any, targets: Tensor, labels: Tensor, config: Any, progress: float = 1.0) -> CapsuleLoss:
        """The training loss: margin + reconstruction for the CapsNet, cross-entropy for the CNN, spread loss (+
        reconstruction, with a decoder) for the EM network.

        `targets` are what reconstructions are compared with (the images, or MultiMNIST's digits alone); `progress`
        (0 to 1) is how far training is, for the EM network's annealed margin (1 when evaluating).
        """
        return self._loss(out, targets, labels, config, progress)


NETWORKS: dict[str, Network] = {}  # filled by `register`, in the order the families' modules are imported


def register(network: Network) -> Network:
    """Add a family to the registry (from its own module); ValueError for a name or config type taken already."""
    if network.name in NETWORKS:
        raise ValueError(f"a network called {network.name!r} is registered already")
    if any(n.config_type is network.config_type for n in NETWORKS.values()):
        raise ValueError(f"{network.config_type.__name__} belongs to a registered network already")
    NETWORKS[network.name] = network
    return network
