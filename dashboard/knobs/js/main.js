// The knobs' component: one default export Streamlit calls with the payload's bytes whenever they arrive.
//
// Each payload names its view, whose module is imported when first needed; a view is built from the payload and
// keeps its own state, which survives a payload of the same input (a rerun that changed nothing the view reads),
// so a rerun never moves a slider back. After every change a view has drawn, `data-settled` counts up: tests and
// benchmarks wait on it.

import { unpack } from "./pack.js";
import { withHeld } from "./store.js";

const VIEWS = {
  canvas: "./canvas.js",
  dimensions: "./dimensions.js",
  routing: "./routing_view.js",
  attention: "./attention_view.js",
  playground: "./playground_view.js",
};
const mounted = new WeakMap(); // the view's root -> {identity, state}

export default async function knobs({ data, parentElement, setStateValue }) {
  const root = parentElement.querySelector(".knobs");
  if (!root || !data) return;
  let payload;
  try {
    payload = unpack(data);
  } catch (error) {
    root.textContent = `The knobs could not read what the server sent: ${error.message}`;
    return;
  }
  const { header } = payload;
  const { arrays, missing } = withHeld(header, payload.arrays);
  if (missing.length) {
    // the server thought this page held them (a payload it sent was never drawn): it sends them again
    root.textContent = "Loading...";
    setStateValue("missing", `${missing.join(" ")} #${Date.now()}`); // a new value each time: a new request
    return;
  }
  if (!Object.hasOwn(VIEWS, header.view)) {
    root.textContent = `No view named ${JSON.stringify(header.view)}.`;
    return;
  }
  const view = await import(VIEWS[header.view]);
  const last = mounted.get(root);
  const kept = last && last.identity === header.identity ? last.state : null;
  let count = Number(root.dataset.settled ?? 0);
  const settled = () => {
    root.dataset.settled = String(++count);
  };
  root.dataset.view = header.view;
  root.dataset.identity = header.identity;
  const state = view.mount(root, header, arrays, { report: setStateValue, kept, settled });
  mounted.set(root, { identity: header.identity, state });
}
