"""The knobs' payloads (dashboard/knobs/payload.py) and what they carry (capsnet/readings/routing_inputs.py): packed
and read back whole, weights halved only where that is exact, and the class layer's inputs those the networks route.
The browser's arithmetic on them is tests/test_knobs_browser.py's."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch

from capsnet.nn.cnn import BaselineCNN
from capsnet.nn.dynamic_routing import dynamic_routing
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.nn.em_routing import em_routing
from capsnet.readings.routing_inputs import routing_inputs
from dashboard.knobs import payload


def test_a_payload_reads_back_whole_and_every_array_is_aligned() -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "votes": rng.standard_normal((1, 3, 5, 4)).astype(np.float32),
        "half": np.arange(7, dtype=np.float16),
        "index": np.arange(3, dtype=np.int32),
    }
    data = payload.pack({"view": "routing", "names": ["ä", "b"]}, arrays)
    header, back = payload.unpack(data)
    assert header == {"view": "routing", "names": ["ä", "b"]}
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and np.array_equal(back[name], array), name
    (length,) = struct.unpack("<I", data[4:8])
    entries = json.loads(data[8 : 8 + length])["arrays"]
    assert (8 + length) % 8 == 0 and all(e["offset"] % 8 == 0 for e in entries.values())  # typed arrays need it


def test_a_payload_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="not a knobs payload"):
        payload.unpack(b"PNG\x00\x00\x00\x00\x00")
    data = payload.pack({}, {"x": np.zeros(4, dtype=np.float32)})
    with pytest.raises(ValueError, match="outside the payload"):
        payload.unpack(data[:-8])  # an array cut short
    with pytest.raises(ValueError, match="reserved|own header key"):
        payload.pack({"arrays": 1}, {})
    with pytest.raises(ValueError, match="float32, float16 or int32"):
        payload.pack({}, {"x": np.zeros(2, dtype=np.float64)})


def test_weights_go_as_float16_only_where_float16_holds_them() -> None:
    exact = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    assert payload.compact(exact).dtype == np.float16
    inexact = np.array([0.1, 1.0], dtype=np.float32)
    kept = payload.compact(inexact)
    assert kept.dtype == np.float32 and np.array_equal(kept, inexact)


def test_the_dynamic_inputs_are_the_votes_the_capsnet_routes(model) -> None:
    image = torch.rand(28, 28).numpy()
    inputs = routing_inputs(model, image)
    c = model.config
    assert inputs.kind == "dynamic" and inputs.votes.shape == (1, c.num_classes, c.num_primary, c.digit_dim)
    assert inputs.weights.shape == (1, c.num_primary) and np.all(inputs.weights < 1)  # |u_i| of squashed capsules
    with torch.inference_mode():
        poses, _ = dynamic_routing(torch.as_tensor(inputs.votes), c.routing_iterations)
        expected = model(torch.as_tensor(image).view(1, 1, 28, 28)).poses
    torch.testing.assert_close(poses, expected, atol=1e-6, rtol=1e-5)


def test_the_em_inputs_route_to_the_networks_answer_at_every_r() -> None:
    torch.manual_seed(0)
    model = EMCapsNet(EMCapsNetConfig.preset("tiny")).eval()
    image = torch.rand(28, 28).numpy()
    inputs = routing_inputs(model, image, most=3)
    assert inputs.kind == "em" and inputs.votes.shape[0] == 3 and inputs.weights.shape[0] == 3
    assert inputs.beta_u is not None and inputs.beta_a is not None
    for r in (1, 2, 3):
        votes = torch.as_tensor(inputs.votes[r - 1]).view(1, 1, *inputs.votes.shape[1:])  # (1, 1, J, I, 16)
        acts = torch.as_tensor(inputs.weights[r - 1]).view(1, 1, -1)
        slots = acts.shape[-1]
        with torch.inference_mode():
            _, activations, _ = em_routing(votes, acts, torch.arange(slots).view(1, -1), slots,
                                           torch.as_tensor(inputs.beta_u), torch.as_tensor(inputs.beta_a), r)  # fmt: skip
            expected = model(torch.as_tensor(image).view(1, 1, 28, 28), routing_iterations=r).activations
        torch.testing.assert_close(activations[:, 0], expected, atol=1e-5, rtol=1e-4)


def test_the_routing_inputs_refuse_a_network_that_does_not_route_and_a_count_below_one(model) -> None:
    with pytest.raises(ValueError, match="most must be at least 1"):
        routing_inputs(model, np.zeros((28, 28), dtype=np.float32), most=0)
    with pytest.raises(ValueError):
        routing_inputs(BaselineCNN().eval(), np.zeros((28, 28), dtype=np.float32))
