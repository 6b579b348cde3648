// EM routing of the class layer (Hinton, Sabour & Frosst 2018, Procedure 1), as capsnet/nn/em_routing.py computes
// it for one position whose children each fill one slot: the browser's copy, held to PyTorch's numbers by
// tests/test_knobs_browser.py.
//
// votes V_ij: Float32Array (J, I, H); activations a_i: (I); beta_u, beta_a: (J). The votes are routed about each
// parent's plain mean of its votes (a shift EM routing does not see), as the server routes them.

import { couplingEntropy, couplings } from "./couplings.js";

export const EPSILON = 1e-8;
export const VARIANCE_FLOOR = 1e-4;
export const LAMBDA_FINAL = 0.3;
export const LAMBDA_RATE = 0.95;

/** lambda of iteration t (1-based). */
export function inverseTemperature(t) {
  return LAMBDA_FINAL * (1 - LAMBDA_RATE ** t);
}

const logSigmoid = (x) => (x >= 0 ? -Math.log1p(Math.exp(-x)) : x - Math.log1p(Math.exp(x)));
const sigmoid = (x) => 1 / (1 + Math.exp(-x));

/**
 * `iterations` of EM routing. Returns one entry per iteration t: the assignments R_ij its M-step weighed (J*I),
 * the parents' means mu_j (J*H), variances (J*H), activations a_j (J), and the assignments' entropy.
 */
export function emRoute(votes, activations, betaU, betaA, J, I, H, iterations, { start = null } = {}) {
  const centre = new Float64Array(J * H);
  for (let j = 0; j < J; j++) {
    for (let i = 0; i < I; i++) for (let h = 0; h < H; h++) centre[j * H + h] += votes[(j * I + i) * H + h];
    for (let h = 0; h < H; h++) centre[j * H + h] /= I;
  }
  let R = start ? couplings(start, J, I) : new Float64Array(J * I).fill(1 / J);
  const scale = J / I; // n_j normalised by parents / children of the receptive field
  const steps = [];
  for (let t = 1; t <= iterations; t++) {
    const lam = inverseTemperature(t);
    const mean = new Float64Array(J * H); // about the centre
    const variance = new Float64Array(J * H);
    const logit = new Float64Array(J);
    for (let j = 0; j < J; j++) {
      let amount = 0;
      for (let i = 0; i < I; i++) amount += R[j * I + i] * activations[i];
      const first = new Float64Array(H);
      const second = new Float64Array(H);
      for (let i = 0; i < I; i++) {
        const w = (R[j * I + i] * activations[i]) / (amount + EPSILON);
        for (let h = 0; h < H; h++) {
          const x = votes[(j * I + i) * H + h] - centre[j * H + h];
          first[h] += w * x;
          second[h] += w * x * x;
        }
      }
      const total = amount / (amount + EPSILON);
      let cost = 0;
      for (let h = 0; h < H; h++) {
        const m = first[h] - centre[j * H + h] * (1 - total);
        const spread = second[h] - m * (2 * first[h] - m * total);
        const v = Math.max(spread, 0) + VARIANCE_FLOOR;
        mean[j * H + h] = m;
        variance[j * H + h] = v;
        cost += (betaU[j] + 0.5 * Math.log(v)) * (amount * scale);
      }
      logit[j] = lam * (betaA[j] - cost);
    }
    const means = mean.map((m, k) => m + centre[k]);
    const acts = logit.map(sigmoid);
    steps.push({ assignments: R, means, variances: variance, activations: acts, entropy: couplingEntropy(R, J, I) });
    if (t < iterations) {
      const logits = new Float64Array(J * I);
      for (let j = 0; j < J; j++) {
        let constant = 0;
        for (let h = 0; h < H; h++) constant += Math.log(2 * Math.PI * variance[j * H + h]);
        const logA = logSigmoid(logit[j]);
        for (let i = 0; i < I; i++) {
          let quadratic = 0;
          for (let h = 0; h < H; h++) {
            const x = votes[(j * I + i) * H + h] - centre[j * H + h] - mean[j * H + h];
            quadratic += (x * x) / variance[j * H + h];
          }
          logits[j * I + i] = logA - 0.5 * (quadratic + constant);
        }
      }
      R = couplings(logits, J, I);
    }
  }
  return steps;
}

/** Each parent's share of the children's data, sum_i R_ij a_i / sum_i a_i (J), from the assignments R (J, I). */
export function dataShares(R, activations, J, I) {
  let total = 0;
  for (let i = 0; i < I; i++) total += activations[i];
  const shares = new Float64Array(J);
  for (let j = 0; j < J; j++) {
    for (let i = 0; i < I; i++) shares[j] += R[j * I + i] * activations[i];
    shares[j] /= Math.max(total, 1e-12);
  }
  return shares;
}

