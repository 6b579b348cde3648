// Capsule dimensions: a class capsule's 16 pose entries on sliders, redrawn through the decoder at every move.
//
// The payload (dashboard/knobs/views.py, `dimensions`) carries every class capsule's pose as read from the input,
// the sliders' ranges, the input and the decoder's weights; nothing here asks the server again, but the capsule in
// focus is reported back (the page's link and Figure 4 follow it).

import { decode } from "./decoder.js";
import { channelsLast, el, paint, segmented, svg } from "./draw.js";

function profile(base, edited, low, high) {
  // each dimension's place in its range: the capsule as read (grey) and as edited (accent)
  const width = 640;
  const height = 120;
  const node = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", "aria-label": "each dimension in its range" });
  const step = width / base.length;
  const y = (v, d) => 10 + (height - 30) * (1 - (v - low[d]) / (high[d] - low[d] || 1));
  base.forEach((value, d) => {
    for (const [v, cls, offset] of [
      [value, "pose", 0.18],
      [edited[d], "edit", 0.52],
    ]) {
      const top = y(v, d);
      node.append(
        svg("rect", {
          x: d * step + step * offset,
          y: Math.min(top, height - 20),
          width: step * 0.3,
          height: Math.max(1, height - 20 - top),
          class: cls,
        }),
      );
    }
    const label = svg("text", { x: d * step + step / 2, y: height - 6, class: "tick", "text-anchor": "middle" });
    label.textContent = String(d + 1);
    node.append(label);
  });
  return node;
}

/** Build the view in `root` from the payload; `kept` is the state of the same input's last view, if any. */
export function mount(root, header, arrays, { report, kept, settled }) {
  const K = header.names.length;
  const D = header.labels.length;
  const layers = [];
  for (let n = 0; arrays[`w${n}`]; n++) layers.push({ weight: arrays[`w${n}`], bias: arrays[`b${n}`] });
  const row = (array, k) => Array.from(array.subarray(k * D, (k + 1) * D));
  const sliding = header.mode !== "redraw"; // "redraw": the Draw page's what-if, a capsule redrawn, no sliders
  const state = kept ?? { capsule: header.capsule, edited: null };
  const redraw = (pose, k) => channelsLast(decode(layers, pose, k), header.side, header.channels);

  const lead = el("p", { class: "lead" }, header.lead);
  const picker = segmented(
    header.names.map((name, k) => (k === header.prediction ? `${name} ★` : name)),
    state.capsule,
    (k) => choose(k, true),
    { name: sliding ? "capsule to edit" : "capsule to redraw" },
  );
  const reset = el("button", { type: "button", class: "plain", onclick: () => choose(state.capsule, false) }, "Reset");
  const moved = el("p", { class: "caption", "data-role": "moved" });
  const inputs = [];
  const values = [];
  const sliders = el("div", { class: "sliders" });
  for (let d = 0; d < D; d++) {
    const input = el("input", { type: "range", "aria-label": header.labels[d], "data-dim": String(d) });
    const value = el("span");
    const box = el("div", { class: "slider" }, el("label", {}, header.labels[d], value), input);
    input.addEventListener("input", () => {
      state.edited[d] = Number(input.value);
      update();
    });
    inputs.push(input);
    values.push(value);
    sliders.append(box);
  }
  const input = el("canvas", { class: "small", "data-role": "input" });
  const original = el("canvas", { class: "small", "data-role": "original" });
  const edited = el("canvas", { class: "large", "data-role": "edited" });
  const originalCaption = el("figcaption");
  const chart = el("div", { class: "caption" });
  if (sliding) {
    const pictures = el(
      "div",
      { class: "pictures" },
      el("div", { class: "row" }, el("figure", {}, input, el("figcaption", {}, "input")), el("figure", {}, original, originalCaption)),
      el("figure", {}, edited, el("figcaption", {}, "edited reconstruction")),
      moved,
    );
    root.replaceChildren(
      lead,
      el("div", { class: "controls" }, el("span", { class: "label" }, "Capsule to edit"), picker.node, reset),
      el("div", { class: "row" }, el("div", { style: "flex: 2.2 1 480px" }, sliders), pictures),
      chart,
    );
  } else {
    original.className = "small"; // beside the input, in a page's side column
    root.replaceChildren(
      el("div", { class: "controls" }, el("span", { class: "label" }, header.lead), picker.node),
      el("div", { class: "row" }, el("figure", {}, input, el("figcaption", {}, "input")), el("figure", {}, original, originalCaption)),
    );
  }
  paint(input, arrays.image, header.side, header.channels);

  let base = null;
  let redrawn = null; // the chosen capsule's redraw as read
  function choose(k, fromHand) {
    state.capsule = k;
    picker.set(k);
    base = row(arrays.poses, k);
    state.edited = Object.assign(base.slice(), { base: k });
    const low = row(arrays.low, k);
    const high = row(arrays.high, k);
    inputs.forEach((input, d) => {
      input.min = String(low[d]);
      input.max = String(high[d]);
      input.step = String(Math.max(Number(((high[d] - low[d]) / 100).toFixed(4)), 1e-4));
      input.value = String(base[d]); // the slider shows it to its step; the pose keeps the exact value until moved
    });
    originalCaption.textContent = sliding
      ? `from capsule ${header.names[k]}`
      : `${header.caption} ${header.names[k]}${k === header.prediction ? " (the prediction)" : ""}`;
    redrawn = redraw(base, k);
    paint(original, redrawn, header.side, header.channels);
    // the Capsule dimensions page's link and Figure 4 follow it; the prediction's capsule means "follow the prediction"
    if (fromHand && sliding) report("capsule", k === header.prediction ? -1 : k);
    update();
  }

  function update() {
    const k = state.capsule;
    if (!sliding) {
      root.values = { capsule: k, pose: base.slice(), reconstruction: Array.from(redrawn) };
      settled();
      return;
    }
    const low = row(arrays.low, k);
    const high = row(arrays.high, k);
    const pixels = redraw(state.edited, k);
    paint(edited, pixels, header.side, header.channels);
    let count = 0;
    state.edited.forEach((value, d) => {
      const isMoved = Math.abs(value - base[d]) > 1e-6;
      count += isMoved;
      values[d].textContent = value.toFixed(3);
      inputs[d].parentElement.classList.toggle("moved", isMoved);
    });
    moved.textContent = count ? `${count} of ${D} dimensions moved.` : "No dimension moved yet: drag a slider.";
    chart.replaceChildren(
      "Each dimension in its slider's range: grey as read, coloured as edited.",
      profile(base, state.edited, low, high),
    );
    root.values = { capsule: k, pose: state.edited.slice(), reconstruction: Array.from(pixels) };
    settled();
  }

  const keptEdits = kept?.edited ? kept.edited.slice() : null;
  choose(state.capsule, false);
  if (keptEdits && keptEdits.base === state.capsule) {
    keptEdits.forEach((value, d) => {
      inputs[d].value = String(value);
      state.edited[d] = value;
    });
    update();
  }
  return state;
}
