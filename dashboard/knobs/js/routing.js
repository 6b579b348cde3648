// Dynamic routing between capsules (Sabour, Frosst & Hinton 2017, Procedure 1), as capsnet/nn/dynamic_routing.py
// computes it: the browser's copy, held to PyTorch's numbers by tests/test_knobs_browser.py.
//
// votes u_hat_{j|i}: Float32Array laid out parents first, (K, N, D). b_ij starts at 0 (or at the logits given),
// c_ij = softmax over the parents j, s_j = sum_i c_ij u_hat_{j|i}, v_j = squash(s_j), b_ij += u_hat_{j|i} . v_j.

import { couplingEntropy, couplings } from "./couplings.js";

export const SQUASH_EPS = 1e-8;

/** Equation 1 on one vector: v = |s|^2 / (1 + |s|^2) * s / sqrt(|s|^2 + eps). */
export function squash(s) {
  let squared = 0;
  for (let d = 0; d < s.length; d++) squared += s[d] * s[d];
  const scale = squared / (1 + squared) / Math.sqrt(squared + SQUASH_EPS);
  return s.map((x) => x * scale);
}

/**
 * Procedure 1, `iterations` times. Returns one entry per iteration t: coupling (K*N), sums s_j and poses v_j
 * (K*D), lengths |v_j| (K), and the couplings' entropy; iteration t of routing r times is iteration t of routing
 * more, so one run of 5 serves r = 1..5.
 */
export function route(votes, K, N, D, iterations, { start = null, leak = false } = {}) {
  let logits = start ? Float64Array.from(start) : new Float64Array(K * N);
  const steps = [];
  for (let t = 0; t < iterations; t++) {
    const c = couplings(logits, K, N, leak);
    const sums = new Float64Array(K * D);
    for (let j = 0; j < K; j++) {
      for (let i = 0; i < N; i++) {
        const w = c[j * N + i];
        const row = (j * N + i) * D;
        for (let d = 0; d < D; d++) sums[j * D + d] += w * votes[row + d];
      }
    }
    const poses = new Float64Array(K * D);
    const lengths = new Float64Array(K);
    for (let j = 0; j < K; j++) {
      const v = squash(sums.subarray(j * D, (j + 1) * D));
      poses.set(v, j * D);
      lengths[j] = Math.hypot(...v);
    }
    steps.push({ coupling: c, sums, poses, lengths, entropy: couplingEntropy(c, K, N) });
    if (t < iterations - 1) {
      const next = Float64Array.from(logits);
      for (let j = 0; j < K; j++) {
        for (let i = 0; i < N; i++) {
          const row = (j * N + i) * D;
          let agreement = 0;
          for (let d = 0; d < D; d++) agreement += votes[row + d] * poses[j * D + d];
          next[j * N + i] += agreement;
        }
      }
      logits = next;
    }
  }
  return steps;
}

/**
 * c_ij aggregated per primary-capsule type, each capsule weighted by its length |u_i| (capsnet.readings.explain
 * .coupling_by_type): c (K, N) -> (types, K); a type with no active capsule falls back to its plain mean.
 */
export function couplingByType(c, weights, K, types, cells) {
  const out = new Float64Array(types * K);
  for (let t = 0; t < types; t++) {
    let total = 0;
    for (let g = 0; g < cells; g++) total += weights[t * cells + g];
    for (let j = 0; j < K; j++) {
      let weighted = 0;
      let plain = 0;
      for (let g = 0; g < cells; g++) {
        const i = t * cells + g;
        weighted += c[j * (types * cells) + i] * weights[i];
        plain += c[j * (types * cells) + i];
      }
      out[t * K + j] = total > 1e-12 ? weighted / total : plain / cells;
    }
  }
  return out;
}
