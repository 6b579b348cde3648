"""Early warning for a training run that has collapsed or diverged, so it stops with a reason.

A CapsNet whose capsules all die (too high a learning rate for the batch size: `--batch-size
1024 --lr 3e-3` on MNIST, say) stays at chance accuracy with every digit capsule shorter than
m- for as long as it is left to run, and says nothing; with a far too high rate they can also
all saturate, every one longer than m+. The signs are cheap to watch: the running train
accuracy, the longest and shortest capsule lengths, and whether the loss is finite. They are
summed on the device and read back only at the trainer's sync points (every few dozen
batches), so the watch adds no host sync per batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from capsnet.errors import CapsNetError

AFTER_BATCHES = 100  # judge a collapse only after this many batches...
AFTER_IMAGES = 25_600  # ...and this many images (200 batches of 128): early batches may sit at chance
CHANCE_MARGIN = 0.05  # "near chance": train accuracy within this of 1/K
# the signs that a run is not learning are said (not acted on) from this many batches, whatever the data's size:
SATURATED_AFTER = 20  # every capsule saturated (or dead) over the batches since the last check
STUCK_AFTER = 40  # the train accuracy at chance, or the loss no lower than over the first batches
FIRST_BATCHES = 10  # the batches whose mean loss a later one is compared with


class TrainingCollapsedError(CapsNetError):
    """The run's loss is not finite, or its capsules died: training cannot recover on its own."""

    exit_code = 3


@dataclass
class CollapseWatch:
    """Running signs of collapse on the device, checked at the trainer's sync points."""

    num_classes: int
    m_plus: float
    m_minus: float
    lr: float
    device: torch.device
    present: int = 1  # classes per example (MultiMNIST: 2): chance is one in comb(K, present)
    advice: str = ""  # what else to try, said after a lower --lr ("the official code's initial scales (--preset ...)")
    loss_falls: bool = (
        True  # whether the loss falls as the run learns (False: a margin that grows, as EM's spread loss)
    )

    def __post_init__(self) -> None:
        self.batches = self.images = 0
        self.warning = ""  # why the run seems not to learn, said in one line ("" while it learns)
        self.first_loss: float | None = None  # the mean loss of the first FIRST_BATCHES batches
        self._reset()
        self.nonfinite = torch.zeros((), dtype=torch.bool, device=self.device)
        self.first_sum = torch.zeros((), device=self.device)

    def _reset(self) -> None:
        self.correct = torch.zeros((), dtype=torch.long, device=self.device)
        self.seen = self.window = 0
        self.loss_sum = torch.zeros((), device=self.device)
        self.longest = torch.zeros((), device=self.device)
        self.shortest = torch.ones((), device=self.device)

    def observe(self, loss: Tensor, lengths: Tensor, correct: Tensor) -> None:
        """After a batch: its loss (scalar), capsule lengths (B, K) and number right (scalar); no host sync."""
        self.batches += 1
        self.window += 1
        self.images += lengths.shape[0]
        self.seen += lengths.shape[0]
        loss = loss.detach().float()
        self.nonfinite |= ~torch.isfinite(loss)
        self.loss_sum += loss
        if self.batches <= FIRST_BATCHES:
            self.first_sum += loss
        self.correct += correct
        self.longest = torch.maximum(self.longest, lengths.detach().float().max())
        self.shortest = torch.minimum(self.shortest, lengths.detach().float().min())

    def verdict(self) -> str | None:
        """Why the run has failed, or None; `warning` says, from the first few dozen batches, why it seems not to
        learn. Reads a few numbers back from the device (a host sync)."""
        if bool(self.nonfinite):
            return (
                f"the loss became NaN or infinite within the first {self.batches} batches: "
                f"training diverged (try a lower --lr than {self.lr:g})"
            )
        if self.seen == 0:
            return None
        accuracy, longest, shortest = int(self.correct) / self.seen, float(self.longest), float(self.shortest)
        loss = float(self.loss_sum) / self.window
        if self.first_loss is None and self.batches >= FIRST_BATCHES:
            self.first_loss = float(self.first_sum) / FIRST_BATCHES
        self._reset()
        chance = 1.0 / math.comb(self.num_classes, self.present)
        self.warning = self._warning(accuracy, chance, longest, shortest, loss)
        if self.batches < AFTER_BATCHES or self.images < AFTER_IMAGES:
            return None
        if accuracy > chance + CHANCE_MARGIN:
            return None
        if longest < self.m_minus:
            state = f"every capsule is shorter than m- = {self.m_minus:g} (the longest {longest:.3f}): they have died"
        elif shortest > self.m_plus:
            state = (
                f"every capsule is longer than m+ = {self.m_plus:g} (the shortest {shortest:.3f}): they have saturated"
            )
        else:
            return None
        return (
            f"training collapsed: after {self.batches} batches the train accuracy is {100 * accuracy:.1f}% "
            f"(chance is {100 * chance:.1f}%) and {state}; try a lower --lr than {self.lr:g} or a smaller --batch-size"
        )

    def _warning(self, accuracy: float, chance: float, longest: float, shortest: float, loss: float) -> str:
        """The sign, in one line with what to try, that the batches since the last check did not learn; "" if none."""
        after = f"not learning: after {self.batches} batches"
        lower = f"try a lower --lr than {self.lr:g}" + (f", or {self.advice}" if self.advice else "")
        if self.batches >= SATURATED_AFTER and shortest > self.m_plus:
            return (f"{after} every class capsule is longer than m+ = {self.m_plus:g} (the shortest {shortest:.3f}): "
                    f"they have saturated; {lower}")  # fmt: skip
        if self.batches >= SATURATED_AFTER and longest < self.m_minus:
            return (f"{after} every class capsule is shorter than m- = {self.m_minus:g} (the longest {longest:.3f}): "
                    f"they have died; {lower} or a smaller --batch-size")  # fmt: skip
        if self.batches < STUCK_AFTER:
            return ""
        if accuracy <= chance + CHANCE_MARGIN:
            return (f"{after} the train accuracy is {100 * accuracy:.1f}%, chance is {100 * chance:.1f}% (a network can "
                    f"sit at chance for a hundred steps or more before it learns); if it stays there, {lower}")  # fmt: skip
        first = self.first_loss
        if self.loss_falls and first is not None and loss >= first and accuracy <= chance + 2 * CHANCE_MARGIN:
            return (f"{after} the loss ({loss:.4f}) is no lower than over the first {FIRST_BATCHES} ({first:.4f}) "
                    f"and the train accuracy {100 * accuracy:.1f}% near chance; {lower}")  # fmt: skip
        return ""
