// Routing, live: the class layer routed in the browser, iteration by iteration, under each coupling rule.
//
// Dynamic routing (routing.js) from the votes u_hat_{j|i}; EM routing (em.js) from the class layer's votes of each
// r. Stepping, animating and switching the rule recompute here and never ask the server; r and the capsule in
// focus are reported back, because the page's link and its views below follow them.

import { bars, el, heatmap, lines, segmented } from "./draw.js";
import { dataShares, emRoute } from "./em.js";
import { randomLogits } from "./random.js";
import { couplingByType, route } from "./routing.js";
import { argmax, drawPicker, experimentBox, randomSentence, rulesTable } from "./rules.js";

const RULES = ["routed", "uniform", "random"];

/** Everything a rule and r give, one entry per iteration (scores, couplings, entropy, per-class summaries). */
function makeRouter(header, arrays) {
  const cache = new Map();
  if (header.kind === "dynamic") {
    const [, K, N, D] = arrays.votes.shape;
    const types = header.types;
    const cells = N / types;
    const summarise = (step) => ({
      scores: Array.from(step.lengths),
      entropy: step.entropy,
      coupling: step.coupling,
      // c_ij per primary-capsule type, each capsule weighted by its length |u_i|: (types, K)
      byType: couplingByType(step.coupling, arrays.weights, K, types, cells),
    });
    // routing r times is the first r iterations of routing more: one run serves every r
    const all = () => {
      if (!cache.has("routed")) cache.set("routed", route(arrays.votes, K, N, D, header.max_r, { leak: header.leak }).map(summarise));
      return cache.get("routed");
    };
    return {
      K,
      random: true,
      steps(rule, r, draw) {
        if (rule === "routed") return all().slice(0, r);
        if (rule === "uniform") return all().slice(0, 1);
        const name = `random ${draw}`; // the couplings drawn are never routed: one iteration
        if (!cache.has(name)) {
          const start = randomLogits(header.seed, draw, K * N);
          cache.set(name, route(arrays.votes, K, N, D, 1, { start, leak: header.leak }).map(summarise));
        }
        return cache.get(name);
      },
    };
  }
  const [R, J, I, H] = arrays.votes.shape;
  const at = (r) => {
    if (!cache.has(r)) {
      const votes = arrays.votes.subarray((r - 1) * J * I * H, r * J * I * H);
      const acts = arrays.weights.subarray((r - 1) * I, r * I);
      const steps = emRoute(votes, acts, arrays.beta_u, arrays.beta_a, J, I, H, r).map((step) => ({
        scores: Array.from(step.activations),
        entropy: step.entropy,
        coupling: step.assignments,
        shares: Array.from(dataShares(step.assignments, acts, J, I)), // each class's share of the children's data
      }));
      cache.set(r, steps);
    }
    return cache.get(r);
  };
  return {
    K: J,
    random: false,
    maxR: R,
    steps(rule, r) {
      return rule === "uniform" ? at(1) : at(r);
    },
  };
}

