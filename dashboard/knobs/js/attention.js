// Self-attention routing (Mazzia, Salvetti & Chiaberge 2021), as capsnet/nn/efficient_capsnet.py's
// self_attention_routing computes it: the browser's copy, held to PyTorch's numbers by tests/test_knobs_browser.py.
//
// votes u_hat_{j|i}: Float32Array laid out parents first, (K, N, D); the learned bias b (K, N).
// c_ji = softmax_j(sharpness * u_hat_ji . sum_m u_hat_jm / sqrt(D)) + b_ji (or the softmax of other logits: random
// couplings), s_j = sum_i c_ji u_hat_ji, v_j = (1 - e^-|s_j|) s_j / |s_j|.

import { couplings } from "./couplings.js";

/** Efficient-CapsNet's squash on one vector: (1 - e^-|s|) s / |s|, 0 at s = 0. */
export function squash(s) {
  let squared = 0;
  for (let d = 0; d < s.length; d++) squared += s[d] * s[d];
  const norm = Math.sqrt(squared);
  const scale = (1 - Math.exp(-norm)) / (norm + 1e-20);
  return s.map((x) => x * scale);
}

/** Each vote's agreement with its class's whole set of votes, u_hat_ji . sum_m u_hat_jm / sqrt(D): (K, N). */
export function agreement(votes, K, N, D) {
  const out = new Float64Array(K * N);
  const total = new Float64Array(D);
  for (let j = 0; j < K; j++) {
    total.fill(0);
    for (let i = 0; i < N; i++) for (let d = 0; d < D; d++) total[d] += votes[(j * N + i) * D + d];
    for (let i = 0; i < N; i++) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += votes[(j * N + i) * D + d] * total[d];
      out[j * N + i] = dot / Math.sqrt(D);
    }
  }
  return out;
}

/**
 * The couplings' mean entropy over the classes, 1 for uniform, as capsnet/readings/explain_attention.py gives it:
 * each child's couplings (a bias may make one negative: it counts as 0) normalised, its entropy / log K, averaged.
 */
export function attentionEntropy(c, K, N) {
  if (K < 2) return 1;
  let sum = 0;
  for (let i = 0; i < N; i++) {
    let total = 0;
    for (let j = 0; j < K; j++) total += Math.max(c[j * N + i], 1e-12);
    for (let j = 0; j < K; j++) {
      const p = Math.max(c[j * N + i], 1e-12) / total;
      sum -= p * Math.log(p);
    }
  }
  return sum / N / Math.log(K);
}

/**
 * One pass: couplings c (K*N), class capsules v_j (K*D), their lengths (K), the entropy, and the evidence each
 * class receives, sum_i |u_i| c_ji (K), from the votes, the bias and the primary capsules' lengths `weights` (N).
 * `sharpness` scales the agreement (1: as trained; 0: every child uniform); `logits` replace it (random couplings);
 * `withBias` false leaves the learned bias out.
 */
export function attend(votes, bias, weights, K, N, D, { sharpness = 1, logits = null, withBias = true } = {}) {
  const scores = logits ? Float64Array.from(logits) : agreement(votes, K, N, D).map((a) => a * sharpness);
  const c = couplings(scores, K, N);
  if (withBias) for (let k = 0; k < K * N; k++) c[k] += bias[k];
  const poses = new Float64Array(K * D);
  const lengths = new Float64Array(K);
  const evidence = new Float64Array(K);
  for (let j = 0; j < K; j++) {
    const s = new Float64Array(D);
    for (let i = 0; i < N; i++) {
      const w = c[j * N + i];
      for (let d = 0; d < D; d++) s[d] += w * votes[(j * N + i) * D + d];
      evidence[j] += weights[i] * w;
    }
    const v = squash(s);
    poses.set(v, j * D);
    lengths[j] = Math.hypot(...v);
  }
  return { coupling: c, poses, lengths, evidence, entropy: attentionEntropy(c, K, N) };
}
