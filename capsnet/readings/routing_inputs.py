"""What routing the class capsules again needs, for one input: the class layer's votes and what weighs them.

The dashboard's knobs (`dashboard/knobs/`) route these in the browser, iteration by iteration and under each coupling
rule, so that a slider or a step costs no server run: everything before the class layer is read here once per input.

Dynamic routing (Sabour, Frosst & Hinton 2017, https://arxiv.org/abs/1710.09829): the votes u_hat_{j|i} (K, N, D)
do not depend on routing, so one set serves every r, and the primary capsules' lengths |u_i| weigh the views.
Self-attention routing (Mazzia, Salvetti & Chiaberge 2021, https://arxiv.org/abs/2101.12491): one pass over the
votes u_hat_{j|i} (K, N, D) with the learned bias b (K, N); the primary capsules' lengths |u_i| weigh the evidence.
EM routing (Hinton, Sabour & Frosst 2018, https://openreview.net/forum?id=HJWLfGWRb): the class layer's votes V_ij
(J, I, 16) and its children's activations a_i depend on how often ConvCaps1 and ConvCaps2 routed, so they are read
for every r up to `most` (routing the whole network r times is the class layer routed r times on those).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from capsnet.data.pictures import as_inputs, picture_of
from capsnet.nn.registry import network_of

MOST = 5  # the routing counts a page steps through: r = 1 .. 5 (or the network's own r, if more)


@dataclass(frozen=True)
class RoutingInputs:
    """The class layer's inputs for one image, as the routing kind needs them."""

    kind: str  # `Routing.kind`: "dynamic", "attention" or "em"
    votes: np.ndarray  # dynamic, attention: (1, K, N, D) u_hat_{j|i}; EM: (R, J, I, 16) V_ij for r = 1 .. R
    weights: np.ndarray  # dynamic, attention: (1, N) |u_i|; EM: (R, I) a_i for each r
    beta_u: np.ndarray | None = None  # EM: (J,) the class types' learned costs
    beta_a: np.ndarray | None = None
    leak: bool = False  # dynamic: routed with the "none-of-the-above" category
    bias: np.ndarray | None = None  # attention: (K, N) the learned bias added to each coupling


def _dynamic(model: Any, x: torch.Tensor, most: int) -> RoutingInputs:
    with torch.inference_mode():
        out = model(x, routing_iterations=1, return_trace=True, return_primary=True)
    assert out.trace is not None and out.primary is not None  # asked for
    votes = out.trace.votes.float().cpu().numpy()  # (1, K, N, D)
    lengths = out.primary.lengths.float().cpu().numpy()  # (1, N)
    return RoutingInputs("dynamic", votes, lengths, leak=out.trace.leak)


def _attention(model: Any, x: torch.Tensor, most: int) -> RoutingInputs:
    with torch.inference_mode():
        u = model(x).primary  # (1, N, d) the squashed primary capsules
        votes = model.votes(u)  # (1, K, N, D)
    bias = model.b.detach().float().cpu().numpy()  # (K, N)
    lengths = u.norm(dim=-1).float().cpu().numpy()  # (1, N)
    return RoutingInputs("attention", votes.float().cpu().numpy(), lengths, bias=bias)


def _em(model: Any, x: torch.Tensor, most: int) -> RoutingInputs:
    votes, weights = [], []
    with torch.inference_mode():
        for r in range(1, most + 1):
            trace = model(x, routing_iterations=r, return_trace=True).trace
            assert trace is not None  # asked for
            positions, _, slots = trace.votes.shape[1], trace.votes.shape[2], trace.votes.shape[3]
            if positions != 1 or not torch.equal(trace.child_index.cpu(), torch.arange(slots).view(1, -1)):
                raise ValueError("the class layer's children must each fill one slot of one position")
            votes.append(trace.votes[0, 0].float().cpu().numpy())  # (J, I, 16)
            weights.append(trace.child_activations[0, 0].float().cpu().numpy())  # (I,)
    classes = model.classes
    return RoutingInputs(
        "em",
        np.stack(votes),
        np.stack(weights),
        beta_u=classes.beta_u.detach().float().cpu().numpy(),
        beta_a=classes.beta_a.detach().float().cpu().numpy(),
    )


READERS: dict[str, Callable[[Any, torch.Tensor, int], RoutingInputs]] = {
    "dynamic": _dynamic,
    "attention": _attention,
    "em": _em,
}


def routing_inputs(model: Any, image: np.ndarray | torch.Tensor, most: int = MOST) -> RoutingInputs:
    """The class layer's inputs for one image (H, W) or (H, W, 3) in [0, 1], for r = 1 .. `most` (eval mode, on the
    model's device)."""
    if most < 1:
        raise ValueError(f"most must be at least 1, got {most}")
    routing = network_of(model).routes()
    if routing.kind not in READERS:
        raise ValueError(f"{network_of(model).described} has no class-layer reader for its {routing.title}")
    c = model.config
    x = as_inputs(picture_of(image, c.in_channels, c.image_size)[None]).to(model.device)  # (1, C, H, W)
    return READERS[routing.kind](model, x, most)
