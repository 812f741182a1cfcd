// The virtual detector: its geometry, how it is drawn over the pattern,
// how dragging moves or resizes it, and how it is written for the API and
// for the equivalent qem command line.

// Edges of the named detectors, as multiples of the bright-field radius r.
const EDGES = { bf: [1], abf: [0.5, 1], adf: [1, 2], haadf: [2, 4], df: [1] };

// Detector coordinates are kept to 1/100 pixel: what is sent, printed and
// reproduced on the command line is then the same short decimal. The
// file's own default detector is the exception until it is first changed
// (fileDefault): it is sent exactly as the server resolved it, so that its
// mask is the one a file qem wrote records the image of (the first image
// then needs no pass over the data), and on the command line it is plain
// `--detector bf`, which resolves the same.
export const round2 = (v) => Math.round(v * 100) / 100;

export function makeDetector(kind, centre, radius, shape, fileDefault = false) {
  const [rows, cols] = shape;
  const r = fileDefault ? radius : round2(Math.max(radius, 0.5));
  const det = fileDefault
    ? { kind, center: [centre[0], centre[1]], radius: r, fileDefault }
    : { kind, center: [round2(centre[0]), round2(centre[1])], radius: r };
  det.inner = round2(r);
  det.outer = round2(2 * r);
  const half = Math.max(1, Math.round(r));
  const cr = Math.round(centre[0]);
  const cc = Math.round(centre[1]);
  det.rect = [
    Math.max(0, cr - half), Math.min(rows, cr + half + 1),
    Math.max(0, cc - half), Math.min(cols, cc + half + 1),
  ];
  return det;
}

export function withKind(det, kind) {
  return { ...det, kind, center: [...det.center], rect: [...det.rect] };
}

// A copy to change: no longer the file's default detector.
export function edited(det) {
  return { ...withKind(det, det.kind), fileDefault: false };
}

const num = (v) => String(v);

// Query parameters of /api/virtual.npy, /api/live and friends.
export function detectorParams(det) {
  if (det.kind === 'rect') return { detector: 'rect', rect: det.rect.join(',') };
  const p = { detector: det.kind, center: num(det.center[0]) + ',' + num(det.center[1]) };
  if (det.kind === 'annulus') {
    p.inner = num(det.inner);
    p.outer = num(det.outer);
  } else {
    p.radius = num(det.radius);
  }
  return p;
}

// Arguments of `qem virtual` selecting the same pixels (null for a
// rectangle, which the command takes as a --mask file).
export function detectorArgs(det) {
  if (det.kind === 'rect') return null;
  if (det.fileDefault && det.kind !== 'annulus') return ['--detector', det.kind];
  const args = ['--detector', det.kind, '--center', num(det.center[0]) + ',' + num(det.center[1])];
  if (det.kind === 'annulus') args.push('--inner', num(det.inner), '--outer', num(det.outer));
  else args.push('--radius', num(det.radius));
  return args;
}

export function describe(det) {
  if (det.kind === 'rect') {
    const [r0, r1, c0, c1] = det.rect;
    return `rect rows ${r0}-${r1 - 1}, columns ${c0}-${c1 - 1}`;
  }
  const c = `centre (${round2(det.center[0])}, ${round2(det.center[1])})`;
  if (det.kind === 'annulus') return `annulus ${c}, ${det.inner} to ${det.outer} px`;
  return `${det.kind} ${c}, r = ${round2(det.radius)} px`;
}

function radii(det) {
  if (det.kind === 'annulus') return [det.inner, det.outer];
  return EDGES[det.kind].map((k) => k * det.radius);
}

