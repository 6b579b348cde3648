// The Routing playground's toy in the browser: both routings of 2-D votes, the curves, and the words on them, as
// capsnet/readings/playground.py and dashboard/routing_texts.py compute them (tests/test_playground_knobs_browser.py
// holds the numbers to PyTorch's and the words to Python's).
//
// Votes are (K, N, 2), parents first, as the server packs them. Dynamic routing is routing.js's `route`; EM routing
// is em.js's `emRoute` with the toy's inputs: every child active (a_i = 1) and no learned costs (beta_u = beta_a = 0).

import { emRoute, inverseTemperature } from "./em.js";
import { route, squash } from "./routing.js";

/** Procedure 1 on the toy's votes, one entry per iteration, with each vote's agreement u_hat_{j|i} . v_j (K*N). */
export function dynamicToy(votes, K, N, iterations) {
  const D = 2;
  return route(votes, K, N, D, iterations).map((step) => {
    const agreement = new Float64Array(K * N);
    for (let j = 0; j < K; j++) {
      for (let i = 0; i < N; i++) {
        const row = (j * N + i) * D;
        agreement[j * N + i] = votes[row] * step.poses[j * D] + votes[row + 1] * step.poses[j * D + 1];
      }
    }
    return { ...step, agreement };
  });
}

/** EM routing on the toy's votes, one entry per iteration, with each Gaussian's sigma (K*2) and its lambda. */
export function emToy(votes, K, N, iterations) {
  const ones = new Float64Array(N).fill(1);
  const zeros = new Float64Array(K);
  return emRoute(votes, ones, zeros, zeros, K, N, 2, iterations).map((step, t) => ({
    ...step,
    stds: step.variances.map(Math.sqrt),
    lambda: inverseTemperature(t + 1),
  }));
}

/** |squash(s)| of a vector of length `norm` (equation 1). */
export function squashLength(norm) {
  return Math.hypot(...squash([norm, 0]));
}

/** Equation 4's loss of one class of length `length`: [present (T_k = 1), absent (T_k = 0)]. */
export function marginLoss(length, mPlus, mMinus, downWeight) {
  return [Math.max(0, mPlus - length) ** 2, downWeight * Math.max(0, length - mMinus) ** 2];
}

/** A vote moved to (x, y), each clipped to [-bound, bound], in float32 as the server keeps votes. */
export function clipped(value, bound) {
  return Math.fround(Math.min(Math.max(value, -bound), bound));
}

/** How many children's votes (of K*N, each 2-D) differ from the preset's by more than 1e-6. */
export function movedCount(votes, preset) {
  let count = 0;
  for (let v = 0; v < votes.length; v += 2) {
    count += Math.abs(votes[v] - preset[v]) > 1e-6 || Math.abs(votes[v + 1] - preset[v + 1]) > 1e-6;
  }
  return count;
}

/** Python's f"{x:.{digits}f}" (the two round an exact binary tie apart, which the routings' numbers never are). */
export function fixed(x, digits) {
  return x.toFixed(digits);
}

/** The entries within `tie` of the largest, the largest first (dashboard.routing_texts._tied). */
function tied(values, tie) {
  const order = values.map((_, k) => k).sort((a, b) => values[b] - values[a] || b - a);
  return order.filter((j) => values[order[0]] - values[j] < tie);
}

function tieText(which, values, names, symbol, tie, digits) {
  const who =
    which.length === names.length ? `all ${names.length} parents have` : `${which.map((j) => `**${names[j]}**`).join(" and ")} have`;
  return `${who} ${symbol} within ${tie} of each other (${fixed(values[which.at(-1)], digits)} to ${fixed(values[which[0]], digits)})`;
}

/**
 * One paragraph on the two algorithms at one iteration (dashboard.routing_texts.routing_comparison), in the same
 * markdown: c and R are (K*N) parents first, lengths |v_j| and activations a_j (K); `ties` holds present, length
 * and activation (the tolerances).
 */
export function comparison(c, lengths, R, activations, names, step, ties) {
  const K = names.length;
  const N = c.length / K;
  const v = Array.from(lengths);
  const a = Array.from(activations);
  const longTied = tied(v, ties.length);
  const activeTied = tied(a, ties.activation);
  const [longest, active] = [longTied[0], activeTied[0]];
  let dynamic;
  if (v[longest] < ties.present) {
    dynamic = `under dynamic routing no parent is present: no v_j reaches |v| = ${ties.present} (the longest, **${names[longest]}**'s, is ${fixed(v[longest], 2)})`;
  } else if (longTied.length > 1) {
    dynamic = `dynamic routing calls no parent the longest: ${tieText(longTied, v, names, "|v|", ties.length, 2)}`;
  } else {
    dynamic = `dynamic routing's longest v_j is **${names[longest]}**'s (|v| = ${fixed(v[longest], 2)})`;
  }
  const em =
    activeTied.length > 1
      ? `EM makes no parent stand out: ${tieText(activeTied, a, names, "a", ties.activation, 3)}`
      : `EM's most active parent is **${names[active]}** (a = ${fixed(a[active], 2)})`;
  const clear = v[longest] >= ties.present && longTied.length === 1 && activeTied.length === 1;
  let leaders;
  if (clear && longest === active) {
    leaders = `Both favour **${names[longest]}**: the longest v_j (|v| = ${fixed(v[longest], 2)}) and the most active Gaussian (a = ${fixed(a[active], 2)}).`;
  } else if (clear) {
    leaders = `They disagree: ${dynamic}, ${em}.`;
  } else {
    leaders = `${dynamic[0].toUpperCase()}${dynamic.slice(1)}; ${em}.`;
  }
  let best = -1;
  let child = 0;
  let parent = 0;
  for (let i = 0; i < N; i++) {
    for (let j = 0; j < K; j++) {
      const gap = Math.abs(c[j * N + i] - R[j * N + i]);
      if (gap > best) [best, child, parent] = [gap, i, j];
    }
  }
  const weights =
    best < 0.02
      ? `In iteration ${step} both still weigh every vote alike: each child splits itself evenly, 1/${K} = ${fixed(1 / K, 2)} to each parent, before any agreement has been measured.`
      : `The vote they weigh most differently is child ${child + 1}'s for ${names[parent]}: c = ${fixed(c[parent * N + child], 2)} under dynamic routing, R = ${fixed(R[parent * N + child], 2)} under EM.`;
  return `${leaders} ${weights}`;
}

/** What one child sends under dynamic routing at one iteration, and its agreements (the page's words). */
export function childReading(step, names, child, N) {
  const shares = names.map((name, j) => `**${fixed(step.coupling[j * N + child], 3)}** to ${name}`).join(", ");
  const agree = names.map((_, j) => signed(step.agreement[j * N + child], 2)).join(", ");
  return `Child ${child + 1} sends ${shares}. Its agreements û·v_j after this iteration: ${agree}.`;
}

/** What one child gives under EM at one iteration, and the Gaussians' spreads (the page's words). */
export function emReading(step, names, child, N) {
  const shares = names.map((name, j) => `**${fixed(step.assignments[j * N + child], 3)}** to ${name}`).join(", ");
  const spreads = names.map((_, j) => `σ = ${fixed((step.stds[2 * j] + step.stds[2 * j + 1]) / 2, 2)}`).join(", ");
  return `Under EM, child ${child + 1} gives ${shares}. The Gaussians this M-step fitted: ${spreads} (λ = ${fixed(step.lambda, 3)} in this iteration).`;
}

function signed(x, digits) {
  const text = fixed(x, digits);
  return text.startsWith("-") ? text : `+${text}`;
}
