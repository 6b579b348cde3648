// What both routing algorithms share (capsnet/nn/routing.py's part): each child's softmax over the parents it may
// send to, and how peaked the result is. Laid out parents first, (K, N): K parents, N children.

/** c_ij from b_ij (K, N): each child's softmax over the parents; with `leak` a parent of logit 0 takes a share. */
export function couplings(logits, K, N, leak = false) {
  const c = new Float64Array(K * N);
  for (let i = 0; i < N; i++) {
    let top = leak ? 0 : -Infinity;
    for (let j = 0; j < K; j++) top = Math.max(top, logits[j * N + i]);
    let total = leak ? Math.exp(-top) : 0;
    for (let j = 0; j < K; j++) total += c[j * N + i] = Math.exp(logits[j * N + i] - top);
    for (let j = 0; j < K; j++) c[j * N + i] /= total;
  }
  return c;
}

/** Each child's entropy over the parents / log K, averaged over the children (1: uniform); c is (K, N). */
export function couplingEntropy(c, K, N) {
  if (K < 2) return 1;
  let sum = 0;
  for (let j = 0; j < K; j++) {
    for (let i = 0; i < N; i++) {
      const x = c[j * N + i];
      if (x > 0) sum -= x * Math.log(x);
    }
  }
  return sum / N / Math.log(K);
}
