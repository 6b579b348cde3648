// Small drawing helpers for the knobs' views: elements, pictures on a canvas, bar charts and heatmaps in SVG.
// Colours come from the app's theme (the --st-* properties Streamlit sets on the component).

const SVG = "http://www.w3.org/2000/svg";

/** An element with attributes and children (strings become text). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

/** An SVG element with attributes and children. */
export function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  for (const child of children) node.append(child);
  return node;
}

/** Paint `pixels` (H*W grey, or H*W*3 colour when `channels` is 3, channels last, in [0, 1]) on `canvas`. */
export function paint(canvas, pixels, side, channels = 1) {
  canvas.width = side;
  canvas.height = side;
  const context = canvas.getContext("2d");
  const image = context.createImageData(side, side);
  for (let p = 0; p < side * side; p++) {
    for (let c = 0; c < 3; c++) {
      const value = channels === 3 ? pixels[p * 3 + c] : pixels[p];
      image.data[p * 4 + c] = Math.round(255 * Math.min(1, Math.max(0, value)));
    }
    image.data[p * 4 + 3] = 255;
  }
  context.putImageData(image, 0, 0);
}

/** The decoder's output (channels first) as a picture's pixels (channels last). */
export function channelsLast(values, side, channels) {
  if (channels === 1) return values;
  const out = new Float64Array(values.length);
  const cells = side * side;
  for (let c = 0; c < channels; c++) for (let p = 0; p < cells; p++) out[p * channels + c] = values[c * cells + p];
  return out;
}

/**
 * A vertical bar chart: one bar per label, heights in [0, top]; `marks` are horizontal lines ({value, label});
 * `focus` is the index drawn in the accent colour. Returns the SVG element.
 */
export function bars(values, labels, { top = 1, marks = [], focus = -1, width = 420, height = 190, title = "" } = {}) {
  const left = 34;
  const bottom = 22;
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title });
  const inner = height - bottom - 8;
  const step = (width - left - 6) / values.length;
  const y = (v) => 8 + inner * (1 - Math.min(Math.max(v / top, 0), 1));
  for (const tick of [0, 0.5, 1]) {
    plot.append(svg("line", { x1: left, x2: width - 4, y1: y(tick * top), y2: y(tick * top), class: "grid" }));
    const text = svg("text", { x: left - 4, y: y(tick * top) + 4, class: "tick", "text-anchor": "end" });
    text.textContent = (tick * top).toFixed(1);
    plot.append(text);
  }
  values.forEach((value, k) => {
    const x = left + k * step + step * 0.15;
    const bar = svg("rect", {
      x,
      y: y(value),
      width: step * 0.7,
      height: Math.max(0, y(0) - y(value)),
      class: k === focus ? "bar focus" : "bar",
    });
    const tip = svg("title");
    tip.textContent = `${labels[k]}: ${value.toFixed(3)}`;
    bar.append(tip);
    plot.append(bar);
    const label = svg("text", { x: x + step * 0.35, y: height - 6, class: "tick", "text-anchor": "middle" });
    label.textContent = labels[k];
    plot.append(label);
  });
  for (const mark of marks) {
    plot.append(svg("line", { x1: left, x2: width - 4, y1: y(mark.value), y2: y(mark.value), class: "mark" }));
    const text = svg("text", { x: width - 6, y: y(mark.value) - 3, class: "tick", "text-anchor": "end" });
    text.textContent = mark.label;
    plot.append(text);
  }
  return plot;
}

/**
 * A heatmap of rows x cols values coloured by their signed distance from `centre` (blue below, red above, scaled by
 * `reach`); `rowLabels` and `colLabels` name them. Returns the SVG element.
 */
export function heatmap(values, rows, cols, { centre = 0, reach = 1, rowLabels = [], colLabels = [], title = "" } = {}) {
  const cell = 14;
  const left = 34;
  const topPad = 16;
  const width = left + cols * cell + 4;
  const height = topPad + rows * cell + 4;
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart heat", role: "img", "aria-label": title });
  colLabels.forEach((label, c) => {
    const text = svg("text", { x: left + c * cell + cell / 2, y: 11, class: "tick", "text-anchor": "middle" });
    text.textContent = label;
    plot.append(text);
  });
  for (let r = 0; r < rows; r++) {
    if (rowLabels[r] && (rows <= 12 || r % 4 === 0)) {
      const text = svg("text", { x: left - 4, y: topPad + r * cell + 10, class: "tick", "text-anchor": "end" });
      text.textContent = rowLabels[r];
      plot.append(text);
    }
    for (let c = 0; c < cols; c++) {
      const value = values[r * cols + c];
      const t = Math.max(-1, Math.min(1, (value - centre) / (reach || 1)));
      const shade = Math.round(255 * (1 - Math.abs(t)));
      const colour = t >= 0 ? `rgb(255,${shade},${shade})` : `rgb(${shade},${shade},255)`;
      const rect = svg("rect", { x: left + c * cell, y: topPad + r * cell, width: cell - 1, height: cell - 1, fill: colour });
      const tip = svg("title");
      tip.textContent = `${rowLabels[r] ?? r} → ${colLabels[c] ?? c}: ${value.toFixed(3)}`;
      rect.append(tip);
      plot.append(rect);
    }
  }
  return plot;
}

/** A row of toggle buttons; `onPick(index)` on a click. Returns {node, set(index)}. */
export function segmented(labels, chosen, onPick, { name = "" } = {}) {
  const node = el("div", { class: "segmented", role: "radiogroup", "aria-label": name });
  const buttons = labels.map((label, k) =>
    el("button", { type: "button", role: "radio", "data-index": String(k), onclick: () => onPick(k) }, String(label)),
  );
  node.append(...buttons);
  const set = (index) =>
    buttons.forEach((button, k) => {
      button.setAttribute("aria-checked", String(k === index));
      button.classList.toggle("on", k === index);
    });
  set(chosen);
  return { node, set, buttons };
}

/** Lines over the iterations: series[k] is one capsule's values at t = 1..T; `focus` drawn in the accent colour. */
export function lines(series, labels, { top = 1, focus = -1, step = -1, width = 300, height = 190, title = "" } = {}) {
  const left = 30;
  const bottom = 20;
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title });
  const T = series[0]?.length ?? 0;
  const x = (t) => left + (T > 1 ? (t * (width - left - 30)) / (T - 1) : (width - left - 30) / 2);
  const y = (v) => 8 + (height - bottom - 8) * (1 - Math.min(Math.max(v / top, 0), 1));
  for (const tick of [0, 0.5, 1]) {
    plot.append(svg("line", { x1: left, x2: width - 28, y1: y(tick * top), y2: y(tick * top), class: "grid" }));
  }
  for (let t = 0; t < T; t++) {
    const text = svg("text", { x: x(t), y: height - 5, class: "tick", "text-anchor": "middle" });
    text.textContent = String(t + 1);
    plot.append(text);
  }
  if (step >= 0) plot.append(svg("line", { x1: x(step), x2: x(step), y1: 8, y2: height - bottom, class: "mark" }));
  const order = series.map((_, k) => k).sort((a, b) => (a === focus) - (b === focus));
  for (const k of order) {
    const points = series[k].map((v, t) => `${x(t)},${y(v)}`).join(" ");
    plot.append(svg("polyline", { points, fill: "none", class: k === focus ? "line focus" : "line" }));
    const last = series[k][T - 1];
    const text = svg("text", { x: width - 24, y: y(last) + 3, class: "tick" });
    text.textContent = labels[k];
    if (k === focus || last > 0.3 * top) plot.append(text);
  }
  return plot;
}
