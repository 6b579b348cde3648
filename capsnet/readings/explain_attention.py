"""One input read by Efficient-CapsNet, with its self-attention routing: what the pages show of it.

Mazzia, Salvetti & Chiaberge (2021), https://arxiv.org/abs/2101.12491. Each primary capsule i attends over the
class capsules j in one pass: c_ij, a softmax over the classes of its vote's agreement with that class's votes, plus
a learned bias (`capsnet.nn.efficient_capsnet`). The couplings have dynamic routing's shape (N, K), so a page that
draws couplings can draw these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.data.pictures import as_inputs, picture_of
from capsnet.nn.efficient_capsnet import EfficientCapsNet


@dataclass
class AttentionExplanation:
    """One input image read by Efficient-CapsNet."""

    image: np.ndarray  # (H, W) or (H, W, 3) the input, in [0, 1]
    lengths: np.ndarray  # (K,) |v_j|
    prediction: int
    poses: np.ndarray  # (K, D) v_j
    reconstruction: np.ndarray | None  # (H, W) or (H, W, 3), redrawn from `decode_class`; None without a decoder
    decode_class: int
    coupling: np.ndarray  # (N, K) c_ij: each primary capsule's attention over the classes, the bias included
    primary_lengths: np.ndarray  # (N,) |u_i|
    primary: np.ndarray  # (N, p) u_i, the primary capsules' poses
    vote_lengths: np.ndarray  # (N, K) |u_hat_{j|i}|, each primary capsule's vote for each class
    features: np.ndarray  # (C, f, f) the last convolution's maps (after ReLU and batch norm), which PrimaryCaps reads

    @property
    def entropy(self) -> float:
        """The couplings' mean entropy over the classes, 1 for uniform (a coupling the bias made negative counts as 0)."""
        c = np.clip(self.coupling, 1e-12, None)
        c = c / c.sum(axis=1, keepdims=True)
        return float((-(c * np.log(c)).sum(axis=1) / np.log(c.shape[1])).mean())


@torch.no_grad()
def explain_attention(
    model: EfficientCapsNet, image: np.ndarray | torch.Tensor, decode_class: int | None = None
) -> AttentionExplanation:
    """Read one image (H, W) in [0, 1] with `model` (eval mode): lengths, poses, the redraw and the couplings, and on
    the way the last convolution's maps, the primary capsules and their votes' lengths (the Architecture page's)."""
    c = model.config
    picture = picture_of(image, c.in_channels, c.image_size)
    device = next(model.parameters()).device
    x = as_inputs(picture[None]).to(device)
    out = model(x, return_features=True)
    assert out.features is not None  # asked for
    features = out.features[0].float().cpu().numpy()  # (C, f, f)
    votes = model.votes(out.primary)[0]  # (K, N, D)
    prediction = int(out.prediction[0])
    shown = prediction if decode_class is None else int(decode_class)
    redraw = None
    if model.decoder is not None:
        drawn = model.decode(out.poses, shown)[0].float().cpu().numpy()  # (C, H, W)
        redraw = drawn[0] if c.in_channels == 1 else drawn.transpose(1, 2, 0)
    return AttentionExplanation(
        picture, out.lengths[0].cpu().numpy(), prediction, out.poses[0].cpu().numpy(), redraw, shown,
        out.coupling[0].cpu().numpy(), out.primary[0].norm(dim=-1).cpu().numpy(), out.primary[0].float().cpu().numpy(),
        votes.norm(dim=-1).T.float().cpu().numpy(), features,
    )  # fmt: skip
