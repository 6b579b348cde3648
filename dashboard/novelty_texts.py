"""What the Draw page says of an input like no class the network knows, and how that is decided
(`capsnet.readings.novelty`)."""

from __future__ import annotations

from dashboard.texts import a


def not_like_any_class(
    noun: str, score: float, error: float, length: float, names: str, thresholds=None, symbol: str = "|v|"
) -> str:
    """The Draw page's warning for an input that resembles no class, naming the test (or tests) it failed; `symbol`
    is the network's score ("|v|" a capsule's length, "a" an EM class capsule's activation)."""
    reasons = []
    tripped = thresholds.tripped(error, length) if thresholds is not None else ("reconstruction", "length")
    if "reconstruction" in tripped:
        limit = f", past the threshold {thresholds.reconstruction_error:.1f}" if thresholds is not None else ""
        reasons.append(f"its reconstruction is far from the input (error {error:.1f}{limit})")
    if "length" in tripped:
        limit = f", under the threshold {thresholds.length:.2f}" if thresholds is not None else ""
        weak = "short" if symbol == "|v|" else "barely active"
        reasons.append(f"its winning capsule is {weak} ({symbol} = {length:.2f}{limit})")
    joiner = " or " if thresholds is None else " and "
    return (
        f"**Not like any {noun} the network knows** (score {score:.2f}; above 1 means unlike). "
        f"It still names a class, since one capsule is always longest, but {joiner.join(reasons)}: "
        f"{names} test images almost never look like this."
    )


def like_a_class(noun: str, error: float, length: float, thresholds, symbol: str = "|v|") -> str:
    """The Draw page's caption for an input like a class the network knows: each of the two tests against its own
    threshold, so that the informative one shows (an EM network's activations sit at 1.00 for every digit, and a
    score that took the larger ratio read 0.99 for all of them)."""
    share = error / max(thresholds.reconstruction_error, 1e-9)
    return (f"Looks like {a(noun)} the network knows: its redraw's error is {error:.1f}, {share:.0%} of the way to "
            f"the threshold {thresholds.reconstruction_error:.1f}, and {symbol} = {length:.2f} is above its threshold "
            f"{thresholds.length:.2f}.")  # fmt: skip


NO_DECODER_NO_CHECK = (
    "This EM network has no decoder: it does not redraw its input, and so it cannot say whether the input is like "
    "a class it knows (that check compares the redraw with the input)."
)


NOVELTY = """
**How "not like any class" is decided.** A capsule network redraws the input from its winning
capsule. On the test images it classifies right, the redrawing is close to the input and the
winner is long (an EM network's: active); each threshold lets through all but 1 in 200 of them
(together about 1 in 110 is flagged). An input past either threshold is one the network has no good
description for: a dot, a scribble, grey noise, many letters (an X, an H); the shipped EM model also
flags a smiley. It flags what is unlike the digits it knows, not everything that is no digit: an A
can pass as a 4 and a bar as a 7 (the EM model: as a 1), and a photo of noise, which the
preprocessing crops and shrinks to a 20x20 blob, as a 0. The score is the larger of the two ratios
to their threshold.
"""
