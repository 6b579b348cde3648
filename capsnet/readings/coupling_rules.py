"""Coupling rules: one network read with its couplings routed r times, left uniform, or random, on the same weights.

Routing is one way to set the couplings between child and parent capsules. `read_rules` reads images with each
routing layer's couplings routed r = 1..5 times (r = 1: they stay as they start, uniform: no routing; for the EM
network, every child's assignments fixed at their even start) and with random couplings, each child's drawn
uniformly from the simplex, for each image from a seed and its index, and never routed
(`capsnet.nn.routing.RandomCouplings`). `Rule` is one rule's row on a test set against the trained r, with McNemar's
exact test; `verdict` says in words what the rows say; `read_input` is one input under each rule.

Paik, Kwak & Kim (2019), "Capsule Networks Need an Improved Routing Algorithm", https://arxiv.org/abs/1907.13327;
Gu & Tresp (2020), "Improving the Robustness of Capsule Networks to Image Affine Transformations", CVPR,
https://arxiv.org/abs/1911.07968. Where routing matters (`capsnet.readings.routing_matters`) keeps the test set's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch
from torch import Tensor

from capsnet.device import exact_float32
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.nn.registry import network_of
from capsnet.nn.routing import CouplingScores, RandomCouplings, check_iterations

ITERATIONS = (1, 2, 3, 4, 5)
BATCH_SIZE = 128  # u_hat of 128 paper-sized examples is 94 MB (float32)
SEED = 0  # of the random couplings: each image's draw depends on this and its index in the test set alone


@dataclass(frozen=True)
class Rule:
    """One coupling rule's row of the experiment: its test accuracy and the answers it gains and loses against the
    trained r on the same images (`RoutingMatters.rules`)."""

    name: str  # "uniform", "routed" or "random"
    iterations: int  # routing iterations: 1 for uniform and random (their couplings are never updated)
    correct: int
    total: int
    gains: int  # right under this rule, wrong at the trained r
    losses: int  # wrong under this rule, right at the trained r
    entropy: float  # the mean coupling entropy of the class layer (1: uniform)
    trained: bool  # the trained r itself

    @property
    def accuracy(self) -> float:
        return self.correct / self.total

    @property
    def p_value(self) -> float:
        """How likely a difference from the trained r at least this lopsided is by chance: McNemar's exact test."""
        return mcnemar_p(self.gains, self.losses)


def mcnemar_p(gains: int, losses: int) -> float:
    """McNemar's exact two-sided test of paired right/wrong answers: the chance of a split of the gains + losses
    discordant images at least as uneven as this one if either rule were as likely to be the right one (1 when none
    differ). Sums in exact integers, so it is right for any test set's size."""
    if gains < 0 or losses < 0:
        raise ValueError(f"gains and losses must be counts, got {gains} and {losses}")
    n = gains + losses
    if n == 0:
        return 1.0
    term = tail = 1  # C(n, 0); then C(n, k + 1) = C(n, k) (n - k) / (k + 1), exact
    for k in range(min(gains, losses)):
        term = term * (n - k) // (k + 1)
        tail += term
    return min(1.0, float(Fraction(2 * tail, 2**n)))  # 2 P(X <= min); a float that may underflow to 0


