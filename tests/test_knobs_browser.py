"""The knobs' arithmetic in a real browser, held to PyTorch's: every number the component shows, on the shipped
MNIST models (the CapsNet, the EM network and Efficient-CapsNet), within 1e-4.

The ES modules of dashboard/knobs/js are served as they are (a loopback HTTP server, as Streamlit serves them) with
the payloads the dashboard sends for two test images; headless Chromium imports them and routes, draws random
couplings and redraws, and the results are compared with the model's own forward pass and routing functions.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from capsnet.checkpoints.checkpoint import load_checkpoint
from capsnet.data.datasets import as_tensors, load_dataset
from capsnet.nn.dynamic_routing import dynamic_routing
from capsnet.nn.routing import RandomCouplings, coupling_entropy
from capsnet.readings import coupling_rules as cr
from capsnet.readings import decoding
from capsnet.readings.explain import coupling_by_type
from capsnet.readings.reading import read
from capsnet.readings.routing_inputs import routing_inputs
from dashboard.knobs import payload

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4
IMAGES = (0, 8)  # a 7 read with confidence, and a 5 the networks find harder
DRAWS = 3  # random couplings drawn, of the 20 the Routing page offers
PAGE = "<!doctype html><meta charset=utf-8><title>knobs</title><p>knobs under test</p>"

# Everything the views compute from one payload, as the views compute it (routing_view.js, dimensions.js).
COMPUTE = """
async ([kind, r, draws, poses]) => {
  const { unpack } = await import("./js/pack.js");
  const { route, couplingByType } = await import("./js/routing.js");
  const { dataShares, emRoute } = await import("./js/em.js");
  const { randomLogits } = await import("./js/random.js");
  const { decode } = await import("./js/decoder.js");
  const bytes = new Uint8Array(await (await fetch(`./${kind}.bin`)).arrayBuffer());
  const { header, arrays } = unpack(bytes);
  const layers = [];
  for (let n = 0; arrays[`w${n}`]; n++) layers.push({ weight: arrays[`w${n}`], bias: arrays[`b${n}`] });
  const plain = (steps) => steps.map((s) => Object.fromEntries(Object.entries(s).map(([k, v]) =>
    [k, typeof v === "number" ? v : Array.from(v)])));
  const out = { routed: {}, random: [], redraws: poses.map(([pose, k]) => Array.from(decode(layers, pose, k))) };
  if (header.kind === "dynamic") {
    const [, K, N, D] = arrays.votes.shape;
    const steps = route(arrays.votes, K, N, D, r);
    out.routed = plain(steps);
    out.byType = steps.map((s) => Array.from(couplingByType(s.coupling, arrays.weights, K, header.types, N / header.types)));
    for (let n = 0; n < draws; n++) {
      out.random.push(plain(route(arrays.votes, K, N, D, 1, { start: randomLogits(header.seed, n, K * N) }))[0]);
    }
  } else {
    const [, J, I, H] = arrays.votes.shape;
    out.routed = {};
    for (let t = 1; t <= r; t++) {
      const votes = arrays.votes.subarray((t - 1) * J * I * H, t * J * I * H);
      const acts = arrays.weights.subarray((t - 1) * I, t * I);
      out.routed[t] = plain(emRoute(votes, acts, arrays.beta_u, arrays.beta_a, J, I, H, t).map((s) =>
        ({ ...s, shares: dataShares(s.assignments, acts, J, I) })));
    }
  }
  return out;
}
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the test's output is the comparison, not the requests
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A folder served on loopback, and its URL: the knobs' modules under js/, the payloads beside them."""
    root = tmp_path_factory.mktemp("knobs-served")
    shutil.copytree(REPO / "dashboard" / "knobs" / "js", root / "js")
    (root / "index.html").write_text(PAGE)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def test_images(data_dir: Path) -> np.ndarray:
    images, _ = as_tensors(load_dataset("mnist", train=False))
    return images[list(IMAGES), 0].numpy()  # (2, 28, 28)


def computed_in_the_browser(page, served: tuple[Path, str], model: Any, image: np.ndarray, poses: list) -> dict:
    """The payload the dashboard sends for `image` (the class layer's inputs and the decoder), computed on in the
    browser: routing r = 1..5, random couplings, per-type couplings and the redraws of `poses` ([pose, class])."""
    root, url = served
    inputs = routing_inputs(model, image)
    header = {"kind": inputs.kind, "seed": cr.SEED, "types": getattr(model.config, "primary_types", 0)}
    arrays = {**payload.routing_arrays(inputs), **payload.decoder_arrays(model.decoder)}
    (root / f"{inputs.kind}.bin").write_bytes(payload.pack(header, arrays))
    page.goto(f"{url}/index.html")
    return page.evaluate(COMPUTE, [inputs.kind, 5, DRAWS, poses])


