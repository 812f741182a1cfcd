// .npy bodies as the server sends them (one, or several back to back).

const TYPES = {
  '|u1': Uint8Array,
  '|b1': Uint8Array,
  '<u2': Uint16Array,
  '<u4': Uint32Array,
  '<u8': BigUint64Array,
  '<f4': Float32Array,
  '<f8': Float64Array,
};

const NAMES = {
  '|u1': 'uint8', '|b1': 'bool', '<u2': 'uint16', '<u4': 'uint32',
  '<u8': 'uint64', '<f4': 'float32', '<f8': 'float64',
};

// One array starting at byte `offset`: {dtype, shape, data, end}.
export function parseNpy(buffer, offset = 0) {
  const bytes = new Uint8Array(buffer);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
  for (let k = 0; k < 6; k++) {
    if (bytes[offset + k] !== magic[k]) throw new Error('not a .npy body');
  }
  const major = bytes[offset + 6];
  const view = new DataView(buffer);
  const headerLength = major === 1 ? view.getUint16(offset + 8, true) : view.getUint32(offset + 8, true);
  const start = offset + (major === 1 ? 10 : 12);
  const header = new TextDecoder('latin1').decode(bytes.subarray(start, start + headerLength));
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !shape || !/'fortran_order':\s*False/.test(header)) throw new Error('unexpected .npy header');
  const Type = TYPES[descr[1]];
  if (!Type) throw new Error('unexpected .npy dtype ' + descr[1]);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const dataStart = start + headerLength;
  const end = dataStart + count * Type.BYTES_PER_ELEMENT;
  if (end > buffer.byteLength) throw new Error('truncated .npy body');
  // A copy: arrays after the first need not be aligned for their type.
  const data = new Type(buffer.slice(dataStart, end));
  return { dtype: NAMES[descr[1]], shape: dims, data, end };
}

// Every array of a body holding several, in order.
export function parseNpyList(buffer) {
  const out = [];
  let at = 0;
  while (at < buffer.byteLength) {
    const one = parseNpy(buffer, at);
    out.push(one);
    at = one.end;
  }
  return out;
}

// Plain numbers (uint64 as decimal strings, which stay exact) for tests
// and readouts.
export function plainValues(data) {
  if (data instanceof BigUint64Array) return Array.from(data, (v) => v.toString());
  return Array.from(data, (v) => (Number.isNaN(v) ? 'NaN' : v === Infinity ? 'Infinity' : v === -Infinity ? '-Infinity' : v));
}
