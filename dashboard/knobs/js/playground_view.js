// The Routing playground's toy, live: 3 parents, 12 children, votes in a plane, routed by dynamic routing and by EM
// routing side by side in the browser.
//
// The payload (dashboard/knobs/playground.py) carries every preset's votes; choosing a preset, stepping through the
// iterations, changing r, dragging a vote (or typing where it points) and moving |s| along the curves recompute here
// and never ask the server. Nothing is reported back: the page's part on the real model's votes does not follow it.

import { el, segmented, svg } from "./draw.js";
import {
  childReading,
  clipped,
  comparison,
  dynamicToy,
  emReading,
  emToy,
  marginLoss,
  movedCount,
  squashLength,
} from "./playground.js";

const LIGHT = "#fafafa";
const GRID = "#3a4150";
const PLANE = { size: 380, left: 30, top: 8, side: 342 }; // a square plot area in a 380 x 380 view box
const STYLE = `
.pg .grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 10px 28px; }
.pg .plane { width: 100%; max-width: 470px; height: auto; touch-action: none; user-select: none; display: block; }
.pg .plane [data-role="vote"] { cursor: grab; }
.pg .plane.dragging, .pg .plane.dragging [data-role="vote"] { cursor: grabbing; }
.pg .figure { width: 100%; max-width: 470px; height: auto; display: block; }
.pg .title { font-size: 13px; font-weight: 600; margin: 6px 0 2px; }
.pg .subtitle { font-size: 12px; opacity: 0.8; min-height: 1.2em; }
.pg .legend { display: flex; gap: 14px; font-size: 12px; align-items: center; flex-wrap: wrap; }
.pg .legend i { display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 4px; }
.pg .fields { display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: flex-end; margin: 6px 0; }
.pg .fields label { display: flex; flex-direction: column; font-size: 12px; gap: 2px; }
.pg .fields input[type="number"] { width: 6em; }
.pg .fields input[type="range"] { width: 240px; accent-color: var(--st-primary-color, #ff4b4b); }
.pg select { font: inherit; padding: 2px 4px; }
.pg .reading { font-size: 13px; margin: 4px 0 10px; }
.pg h4 { margin: 18px 0 4px; font-size: 16px; }
.pg svg text { fill: currentColor; }
.pg .tick { font-size: 10px; opacity: 0.75; }
.pg .clickable { cursor: pointer; }
`;
let mounts = 0; // each mount's clip paths get ids of their own

function label(x, y, text, attributes = {}) {
  const node = svg("text", { x, y, class: "tick", ...attributes });
  node.textContent = text;
  return node;
}

function tip(node, text) {
  const title = svg("title");
  title.textContent = text;
  node.append(title);
  return node;
}

/** Markdown's **bold** as <strong>, the rest as text, in `node`. */
function rich(node, text) {
  node.replaceChildren(...text.split("**").map((part, k) => (k % 2 ? el("strong", {}, part) : part)));
}

/** How far the plane reaches: the votes and the unit circle, with room around them (the page's figures' rule). */
function reachOf(votes) {
  let far = 1.05;
  for (const v of votes) far = Math.max(far, Math.abs(v));
  return far * 1.12;
}

const fmt = (x, digits) => x.toFixed(digits);

