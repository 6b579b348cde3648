// Routing, live, for self-attention (Efficient-CapsNet): the one pass recomputed in the browser (attention.js) as the
// hand turns it: the attention's sharpness (1 as trained, 0 uniform), the learned bias on or off, or random
// couplings in the attention's place. Nothing here asks the server: the page's answer stays the network's own.

import { attend } from "./attention.js";
import { bars, el, heatmap, segmented } from "./draw.js";
import { randomLogits } from "./random.js";
import { argmax, drawPicker, experimentBox, randomSentence, rulesTable } from "./rules.js";

const RULES = ["attention", "uniform", "random"];
const MOST_SHARPNESS = 4;

/** Build the view in `root` from the payload; `kept` is the state of the same input's last view, if any. */
export function mount(root, header, arrays, { kept, settled }) {
  const [, K, N, D] = arrays.votes.shape;
  const { names } = header;
  const state = kept ?? { rule: "attention", sharpness: 1, bias: true, draw: 0 };
  const cache = new Map();
  const pass = (rule, sharpness, bias, draw) => {
    const key = `${rule} ${sharpness} ${bias} ${draw}`;
    if (!cache.has(key)) {
      const logits = rule === "random" ? randomLogits(header.seed, draw, K * N) : null;
      const scale = rule === "uniform" ? 0 : sharpness;
      if (cache.size > 64) cache.clear();
      cache.set(key, attend(arrays.votes, arrays.bias, arrays.weights, K, N, D, { sharpness: scale, logits, withBias: bias }));
    }
    return cache.get(key);
  };
  const trained = () => pass("attention", 1, true, 0);

  const rulePicker = segmented(RULES, RULES.indexOf(state.rule), (k) => {
    state.rule = RULES[k];
    render();
  }, { name: "couplings" });
  const sharpness = el("input", { type: "range", min: "0", max: String(MOST_SHARPNESS), step: "0.05", value: String(state.sharpness), "aria-label": "sharpness" });
  const sharpnessShown = el("span", { class: "label", "data-role": "sharpness" });
  sharpness.addEventListener("input", () => {
    state.sharpness = Number(sharpness.value);
    if (state.rule !== "attention") state.rule = "attention";
    render();
  });
  const bias = el("input", { type: "checkbox", "aria-label": "learned bias" });
  bias.checked = state.bias;
  bias.addEventListener("change", () => {
    state.bias = bias.checked;
    render();
  });
  const { node: drawBox, input: draw } = drawPicker(header.seed, header.draws, state.draw, (n) => {
    state.draw = n;
    render();
  });
  const reset = el("button", { type: "button", class: "plain", onclick: () => {
    Object.assign(state, { rule: "attention", sharpness: 1, bias: true, draw: 0 });
    render();
  } }, "As trained");
  const summary = el("p", { class: "lead", "data-role": "summary" });
  const notice = el("p", { class: "notice", "data-role": "notice" });
  const scores = el("div", { class: "panel" });
  const map = el("div", { class: "panel" });
  const evidence = el("div", { class: "panel" });
  const entropy = el("p", { class: "caption", "data-role": "entropy" });
  const { node: experiment, body: experimentBody } = experimentBox(
    "Does the attention matter for this input? As trained, uniform and random couplings",
    () => compareRules(),
    settled,
  );
  root.replaceChildren(
    el("p", { class: "lead" }, header.lead),
    el(
      "div",
      { class: "controls" },
      el("span", { class: "label" }, "Couplings"),
      rulePicker.node,
      drawBox,
      el("span", { class: "label" }, "Sharpness"),
      sharpness,
      sharpnessShown,
      el("label", { class: "label" }, bias, " learned bias"),
      reset,
    ),
    summary,
    notice,
    el("div", { class: "row" }, scores, map, evidence),
    entropy,
    experiment,
  );

  function describe() {
    if (state.rule === "random") return `random couplings (draw ${state.draw + 1})`;
    const what = state.rule === "uniform" || state.sharpness === 0 ? "uniform attention" : state.sharpness === 1 ? "the attention as trained" : `the attention at sharpness ${state.sharpness.toFixed(2)}`;
    return state.bias ? what : `${what}, without the learned bias`;
  }

  /** The input under each rule: as trained, uniform (with and without the bias), and every random draw. */
  function compareRules() {
    const read = (name, one) => ({ name, scores: one.lengths, entropy: one.entropy });
    const rows = [
      read("As trained (sharpness 1, bias)", trained()),
      read("Uniform attention, bias kept", pass("uniform", 0, true, 0)),
      read("Uniform attention, no bias", pass("uniform", 0, false, 0)),
    ];
    const draws = Array.from({ length: header.draws }, (_, n) => read("", pass("random", 1, state.bias, n)));
    const answer = argmax(rows[0].scores);
    const label = `Random, ${draws.length} draws${state.bias ? ", bias kept" : ""}`;
    const { table, agreeing } = rulesTable(rows, draws, label, names, header.symbol, answer);
    const uniform = argmax(rows[1].scores);
    const lead = uniform === answer
      ? "Uniform attention gives the answer the network gives."
      : `Uniform attention changes the answer from ${names[answer]} to ${names[uniform]}.`;
    const sentence = randomSentence(agreeing, draws.length, "the network's answer", "the attention's couplings");
    experimentBody.replaceChildren(table, el("p", { class: "caption" }, `${lead} ${sentence}`));
    root.experiment = { rows: rows.map(({ name, scores, entropy }) => ({ name, scores: Array.from(scores), entropy })), agreeing, draws: draws.length };
  }

  function render() {
    const now = pass(state.rule, state.sharpness, state.bias, state.draw);
    const winner = argmax(now.lengths);
    const answer = argmax(trained().lengths);
    rulePicker.set(RULES.indexOf(state.rule));
    sharpness.value = String(state.sharpness);
    sharpness.disabled = state.rule !== "attention";
    sharpnessShown.textContent = state.rule === "attention" ? `${state.sharpness.toFixed(2)}${state.sharpness === 1 ? " (as trained)" : ""}` : "";
    bias.checked = state.bias;
    drawBox.style.display = state.rule === "random" ? "" : "none";
    draw.value = String(state.draw + 1);
    summary.textContent = `With ${describe()}, the network reads ${names[winner]} (${header.symbol} = ${now.lengths[winner].toFixed(3)}).`;
    notice.textContent = winner !== answer ? `These couplings change the answer: as trained the network reads ${names[answer]}.` : "";
    notice.style.display = notice.textContent ? "" : "none";
    const marks = header.m_plus == null ? [] : [
      { value: header.m_plus, label: `m+ ${header.m_plus}` },
      { value: header.m_minus, label: `m- ${header.m_minus}` },
    ];
    scores.replaceChildren(
      el("div", { class: "caption" }, header.score_axis),
      bars(now.lengths, names, { marks, focus: winner, title: header.score_axis }),
    );
    const uniform = 1 / K;
    let reach = 1e-6;
    for (const v of now.coupling) reach = Math.max(reach, Math.abs(v - uniform));
    map.replaceChildren(
      el("div", { class: "caption" }, `each primary capsule's coupling to each class (red: above the uniform ${uniform.toFixed(3)}, blue: below)`),
      heatmap(now.coupling, K, N, {
        centre: uniform,
        reach,
        rowLabels: names,
        colLabels: Array.from({ length: N }, (_, i) => (i % 4 === 0 ? `${i + 1}` : "")),
        title: "couplings",
      }),
    );
    evidence.replaceChildren(
      el("div", { class: "caption" }, "the evidence each class receives, Σᵢ |uᵢ| cᵢⱼ"),
      bars(now.evidence, names, { focus: winner, top: Math.max(1e-6, ...now.evidence), title: "evidence" }),
    );
    entropy.textContent = `Coupling entropy ${now.entropy.toFixed(4)} (1 = every class alike, 0 = every primary capsule on one class).`;
    if (experiment.open) compareRules();
    root.values = {
      rule: state.rule,
      sharpness: state.sharpness,
      bias: state.bias,
      draw: state.draw,
      scores: Array.from(now.lengths),
      coupling: Array.from(now.coupling),
      evidence: Array.from(now.evidence),
      entropy: now.entropy,
      prediction: winner,
    };
    settled();
  }

  render();
  return state;
}
