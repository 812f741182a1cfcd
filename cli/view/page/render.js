// Drawing arrays: colour maps, percentile contrast, linear or log scale.

// Colour maps as a few anchor colours, interpolated linearly in RGB.
const ANCHORS = {
  gray: ['#000000', '#ffffff'],
  viridis: ['#440154', '#3b528b', '#21918c', '#5ec962', '#fde725'],
  magma: ['#000004', '#51127c', '#b73779', '#fc8961', '#fcfdbf'],
  hot: ['#000000', '#e00000', '#ffd000', '#ffffff'],
  diverging: ['#2166ac', '#92c5de', '#f7f7f7', '#f4a582', '#b2182b'],
};

export const COLORMAPS = ['gray', 'viridis', 'magma', 'hot', 'diverging'];

export const CONTRASTS = [
  ['0,100', 'min to max'],
  ['0.5,99.5', '0.5 to 99.5 %'],
  ['1,99', '1 to 99 %'],
  ['2,98', '2 to 98 %'],
  ['5,95', '5 to 95 %'],
];

const lutCache = new Map();

function lut(name) {
  if (lutCache.has(name)) return lutCache.get(name);
  const anchors = (ANCHORS[name] || ANCHORS.gray).map((hex) => [
    parseInt(hex.slice(1, 3), 16), parseInt(hex.slice(3, 5), 16), parseInt(hex.slice(5, 7), 16),
  ]);
  const table = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (anchors.length - 1);
    const k = Math.min(Math.floor(x), anchors.length - 2);
    const f = x - k;
    for (let c = 0; c < 3; c++) table[3 * i + c] = Math.round(anchors[k][c] * (1 - f) + anchors[k + 1][c] * f);
  }
  lutCache.set(name, table);
  return table;
}

// Values as float64 (uint64 through Number: display only).
export function toFloat(data) {
  if (data instanceof Float64Array) return data;
  const out = new Float64Array(data.length);
  if (data instanceof BigUint64Array) {
    for (let i = 0; i < data.length; i++) out[i] = Number(data[i]);
  } else {
    out.set(data);
  }
  return out;
}

// The display transform, and the levels that map to the ends of the colour
// map: percentiles of the transformed finite values from a 4096-bin
// histogram (linear time, so live frames stay cheap).
export function levels(values, settings) {
  let min = Infinity;
  for (let i = 0; i < values.length; i++) if (values[i] < min) min = values[i];
  const shift = settings.scale === 'log' && min < 0 ? -min : 0;
  const transform = settings.scale === 'log' ? (v) => Math.log1p(v + shift) : (v) => v;
  const t = new Float64Array(values.length);
  let lo = Infinity;
  let hi = -Infinity;
  let finite = 0;
  for (let i = 0; i < values.length; i++) {
    const v = transform(values[i]);
    t[i] = v;
    if (Number.isFinite(v)) {
      finite++;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (!finite) return { transform, t, lo: 0, hi: 1 };
  const [pLow, pHigh] = settings.contrast.split(',').map(Number);
  if (settings.symmetric) {
    const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    lo = -m;
    hi = m;
  }
  if ((pLow > 0 || pHigh < 100) && hi > lo && !settings.symmetric) {
    const bins = 4096;
    const counts = new Uint32Array(bins);
    const width = (hi - lo) / bins;
    for (let i = 0; i < t.length; i++) {
      if (!Number.isFinite(t[i])) continue;
      counts[Math.min(bins - 1, Math.floor((t[i] - lo) / width))]++;
    }
    const at = (p) => {
      const target = (p / 100) * finite;
      let sum = 0;
      for (let b = 0; b < bins; b++) {
        sum += counts[b];
        if (sum >= target) return lo + (b + (p >= 50 ? 1 : 0)) * width;
      }
      return hi;
    };
    const a = at(pLow);
    const b = at(pHigh);
    if (b > a) {
      lo = a;
      hi = b;
    }
  }
  if (!(hi > lo)) hi = lo + 1;
  return { transform, t, lo, hi };
}

// Draws rows x cols values into `canvas` at one canvas pixel per value.
export function drawArray(canvas, data, rows, cols, settings) {
  const values = toFloat(data);
  const { t, lo, hi } = levels(values, settings);
  if (canvas.width !== cols || canvas.height !== rows) {
    canvas.width = cols;
    canvas.height = rows;
  }
  const context = canvas.getContext('2d');
  const image = context.createImageData(cols, rows);
  const table = lut(settings.cmap);
  const scale = 255 / (hi - lo);
  for (let i = 0; i < rows * cols; i++) {
    const v = t[i];
    const o = 4 * i;
    if (!Number.isFinite(v)) {
      image.data[o] = 255;
      image.data[o + 1] = 0;
      image.data[o + 2] = 255;
    } else {
      const k = 3 * Math.max(0, Math.min(255, Math.round((v - lo) * scale)));
      image.data[o] = table[k];
      image.data[o + 1] = table[k + 1];
      image.data[o + 2] = table[k + 2];
    }
    image.data[o + 3] = 255;
  }
  context.putImageData(image, 0, 0);
  return { lo, hi };
}

// Sizes an image canvas (and its overlay) to fit `box` CSS pixels with
// square pixels; returns CSS pixels per array pixel.
export function fit(canvases, rows, cols, box) {
  const scale = box / Math.max(rows, cols);
  const width = cols * scale;
  const height = rows * scale;
  const ratio = window.devicePixelRatio || 1;
  const stage = canvases[0].parentElement;
  if (stage && stage.classList.contains('stage')) {
    stage.style.width = width + 'px';
    stage.style.height = height + 'px';
  }
  for (const canvas of canvases) {
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    if (canvas.classList.contains('overlay')) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
  }
  return scale;
}

export function fillSelect(select, entries, chosen) {
  select.textContent = '';
  for (const entry of entries) {
    const [value, label] = Array.isArray(entry) ? entry : [entry, entry];
    const option = document.createElement('option');
    option.value = value;
    option.textContent = label;
    if (value === chosen) option.selected = true;
    select.appendChild(option);
  }
}
