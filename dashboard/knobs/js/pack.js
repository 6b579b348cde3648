// The binary payload the server sends once per input (and once per model): a JSON header and typed arrays.
//
// Layout (dashboard/knobs/payload.py writes it): 4 bytes "CKN1", a little-endian uint32 header length, the header
// as UTF-8 JSON (padded to 8 bytes), then each array at the offset its header entry names, from the header's end. Float16 arrays (the shipped
// checkpoints' weights, exact in float16) are widened to float32 here, through a 65,536-entry table.

const MAGIC = "CKN1";
let HALF = null; // float16 bits -> float32 value, made on first use

function halfTable() {
  if (HALF !== null) return HALF;
  HALF = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >> 10) & 0x1f;
    const fraction = h & 0x3ff;
    let value;
    if (exponent === 0) value = fraction * 2 ** -24; // subnormal
    else if (exponent === 31) value = fraction ? NaN : Infinity;
    else value = (1 + fraction / 1024) * 2 ** (exponent - 15);
    HALF[h] = sign * value;
  }
  return HALF;
}

function widen(bits) {
  const table = halfTable();
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
  return out;
}

/** Unpack a payload (Uint8Array, ArrayBuffer or DataView) into {header, arrays}; arrays are float32 or int32. */
export function unpack(data) {
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data.buffer ?? data);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (magic !== MAGIC) throw new Error(`not a knobs payload (starts ${JSON.stringify(magic)})`);
  const length = view.getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const arrays = {};
  for (const [name, entry] of Object.entries(header.arrays ?? {})) {
    const start = bytes.byteOffset + 8 + length + entry.offset;
    const count = entry.shape.reduce((a, b) => a * b, 1);
    // a copy at an aligned offset of its own: the message's buffer may sit at any byte offset
    const buffer = bytes.buffer.slice(start, start + count * { f32: 4, f16: 2, i32: 4 }[entry.dtype]);
    if (entry.dtype === "f32") arrays[name] = new Float32Array(buffer);
    else if (entry.dtype === "f16") arrays[name] = widen(new Uint16Array(buffer));
    else if (entry.dtype === "i32") arrays[name] = new Int32Array(buffer);
    else throw new Error(`unknown dtype ${entry.dtype} for ${name}`);
    arrays[name].shape = entry.shape;
  }
  return { header, arrays };
}
