// What the browser holds between payloads: arrays the server sends once per browser session (a model's decoder, an
// input's votes) and later names only. Shared by every knobs view of the page (one module instance); the server
// remembers fewer groups than this keeps, and a group asked for but not held is reported back, so that the next
// payload carries it again (dashboard/knobs/views.py).

const KEEP = 16; // groups held, the most recently used last
const held = new Map(); // group key -> {name: typed array}

/**
 * The payload's arrays with its held groups put in: a group it carries is kept, one it names is taken from what is
 * held. Returns {arrays, missing}: the keys of the groups named but not held (none when all is well).
 */
export function withHeld(header, arrays) {
  const out = { ...arrays };
  const missing = [];
  for (const [key, names] of Object.entries(header.held ?? {})) {
    const prefix = `${key}/`;
    const carried = names.every((name) => out[prefix + name] !== undefined);
    if (carried) {
      held.set(key, Object.fromEntries(names.map((name) => [name, out[prefix + name]])));
    }
    const group = held.get(key);
    if (!group) {
      missing.push(key);
      continue;
    }
    held.delete(key); // most recently used last
    held.set(key, group);
    for (const name of names) {
      delete out[prefix + name];
      out[name] = group[name];
    }
  }
  while (held.size > KEEP) held.delete(held.keys().next().value);
  return { arrays: out, missing };
}
