// The drawing canvas: white ink on black, drawn with the mouse, a pen or a finger (pointer events), with Undo and
// Clear. Nothing goes to the server while the pen moves: when it lifts, the picture (a PNG, a few kilobytes) and the
// strokes (to draw them again when the page is opened again) are reported once (dashboard/knobs/canvas.py).

import { el } from "./draw.js";

/** Trace one stroke (flat [x0, y0, x1, y1, ...]) through the midpoints of its points, as a pen's ink is smoothed. */
function trace(context, points, width) {
  if (points.length < 4) {
    context.beginPath();
    context.arc(points[0], points[1], width / 2, 0, 2 * Math.PI);
    context.fill();
    return;
  }
  context.beginPath();
  context.moveTo(points[0], points[1]);
  for (let i = 2; i < points.length - 2; i += 2) {
    const midX = (points[i] + points[i + 2]) / 2;
    const midY = (points[i + 1] + points[i + 3]) / 2;
    context.quadraticCurveTo(points[i], points[i + 1], midX, midY);
  }
  context.lineTo(points[points.length - 2], points[points.length - 1]);
  context.stroke();
}

/** Build the view in `root`; `kept` is the state of this canvas's last view (its strokes), if any. */
export function mount(root, header, _arrays, { report, kept, settled }) {
  if (kept?.caption && root.contains(kept.caption)) {
    // a rerun of the same canvas: left as it is (a stroke may be under way), its words brought up to date
    kept.caption.textContent = header.caption;
    return kept;
  }
  const size = header.size;
  const state = { strokes: (kept?.strokes ?? header.strokes ?? []).map((s) => s.slice()) };
  const canvas = el("canvas", {
    class: "ink",
    width: String(size),
    height: String(size),
    role: "img",
    "aria-label": header.label,
    style: `width: ${size}px; height: ${size}px`,
  });
  const context = canvas.getContext("2d");
  const undo = el("button", { type: "button", class: "plain", onclick: () => edit(state.strokes.slice(0, -1)) }, "Undo");
  const clear = el("button", { type: "button", class: "plain", onclick: () => edit([]) }, "Clear");
  state.caption = el("p", { class: "caption" }, header.caption);
  root.replaceChildren(el("div", { class: "controls" }, clear, undo), canvas, state.caption);

  function paintAll(extra = null) {
    context.fillStyle = "#000";
    context.fillRect(0, 0, size, size);
    context.strokeStyle = context.fillStyle = "#fff";
    context.lineWidth = header.width;
    context.lineCap = context.lineJoin = "round";
    for (const points of state.strokes) trace(context, points, header.width);
    if (extra) trace(context, extra, header.width);
    undo.disabled = clear.disabled = state.strokes.length === 0 && !extra;
    root.values = { strokes: state.strokes.length };
  }

  function send() {
    // what the server reads: the picture, and the strokes to draw it again (none: nothing to read)
    const png = state.strokes.length ? canvas.toDataURL("image/png") : null;
    report("drawing", { png, strokes: state.strokes, at: Date.now() });
  }

  function edit(strokes) {
    state.strokes = strokes;
    paintAll();
    send();
  }

  let pen = null; // the stroke under way: its points, and the pointer drawing it
  const at = (event) => {
    const box = canvas.getBoundingClientRect();
    const x = ((event.clientX - box.left) * size) / (box.width || size);
    const y = ((event.clientY - box.top) * size) / (box.height || size);
    return [Math.round(Math.min(size, Math.max(0, x))), Math.round(Math.min(size, Math.max(0, y)))];
  };
  canvas.addEventListener("pointerdown", (event) => {
    if (event.button !== 0 || pen) return;
    event.preventDefault();
    canvas.setPointerCapture(event.pointerId);
    pen = { id: event.pointerId, points: at(event) };
    paintAll(pen.points);
  });
  canvas.addEventListener("pointermove", (event) => {
    if (!pen || event.pointerId !== pen.id) return;
    for (const e of event.getCoalescedEvents?.() ?? [event]) pen.points.push(...at(e));
    paintAll(pen.points);
  });
  const lift = (event) => {
    if (!pen || event.pointerId !== pen.id) return;
    state.strokes = [...state.strokes, pen.points];
    pen = null;
    paintAll();
    send();
  };
  canvas.addEventListener("pointerup", lift);
  canvas.addEventListener("pointercancel", lift);

  paintAll();
  settled();
  return state;
}
