"""How the dashboard words the verdict on the paper's two claims (Sabour, Frosst & Hinton 2017, sections 5.2 and 6):
what the Overlapping digits page and the Transform lens say around `capsnet.readings.claims.Verdict`, its table and its curve."""

from __future__ import annotations

from capsnet.readings import affnist

DISPUTE = """
**The claims are disputed.** Gu & Tresp ([arXiv:1911.07968](https://arxiv.org/abs/1911.07968)) find that
dynamic routing helps neither generalisation nor robustness to affine transformations; Gu, Tresp & Hu
(CVPR 2021, "Capsule Network Is Not More Robust Than Convolutional Network") find strengthened CNNs ahead of
CapsNets on affine and overlapping-digit tests; an independent TensorFlow reproduction
([shinseung428/CapsNet_Tensorflow](https://github.com/shinseung428/CapsNet_Tensorflow)) reaches 75.89% on
the real affNIST against 61.70% for its CNN, the paper's order but lower. The figures above are this
project's own, measured on its shipped files: read them with their budgets.
"""


def start_text(row) -> str:
    """Where a row's network began: the MNIST model it was warm-started from, or its initial weights."""
    if row.from_scratch:
        return "from scratch"
    figure = "" if row.source_accuracy is None else f" at {100 * row.source_accuracy:.2f}%"
    return f"warm: an MNIST model{figure} ({row.started_from:,} digits)"


def claim_table(verdict, start_free=None) -> list[dict[str, object]]:
    """The verdict's rows as a table: network, the paper's error, ours, and how ours was reached (a warm-started
    model's examples, hours and epochs are its own run's on the claim's data); then, if given, the start-free
    pair's rows (both networks trained from scratch on the same claim), each row saying where it started."""
    from capsnet.readings.claims import NETWORKS

    return [
        {
            "network": NETWORKS[r.network],
            "start": start_text(r),
            "paper's test error": f"{100 * r.paper_error:.1f}%",
            "here": "—"
            if r.error is None
            else f"{100 * r.error:.2f}%" + (f" ({r.test_examples:,} test examples)" if r.test_examples else ""),
            "examples trained on": f"{r.examples_seen:,}",
            "hours trained": "—" if r.hours is None else f"{r.hours:.1f}",
            "epochs": r.epochs or "—",
            "learning rate": "—" if r.lr is None else f"{r.lr:g}",
            "epoch kept": (f"{r.chosen_epoch}, " if r.chosen_epoch else "") + f"chosen on {r.chosen_on}",
        }
        for r in (*verdict.rows, *(start_free.rows if start_free is not None else ()))
    ]


def claim_table_by_network(verdict, start_free=None) -> dict[str, list[str]]:
    """`claim_table` turned: one column per network, one row per figure ("figure" first, as the rows' names), so
    that 2 to 4 networks fit the page's width and a figure reads across them. The start-free pair's columns are
    named so ("CapsNet · from scratch"): its networks are the pair beside the verdict's own."""
    rows = claim_table(verdict, start_free)
    own = len(verdict.rows)
    names = [str(r["network"]) + ("" if n < own else " · from scratch") for n, r in enumerate(rows)]
    figures = [k for k in rows[0] if k != "network"] if rows else []
    return {"figure": figures, **{name: [str(r[k]) for k in figures] for name, r in zip(names, rows)}}


MULTIMNIST_CURVE = (
    "Lines: test error after each epoch on the runs' own test pairs. Diamonds: each kept file on the fixed test "
    "pairs, the table's figure, at the pairs it had seen. Dashed: the paper's, after 60 million pairs."
)


def affnist_claim(dataset: str) -> str:
    """The affine claim and how it is tested here; the last sentence says what the curves above it are for a model
    trained on `dataset`."""
    curves = (
        "The curves above are the open model's and its CNN's, both trained for this test."
        if dataset == affnist.TRAINING_SET
        else "The curves above are the open model's and its CNN's, trained on images moved by 2 pixels at most, not "
        "for this test."
    )
    return f"""
**Does the affine claim hold here?** The paper (section 5.2): trained on MNIST digits moved anywhere on a 40x40
canvas, tested on affNIST, the CapsNet reached 79% against 66% for a CNN with the same MNIST accuracy. Here both
networks are trained on the same moved digits (`--dataset mnist-40`) and tested on an affNIST-like set: each MNIST
test digit on 40x40 turned by up to 20°, sheared by up to 0.2 and scaled by 0.8-1.2 (`capsnet.readings.affnist`; affNIST
itself cannot be downloaded here, and the stand-in adds no translation, so it is likely easier). {curves} The
verdict below is the paper's pair, whatever model is open: a CapsNet against a CNN, both trained on the digits moved on
40x40 (the shipped `checkpoints/mnist-40.safetensors` and `baselines/mnist-40-cnn.safetensors`, else the newest runs).
"""


AFFNIST_CURVE = (
    "Lines: test error after each epoch on the runs' own test digits moved on 40x40 (not transformed). Diamonds: "
    "each kept file on all 10,000 affNIST-like test digits, the table's figure, at the digits it had seen. Dashed: "
    "the paper's, on the real affNIST."
)

NO_AFFINE_PAIR = (
    "No pair trained on MNIST digits moved on 40x40 is here: train a CapsNet and a CNN with `--dataset mnist-40` "
    "(from the sidebar or `capsnet-train`), then export each with `python -m capsnet export`, which measures it on "
    "the affNIST-like set, to see the verdict."
)
