// The decoder that redraws the input from one class capsule (capsnet/nn/decoder.py): fully connected layers with
// ReLU, then a sigmoid to every pixel. Only the chosen class's D entries of the masked input are non-zero, so the
// first layer reads D of its K*D columns.

/**
 * Redraw from `pose` (D numbers) placed in class `klass`'s capsule. `layers`: [{weight (out, in), bias (out)}] as
 * PyTorch stores them. Returns the C*H*W pixels, in [0, 1], channels first.
 */
export function decode(layers, pose, klass) {
  const D = pose.length;
  let x = null;
  layers.forEach((layer, n) => {
    const { weight, bias } = layer;
    const out = bias.length;
    const fanIn = weight.length / out;
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let acc = bias[o];
      const row = o * fanIn;
      if (n === 0) {
        const first = row + klass * D;
        for (let d = 0; d < D; d++) acc += weight[first + d] * pose[d];
      } else {
        for (let k = 0; k < fanIn; k++) acc += weight[row + k] * x[k];
      }
      y[o] = n < layers.length - 1 ? Math.max(acc, 0) : 1 / (1 + Math.exp(-acc));
    }
    x = y;
  });
  return x;
}