def read_rules(
    model: CapsNet | EMCapsNet,
    images: Tensor,
    iterations: Sequence[int] = ITERATIONS,
    seed: int | None = SEED,
    first_index: int = 0,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int, int], None] | None = None,
) -> CouplingScores:
    """Every image's class scores and class-layer coupling entropy under each coupling rule: routed r times for each
    r of `iterations`, then (unless `seed` is None) random couplings not routed, image n's drawn from `seed` and its
    index `first_index + n` (so a chunk of a test set draws what the whole set would). (N, R + 1, K) and (N, R + 1),
    float32, on the CPU.

    Each network says how (`scores_by_coupling`): the CapsNet runs its convolutions and votes once per batch and
    routes them again for each rule; the EM network routes every capsule layer under each rule (its first capsule
    layer once for every r, the later ones again for each r, as their votes depend on the layer before).
    `on_batch(done, total)` after each batch. The model is used in inference mode and left as it was.
    """
    network_of(model).routes()  # ValueError for a network that does not route
    if len(iterations) == 0 or min(iterations) < 1:
        raise ValueError(f"iterations must be at least 1, got {list(iterations)}")
    if images.dim() != 4 or len(images) == 0:
        raise ValueError(f"expected a non-empty batch of images (N, C, H, W), got {tuple(images.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    weight = next(model.parameters())
    device, dtype = weight.device, weight.dtype
    was_training = model.training
    model.eval()
    scores, entropy = [], []
    try:
        with torch.inference_mode(), exact_float32():  # a GPU's answers are then the CPU's
            for start in range(0, len(images), batch_size):
                x = images[start : start + batch_size].to(device, dtype)  # (B, C, H, W)
                ids = torch.arange(first_index + start, first_index + start + len(x))  # (B,)
                random = None if seed is None else RandomCouplings(seed, ids)
                read = model.scores_by_coupling(x, iterations, random)  # (B, R', K), (B, R')
                scores.append(read.scores.float().cpu())
                entropy.append(read.entropy.float().cpu())
                if on_batch is not None:
                    on_batch(min(start + batch_size, len(images)), len(images))
    finally:
        model.train(was_training)
    return CouplingScores(torch.cat(scores), torch.cat(entropy))  # (N, R', K), (N, R')


@dataclass(frozen=True)
class InputRules:
    """One input read under each coupling rule on the same weights (`read_input`)."""

    iterations: int  # the routed r
    uniform: np.ndarray  # (K,) class scores with uniform couplings (r = 1)
    routed: np.ndarray  # (K,) routed r times
    random: np.ndarray  # (draws, K) with random couplings, one row per draw
    entropy: tuple[float, float, float]  # the class layer's coupling entropy: uniform, routed, random (their mean)

    @property
    def random_predictions(self) -> np.ndarray:
        return self.random.argmax(axis=1)  # (draws,)

    def random_majority(self) -> tuple[int, int]:
        """The answer most random draws give, and how many give it."""
        counts = np.bincount(self.random_predictions, minlength=len(self.routed))  # (K,)
        return int(counts.argmax()), int(counts.max())

    def random_agreeing(self) -> int:
        """How many random draws give the routed answer."""
        return int((self.random_predictions == int(self.routed.argmax())).sum())


DRAWS = 20  # random couplings drawn for one input


def read_input(
    model: CapsNet | EMCapsNet, image: np.ndarray | Tensor, iterations: int, draws: int = DRAWS, seed: int = SEED
) -> InputRules:
    """One image (its C*H*W pixels in any shape) read with uniform couplings, routed `iterations` times, and with
    `draws` random couplings (draw n as test image n would get it)."""
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    c = model.config
    shape = (c.in_channels, c.image_size, c.image_size)
    pixels = torch.as_tensor(np.asarray(image, dtype=np.float32))
    if pixels.numel() != math.prod(shape):
        raise ValueError(f"expected one image of {'x'.join(map(str, shape))} pixels, got {pixels.numel()}")
    rs = sorted({1, check_iterations(iterations)})
    batch = pixels.reshape(1, *shape).expand(draws, *shape)  # (draws, C, H, W)
    read = read_rules(model, batch, rs, seed, batch_size=draws)  # (draws, R + 1, K), (draws, R + 1)
    scores, entropy = read.scores.numpy(), read.entropy.numpy()
    routed = rs.index(iterations)
    return InputRules(
        iterations=iterations,
        uniform=scores[0, 0],
        routed=scores[0, routed],
        random=scores[:, -1],
        entropy=(float(entropy[0, 0]), float(entropy[0, routed]), float(entropy[:, -1].mean())),
    )


SIGNIFICANCE = 0.05  # a difference from the trained r with a McNemar p below this is called real, not chance
NEARLY_UNIFORM = 0.9  # a mean coupling entropy above this is "close to uniform"
PAPERS = (
    "Paik, Kwak & Kim (2019) report that uniform or random couplings often do as well as routing; Gu & Tresp (2020) "
    "that a CapsNet without routing is as accurate and more robust to affine changes."
)


def _label(rule: Rule) -> str:
    if rule.name == "random":
        return "random couplings"
    return "uniform couplings" if rule.name == "uniform" else f"routing at r = {rule.iterations}"


def _compare(own: Rule, rule: Rule) -> str:
    """One sentence: the trained r against `rule`, with the discordant images and McNemar's p."""
    p = rule.p_value
    chance = f"p = {p:.2g}" if p >= 0.001 else "p < 0.001"
    split = f"{rule.losses:,} right only when routed, {rule.gains:,} only with {rule.name} couplings; {chance}"
    if p >= SIGNIFICANCE:
        return f"with {_label(rule)} it is {100 * rule.accuracy:.2f}%, no different beyond chance ({split})"
    gap = 100 * (own.correct - rule.correct) / own.total
    side = "ahead of" if gap > 0 else "behind"
    return f"it is {abs(gap):.2f} points {side} {_label(rule)} ({100 * rule.accuracy:.2f}%; {split})"


FEW_IMAGES = 1_000  # below this, the verdict says that its test set is small


def verdict(rules: Sequence[Rule]) -> str:
    """What the experiment says, in words that follow its numbers (`RoutingMatters.rules`, random last): the trained
    r against uniform and random couplings on the same weights (McNemar's exact test on the images they disagree
    on), then how peaked the routed couplings are, then the papers."""
    own = next(rule for rule in rules if rule.trained)
    fixed = [rule for rule in rules if rule.name in ("uniform", "random") and rule is not own]
    lines = [f"Routed at r = {own.iterations}, the model is right on {100 * own.accuracy:.2f}% of {own.total:,}; "
             + "; ".join(_compare(own, rule) for rule in fixed) + "."]  # fmt: skip
    ahead = [rule for rule in fixed if rule.p_value < SIGNIFICANCE and own.correct > rule.correct]
    behind = [rule for rule in fixed if rule.p_value < SIGNIFICANCE and own.correct < rule.correct]
    if behind:
        lines.append(f"On these weights routing does worse than {' and '.join(map(_label, behind))}.")
    elif len(ahead) == len(fixed):
        gap = min(100 * (own.correct - rule.correct) / own.total for rule in ahead)
        size = "by little" if gap < 0.5 else "by a wide margin" if gap >= 5 else "clearly"
        lines.append(f"On these weights routing matters, {size}: couplings that are not routed lose at least "
                     f"{gap:.2f} points.")  # fmt: skip
    elif ahead:
        level = [rule for rule in fixed if rule not in ahead]
        lines.append(f"Routing beats {' and '.join(map(_label, ahead))}, but {' and '.join(map(_label, level))} "
                     "do as well.")  # fmt: skip
    else:
        lines.append("On these weights routing adds nothing measurable: fixed couplings do as well.")
    if own.total < FEW_IMAGES:
        lines.append(f"A caution: {own.total:,} test images are few (one image is {100 / own.total:.2f} points), so "
                     "only a large difference is told from chance; a larger test set says more.")  # fmt: skip
    random = rules[-1]
    shape = "stay close to uniform" if own.entropy > NEARLY_UNIFORM else "concentrate each child on few parents"
    lines.append(f"The routed couplings {shape} (mean entropy {own.entropy:.3f}, where uniform is 1 and random "
                 f"couplings average {random.entropy:.3f}).")  # fmt: skip
    return " ".join(lines + [PAPERS])