def close(browser_values: Any, torch_values: Any, what: str) -> None:
    got, want = np.asarray(browser_values, dtype=np.float64), np.asarray(torch_values, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    worst = float(np.abs(got - want).max())
    assert worst <= TOLERANCE, f"{what}: the browser is {worst:.2e} from PyTorch"


def redraws(model: Any, poses: list) -> list[np.ndarray]:
    return [decoding.decode_vector(model, np.asarray(pose, dtype=np.float32), k).ravel() for pose, k in poses]


def poses_to_redraw(reading: Any) -> list:
    """The winner's pose as read, the same with one entry moved (a slider), and another class's pose."""
    moved = reading.poses[reading.prediction].copy()
    moved[5] += 0.2
    other = reading.runner_up
    return [[reading.poses[reading.prediction].tolist(), reading.prediction], [moved.tolist(), reading.prediction],
            [reading.poses[other].tolist(), other]]  # fmt: skip


@pytest.mark.parametrize("index", range(len(IMAGES)))
def test_dynamic_routing_in_the_browser_is_pytorchs(page, served, test_images, index: int) -> None:
    """The shipped CapsNet: couplings, lengths, entropies and per-type couplings of every iteration r = 1..5, the
    random couplings of three draws, and the decoder's redraws, each equal to PyTorch's."""
    model = load_checkpoint(REPO / "checkpoints" / "mnist.safetensors", device="cpu").model.eval()
    image = test_images[index]
    reading = read(model, image, 5)
    poses = poses_to_redraw(reading)
    got = computed_in_the_browser(page, served, model, image, poses)

    votes = torch.as_tensor(routing_inputs(model, image).votes)  # (1, K, N, D)
    with torch.inference_mode():
        _, trace = dynamic_routing(votes, 5, trace=True)
    assert trace is not None
    lengths = np.stack([step["lengths"] for step in got["routed"]])
    close(lengths, trace.lengths[0].numpy(), "lengths per iteration")
    for r in range(1, 6):  # routing r times: the model's own forward pass at r
        close(lengths[r - 1], read(model, image, r).scores, f"the model's lengths at r = {r}")
    for t, step in enumerate(got["routed"]):
        close(step["coupling"], trace.coupling[0, t].flatten().numpy(), f"couplings of iteration {t + 1}")
        close(step["entropy"], coupling_entropy(trace.coupling[0, t]).item(), f"entropy of iteration {t + 1}")
    by_type = coupling_by_type(trace.coupling[0].transpose(1, 2).numpy(), routing_inputs(model, image).weights[0],
                               model.config.primary_types, model.config.primary_grid)  # fmt: skip
    close(np.asarray(got["byType"]).reshape(by_type.shape), by_type, "couplings per primary-capsule type")

    rules = cr.read_input(model, image, 3, draws=DRAWS)  # uniform, routed and random, as the server reads them
    close(got["routed"][0]["lengths"], rules.uniform, "uniform couplings' lengths")
    close(np.stack([draw["lengths"] for draw in got["random"]]), rules.random, "random couplings' lengths")
    close(np.mean([draw["entropy"] for draw in got["random"]]), rules.entropy[2], "random couplings' entropy")
    start = RandomCouplings(cr.SEED, torch.arange(DRAWS)).logits((DRAWS, *votes.shape[1:3]), torch.device("cpu"))
    with torch.inference_mode():
        _, drawn = dynamic_routing(votes.expand(DRAWS, -1, -1, -1), 1, trace=True, start=start)
    assert drawn is not None
    close(np.stack([draw["coupling"] for draw in got["random"]]), drawn.coupling[:, 0].flatten(1).numpy(),
          "random couplings")  # fmt: skip
    close(got["redraws"], redraws(model, poses), "the decoder's redraws")


@pytest.mark.parametrize("index", range(len(IMAGES)))
def test_em_routing_in_the_browser_is_pytorchs(page, served, test_images, index: int) -> None:
    """The shipped EM network: the class layer's activations, poses, assignments, entropies and shares of every
    iteration of r = 1..5 (its votes read with every layer routed r times), and the redraws, each equal to
    PyTorch's."""
    model = load_checkpoint(REPO / "checkpoints" / "mnist-em.safetensors", device="cpu").model.eval()
    image = test_images[index]
    reading = read(model, image)
    poses = poses_to_redraw(reading)
    got = computed_in_the_browser(page, served, model, image, poses)
    x = torch.as_tensor(image).view(1, 1, 28, 28)
    for r in range(1, 6):
        steps = got["routed"][str(r)]
        with torch.inference_mode():
            out = model(x, routing_iterations=r, return_trace=True)
        trace = out.trace
        assert trace is not None and len(steps) == r
        close(steps[-1]["activations"], out.activations[0].numpy(), f"activations at r = {r}")
        close(steps[-1]["means"], out.poses[0].flatten().numpy(), f"poses at r = {r}")
        for t, step in enumerate(steps):
            close(step["activations"], trace.activations[0, t, 0].numpy(), f"r = {r}, iteration {t + 1}'s a_j")
            close(step["assignments"], trace.assignments[0, t, 0].flatten().numpy(), f"r = {r}, iteration {t + 1}'s R")
            close(step["entropy"], coupling_entropy(trace.assignments[0, t, 0]).item(), f"r = {r}, entropy {t + 1}")
        explained = read(model, image, r).routing
        close([s["shares"] for s in steps], explained.shares, f"shares of the children's data at r = {r}")  # type: ignore[union-attr]
    close(got["redraws"], redraws(model, poses), "the EM decoder's redraws")


ATTEND = """
async ([settings, draws]) => {
  const { unpack } = await import("./js/pack.js");
  const { attend } = await import("./js/attention.js");
  const { randomLogits } = await import("./js/random.js");
  const { header, arrays } = unpack(new Uint8Array(await (await fetch("./attention.bin")).arrayBuffer()));
  const [, K, N, D] = arrays.votes.shape;
  const plain = (one) => Object.fromEntries(Object.entries(one).map(([k, v]) => [k, typeof v === "number" ? v : Array.from(v)]));
  const run = (options) => plain(attend(arrays.votes, arrays.bias, arrays.weights, K, N, D, options));
  return {
    settings: settings.map(([sharpness, withBias]) => run({ sharpness, withBias })),
    random: Array.from({ length: draws }, (_, n) => run({ logits: randomLogits(header.seed, n, K * N) })),
  };
}
"""


@pytest.mark.parametrize("index", range(len(IMAGES)))
def test_self_attention_routing_in_the_browser_is_pytorchs(page, served, test_images, index: int) -> None:
    """The shipped Efficient-CapsNet: lengths, couplings, evidence and entropy of its one pass as trained (the
    model's own forward pass), at other sharpnesses (0: uniform), without its bias, and with random couplings, each
    equal to PyTorch's `self_attention_routing`."""
    from capsnet.nn.efficient_capsnet import self_attention_routing
    from capsnet.readings.explain_attention import explain_attention

    model = load_checkpoint(REPO / "checkpoints" / "mnist-efficient.safetensors", device="cpu").model.eval()
    image = test_images[index]
    inputs = routing_inputs(model, image)
    root, url = served
    arrays = payload.routing_arrays(inputs)
    (root / "attention.bin").write_bytes(payload.pack({"seed": cr.SEED}, arrays))
    page.goto(f"{url}/index.html")
    settings = [(1.0, True), (0.0, True), (2.5, True), (1.0, False), (0.0, False)]
    got = page.evaluate(ATTEND, [settings, DRAWS])

    explained = explain_attention(model, image)  # the model's own forward pass, as trained
    close(got["settings"][0]["lengths"], explained.lengths, "lengths as trained")
    close(got["settings"][0]["coupling"], explained.coupling.T.flatten(), "couplings as trained")
    close(got["settings"][0]["entropy"], explained.entropy, "the couplings' entropy")
    weights = inputs.weights[0]  # (N,) |u_i|
    close(got["settings"][0]["evidence"], (explained.coupling * weights[:, None]).sum(axis=0), "the evidence")
    votes, bias = torch.as_tensor(inputs.votes), model.b.detach()
    for (sharpness, with_bias), one in zip(settings, got["settings"]):
        with torch.inference_mode():
            v, coupling = self_attention_routing(votes, bias if with_bias else torch.zeros_like(bias), sharpness)
        what = f"sharpness {sharpness}, {'with' if with_bias else 'without'} the bias"
        close(one["lengths"], v[0].norm(dim=-1).numpy(), f"lengths at {what}")
        close(one["poses"], v[0].flatten().numpy(), f"poses at {what}")
        close(one["coupling"], coupling[0].flatten().numpy(), f"couplings at {what}")
    assert np.allclose(np.asarray(got["settings"][4]["coupling"]), 0.1)  # sharpness 0, no bias: uniform
    start = RandomCouplings(cr.SEED, torch.arange(DRAWS)).logits((DRAWS, *votes.shape[1:3]), torch.device("cpu"))
    with torch.inference_mode():
        v, coupling = self_attention_routing(votes.expand(DRAWS, -1, -1, -1), bias, logits=start)
    close(np.stack([draw["lengths"] for draw in got["random"]]), v.norm(dim=-1).numpy(), "random couplings' lengths")
    close(np.stack([draw["coupling"] for draw in got["random"]]), coupling.flatten(1).numpy(), "random couplings")


def test_the_browser_holds_what_it_was_sent_and_says_what_it_lacks(page, served) -> None:
    """js/store.js: a group of arrays carried once is held and put in by name later; a group named but never
    carried is reported missing (the page then asks the server to send it again)."""
    _, url = served
    page.goto(f"{url}/index.html")
    said = page.evaluate(
        """async () => {
          const { withHeld } = await import("./js/store.js");
          const header = { held: { "decoder:abc": ["w0"] } };
          const first = withHeld(header, { "decoder:abc/w0": new Float32Array([1, 2]), image: new Float32Array(1) });
          const second = withHeld(header, { image: new Float32Array(1) });
          const lacking = withHeld({ held: { "votes:xyz": ["votes"] } }, {});
          return [Array.from(first.arrays.w0), Array.from(second.arrays.w0), second.missing, lacking.missing,
                  Object.keys(second.arrays).sort()];
        }"""
    )
    assert said == [[1, 2], [1, 2], [], ["votes:xyz"], ["image", "w0"]]