/** Build the view in `root` from the payload; `kept` is the state of the same payload's last view, if any. */
export function mount(root, header, arrays, { kept, settled }) {
  const [, K, N] = arrays.votes.shape;
  const size = K * N * 2;
  const names = header.parents;
  const colours = header.colours;
  const preset = (p) => arrays.votes.subarray(p * size, (p + 1) * size);
  const state = kept ?? {
    preset: 0,
    votes: Float32Array.from(preset(0)),
    r: header.r,
    step: 1,
    parent: 0,
    child: 0,
    norm: header.norm,
  };
  let reach = reachOf(state.votes);
  const id = `pg${++mounts}`;
  const ties = { present: header.present, length: header.length_tie, activation: header.activation_tie };

  // ---------------------------------------------------------------- controls
  const presetPicker = el("select", { "data-role": "preset", "aria-label": "situation" });
  presetPicker.append(...header.presets.map((name, p) => el("option", { value: String(p) }, name)));
  presetPicker.addEventListener("change", () => choosePreset(Number(presetPicker.value)));
  const rPicker = segmented(
    Array.from({ length: header.max_r }, (_, k) => String(k + 1)),
    state.r - 1,
    (k) => setR(k + 1),
    { name: "routing iterations" },
  );
  rPicker.node.dataset.role = "iterations";
  const back = el("button", { type: "button", class: "plain", "data-role": "prev", "aria-label": "previous iteration", onclick: () => step(-1) }, "◀");
  const forth = el("button", { type: "button", class: "plain", "data-role": "next", "aria-label": "next iteration", onclick: () => step(1) }, "▶");
  const shown = el("span", { class: "label", "data-role": "step" });
  const reset = el(
    "button",
    { type: "button", class: "plain", "data-role": "reset", title: "Put every moved vote back where the situation has it.", onclick: resetVotes },
    "Reset to the preset",
  );
  const help = el("p", { class: "caption", "data-role": "help" });

  // ---------------------------------------------------------------- the two planes
  const dynamicPlane = plane("dynamic-plane", "dynamic routing's votes, weighted by c_ij");
  const emPlane = plane("em-plane", "EM routing's votes, weighted by R_ij");
  const dynamicTitle = el("div", { class: "subtitle", "data-role": "dynamic-title" });
  const emTitle = el("div", { class: "subtitle", "data-role": "em-title" });
  const legend = el(
    "div",
    { class: "legend" },
    ...names.map((name, j) => el("span", {}, el("i", { style: `background:${colours[j]}` }), `votes for ${name}`)),
    el("span", { class: "caption" }, "A vote's size and strength: its weight. Drag one to move it."),
  );
  const compared = el("p", { "data-role": "comparison" });
  const dynamicBars = el("div", { "data-role": "dynamic-bars" });
  const emBars = el("div", { "data-role": "em-bars" });
  const reading = el("p", { class: "reading", "data-role": "child-reading" });
  const emReadingNode = el("p", { class: "reading", "data-role": "em-reading" });

  // ---------------------------------------------------------------- the chosen vote
  const childPicker = el("select", { "data-role": "child", "aria-label": "child" });
  childPicker.append(...Array.from({ length: N }, (_, i) => el("option", { value: String(i) }, `child ${i + 1}`)));
  childPicker.addEventListener("change", () => choose(state.parent, Number(childPicker.value)));
  const parentPicker = el("select", { "data-role": "parent", "aria-label": "its vote for" });
  parentPicker.append(...names.map((name, j) => el("option", { value: String(j) }, name)));
  parentPicker.addEventListener("change", () => choose(Number(parentPicker.value), state.child));
  const xs = ["x", "y"].map((axis, d) => {
    const input = el("input", {
      type: "number",
      min: String(-header.bound),
      max: String(header.bound),
      step: "0.1",
      "data-role": axis,
      "aria-label": axis,
    });
    input.addEventListener("change", () => {
      const value = Number(input.value);
      if (input.value === "" || !Number.isFinite(value)) return;
      state.votes[(state.parent * N + state.child) * 2 + d] = clipped(value, header.bound);
      reach = reachOf(state.votes);
      render();
    });
    return input;
  });
  const moved = el("p", { class: "caption", "data-role": "moved" });
  const lengthsNode = el("div", { "data-role": "lengths" });
  const activationsNode = el("div", { "data-role": "activations" });

  // ---------------------------------------------------------------- the curves
  const norm = el("input", {
    type: "range",
    min: "0",
    max: String(header.max_norm),
    step: "0.05",
    value: String(state.norm),
    "data-role": "norm",
    "aria-label": "length of a sum |s_j|",
  });
  norm.addEventListener("input", () => {
    state.norm = Number(norm.value);
    render();
  });
  const normShown = el("span", {});
  const curveReading = el("p", { "data-role": "curve-reading" });
  const squashNode = el("div", { "data-role": "squash" });
  const marginNode = el("div", { "data-role": "margin" });

  root.replaceChildren(
    el("style", {}, STYLE),
    el(
      "div",
      { class: "pg" },
      el("p", { class: "lead" }, header.lead),
      el(
        "div",
        { class: "controls" },
        el("span", { class: "label" }, "Situation"),
        presetPicker,
        el("span", { class: "label" }, "Routing iterations r"),
        rPicker.node,
        back,
        shown,
        forth,
        reset,
      ),
      help,
      legend,
      el(
        "div",
        { class: "grid2" },
        el("div", {}, el("div", { class: "title" }, "Dynamic routing (Sabour et al. 2017): c_ij, s_j and v_j"), dynamicTitle, dynamicPlane.node),
        el("div", {}, el("div", { class: "title" }, "EM routing (Hinton et al. 2018): R_ij, each parent's Gaussian and a_j"), emTitle, emPlane.node),
      ),
      compared,
      el("p", { class: "caption" }, header.contrast),
      el("div", { class: "grid2" }, el("div", {}, dynamicBars, reading), el("div", {}, emBars, emReadingNode)),
      el(
        "div",
        { class: "grid2" },
        el(
          "div",
          {},
          el("div", { class: "title" }, "Move a vote"),
          el("p", { class: "caption" }, "Drag a point in either plane, or click one and say here where it points."),
          el(
            "div",
            { class: "fields" },
            el("label", {}, "Child", childPicker),
            el("label", {}, "Its vote for", parentPicker),
            el("label", {}, "x", xs[0]),
            el("label", {}, "y", xs[1]),
          ),
          moved,
        ),
        el("div", {}, lengthsNode, activationsNode),
      ),
      el("h4", {}, "The two curves behind it"),
      el("div", { class: "fields" }, el("label", {}, el("span", {}, "Length of a sum |s_j|: ", normShown), norm)),
      curveReading,
      el("div", { class: "grid2" }, squashNode, marginNode),
    ),
  );

  // ---------------------------------------------------------------- what the hand does
  function choosePreset(p) {
    state.preset = p;
    state.votes = Float32Array.from(preset(p));
    state.step = 1; // another situation opens at its first iteration
    reach = reachOf(state.votes);
    render();
  }
  function resetVotes() {
    state.votes = Float32Array.from(preset(state.preset)); // the iteration shown stays
    reach = reachOf(state.votes);
    render();
  }
  function setR(r) {
    state.r = r;
    render();
  }
  function step(delta) {
    state.step = Math.min(Math.max(state.step + delta, 1), state.r);
    render();
  }
  function choose(parent, child) {
    state.parent = parent;
    state.child = child;
    render();
  }
  root.addEventListener("keydown", (event) => {
    if (event.target.closest?.("input, select")) return;
    if (event.key === "ArrowLeft") step(-1);
    if (event.key === "ArrowRight") step(1);
  });

  /** A plane's SVG, whose votes can be dragged: built once, its content redrawn. */
  function plane(role, title) {
    const node = svg("svg", { viewBox: `0 0 ${PLANE.size} ${PLANE.size}`, class: "plane", role: "img", "aria-label": title, "data-role": role });
    const clip = `${id}-${role}`;
    node.append(
      svg("defs", {}, svg("clipPath", { id: clip }, svg("rect", { x: PLANE.left, y: PLANE.top, width: PLANE.side, height: PLANE.side }))),
    );
    const frame = svg("g");
    const content = svg("g", { "clip-path": `url(#${clip})` });
    const over = svg("g"); // labels that may cross the frame
    node.append(frame, content, over);
    let drag = null;
    node.addEventListener("pointerdown", (event) => {
      const vote = event.target.closest?.('[data-role="vote"]');
      if (!vote) return;
      event.preventDefault();
      drag = { pointer: event.pointerId, moved: false };
      node.setPointerCapture(event.pointerId);
      node.classList.add("dragging");
      choose(Number(vote.dataset.parent), Number(vote.dataset.child));
    });
    node.addEventListener("pointermove", (event) => {
      if (!drag || drag.pointer !== event.pointerId) return;
      const point = node.createSVGPoint();
      point.x = event.clientX;
      point.y = event.clientY;
      const local = point.matrixTransform(node.getScreenCTM().inverse());
      const inside = 0.98 * reach; // the plane keeps its scale while a vote moves: the vote stays under the pointer
      const x = Math.min(Math.max(fromX(local.x), -inside), inside);
      const y = Math.min(Math.max(fromY(local.y), -inside), inside);
      const at = (state.parent * N + state.child) * 2;
      state.votes[at] = clipped(x, header.bound);
      state.votes[at + 1] = clipped(y, header.bound);
      drag.moved = true;
      render();
    });
    const drop = (event) => {
      if (!drag || drag.pointer !== event.pointerId) return;
      const wasMoved = drag.moved;
      drag = null;
      node.classList.remove("dragging");
      if (wasMoved) {
        reach = reachOf(state.votes); // let go: the plane takes in where the vote went
        render();
      }
    };
    node.addEventListener("pointerup", drop);
    node.addEventListener("pointercancel", drop);
    return { node, frame, content, over };
  }

  const toX = (x) => PLANE.left + ((x + reach) / (2 * reach)) * PLANE.side;
  const toY = (y) => PLANE.top + ((reach - y) / (2 * reach)) * PLANE.side;
  const fromX = (px) => ((px - PLANE.left) / PLANE.side) * 2 * reach - reach;
  const fromY = (py) => reach - ((py - PLANE.top) / PLANE.side) * 2 * reach;

  function drawFrame(target) {
    target.frame.replaceChildren();
    target.over.replaceChildren();
    const { left, top, side } = PLANE;
    target.frame.append(svg("rect", { x: left, y: top, width: side, height: side, fill: "none", stroke: GRID }));
    const ticks = [];
    for (let t = Math.ceil(-reach); t <= Math.floor(reach); t++) ticks.push(t);
    for (const t of ticks) {
      target.frame.append(label(toX(t), top + side + 13, String(t), { "text-anchor": "middle" }));
      target.frame.append(label(left - 5, toY(t) + 3, String(t), { "text-anchor": "end" }));
    }
    target.frame.append(
      svg("line", { x1: toX(0), x2: toX(0), y1: top, y2: top + side, stroke: GRID }),
      svg("line", { x1: left, x2: left + side, y1: toY(0), y2: toY(0), stroke: GRID }),
      svg("circle", { cx: toX(0), cy: toY(0), r: (PLANE.side / (2 * reach)) * 1, fill: "none", stroke: "#7f8ea3", "stroke-dasharray": "2 3" }),
    );
  }

  /** The votes of every parent at (x, y), each sized and faded by `weight(j, i)` in [0, 1]. */
  function drawVotes(target, weight, what) {
    for (let j = 0; j < K; j++) {
      for (let i = 0; i < N; i++) {
        const x = state.votes[(j * N + i) * 2];
        const y = state.votes[(j * N + i) * 2 + 1];
        const w = weight(j, i);
        const radius = 3 + 11 * w;
        const group = svg("g", { "data-role": "vote", "data-parent": j, "data-child": i });
        group.append(
          svg("circle", { cx: toX(x), cy: toY(y), r: Math.max(radius, 8), fill: "transparent" }),
          svg("circle", { cx: toX(x), cy: toY(y), r: radius, fill: colours[j], "fill-opacity": 0.25 + 0.75 * w }),
          label(toX(x), toY(y) - radius - 2, String(i + 1), { "text-anchor": "middle", style: `fill:${colours[j]};opacity:1` }),
        );
        tip(group, `child ${i + 1} → ${names[j]}: (${fmt(x, 2)}, ${fmt(y, 2)}), ${what(j, i)}`);
        target.content.append(group);
      }
    }
    const at = (state.parent * N + state.child) * 2;
    target.content.append(
      svg("circle", { cx: toX(state.votes[at]), cy: toY(state.votes[at + 1]), r: 13, fill: "none", stroke: LIGHT, "stroke-width": 2, "data-role": "chosen" }),
    );
  }

  function arrow(target, x, y, colour) {
    const [x0, y0, x1, y1] = [toX(0), toY(0), toX(x), toY(y)];
    const length = Math.hypot(x1 - x0, y1 - y0);
    target.content.append(svg("line", { x1: x0, y1: y0, x2: x1, y2: y1, stroke: colour, "stroke-width": 3 }));
    if (length < 1) return;
    const [ux, uy] = [(x1 - x0) / length, (y1 - y0) / length];
    const head = Math.min(11, length);
    const points = [
      [x1, y1],
      [x1 - head * ux - 5 * uy, y1 - head * uy + 5 * ux],
      [x1 - head * ux + 5 * uy, y1 - head * uy - 5 * ux],
    ];
    target.content.append(svg("polygon", { points: points.map((p) => p.join(",")).join(" "), fill: colour }));
  }

  function cross(target, x, y, colour) {
    const [cx, cy] = [toX(x), toY(y)];
    target.content.append(
      svg("path", { d: `M${cx - 6},${cy - 6}L${cx + 6},${cy + 6}M${cx - 6},${cy + 6}L${cx + 6},${cy - 6}`, stroke: colour, "stroke-width": 3 }),
      svg("path", { d: `M${cx - 6},${cy - 6}L${cx + 6},${cy + 6}M${cx - 6},${cy + 6}L${cx + 6},${cy - 6}`, stroke: LIGHT, "stroke-width": 0.8 }),
    );
  }

  function drawDynamic(steps, t) {
    const now = steps[t];
    let scale = 1e-6; // the largest coupling of any iteration gets the largest mark
    for (const s of steps) for (const c of s.coupling) scale = Math.max(scale, c);
    drawFrame(dynamicPlane);
    dynamicPlane.content.replaceChildren();
    drawVotes(
      dynamicPlane,
      (j, i) => now.coupling[j * N + i] / scale,
      (j, i) => `c = ${fmt(now.coupling[j * N + i], 3)}, û·v = ${fmt(now.agreement[j * N + i], 3)}`,
    );
    const far = [];
    for (let j = 0; j < K; j++) arrow(dynamicPlane, now.poses[2 * j], now.poses[2 * j + 1], colours[j]);
    for (let j = 0; j < K; j++) {
      const [sx, sy] = [now.sums[2 * j], now.sums[2 * j + 1]];
      const length = Math.hypot(sx, sy);
      const edge = 0.94 * reach;
      const shrink = length > edge ? edge / length : 1; // a sum beyond the view is drawn at its edge
      if (shrink < 1) far.push(`|s| = ${fmt(length, 1)} for ${names[j]} (at the edge)`);
      cross(dynamicPlane, sx * shrink, sy * shrink, colours[j]);
    }
    dynamicTitle.textContent = `Iteration ${t + 1} of ${steps.length}: arrows are v_j, crosses s_j` + (far.length ? `; ${far.join("; ")}` : "");
  }

  function drawEM(steps, t) {
    const now = steps[t];
    drawFrame(emPlane);
    emPlane.content.replaceChildren();
    const px = PLANE.side / (2 * reach);
    for (let j = 0; j < K; j++) {
      const [mx, my] = [now.means[2 * j], now.means[2 * j + 1]];
      const [sx, sy] = [now.stds[2 * j], now.stds[2 * j + 1]];
      for (const [k, dash, width] of [
        [1, "", 2],
        [2, "2 3", 1],
      ]) {
        emPlane.content.append(
          svg("ellipse", { cx: toX(mx), cy: toY(my), rx: k * sx * px, ry: k * sy * px, fill: "none", stroke: colours[j], "stroke-width": width, "stroke-dasharray": dash }),
        );
      }
    }
    drawVotes(
      emPlane,
      (j, i) => now.assignments[j * N + i],
      (j, i) => `R = ${fmt(now.assignments[j * N + i], 3)}`,
    );
    for (let j = 0; j < K; j++) {
      const edge = 0.98 * reach;
      const [mx, my] = [now.means[2 * j], now.means[2 * j + 1]].map((v) => Math.min(Math.max(v, -edge), edge));
      const [cx, cy] = [toX(mx), toY(my)];
      const diamond = svg("polygon", {
        points: `${cx},${cy - 8} ${cx + 7},${cy} ${cx},${cy + 8} ${cx - 7},${cy}`,
        fill: colours[j],
        stroke: LIGHT,
        "stroke-width": 1,
      });
      tip(diamond, `μ for ${names[j]} = (${fmt(now.means[2 * j], 2)}, ${fmt(now.means[2 * j + 1], 2)}), σ = (${fmt(now.stds[2 * j], 2)}, ${fmt(now.stds[2 * j + 1], 2)}), a = ${fmt(now.activations[j], 3)}`);
      emPlane.content.append(diamond);
    }
    emTitle.textContent = `Iteration ${t + 1} of ${steps.length}: μ_j (diamonds) and its 1σ, 2σ ellipses`;
  }

  /** Each child's weights (K*N, parents first) as one stacked bar a row; a click on a row chooses that child. */
  function stacked(values, symbol) {
    const [width, rowH, left, top] = [420, 19, 62, 6];
    const plot = svg("svg", { viewBox: `0 0 ${width} ${top + N * rowH + 20}`, class: "figure", role: "img", "aria-label": `${symbol}_ij of each child` });
    const span = width - left - 8;
    for (let i = 0; i < N; i++) {
      const row = svg("g", { class: "clickable", "data-role": "bar-row", "data-child": i });
      row.addEventListener("click", () => choose(state.parent, i));
      const y = top + i * rowH;
      row.append(label(left - 6, y + rowH / 2 + 3, `child ${i + 1}${i === state.child ? " ◀" : ""}`, { "text-anchor": "end" }));
      let x = left;
      for (let j = 0; j < K; j++) {
        const w = values[j * N + i] * span;
        const rect = svg("rect", { x, y: y + 2, width: Math.max(w, 0), height: rowH - 4, fill: colours[j] });
        tip(rect, `child ${i + 1}: ${symbol} to ${names[j]} = ${fmt(values[j * N + i], 3)}`);
        row.append(rect);
        if (values[j * N + i] >= 0.12) row.append(label(x + w / 2, y + rowH / 2 + 3, fmt(values[j * N + i], 2), { "text-anchor": "middle", style: "fill:#fff;opacity:1" }));
        x += w;
      }
      plot.append(row);
    }
    for (const tick of [0, 0.5, 1]) plot.append(label(left + tick * span, top + N * rowH + 13, String(tick), { "text-anchor": "middle" }));
    return [el("div", { class: "title" }, `${symbol}_ij of each child (a row sums to 1)`), plot];
  }

  /** One line a parent over the iterations 1..T (values[t][j]), the iteration shown marked; `span` the value axis,
   * `ticks` the values marked on it. */
  function overIterations(values, quantity, span, t, ticks = [span[0], (span[0] + span[1]) / 2, span[1]]) {
    const [width, height, left, bottom, top] = [420, 150, 40, 20, 8];
    const T = values.length;
    const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "figure", role: "img", "aria-label": `${quantity} after each iteration` });
    const x = (s) => left + (T > 1 ? (s / (T - 1)) * (width - left - 16) : (width - left - 16) / 2);
    const y = (v) => top + (height - bottom - top) * (1 - (v - span[0]) / (span[1] - span[0] || 1));
    for (const tick of ticks) {
      plot.append(svg("line", { x1: left, x2: width - 10, y1: y(tick), y2: y(tick), stroke: GRID }));
      plot.append(label(left - 4, y(tick) + 3, fmt(tick, 2), { "text-anchor": "end" }));
    }
    for (let s = 0; s < T; s++) plot.append(label(x(s), height - 5, String(s + 1), { "text-anchor": "middle" }));
    plot.append(svg("line", { x1: x(t), x2: x(t), y1: top, y2: height - bottom, stroke: LIGHT, "stroke-dasharray": "2 3" }));
    for (let j = 0; j < K; j++) {
      const points = values.map((v, s) => `${x(s)},${y(v[j])}`).join(" ");
      plot.append(svg("polyline", { points, fill: "none", stroke: colours[j], "stroke-width": 2 }));
      values.forEach((v, s) => plot.append(tip(svg("circle", { cx: x(s), cy: y(v[j]), r: 3, fill: colours[j] }), `${names[j]}: ${quantity} = ${fmt(v[j], 3)}`)));
    }
    return [el("div", { class: "title" }, `${quantity} after each iteration`), plot];
  }

  /** Curves y(x) on [0, xMax] x [0, yMax] with marks, `yTicks` marked on the value axis; returns the SVG. */
  function curvePlot(curves, xMax, yMax, yTicks, marks, xLabel, yLabel, lines = []) {
    const [width, height, left, bottom, top] = [420, 232, 40, 30, 22];
    const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "figure", role: "img", "aria-label": `${yLabel} against ${xLabel}` });
    const x = (v) => left + (Math.min(Math.max(v, 0), xMax) / xMax) * (width - left - 12);
    const y = (v) => top + (height - bottom - top) * (1 - Math.min(Math.max(v, 0), yMax) / yMax);
    for (const tick of yTicks) {
      plot.append(svg("line", { x1: left, x2: width - 12, y1: y(tick), y2: y(tick), stroke: GRID }));
      plot.append(label(left - 4, y(tick) + 3, fmt(tick, 1), { "text-anchor": "end" }));
    }
    for (const tick of [0, 0.5, 1]) plot.append(label(x(tick * xMax), height - 16, fmt(tick * xMax, 1), { "text-anchor": "middle" }));
    plot.append(label((left + width) / 2, height - 3, xLabel, { "text-anchor": "middle" }));
    plot.append(label(left - 4, 10, yLabel, { "text-anchor": "end" }));
    for (const line of lines) {
      plot.append(svg("line", { x1: x(line.x), x2: x(line.x), y1: top, y2: height - bottom, stroke: line.colour, "stroke-dasharray": "4 3" }));
      plot.append(label(x(line.x) + 3, top - 4, line.label, { style: `fill:${line.colour};opacity:1` }));
    }
    for (const curve of curves) {
      const points = [];
      for (let k = 0; k <= 200; k++) points.push(`${x((k / 200) * xMax)},${y(curve.f((k / 200) * xMax))}`);
      plot.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: curve.colour, "stroke-width": 2 }));
    }
    for (const mark of marks) {
      plot.append(tip(svg("circle", { cx: x(mark.x), cy: y(mark.y), r: mark.r ?? 6, fill: mark.colour, stroke: LIGHT, "stroke-width": 1, "data-role": mark.role ?? "" }), mark.text));
    }
    return plot;
  }

  // ---------------------------------------------------------------- drawing
  function render() {
    const dynamic = dynamicToy(state.votes, K, N, state.r);
    const em = emToy(state.votes, K, N, state.r);
    state.step = Math.min(Math.max(state.step, 1), state.r);
    const t = state.step - 1;
    presetPicker.value = String(state.preset);
    rPicker.set(state.r - 1);
    shown.textContent = `iteration ${state.step} of ${state.r}`;
    back.disabled = state.step <= 1;
    forth.disabled = state.step >= state.r;
    help.textContent = header.help[state.preset];
    childPicker.value = String(state.child);
    parentPicker.value = String(state.parent);
    const at = (state.parent * N + state.child) * 2;
    xs.forEach((input, d) => {
      if (document.activeElement !== input && root.getRootNode().activeElement !== input) input.value = fmt(state.votes[at + d], 2);
    });

    drawDynamic(dynamic, t);
    drawEM(em, t);
    const said = comparison(dynamic[t].coupling, dynamic[t].lengths, em[t].assignments, em[t].activations, names, state.step, ties);
    rich(compared, said);
    dynamicBars.replaceChildren(...stacked(dynamic[t].coupling, "c"));
    emBars.replaceChildren(...stacked(em[t].assignments, "R"));
    const childSaid = childReading(dynamic[t], names, state.child, N);
    const emSaid = emReading(em[t], names, state.child, N);
    rich(reading, childSaid);
    rich(emReadingNode, emSaid);
    const count = movedCount(state.votes, preset(state.preset));
    moved.textContent = count ? `${count} vote${count === 1 ? "" : "s"} moved from the preset.` : "No vote moved yet.";
    lengthsNode.replaceChildren(...overIterations(dynamic.map((s) => s.lengths), "|v_j|", [0, 1.02], t, [0, 0.5, 1]));
    let [low, high] = [Infinity, -Infinity];
    for (const s of em) for (const a of s.activations) [low, high] = [Math.min(low, a), Math.max(high, a)];
    const pad = Math.max(0.02, (high - low) * 0.15);
    activationsNode.replaceChildren(...overIterations(em.map((s) => s.activations), "a_j", [Math.max(0, low - pad), Math.min(1, high + pad)], t));

    const length = squashLength(state.norm);
    const [present, absent] = marginLoss(length, header.m_plus, header.m_minus, header.down_weight);
    normShown.textContent = fmt(state.norm, 2);
    norm.value = String(state.norm);
    rich(
      curveReading,
      `|s_j| = **${fmt(state.norm, 2)}** squashes to |v_j| = **${fmt(length, 3)}**. As a class capsule of that length it would ` +
        `cost **${fmt(present, 3)}** if its class were present, **${fmt(absent, 3)}** if absent. The coloured marks are the toy's ` +
        `parents at iteration ${state.step}.`,
    );
    const parentsAt = names.map((name, j) => {
      const s = Math.hypot(dynamic[t].sums[2 * j], dynamic[t].sums[2 * j + 1]);
      return { s, v: dynamic[t].lengths[j], name, colour: colours[j] };
    });
    squashNode.replaceChildren(
      el("div", { class: "title" }, "Squash: short vectors shrink to ~0, long ones to just below 1"),
      curvePlot(
        [{ f: squashLength, colour: "#7f8ea3" }],
        header.max_norm,
        1.05,
        [0, 0.5, 1],
        [
          ...parentsAt.map((p) => ({ x: p.s, y: p.v, colour: p.colour, r: 5, text: `${p.name}: |s| = ${fmt(p.s, 2)}, |v| = ${fmt(p.v, 3)}` })),
          { x: state.norm, y: length, colour: header.accent, role: "norm-mark", text: `|s| = ${fmt(state.norm, 2)} → |v| = ${fmt(length, 3)}` },
        ],
        "|s_j|",
        "|v_j|",
      ),
    );
    const mp = header.m_plus;
    const mm = header.m_minus;
    const lossOf = (v) => marginLoss(v, mp, mm, header.down_weight);
    marginNode.replaceChildren(
      el("div", { class: "title" }, "Margin loss of one class, by its length"),
      curvePlot(
        [
          { f: (v) => lossOf(v)[0], colour: header.colour_present },
          { f: (v) => lossOf(v)[1], colour: header.colour_absent },
        ],
        1,
        Math.max(mp, 1 - mm) ** 2 * 1.05,
        [0, 0.4, 0.8],
        [
          ...parentsAt.flatMap((p) => [
            { x: p.v, y: lossOf(p.v)[0], colour: p.colour, r: 4, text: `${p.name} present: L = ${fmt(lossOf(p.v)[0], 3)}` },
            { x: p.v, y: lossOf(p.v)[1], colour: p.colour, r: 4, text: `${p.name} absent: L = ${fmt(lossOf(p.v)[1], 3)}` },
          ]),
          { x: length, y: present, colour: header.colour_present, role: "present-mark", text: `present: L = ${fmt(present, 3)}` },
          { x: length, y: absent, colour: header.colour_absent, role: "absent-mark", text: `absent: L = ${fmt(absent, 3)}` },
        ],
        "|v_k|",
        "L_k",
        [
          { x: mp, colour: header.colour_present, label: `m⁺ = ${mp}` },
          { x: mm, colour: header.colour_absent, label: `m⁻ = ${mm}` },
        ],
      ),
      el("div", { class: "caption" }, "Green: the class present (T_k = 1); orange: absent (T_k = 0)."),
    );

    const plain = (array) => Array.from(array);
    root.values = {
      preset: state.preset,
      presetName: header.presets[state.preset],
      r: state.r,
      step: state.step,
      parent: state.parent,
      child: state.child,
      votes: plain(state.votes),
      moved: count,
      dynamic: dynamic.map((s) => ({
        coupling: plain(s.coupling),
        lengths: plain(s.lengths),
        sums: plain(s.sums),
        poses: plain(s.poses),
        agreement: plain(s.agreement),
      })),
      em: em.map((s) => ({
        assignments: plain(s.assignments),
        activations: plain(s.activations),
        means: plain(s.means),
        stds: plain(s.stds),
        lambda: s.lambda,
      })),
      comparison: said,
      childReading: childSaid,
      emReading: emSaid,
      norm: state.norm,
      squash: length,
      loss: [present, absent],
    };
    settled();
  }

  render();
  return state;
}