/** Build the view in `root` from the payload; `kept` is the state of the same input's last view, if any. */
export function mount(root, header, arrays, { report, kept, settled }) {
  const router = makeRouter(header, arrays);
  const { names } = header;
  const K = router.K;
  const state = kept ?? { r: header.r, step: header.r, rule: "routed", draw: 0, capsule: header.capsule };
  // what the server changed (a link, another page) wins over what this view last had; what the hand did is kept
  if (kept && kept.serverR !== header.r && kept.r !== header.r) Object.assign(state, { r: header.r, step: header.r });
  if (kept && kept.serverCapsule !== header.capsule) state.capsule = header.capsule;
  Object.assign(state, { serverR: header.r, serverCapsule: header.capsule });
  const MAX_R = header.max_r;
  const dynamic = header.kind === "dynamic";

  const rPicker = segmented(
    Array.from({ length: MAX_R }, (_, k) => (k + 1 === header.trained ? `${k + 1} ★` : String(k + 1))),
    state.r - 1,
    (k) => setR(k + 1),
    { name: "routing iterations" },
  );
  const back = el("button", { type: "button", class: "plain", "aria-label": "previous iteration", onclick: () => step(-1) }, "◀");
  const forth = el("button", { type: "button", class: "plain", "aria-label": "next iteration", onclick: () => step(1) }, "▶");
  const shown = el("span", { class: "label", "data-role": "step" });
  const rulePicker = segmented(RULES, RULES.indexOf(state.rule), (k) => setRule(RULES[k]), { name: "couplings" });
  if (!router.random) {
    rulePicker.buttons[2].disabled = true;
    rulePicker.buttons[2].title = "EM's random couplings are drawn in every capsule layer: see Where routing matters";
  }
  const { node: drawBox } = drawPicker(header.seed, header.draws, state.draw, (n) => {
    state.draw = n;
    render();
  });
  const capsule = el("select", { "aria-label": "capsule in focus" });
  capsule.append(el("option", { value: "-1" }, "the prediction"), ...names.map((name, k) => el("option", { value: String(k) }, name)));
  capsule.value = String(state.capsule);
  capsule.addEventListener("change", () => {
    state.capsule = Number(capsule.value);
    report("capsule", state.capsule);
    render();
  });
  const summary = el("p", { class: "lead", "data-role": "summary" });
  const notice = el("p", { class: "notice", "data-role": "notice" });
  const scores = el("div", { class: "panel" });
  const over = el("div", { class: "panel" });
  const right = el("div", { class: "panel" });
  const entropy = el("p", { class: "caption", "data-role": "entropy" });
  const { node: experiment, body: experimentBody } = experimentBox(
    "Does routing matter for this input? Uniform, routed and random couplings",
    () => compareRules(),
    settled,
  );
  root.replaceChildren(
    el("p", { class: "lead" }, header.lead),
    el(
      "div",
      { class: "controls" },
      el("span", { class: "label" }, "Iterations r"),
      rPicker.node,
      back,
      shown,
      forth,
      el("span", { class: "label" }, "Couplings"),
      rulePicker.node,
      drawBox,
      el("span", { class: "label" }, "Capsule"),
      capsule,
    ),
    summary,
    notice,
    el("div", { class: "row" }, scores, over, right),
    entropy,
    experiment,
  );

  function setR(r) {
    state.r = r;
    state.step = r;
    if (state.rule === "uniform") state.rule = "routed";
    report("iterations", r);
    render();
  }
  function setRule(rule) {
    state.rule = rule;
    render();
  }
  function step(delta) {
    const T = router.steps(state.rule, state.r, state.draw).length;
    state.step = Math.min(Math.max(state.step + delta, 1), T);
    render();
  }
  root.addEventListener("keydown", (event) => {
    if (event.key === "ArrowLeft") step(-1);
    if (event.key === "ArrowRight") step(1);
  });

  /** The input under each rule, as the Routing page's experiment reads it: uniform, routed r times, and every
   * random draw (not routed), with the answer, its score and the couplings' entropy. */
  function compareRules() {
    const uniform = router.steps("uniform", state.r, 0).at(-1);
    const routed = router.steps("routed", state.r, 0).at(-1);
    const rows = [{ name: "Uniform (r = 1, not routed)", ...uniform }];
    if (state.r > 1) rows.push({ name: `Routed, r = ${state.r}`, ...routed });
    const values = { uniform: uniform.scores, routed: routed.scores, random: [] };
    const answer = argmax(routed.scores);
    let table;
    let sentence;
    if (router.random) {
      const draws = Array.from({ length: header.draws }, (_, n) => router.steps("random", state.r, n)[0]);
      const read = rulesTable(rows, draws, `Random, ${draws.length} draws (not routed)`, names, header.symbol, answer);
      table = read.table;
      sentence = randomSentence(read.agreeing, draws.length, "the routed answer", "the couplings");
      values.random = draws.map((d) => d.scores);
      values.randomEntropy = read.meanEntropy;
    } else {
      table = rulesTable(rows, [], "", names, header.symbol, answer).table; // EM's are drawn in every layer
      sentence = "Random couplings are drawn in every capsule layer of the EM network: the page's experiment below reads them.";
    }
    const same = argmax(uniform.scores) === answer;
    const lead = state.r === 1 ? "With one iteration routing has not begun." : same
      ? `Uniform couplings give the same answer as routing at r = ${state.r}.`
      : `Routing at r = ${state.r} changes the answer from ${names[argmax(uniform.scores)]} to ${names[answer]}.`;
    experimentBody.replaceChildren(table, el("p", { class: "caption" }, `${lead} ${sentence}`));
    root.experiment = values;
  }

  function render() {
    const steps = router.steps(state.rule, state.r, state.draw);
    const T = steps.length;
    state.step = Math.min(Math.max(state.step, 1), T);
    const now = steps[state.step - 1];
    const last = steps[T - 1];
    const winner = argmax(last.scores);
    const focus = state.capsule >= 0 ? state.capsule : winner;
    rPicker.set(state.r - 1);
    rulePicker.set(RULES.indexOf(state.rule));
    drawBox.style.display = state.rule === "random" ? "" : "none";
    shown.textContent = `iteration ${state.step} of ${T}`;
    back.disabled = state.step <= 1;
    forth.disabled = state.step >= T;
    const rule =
      state.rule === "routed"
        ? `routed r = ${state.r}`
        : state.rule === "uniform"
          ? "uniform couplings (no routing)"
          : `random couplings, draw ${state.draw + 1}`;
    summary.textContent =
      `With ${rule}, the network reads ${names[winner]} (${header.symbol} = ${last.scores[winner].toFixed(3)}). ` +
      `Shown: iteration ${state.step}, where ${names[focus]} has ${header.symbol} = ${now.scores[focus].toFixed(3)}.`;
    const first = argmax(steps[0].scores);
    notice.textContent =
      T > 1 && first !== winner ? `Routing changed the answer: after the first iteration ${names[first]} led.` : "";
    notice.style.display = notice.textContent ? "" : "none";
    const marks = dynamic
      ? [
          { value: header.m_plus, label: `m+ ${header.m_plus}` },
          { value: header.m_minus, label: `m- ${header.m_minus}` },
        ]
      : [];
    scores.replaceChildren(
      el("div", { class: "caption" }, `${header.score_axis} at iteration ${state.step}`),
      bars(now.scores, names, { marks, focus, title: header.score_axis }),
    );
    over.replaceChildren(
      el("div", { class: "caption" }, `${header.score_axis} over the iterations`),
      lines(
        names.map((_, k) => steps.map((s) => s.scores[k])),
        names,
        { focus, step: state.step - 1, title: "scores over the iterations" },
      ),
    );
    if (dynamic) {
      const uniform = 1 / (K + (header.leak ? 1 : 0));
      let reach = 1e-6;
      for (const v of now.byType) reach = Math.max(reach, Math.abs(v - uniform));
      right.replaceChildren(
        el("div", { class: "caption" }, `each class's coupling per primary-capsule type (red: above the uniform ${uniform.toFixed(3)})`),
        heatmap(transpose(now.byType, header.types, K), K, header.types, {
          centre: uniform,
          reach,
          rowLabels: names,
          colLabels: Array.from({ length: header.types }, (_, t) => (t % 4 === 0 ? `${t + 1}` : "")),
          title: "couplings per type",
        }),
      );
    } else {
      right.replaceChildren(
        el("div", { class: "caption" }, "each class's share of the children's data"),
        bars(now.shares, names, { focus, title: "shares", top: Math.max(0.2, ...now.shares) }),
      );
    }
    if (experiment.open) compareRules();
    entropy.textContent = `Coupling entropy ${now.entropy.toFixed(4)} (1 = uniform, 0 = every child on one capsule).`;
    root.values = {
      kind: header.kind,
      rule: state.rule,
      r: state.r,
      step: state.step,
      draw: state.draw,
      scores: now.scores,
      entropy: now.entropy,
      coupling: Array.from(now.coupling),
      byType: now.byType ? Array.from(now.byType) : null,
      shares: now.shares ?? null,
      prediction: winner,
    };
    settled();
  }

  render();
  return state;
}

function transpose(values, rows, cols) {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = values[r * cols + c];
  return out;
}
