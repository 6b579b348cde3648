// What the Routing views share (routing_view.js, attention_view.js): the input read under each coupling rule, as a
// table and a sentence, the box that holds them, and the picker of a random draw.

import { el } from "./draw.js";

/** The index of the largest value (the first of equals). */
export function argmax(values) {
  let best = 0;
  values.forEach((v, k) => {
    if (v > values[best]) best = k;
  });
  return best;
}

/** The picker of random draw 1..`draws` (seed `seed`); `onPick(index)` gets the draw's index from 0. */
export function drawPicker(seed, draws, chosen, onPick) {
  const input = el("input", { type: "number", min: "1", max: String(draws), value: String(chosen + 1), "aria-label": "random draw" });
  input.addEventListener("input", () => onPick(Math.min(Math.max(Math.round(Number(input.value)) || 1, 1), draws) - 1));
  const node = el("span", {}, el("span", { class: "label" }, `draw (seed ${seed})`), input);
  return { node, input };
}

/** The experiment's folded box, titled `title`: `onOpen()` fills `body` when it opens, then the view has settled. */
export function experimentBox(title, onOpen, settled) {
  const node = el("details", { "data-role": "experiment" });
  const body = el("div");
  node.append(el("summary", {}, title), body);
  node.addEventListener("toggle", () => {
    if (node.open) {
      onOpen();
      settled();
    }
  });
  return { node, body };
}

/**
 * The rules' table: a row per rule ({name, scores, entropy}: its answer, the answer's score and the entropy), then
 * the random draws ([{scores, entropy}], if any) in one row: their commonest answer, in how many draws, and the means.
 * Returns the table, the random draws' mean entropy, and how many of them give `answer`.
 */
export function rulesTable(rows, draws, randomLabel, names, symbol, answer) {
  const table = el("table", { class: "rules" });
  table.append(el("tr", {}, ...["Couplings", "Answer", symbol, "Entropy"].map((h) => el("th", {}, h))));
  for (const { name, scores, entropy } of rows) {
    const k = argmax(scores);
    table.append(el("tr", {}, el("td", {}, name), el("td", {}, names[k]), el("td", {}, scores[k].toFixed(2)), el("td", {}, entropy.toFixed(3))));
  }
  if (draws.length === 0) return { table, meanEntropy: NaN, agreeing: 0 }; // no random couplings to read
  const counts = new Array(names.length).fill(0);
  draws.forEach((d) => counts[argmax(d.scores)]++);
  const common = argmax(counts);
  const meanScore = draws.reduce((a, d) => a + d.scores[common], 0) / draws.length;
  const meanEntropy = draws.reduce((a, d) => a + d.entropy, 0) / draws.length;
  table.append(el("tr", {}, el("td", {}, randomLabel), el("td", {}, `${names[common]} (in ${counts[common]} of the ${draws.length} draws)`),
    el("td", {}, `${meanScore.toFixed(2)} (mean)`), el("td", {}, `${meanEntropy.toFixed(3)} (mean)`)));
  const agreeing = draws.filter((d) => argmax(d.scores) === answer).length;
  return { table, meanEntropy, agreeing };
}

/** How many of `total` random couplings give `answerSaid` ("the routed answer"), in words; `what` is what they share
 * out ("the couplings": they hardly matter, or decide it). */
export function randomSentence(agreeing, total, answerSaid, what) {
  if (agreeing === total) return `Every one of ${total} random couplings gives ${answerSaid}: for this input ${what} hardly matter.`;
  if (agreeing === 0) return `None of ${total} random couplings gives ${answerSaid}: for this input ${what} decide it.`;
  return `${agreeing} of ${total} random couplings give ${answerSaid}: how the votes are shared decides some.`;
}
