"""One input read by the EM network, with its class layer's EM routing: what the Draw page shows of it.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. A class capsule j has an activation a_j
(the class score) and a 4x4 pose mu_j; routing assigns each child capsule i of the last grid to the classes by
R_ij, iteration by iteration (`capsnet.nn.em_routing`). One forward pass with the trace; no Python loop over
capsules. Runs without Streamlit and returns NumPy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.data.pictures import as_inputs, as_pictures, picture_of
from capsnet.nn.em_capsnet import EMCapsNet
from capsnet.readings.em_layers import ConvLayerRouting, layers_of


@dataclass
class EMExplanation:
    """One input image read by the EM network."""

    image: np.ndarray  # (H, W) the input, in [0, 1]
    activations: np.ndarray  # (K,) a_j after the last M-step
    prediction: int  # argmax_j a_j
    poses: np.ndarray  # (K, 16) mu_j, the 4x4 pose of each class capsule, row-major
    reconstruction: np.ndarray | None  # (H, W) redrawn from `decode_class`'s pose; None without a decoder
    # sum of squared pixel errors of the winner's redraw (`capsnet.readings.novelty`); None without a decoder
    reconstruction_error: float | None
    decode_class: int
    iterations: int  # EM iterations r
    # the class layer's routing, one row per M-step t = 1..r
    activations_by_iteration: np.ndarray  # (r, K) a_j as each M-step fitted it
    shares: np.ndarray  # (r, K) the share of the children's data (sum_i R_ij a_i / sum_i a_i) each class was given
    spreads: np.ndarray  # (r, K) each class's spread: the mean over the 16 pose entries of sigma_j
    assignments: np.ndarray  # (r, K, I) R_ij of every child i of the last grid, i = (type, y, x), per M-step
    child_activations: np.ndarray  # (I,) a_i of those children
    child_grid: tuple[int, int]  # (types, side): the last grid's capsule types and its side, I = types * side^2
    features: np.ndarray | None = None  # (A, S, S) Conv1's maps, kept with the layers' routing (`layers=True`)

    @property
    def runner_up(self) -> int:
        """The class with the second-highest activation."""
        return int(np.argsort(-self.activations, kind="stable")[1])


def explain_em(
    model: EMCapsNet, image: np.ndarray | torch.Tensor, iterations: int | None = None, decode_class: int | None = None
) -> EMExplanation:
    """Read one image (H, W) or (1, 1, H, W) in [0, 1]: activations, poses, the redraw and the class layer's routing,
    with the model's own number of EM iterations or `iterations` (in every capsule layer)."""
    return explain_em_with_layers(model, image, iterations, decode_class, layers=False)[0]


def explain_em_with_layers(
    model: EMCapsNet,
    image: np.ndarray | torch.Tensor,
    iterations: int | None = None,
    decode_class: int | None = None,
    layers: bool = True,
) -> tuple[EMExplanation, tuple[ConvLayerRouting, ...]]:
    """`explain_em` and, with `layers`, ConvCaps1's and ConvCaps2's routing (`capsnet.readings.em_layers`), from one
    forward pass (which keeps those layers' traces only when asked: they cost a vote-sized tensor each)."""
    c = model.config
    picture = picture_of(image, c.in_channels, c.image_size)  # (H, W) or (H, W, 3)
    x = as_inputs(picture[None])  # (1, C, H, W)
    if decode_class is not None:
        decode_class = c.check_class(decode_class)
    with torch.inference_mode():
        out = model(x.to(model.device), decode_class=decode_class, routing_iterations=iterations, return_trace=True,
                    return_layer_traces=layers, return_primary=layers, return_features=layers)  # fmt: skip
    trace = out.trace
    assert trace is not None  # asked for
    child_a = trace.child_activations[0, 0].double()  # (I,) a_i of the last grid's capsules
    assignments = trace.assignments[0, :, 0].double()  # (r, K, I) R_ij as each M-step weighed them
    shares = (assignments * child_a).sum(dim=-1) / child_a.sum().clamp(min=1e-12)  # (r, K)
    spreads = trace.variances[0, :, 0].double().sqrt().mean(dim=-1)  # (r, K)
    prediction = int(out.prediction[0])
    recon = None if out.reconstruction is None else as_pictures(out.reconstruction.float())[0]
    chosen = prediction if decode_class is None else decode_class
    error = None
    if out.reconstruction is not None:  # the winner's redraw, whichever class was asked to be redrawn
        with torch.inference_mode():
            winner = out.reconstruction if chosen == prediction else model.decode(out.poses, prediction)
        error = float((winner.float().cpu() - x.float()).square().sum())
    explained = EMExplanation(
        image=picture,
        activations=out.activations[0].float().cpu().numpy(),
        prediction=prediction,
        poses=out.poses[0].float().cpu().numpy(),
        reconstruction=recon,
        reconstruction_error=error,
        decode_class=chosen,
        iterations=trace.assignments.shape[1],
        activations_by_iteration=trace.activations[0, :, 0].float().cpu().numpy(),
        shares=shares.float().cpu().numpy(),
        spreads=spreads.float().cpu().numpy(),
        assignments=assignments.float().cpu().numpy(),
        child_activations=child_a.float().cpu().numpy(),
        child_grid=(c.convcaps2_types, c.convcaps2_grid),
        features=None if out.features is None else out.features[0].float().cpu().numpy(),
    )
    return explained, (layers_of(c, out) if layers else ())
