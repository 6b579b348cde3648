"""The words around routing: Procedure 1 and its formulas, how to read the votes, a primary capsule's couplings,
the shares of the votes, and the stroke maps (Routing and Overlapping digits pages)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from capsnet.nn.config import CapsNetConfig
from capsnet.readings.agreement import vote_shares
from capsnet.readings.coupling_rules import InputRules, Rule
from capsnet.readings.routing_matters import RoutingMatters
from dashboard.figures.agreement import VISIBLE_SHARE_CHANGE, shows_share_changes


def procedure(config: CapsNetConfig) -> str:
    g, k = config.primary_grid, config.num_classes
    if config.none_of_the_above:  # section 7: one more parent, whose logit stays 0 and whose share is dropped
        return rf"""
**Routing by agreement (Procedure 1 of the paper), with a "none of the above" category.** Each of the primary
capsules $i$ ({config.primary_types} types on a {g}x{g} grid: {config.num_primary:,} in this model) *predicts* every
class capsule $j$ through a learned matrix: $\hat u_{{j|i}} = W_{{ij}} u_i$. Its **coupling coefficients** $c_{{ij}}$
share its vote between the {k} class capsules and one more parent that stands for *none of the above* (section 7 of
the paper, for CIFAR-10's cluttered photos): its logit stays 0 and its share goes nowhere, so a child's couplings sum
to less than 1 ($c_{{ij}} = \exp b_{{ij}} / (1 + \sum_k \exp b_{{ik}})$). They start equal, $1/{k + 1}$ each; each
iteration raises $b_{{ij}}$ where the prediction **agrees** with the class capsule's output, and a child that agrees
with no class sends most of its vote to none of them.
"""
    return f"""
**Routing by agreement (Procedure 1 of the paper).** Each of the primary capsules $i$
({config.primary_types} types on a {g}x{g} grid: {config.num_primary:,} in this model) *predicts*
every class capsule $j$ (the paper's DigitCaps) through a learned matrix: $\\hat u_{{j|i}} = W_{{ij}} u_i$. Routing decides how
much of each prediction goes to each class capsule with **coupling coefficients** $c_{{ij}}$ that
sum to 1 over $j$. They start equal ($b_{{ij}} = 0$, so $c_{{ij}} = 1/{k}$); each iteration then
raises $b_{{ij}}$ where the prediction **agrees** with the class capsule's current output
($\\hat u_{{j|i}} \\cdot v_j$ is large), so primary capsules send more of their vote to the parent
they agree with.
"""


PROCEDURE_LATEX = [
    r"c_{ij} = \frac{\exp b_{ij}}{\sum_k \exp b_{ik}}",
    r"s_j = \sum_i c_{ij}\, \hat u_{j|i}",
    r"v_j = \operatorname{squash}(s_j)",
    r"b_{ij} \leftarrow b_{ij} + \hat u_{j|i} \cdot v_j",
]


def aggregation(config: CapsNetConfig) -> str:
    g = config.primary_grid
    return f"""
**How the {config.num_primary:,} couplings are summarised.** For each of the primary-capsule *types*
(rows) the heatmap shows the mean of $c_{{ij}}$ over its {g}x{g} positions, each position counting in
proportion to its capsule's length $\\lVert u_i \\rVert$: a
capsule that detected nothing predicts nothing and keeps the uniform $1/{config.num_classes}$, so
weighting shows where the evidence that is really there is sent. Each capsule's couplings sum to 1
over the class capsules, so a row of the change from uniform, $c_{{ij}} - 1/{config.num_classes}$, sums to 0:
what one class gains, the others lose.
"""


def votes_reading(name: str, moved_share: float, children: int, k: int, iterations: int) -> str:
    """How to read the votes figures, with how much routing moved the couplings for this input."""
    if iterations == 1:
        return (
            f"**Reading the votes.** Each point is one primary capsule's vote for capsule {name}, on two axes that "
            f"stay fixed: to the right, along the consensus v_j. With one iteration every vote has the same weight, "
            f"1/{k}: s_j is their sum weighted by 1/{k} (not a mean: with {children:,} votes it can lie far from "
            f"every one of them), and v_j its squash. Uniform couplings prefer nothing, so nothing is coloured yet. "
            f"Add iterations to watch agreement reweigh them."
        )
    return (
        f"**Reading the votes.** Each point is one primary capsule's vote for capsule {name}, on two axes that stay "
        f"fixed across iterations: to the right, along the consensus v_j (further right: more agreement); "
        f"upwards, the main way the votes differ. Size and colour are the weight c_ij routing gives the vote "
        f"(red: more than the uniform 1/{k}, blue: less); ✕ is their weighted sum s_j (a sum over {children:,} "
        f"votes, not a mean, so it can lie far outside them), ◆ the capsule v_j = squash(s_j). Step through the iterations (◀ ▶ above): "
        f"votes that agree with the consensus gain weight, outliers lose it. Here {moved_share:.0%} of the "
        f"{children:,} couplings to capsule {name} moved more than 0.01 from 1/{k}"
        + (
            ": in this trained network most couplings move little; routing tidies up the few votes that "
            "disagree, and those are the large red and blue points."
            if moved_share < 0.5
            else ": routing reweighs much of the evidence for this input; the large red and blue points moved most."
        )
    )


BARELY = 0.005  # a coupling within this of 1/K has barely moved: it is said so, not called a favourite


def primary_coupling(length: float, coupling: np.ndarray, names: Sequence[str], step: int, leak: bool = False) -> str:
    """The selected primary capsule after iteration `step`: where its vote goes, or that routing barely moved it.
    `leak`: the model routes with a "none-of-the-above" category (uniform is 1/(K+1), the rest goes to no class)."""
    k = len(coupling) + int(leak)
    favourite = int(np.argmax(coupling))
    said = f"Its pose is {length:.2f} long (how sure it is that its feature is in its square); after iteration {step} "
    lost = f" and {1 - float(np.sum(coupling)):.1%} to none of the above" if leak else ""
    if abs(float(coupling[favourite]) - 1 / k) < BARELY:
        return said + (
            f"its couplings have barely moved: every one is within {BARELY:.1%} of 1/{k} = {1 / k:.1%}, as before "
            f"routing (a capsule that is short, or whose votes agree with no consensus more than another's){lost}."
        )
    return said + (
        f"it sends {float(coupling[favourite]):.1%} of its vote to capsule {names[favourite]}{lost}, "
        f"against 1/{k} = {1 / k:.1%} for each before routing."
    )


def vote_share(mass: np.ndarray, names: Sequence[str], capsule: int) -> str:
    """What the share chart shows: each vote weighted by its capsule's length, and how the winner's share moves."""
    share = vote_shares(mass)  # (r, K)
    first, last = float(share[0, capsule]), float(share[-1, capsule])
    moves = " -> ".join(f"{100 * float(v):.2f}%" for v in share[:, capsule])
    change = "barely changes" if abs(last - first) < BARELY else ("grows" if last > first else "shrinks")
    return (
        f"Each vote counts as much as its primary capsule is sure of its feature (|u_i|), so the many capsules "
        f"that detect nothing do not drown the rest. Capsule {names[capsule]}'s share {change} over the "
        f"iterations: {moves}."
        + (f" Every share stays within {VISIBLE_SHARE_CHANGE:.0%} of where it started, so the chart shows how far each "
           "moved." if shows_share_changes(mass) else "")
    )  # fmt: skip


def pair_overlay(config: CapsNetConfig, first: str, second: str) -> str:
    """How to read the two-digit stroke map: the same red and green as the redraw above it."""
    side = config.conv1_kernel + config.primary_kernel - 1
    return (
        f"Each primary capsule sees a {side}x{side} patch of the input. A stroke is red when more of the votes cast "
        f"from it go to capsule {first} than to capsule {second}, green for the reverse, and grey when they split "
        "evenly: the colours of the redraw above. In a trained network most couplings move little, so the colour "
        "scale spans this input's own range."
    )


def overlay(config: CapsNetConfig) -> str:
    side = config.conv1_kernel + config.primary_kernel - 1
    return (
        f"Each primary capsule sees a {side}x{side} patch of the input (its receptive field). A stroke takes the "
        "colour of the class capsule that most of the votes cast from it go to, each vote weighted by its coupling "
        "and by how sure its capsule is (its length), in the iteration shown. "
        + (
            "The last row and column of pixels reach no capsule at all: the strides of this architecture skip them."
            if (config.image_size - config.conv1_kernel + 1 - config.primary_kernel) % config.primary_stride
            else ""
        )
    )


# one short formula a line: the playground shows the M-step and the E-step in two half-width columns
EM_M_STEP_LATEX = [
    r"n_j = \textstyle\sum_i R_{ij} a_i",
    r"\mu_j = \frac{1}{n_j} \sum_i R_{ij} a_i V_{ij}",
    r"\sigma_j^2 = \frac{1}{n_j} \sum_i R_{ij} a_i (V_{ij} - \mu_j)^2",
    r"\text{cost}_j = \textstyle\sum_h (\beta_u + \log \sigma_j^h)\, n_j",
    r"a_j = \operatorname{logistic}(\lambda (\beta_a - \text{cost}_j))",
]
EM_E_STEP_LATEX = [
    r"p_{ij} = \mathcal N(V_{ij};\, \mu_j, \sigma_j^2)",
    r"R_{ij} = \frac{a_j\, p_{ij}}{\sum_k a_k\, p_{ik}}",
]


def away_from_trained(r: int, trained: int, kept: RoutingMatters | None, test_set: str) -> str | None:
    """What a routing count other than the trained one does to the model's answers, in words (None at the trained
    r): the test accuracy at both counts where Where routing matters has measured them, else that it has not."""
    if r == trained:
        return None
    said = f"This model was trained with r = {trained}; "
    if kept is not None and r in kept.iterations and trained in kept.iterations:
        at = dict(zip(kept.iterations, kept.accuracy))
        return said + (
            f"at r = {r} it answers {100 * at[r]:.2f}% of the {test_set} test set right, against "
            f"{100 * at[trained]:.2f}% at r = {trained} (measured on Where routing matters): read this answer with that in mind."
        )
    return said + (
        f"how often it is right at r = {r} is not measured yet (Where routing matters measures every r from 1 to 5 on "
        "the test set)."
    )


PRESENT = 0.5  # |v_j| below this: dynamic routing calls no parent present (the margin loss's m+ = 0.9, m- = 0.1)
LENGTH_TIE = 0.05  # two |v_j| closer than this: neither is called the longer
ACTIVATION_TIE = 0.01  # two a_j closer than this: neither is called the more active (the toy's stay near 0.5)
CONTRAST = (
    "Dynamic routing gives a vote more weight when it points along v_j (the dot product û·v_j), so a long vote in the "
    "right direction gains wherever it lies; EM gives it more when it is likely under the parent's Gaussian, so a vote "
    "far from μ_j loses however long it is, a tight cluster makes an active parent, and parents compete for each "
    "child's one unit of data. The toy's parents have no learned costs (β_u = β_a = 0), so their activations stay "
    "near 0.5 and only their order means much."
)


def _tied(values: np.ndarray, tie: float) -> list[int]:
    """The entries within `tie` of the largest, the largest first (one entry: a clear leader)."""
    order = np.argsort(values)[::-1]
    return [int(j) for j in order if values[order[0]] - values[j] < tie]


def _tie(tied: list[int], values: np.ndarray, names: Sequence[str], symbol: str, tie: float, digits: int) -> str:
    """'**parent 1** and **parent 2** have |v| within 0.05 of each other (0.94 to 0.97)', or 'all 3 parents have ...'."""
    who = (
        f"all {len(names)} parents have"
        if len(tied) == len(names)
        else " and ".join(f"**{names[j]}**" for j in tied) + " have"
    )
    return f"{who} {symbol} within {tie} of each other ({values[tied[-1]]:.{digits}f} to {values[tied[0]]:.{digits}f})"


def routing_comparison(
    coupling: np.ndarray,
    lengths: np.ndarray,
    assignments: np.ndarray,
    activations: np.ndarray,
    names: Sequence[str],
    step: int,
) -> str:
    """One paragraph on the two algorithms at iteration `step` (from 1), from the numbers the two charts show: a
    winner only where it leads by more than the stated tolerance (`LENGTH_TIE`, `ACTIVATION_TIE`), "no parent
    present" where no |v_j| reaches `PRESENT`. What holds of the two algorithms in general is `CONTRAST`, said once.

    coupling and assignments (r, N, K): dynamic routing's c_ij and EM's R_ij; lengths (r, K) |v_j|; activations
    (r, K) a_j.
    """
    t = step - 1
    k = coupling.shape[-1]
    v, a = lengths[t], activations[t]
    long_tied, active_tied = _tied(v, LENGTH_TIE), _tied(a, ACTIVATION_TIE)
    longest, active = long_tied[0], active_tied[0]
    if v[longest] < PRESENT:
        dynamic = (f"under dynamic routing no parent is present: no v_j reaches |v| = {PRESENT} (the longest, "
                   f"**{names[longest]}**'s, is {v[longest]:.2f})")  # fmt: skip
    elif len(long_tied) > 1:
        dynamic = f"dynamic routing calls no parent the longest: {_tie(long_tied, v, names, '|v|', LENGTH_TIE, 2)}"
    else:
        dynamic = f"dynamic routing's longest v_j is **{names[longest]}**'s (|v| = {v[longest]:.2f})"
    if len(active_tied) > 1:
        em = f"EM makes no parent stand out: {_tie(active_tied, a, names, 'a', ACTIVATION_TIE, 3)}"
    else:
        em = f"EM's most active parent is **{names[active]}** (a = {a[active]:.2f})"
    clear = v[longest] >= PRESENT and len(long_tied) == 1 and len(active_tied) == 1
    if clear and longest == active:
        leaders = (f"Both favour **{names[longest]}**: the longest v_j (|v| = {v[longest]:.2f}) and the most active "
                   f"Gaussian (a = {a[active]:.2f}).")  # fmt: skip
    elif clear:
        leaders = f"They disagree: {dynamic}, {em}."
    else:
        leaders = f"{dynamic[0].upper()}{dynamic[1:]}; {em}."
    gap = np.abs(coupling[t] - assignments[t])  # (N, K)
    if gap.max() < 0.02:
        weights = (f"In iteration {step} both still weigh every vote alike: each child splits itself evenly, "
                   f"1/{k} = {1 / k:.2f} to each parent, before any agreement has been measured.")  # fmt: skip
    else:
        child, parent = np.unravel_index(int(np.argmax(gap)), gap.shape)
        weights = (f"The vote they weigh most differently is child {child + 1}'s for {names[int(parent)]}: "
                   f"c = {coupling[t, child, parent]:.2f} under dynamic routing, R = "
                   f"{assignments[t, child, parent]:.2f} under EM.")  # fmt: skip
    return f"{leaders} {weights}"


# ---------------------------------------------------------------- does routing matter? (Where routing matters, Routing)

RULE_NAMES = {"uniform": "Uniform (r = 1, not routed)", "random": "Random (seeded, not routed)"}
EXPERIMENT_INTRO = (
    "Routing is one way to set the couplings. On the same trained weights, here are the test accuracies with the "
    "couplings left uniform (**r = 1**; for the EM network, every child's assignments fixed at their even start), "
    "routed **r = 2 to 5** times, and **random**: each child's couplings drawn uniformly from all the ways of sharing "
    "it among the parents (seeded per test image, one draw each, never routed). *Gained* and *lost* count the test "
    "{noun}s right under that rule and wrong at the trained r, and the reverse; *p* is the chance of a split at least "
    "that uneven if neither rule were better (McNemar's exact test). *Entropy* says how evenly each child's couplings "
    "spread over the parents in the class layer, averaged over the children: 1 is uniform, 0 all on one parent."
)


def rule_name(rule: Rule) -> str:
    if rule.name in RULE_NAMES:
        return RULE_NAMES[rule.name]
    return f"Routed, r = {rule.iterations}" + (" (trained)" if rule.trained else "")


def experiment_rows(result: RoutingMatters) -> list[dict[str, str]]:
    """The experiment's table: one row per coupling rule, the trained r's row with dashes where it meets itself."""
    rows = []
    for rule in result.rules():
        p = "" if rule.trained else ("< 0.001" if rule.p_value < 0.001 else f"{rule.p_value:.3f}")
        rows.append({
            "Couplings": rule_name(rule),
            "Test accuracy": f"{100 * rule.accuracy:.2f}%",
            "Gained": "" if rule.trained else f"{rule.gains:,}",
            "Lost": "" if rule.trained else f"{rule.losses:,}",
            "p": p,
            "Entropy": f"{rule.entropy:.3f}",
        })  # fmt: skip
    return rows


def input_rules_rows(reading: InputRules, names: Sequence[str], symbol: str) -> list[dict[str, str]]:
    """One input under each coupling rule: the answer, its score and the couplings' entropy."""
    r = reading.iterations
    rows = [
        ("Uniform (r = 1, not routed)", reading.uniform, reading.entropy[0]),
        (f"Routed, r = {r}", reading.routed, reading.entropy[1]),
    ]
    out = [
        {"Couplings": name, "Answer": names[int(s.argmax())], symbol: f"{float(s.max()):.2f}", "Entropy": f"{e:.3f}"}
        for name, s, e in (rows if r != 1 else rows[:1])
    ]
    draws = len(reading.random)
    common, count = reading.random_majority()
    out.append({
        "Couplings": f"Random, {draws} draws (not routed)",
        "Answer": f"{names[common]} (in {count} of the {draws} draws)",
        symbol: f"{float(reading.random[:, common].mean()):.2f} (mean)",
        "Entropy": f"{reading.entropy[2]:.3f} (mean)",
    })  # fmt: skip
    return out


def input_rules_summary(reading: InputRules, names: Sequence[str]) -> str:
    """Whether the couplings decide this input's answer, in one or two sentences."""
    routed, uniform = int(reading.routed.argmax()), int(reading.uniform.argmax())
    agreeing, draws = reading.random_agreeing(), len(reading.random)
    if reading.iterations == 1:
        first = f"With uniform couplings (r = 1, no routing) the answer is **{names[uniform]}**"
    else:
        first = (
            f"Uniform couplings give the same answer, **{names[routed]}**, as routing at r = {reading.iterations}"
            if uniform == routed
            else f"Routing at r = {reading.iterations} changes the answer: **{names[routed]}**, where uniform couplings "
            f"say **{names[uniform]}**"
        )
    if agreeing == draws:
        second = f"and so does every one of {draws} random couplings: for this input the couplings hardly matter."
    elif agreeing == 0:
        second = f"while none of {draws} random couplings does: for this input they decide the answer."
    else:
        second = f"and {agreeing} of {draws} random couplings do: how the votes are shared decides some of them."
    return f"{first}; {second}"


COMPARE_HINT = (
    "Here the shipped weights are read with their couplings routed, uniform or random. To answer with trained models, "
    "train each routing from the same seed, data and budget, into a folder of the runs folder:\n\n"
    "`python -m capsnet compare-routings --out runs/compare-mnist --seeds 3`\n\n"
    "(dynamic routing, no routing, self-attention and EM routing; the table and its verdict then show here)."
)
COMPARE_COLUMNS = (
    "**Spread**: the test accuracy's highest minus its lowest over the seeds, in points. **affNIST-like**: the test digits each rotated (within 20 degrees), sheared and scaled (0.8 to 1.2) in the "
    "network's own frame, as affNIST moves them. **Non-digits flagged**: of the drawn non-digits (a dot, a scribble, "
    "an X, an H, a smiley, an A, a bar, grey noise), how many the model's not-like-any-class test flags, with its own "
    "thresholds (-: a network that redraws nothing, or too weak to calibrate its thresholds on)."
)
