// Random couplings drawn exactly as the server draws them (capsnet.nn.routing.RandomCouplings): a counter-based
// SplitMix64 hash of (seed, the draw's index, the layer), so the browser's random rule gives PyTorch's numbers.
//
// Start logits log E, E = -log U ~ Exp(1): their softmax over a child's parents is uniform on the simplex.

const MASK = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;
const MIX1 = 0xbf58476d1ce4e5b9n;
const MIX2 = 0x94d049bb133111ebn;

/** SplitMix64's finaliser on a 64-bit counter (BigInt), wrapping as uint64. */
export function splitmix64(x) {
  x = (x + GOLDEN) & MASK;
  x = ((x ^ (x >> 30n)) * MIX1) & MASK;
  x = ((x ^ (x >> 27n)) * MIX2) & MASK;
  return x ^ (x >> 31n);
}

/** The start logits of draw `index` (a test image's index) for one routing layer: `count` floats (parents first). */
export function randomLogits(seed, index, count, layer = 0) {
  const key = splitmix64(splitmix64(BigInt(seed) * 1000003n + BigInt(layer)) ^ BigInt(index));
  const base = (key * BigInt(count)) & MASK;
  const out = new Float32Array(count);
  for (let c = 0; c < count; c++) {
    const bits = splitmix64((base + BigInt(c)) & MASK);
    const uniform = (Number(bits >> 11n) + 0.5) * 2 ** -53; // in (0, 1)
    out[c] = Math.log(-Math.log(uniform));
  }
  return out;
}