// Draws the detector; `scale` CSS pixels per detector pixel.
export function drawDetector(canvas, det, shape, scale) {
  const ratio = canvas.width / (shape[1] * scale);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const k = ratio * scale;
  // Detector coordinates: pixel (r, c) has its centre at (r, c).
  ctx.setTransform(k, 0, 0, k, 0.5 * k, 0.5 * k);
  ctx.lineWidth = 1.5 / k;
  ctx.strokeStyle = '#4fc3f7';
  ctx.fillStyle = 'rgba(79, 195, 247, 0.18)';
  const [cr, cc] = det.center;
  if (det.kind === 'rect') {
    const [r0, r1, c0, c1] = det.rect;
    ctx.beginPath();
    ctx.rect(c0 - 0.5, r0 - 0.5, c1 - c0, r1 - r0);
    ctx.fill();
    ctx.stroke();
    return;
  }
  const [inner, outer] = radii(det).length === 1 ? [0, radii(det)[0]] : radii(det);
  ctx.beginPath();
  if (det.kind === 'df') {
    ctx.rect(-0.5, -0.5, shape[1], shape[0]);
    ctx.arc(cc, cr, outer, 0, 2 * Math.PI, true);
  } else {
    ctx.arc(cc, cr, outer, 0, 2 * Math.PI);
    if (inner > 0) ctx.arc(cc, cr, inner, 0, 2 * Math.PI, true);
  }
  ctx.fill('evenodd');
  for (const r of radii(det)) {
    ctx.beginPath();
    ctx.arc(cc, cr, r, 0, 2 * Math.PI);
    ctx.stroke();
  }
  ctx.beginPath();
  ctx.moveTo(cc - 2 / scale * 3, cr);
  ctx.lineTo(cc + 2 / scale * 3, cr);
  ctx.moveTo(cc, cr - 2 / scale * 3);
  ctx.lineTo(cc, cr + 2 / scale * 3);
  ctx.stroke();
}

// What a press at detector position (row, col) grabs: an edge (resize) or
// the body (move). `tolerance` in detector pixels.
export function grab(det, row, col, tolerance) {
  if (det.kind === 'rect') {
    const [r0, r1, c0, c1] = det.rect;
    const inRows = row >= r0 - 0.5 - tolerance && row <= r1 - 0.5 + tolerance;
    const inCols = col >= c0 - 0.5 - tolerance && col <= c1 - 0.5 + tolerance;
    if (inRows && Math.abs(col - (c0 - 0.5)) <= tolerance) return { edge: 'c0' };
    if (inRows && Math.abs(col - (c1 - 0.5)) <= tolerance) return { edge: 'c1' };
    if (inCols && Math.abs(row - (r0 - 0.5)) <= tolerance) return { edge: 'r0' };
    if (inCols && Math.abs(row - (r1 - 0.5)) <= tolerance) return { edge: 'r1' };
    return { edge: null };
  }
  const d = Math.hypot(row - det.center[0], col - det.center[1]);
  const rs = radii(det);
  let best = -1;
  for (let k = 0; k < rs.length; k++) {
    if (Math.abs(d - rs[k]) <= tolerance && (best < 0 || Math.abs(d - rs[k]) < Math.abs(d - rs[best]))) best = k;
  }
  return { edge: best >= 0 ? best : null };
}

const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));

// The detector after dragging from `from` (what was grabbed, the start
// detector and point) to detector position (row, col).
export function dragTo(from, row, col, shape) {
  const start = from.det;
  const det = edited(start);
  const [rows, cols] = shape;
  const dr = row - from.row;
  const dc = col - from.col;
  if (det.kind === 'rect') {
    let [r0, r1, c0, c1] = start.rect;
    const edge = Math.round(from.edge === 'r0' || from.edge === 'r1' ? row + 0.5 : col + 0.5);
    if (from.edge === 'r0') r0 = clamp(edge, 0, r1 - 1);
    else if (from.edge === 'r1') r1 = clamp(edge, r0 + 1, rows);
    else if (from.edge === 'c0') c0 = clamp(edge, 0, c1 - 1);
    else if (from.edge === 'c1') c1 = clamp(edge, c0 + 1, cols);
    else {
      const sr = clamp(Math.round(dr), -r0, rows - r1);
      const sc = clamp(Math.round(dc), -c0, cols - c1);
      r0 += sr; r1 += sr; c0 += sc; c1 += sc;
    }
    det.rect = [r0, r1, c0, c1];
    return det;
  }
  if (from.edge === null) {
    det.center = [round2(start.center[0] + dr), round2(start.center[1] + dc)];
    return det;
  }
  const d = Math.hypot(row - start.center[0], col - start.center[1]);
  if (det.kind === 'annulus') {
    if (from.edge === 0) det.inner = round2(clamp(d, 0, start.outer - 0.01));
    else det.outer = round2(Math.max(d, start.inner + 0.01));
    return det;
  }
  const multiple = EDGES[det.kind][from.edge];
  det.radius = round2(Math.max(0.5, d / multiple));
  return det;
}
