"""The command-line tools, one module each, all reached through `python -m capsnet COMMAND` (`capsnet/__main__.py`)
and installed as `capsnet-COMMAND` scripts (`pyproject.toml`)."""

COMMANDS = {
    "train": (
        "capsnet.cli.train",
        "train a network (CapsNet, CNN, EM or Efficient-CapsNet) into a resumable run folder",
    ),
    "evaluate": ("capsnet.cli.evaluate", "a checkpoint's accuracy per class and confusion matrix on its test set"),
    "predict": ("capsnet.cli.predict", "read PNG or JPEG files as the dashboard does: class, lengths, novelty"),
    "export": ("capsnet.cli.export", "turn a run's checkpoint into a shipped one (float16, re-measured)"),
    "affnist": ("capsnet.cli.affnist", "mnist-40 models on the affNIST-like set, or rotation and scale sweeps"),
    "routing-matters": ("capsnet.cli.routing_matters", "accuracy at r = 1..5 routing iterations, kept on disk"),
    "claims": ("capsnet.cli.claims", "the paper's claim for a CapsNet and its CNN, printed or kept as a record"),
    "compare-routings": (
        "capsnet.cli.compare_routings",
        "each routing trained alike, and one table of what it learned",
    ),
}
