// qem view: the page. Left, the scan image of the current detector (and
// thumbnails of every file of a series); right, the mean pattern or the
// pattern under the cursor with the detector over it; below, CoM/DPC, the
// file's metadata and exports with the qem command that reproduces each.
import { getJson, getNpy, getLive, LatestOnly, tokenUrl } from '/page/api.js';
import { plainValues } from '/page/npy.js';
import { drawArray, fit, fillSelect, COLORMAPS, CONTRASTS } from '/page/render.js';
import {
  makeDetector, withKind, edited, detectorParams, detectorArgs, describe, drawDetector, grab, dragTo, round2,
} from '/page/detector.js';

const $ = (id) => document.getElementById(id);
const BOX = 480;
const THUMB = 96;

const state = {
  info: null,
  files: [],
  selected: 0,
  det: null,
  detShape: [1, 1],
  cursor: null,
  pinned: false,
  dpMode: 'mean',
  images: [],
  means: [],
  pattern: null,
  dpc: null,
  clientId: Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join(''),
  scanScale: 1,
  dpScale: 1,
  drag: null,
};

let loading = 0;

// What tests (and curious people) can read back from the page.
const qemView = {
  ready: false,
  state,
  last: null,
  lastPattern: null,
  errors: [],
  counts: { moves: 0, liveSent: 0, liveDrawn: 0, patternsDrawn: 0, recordingPolls: 0 },
  // qem record --view: the last /api/recording answer (null for files).
  recording: null,
  drawnSeqs: [],
  busy: () => live.busy() || patterns.busy() || loading > 0,
  values(which, k = 0) {
    if (which === 'scan') return qemView.last ? plainValues(qemView.last.images[k].data) : null;
    if (which === 'pattern') return qemView.lastPattern ? plainValues(qemView.lastPattern.data) : null;
    return null;
  },
  // CSS pixels from the centre of the pattern overlay to the detector's centre.
  detectorPoint() {
    const canvas = $('dp-overlay');
    const [r, c] = state.det.kind === 'rect'
      ? [(state.det.rect[0] + state.det.rect[1] - 1) / 2, (state.det.rect[2] + state.det.rect[3] - 1) / 2]
      : state.det.center;
    return {
      x: (c + 0.5) * state.dpScale - canvas.clientWidth / 2,
      y: (r + 0.5) * state.dpScale - canvas.clientHeight / 2,
      scale: state.dpScale,
    };
  },
  // CSS pixels from the centre of the scan overlay to scan position (row, col).
  scanPoint(row, col) {
    const canvas = $('scan-overlay');
    return {
      x: (col + 0.5) * state.scanScale - canvas.clientWidth / 2,
      y: (row + 0.5) * state.scanScale - canvas.clientHeight / 2,
      scale: state.scanScale,
    };
  },
};
window.qemView = qemView;

window.addEventListener('error', (event) => qemView.errors.push(String(event.message)));
window.addEventListener('unhandledrejection', (event) => qemView.errors.push(String(event.reason)));

function setStatus(text) {
  $('status').textContent = text;
}

// Work that takes over a second says so, with the seconds elapsed, until
// it ends (the server reports no fractions: this is the honest progress).
const busy = { started: new Map(), timer: null };
function busyStart(what) {
  busy.started.set(what, performance.now());
  if (!busy.timer) busy.timer = setInterval(busyShow, 250);
}
function busyEnd(what) {
  busy.started.delete(what);
  if (!busy.started.size && busy.timer) {
    clearInterval(busy.timer);
    busy.timer = null;
    if ($('status').textContent.startsWith('computing')) setStatus('');
  }
}
function busyShow() {
  const now = performance.now();
  const slow = [...busy.started].filter(([, t]) => now - t >= 1000);
  if (!slow.length) return;
  setStatus('computing ' + slow.map(([what, t]) => `${what} (${((now - t) / 1000).toFixed(1)} s)`).join(', '));
}

const file = () => state.files[state.selected];
const scanShape = () => [file().shape[0], file().shape[1]];

// --- live detector updates ---------------------------------------------------

const live = new LatestOnly(
  (det, seq) => {
    qemView.counts.liveSent++;
    busyStart('the scan image');
    return getLive({ client: state.clientId, seq, file: state.selected, ...detectorParams(det) })
      .finally(() => busyEnd('the scan image'));
  },
  (result, det, seq) => {
    qemView.drawnSeqs.push(seq);
    state.images = result.images;
    qemView.last = {
      seq: result.seq,
      detector: det,
      params: detectorParams(det),
      images: result.images,
      computeMs: result.computeMs,
      roundTripMs: result.roundTripMs,
      pixelsChanged: result.pixelsChanged,
      maskPixels: result.maskPixels,
    };
    qemView.counts.liveDrawn++;
    const work = result.fromKept ? `a kept image, ${result.pixelsChanged} pixels changed`
      : result.fromRecorded ? 'prepared values the file records, no decoding'
      : result.fromCached ? 'the image kept from an earlier open of this file, no decoding'
      : result.fullRecomputation ? 'full computation' : `${result.pixelsChanged} pixels changed`;
    $('latency').textContent = `update ${result.roundTripMs.toFixed(1)} ms (server ${result.computeMs.toFixed(1)} ms; `
      + `${work}, ${result.maskPixels} in the detector)`;
    setStatus('');
    drawScan();
    drawThumbs();
    updateExports();
    if (!qemView.ready) {
      // The mean pattern (a pass over every scan) only once the first image
      // is up, so that it does not delay it.
      qemView.ready = true;
      loadMean(state.selected);
      if (smallFile(file())) computeDpc();
    }
  },
  (error) => setStatus('detector update refused: ' + error.message),
);

function detectorChanged() {
  qemView.counts.moves++;
  drawDetectorOverlay();
  syncFields();
  live.submit(state.det);
}

// --- patterns ----------------------------------------------------------------

// Frames readable now: every scan of a file, those received of a recording.
const receivedNow = () => (recording.state && !recording.state.finished ? recording.state.received : Infinity);

const patterns = new LatestOnly(
  async (req) => {
    const received = receivedNow(); // before asking: the answer holds at least these
    return { req, received, array: await getNpy('/api/dp.npy', { file: req.file, scan: `${req.row},${req.col}` }) };
  },
  ({ req, received, array }) => {
    state.pattern = { file: req.file, row: req.row, col: req.col, received, ...array };
    qemView.lastPattern = { file: req.file, scan: [req.row, req.col], ...array };
    qemView.counts.patternsDrawn++;
    if (state.dpMode === 'cursor') drawDp();
  },
  (error) => setStatus('pattern refused: ' + error.message),
);

const meanLoading = new Set();

// again: fetch it anew (a recording's mean grows with its frames).
async function loadMean(k, again = false) {
  if ((state.means[k] && !again) || meanLoading.has(k)) return;
  meanLoading.add(k);
  loading++;
  busyStart('the mean pattern');
  try {
    state.means[k] = await getNpy('/api/mean.npy', { file: k });
    if (k === state.selected && state.dpMode === 'mean') {
      qemView.lastPattern = { file: k, scan: null, ...state.means[k] };
      drawDp();
    }
  } catch (error) {
    setStatus('mean pattern refused: ' + error.message);
  } finally {
    busyEnd('the mean pattern');
    meanLoading.delete(k);
    loading--;
  }
}

// --- a recording in progress (qem record --view) -----------------------------

// About twice a second while frames arrive: the scan image of the current
// detector, the pattern at the cursor once its position has arrived and
// the mean pattern are asked again; once the recording is finished, a
// last time, and the polling stops.
const recording = { state: null };
const POLL_MS = 500;

async function pollRecording() {
  let now;
  try {
    now = await getJson('/api/recording');
  } catch (error) {
    setStatus('recording state refused: ' + error.message);
    setTimeout(pollRecording, POLL_MS);
    return;
  }
  qemView.counts.recordingPolls++;
  const before = recording.state;
  recording.state = now;
  qemView.recording = now;
  const shown = $('recording');
  shown.textContent = !now.finished ? `live: ${now.received} of ${now.expected} frames`
    : now.complete ? 'complete'
      : `ended: ${now.received} of ${now.expected} frames (incomplete)`;
  shown.className = now.finished ? 'done' : 'live';
  if (now.finished) renderMeta();
  const changed = !before || now.received !== before.received || now.finished !== before.finished;
  if (changed && state.det) {
    live.submit(state.det);
    const p = state.pattern;
    if (state.dpMode === 'cursor' && state.cursor && p && p.file === state.selected) {
      const at = state.cursor.row * scanShape()[1] + state.cursor.col;
      if (at >= p.received && (at < now.received || now.finished)) {
        patterns.submit({ file: state.selected, row: state.cursor.row, col: state.cursor.col });
      }
    }
    if (state.means[state.selected] || now.finished) loadMean(state.selected, true);
    if (now.finished && smallFile(file())) computeDpc();
  }
  if (!now.finished) setTimeout(pollRecording, POLL_MS);
}

function showCursor(row, col, pin) {
  const [rows, cols] = scanShape();
  row = Math.max(0, Math.min(rows - 1, row));
  col = Math.max(0, Math.min(cols - 1, col));
  if (pin) state.pinned = true;
  const moved = !state.cursor || state.cursor.row !== row || state.cursor.col !== col;
  state.cursor = { row, col };
  state.dpMode = 'cursor';
  drawScanOverlay();
  scanReadout();
  if (moved || !state.pattern || state.pattern.file !== state.selected) {
    patterns.submit({ file: state.selected, row, col });
  } else {
    drawDp();
  }
  updateExports();
}

function showMean() {
  state.pinned = false;
  state.cursor = null;
  state.dpMode = 'mean';
  if (state.means[state.selected]) qemView.lastPattern = { file: state.selected, scan: null, ...state.means[state.selected] };
  drawScanOverlay();
  drawDp();
  updateExports();
}

// --- drawing -----------------------------------------------------------------

function settings(prefix) {
  return {
    cmap: $(prefix + '-cmap').value,
    contrast: $(prefix + '-contrast').value,
    scale: $(prefix + '-scale').value,
  };
}

function drawScan() {
  const image = state.images[state.selected];
  if (!image) return;
  const [rows, cols] = scanShape();
  state.scanScale = fit([$('scan-image'), $('scan-overlay')], rows, cols, BOX);
  const { lo, hi } = drawArray($('scan-image'), image.data, rows, cols, settings('scan'));
  $('scan-title').textContent = `${file().name}, ${describe(state.det)} (${image.dtype}, levels ${fmt(lo)} to ${fmt(hi)})`;
  drawScanOverlay();
  scanReadout();
}

function drawThumbs() {
  const box = $('thumbs');
  if (state.files.length < 2) {
    box.textContent = '';
    return;
  }
  if (box.children.length !== state.files.length) {
    box.textContent = '';
    state.files.forEach((f, k) => {
      const canvas = document.createElement('canvas');
      canvas.className = 'thumb';
      canvas.title = f.name;
      canvas.addEventListener('click', () => selectFile(k));
      box.appendChild(canvas);
    });
  }
  state.files.forEach((f, k) => {
    const canvas = box.children[k];
    canvas.classList.toggle('selected', k === state.selected);
    const image = state.images[k];
    if (!image) return;
    fit([canvas], f.shape[0], f.shape[1], THUMB);
    drawArray(canvas, image.data, f.shape[0], f.shape[1], settings('scan'));
  });
}

function drawScanOverlay() {
  const canvas = $('scan-overlay');
  const ctx = canvas.getContext('2d');
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!state.cursor) return;
  const k = canvas.width / (scanShape()[1] * state.scanScale) * state.scanScale;
  const { row, col } = state.cursor;
  ctx.lineWidth = 1.5;
  ctx.strokeStyle = state.pinned ? '#ffb74d' : '#4fc3f7';
  ctx.strokeRect(col * k, row * k, k, k);
  ctx.beginPath();
  ctx.moveTo((col + 0.5) * k, 0);
  ctx.lineTo((col + 0.5) * k, row * k);
  ctx.moveTo((col + 0.5) * k, (row + 1) * k);
  ctx.lineTo((col + 0.5) * k, canvas.height);
  ctx.moveTo(0, (row + 0.5) * k);
  ctx.lineTo(col * k, (row + 0.5) * k);
  ctx.moveTo((col + 1) * k, (row + 0.5) * k);
  ctx.lineTo(canvas.width, (row + 0.5) * k);
  ctx.globalAlpha = 0.5;
  ctx.stroke();
  ctx.globalAlpha = 1;
}

function shownPattern() {
  if (state.dpMode === 'cursor') {
    const p = state.pattern;
    if (p && p.file === state.selected && state.cursor && p.row === state.cursor.row && p.col === state.cursor.col) return p;
    return p && p.file === state.selected ? p : null;
  }
  return state.means[state.selected] || null;
}

function drawDp() {
  const [rows, cols] = state.detShape;
  state.dpScale = fit([$('dp-image'), $('dp-overlay')], rows, cols, BOX);
  const p = shownPattern();
  if (p) {
    drawArray($('dp-image'), p.data, rows, cols, settings('dp'));
    $('dp-title').textContent = state.dpMode === 'cursor'
      ? `pattern at scan (${p.row}, ${p.col}) of ${file().name} (${p.dtype})`
      : `mean pattern of ${file().name} (${p.dtype})`;
  }
  drawDetectorOverlay();
}

function drawDetectorOverlay() {
  if (state.det) drawDetector($('dp-overlay'), state.det, state.detShape, state.dpScale);
}

function drawDpc() {
  const d = state.dpc;
  if (!d || d.file !== state.selected) return;
  const [rows, cols] = scanShape();
  const kind = $('dpc-kind').value;
  let values;
  if (kind === 'phase') {
    values = d.phase.data;
  } else {
    const component = kind === 'row' ? 0 : 1;
    values = new Float32Array(rows * cols);
    for (let i = 0; i < rows * cols; i++) values[i] = d.com.data[2 * i + component];
  }
  fit([$('dpc-image')], rows, cols, BOX);
  const phase = kind === 'phase';
  drawArray($('dpc-image'), values, rows, cols, {
    cmap: phase ? 'gray' : 'diverging', contrast: phase ? '0.5,99.5' : '0,100', scale: 'linear', symmetric: !phase,
  });
  $('dpc-title').textContent = `${file().name}${d.masked ? ', within ' + describe(d.det) : ''}`;
  $('dpc-readout').textContent = phase
    ? `iDPC phase; rotation ${fmt(d.rotation)} degrees${d.exchanged ? ', components exchanged' : ''}`
    : `DPC ${kind === 'row' ? 'row' : 'column'} component in detector pixels (CoM minus its scan mean)`;
  if (d.recorded) $('dpc-readout').textContent += '; from the moments the file records (no decoding)';
}

// --- readouts ----------------------------------------------------------------

function fmt(v) {
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return String(v);
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : String(round2(v));
}

function quantity(q) {
  return q ? `${fmt(q.value)} ${q.unit}${q.source === 'override' ? ' (override)' : ''}` : null;
}

function scanReadout() {
  const c = state.cursor;
  const image = state.images[state.selected];
  if (!c || !image) return;
  const value = image.data[c.row * scanShape()[1] + c.col];
  let text = `scan (${c.row}, ${c.col}): ${String(value)}`;
  const cal = file().calibration;
  if (cal && cal.scan_step[0] && cal.scan_step[1]) {
    text += ` at (${fmt(c.row * cal.scan_step[0].value)}, ${fmt(c.col * cal.scan_step[1].value)}) ${cal.scan_step[0].unit}`;
  }
  $('scan-readout').textContent = text + (state.pinned ? ' (pinned; arrow keys or WASD move it)' : '');
}

function dpReadout(row, col) {
  const p = shownPattern();
  const [rows, cols] = state.detShape;
  const r = Math.round(row);
  const c = Math.round(col);
  let text = describe(state.det);
  if (p && r >= 0 && c >= 0 && r < rows && c < cols) text = `pixel (${r}, ${c}): ${String(p.data[r * cols + c])}; ` + text;
  $('dp-readout').textContent = text;
}

function renderMeta() {
  const f = file();
  const rows = [
    ['file', f.name],
    ['path', f.path],
    ['container', f.kind === 'pack' ? 'Lossless Pack Format v1' : '.qem'],
    [f.kind === 'pack' ? 'profile' : 'codec', f.format],
    ['shape', `${f.shape[0]} x ${f.shape[1]} scans x ${f.shape[2]} x ${f.shape[3]} detector`],
    ['dtype', `${f.dtype} (${f.data})`],
    ['file size', f.file_bytes !== null ? `${f.file_bytes} bytes`
      : recording.state && recording.state.finished ? 'published (qem info FILE tells)' : 'being recorded'],
    ['logical size', `${f.logical_bytes} bytes`],
    ['compression ratio', f.compression_ratio ? `${fmt(f.compression_ratio)}x` : null],
    ['valid pixels', `${f.valid_pixels} of ${f.shape[2] * f.shape[3]}`],
  ];
  const cal = f.calibration;
  if (cal) {
    rows.push(['scan step', cal.scan_step[0] ? `${quantity(cal.scan_step[0])} x ${quantity(cal.scan_step[1])}` : null]);
    rows.push(['detector step', cal.detector_step[0] ? `${quantity(cal.detector_step[0])} x ${quantity(cal.detector_step[1])}` : null]);
    rows.push(['voltage', quantity(cal.voltage)]);
    rows.push(['convergence semi-angle', quantity(cal.semiangle)]);
    rows.push(['dwell', quantity(cal.dwell)]);
    rows.push(['camera length', quantity(cal.camera_length)]);
  } else {
    rows.push(['calibration', f.semiangle_mrad ? `semi-angle ${fmt(f.semiangle_mrad)} mrad` : 'none recorded']);
  }
  const dc = f.detector_calibration;
  rows.push(['detector calibration', dc ? `centre (${fmt(dc.center[0])}, ${fmt(dc.center[1])}), r = ${fmt(dc.radius)} px (${dc.method})` : 'none recorded']);
  const table = $('meta');
  table.textContent = '';
  for (const [key, value] of rows) {
    const tr = document.createElement('tr');
    const a = document.createElement('td');
    const b = document.createElement('td');
    a.textContent = key;
    b.textContent = value === null || value === undefined ? 'not recorded' : String(value);
    tr.append(a, b);
    table.appendChild(tr);
  }
}

// --- exports -----------------------------------------------------------------

const shellWord = (s) => (/^[A-Za-z0-9_/.,:=+@%-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'");
const command = (words) => words.map(shellWord).join(' ');

function downloadCanvas(canvas, name) {
  canvas.toBlob((blob) => {
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }, 'image/png');
}

function exportRow(title, canvas, pngName, links, commandText) {
  const row = document.createElement('div');
  row.className = 'export-row';
  const head = document.createElement('div');
  head.textContent = title + ': ';
  const png = document.createElement('button');
  png.type = 'button';
  png.textContent = 'PNG (as shown)';
  png.addEventListener('click', () => downloadCanvas(canvas, pngName));
  head.appendChild(png);
  for (const [label, href, name] of links) {
    const a = document.createElement('a');
    a.href = href;
    a.download = name;
    a.textContent = label;
    head.appendChild(a);
  }
  const code = document.createElement('code');
  code.textContent = commandText;
  row.append(head, code);
  return row;
}

function updateExports() {
  if (!state.det || !state.files.length) return;
  const f = file();
  const k = state.selected;
  const box = $('exports');
  box.textContent = '';
  const args = detectorArgs(state.det);
  const params = { file: k, ...detectorParams(state.det) };
  const links = [['.npy', tokenUrl('/api/virtual.npy', params), `virtual-${state.det.kind}.npy`]];
  let cmd;
  if (args) {
    cmd = command(['qem', 'virtual', f.path, ...args, '-o', `virtual-${state.det.kind}.npy`]);
  } else {
    links.push(['mask .npy', tokenUrl('/api/mask.npy', params), 'mask.npy']);
    cmd = command(['qem', 'virtual', f.path, '--mask', 'mask.npy', '-o', 'virtual-rect.npy'])
      + '   # mask.npy: the rectangle, from the link above';
  }
  box.appendChild(exportRow('Scan image', $('scan-image'), `virtual-${state.det.kind}.png`, links, cmd));
  if (state.dpMode === 'cursor' && state.cursor) {
    const { row, col } = state.cursor;
    box.appendChild(exportRow(`Pattern at (${row}, ${col})`, $('dp-image'), `dp-${row}-${col}.png`,
      [['.npy', tokenUrl('/api/dp.npy', { file: k, scan: `${row},${col}` }), `dp-${row}-${col}.npy`]],
      command(['qem', 'dp', f.path, '--scan', `${row},${col}`, '-o', `dp-${row}-${col}.npy`])));
  } else {
    box.appendChild(exportRow('Mean pattern', $('dp-image'), 'mean.png',
      [['.npy', tokenUrl('/api/mean.npy', { file: k }), 'mean.npy']],
      command(['qem', 'mean', f.path, '-o', 'mean.npy'])));
  }
  const d = state.dpc;
  if (d && d.file === k) {
    const extra = d.masked ? detectorParams(d.det) : {};
    const extraArgs = d.masked ? detectorArgs(d.det) || ['--mask', 'mask.npy'] : [];
    if ($('dpc-kind').value === 'phase') {
      box.appendChild(exportRow('iDPC phase', $('dpc-image'), 'idpc.png',
        [['.npy', tokenUrl('/api/dpc.npy', { file: k, ...extra }), 'idpc.npy']],
        command(['qem', 'dpc', f.path, ...extraArgs, '-o', 'idpc.npy'])));
    } else {
      box.appendChild(exportRow('DPC components (CoM minus its mean)', $('dpc-image'), 'dpc.png',
        [['.npy', tokenUrl('/api/com.npy', { file: k, subtract_mean: 1, ...extra }), 'dpc.npy']],
        command(['qem', 'com', f.path, '--subtract-mean', ...extraArgs, '-o', 'dpc.npy'])));
    }
  }
}

// --- CoM / DPC ---------------------------------------------------------------

async function computeDpc() {
  const k = state.selected;
  const masked = $('dpc-masked').checked;
  const det = state.det;
  const extra = masked ? detectorParams(det) : {};
  $('dpc-readout').textContent = 'computing...';
  loading++;
  try {
    const com = await getNpy('/api/com.npy', { file: k, subtract_mean: 1, ...extra });
    const phase = await getNpy('/api/dpc.npy', { file: k, ...extra });
    state.dpc = {
      file: k, masked, det, com, phase,
      rotation: Number(phase.headers.get('X-Qem-Rotation-Degrees')),
      exchanged: phase.headers.get('X-Qem-Components-Exchanged') === '1',
      recorded: com.headers.get('X-Qem-Origin') === 'recorded',
    };
    drawDpc();
    updateExports();
  } catch (error) {
    $('dpc-readout').textContent = 'CoM/DPC refused: ' + error.message;
  } finally {
    loading--;
  }
}

// --- controls ----------------------------------------------------------------

function numberField(label, value, onChange, step = '0.01') {
  const wrap = document.createElement('label');
  wrap.textContent = label + ' ';
  const input = document.createElement('input');
  input.type = 'number';
  input.step = step;
  input.value = String(value);
  input.addEventListener('change', () => {
    const v = Number(input.value);
    if (Number.isFinite(v)) onChange(v);
  });
  wrap.appendChild(input);
  return wrap;
}

function buildFields() {
  const box = $('det-fields');
  box.textContent = '';
  const det = state.det;
  const update = (mutate) => (v) => {
    const next = edited(state.det);
    mutate(next, v);
    state.det = next;
    detectorChanged();
  };
  if (det.kind === 'rect') {
    ['row from', 'row to', 'col from', 'col to'].forEach((label, i) => {
      box.appendChild(numberField(label, det.rect[i], update((d, v) => { d.rect[i] = Math.round(v); }), '1'));
    });
    return;
  }
  box.appendChild(numberField('centre row', round2(det.center[0]), update((d, v) => { d.center[0] = round2(v); })));
  box.appendChild(numberField('col', round2(det.center[1]), update((d, v) => { d.center[1] = round2(v); })));
  if (det.kind === 'annulus') {
    box.appendChild(numberField('inner', det.inner, update((d, v) => { d.inner = round2(v); })));
    box.appendChild(numberField('outer', det.outer, update((d, v) => { d.outer = round2(v); })));
  } else {
    box.appendChild(numberField('r', round2(det.radius), update((d, v) => { d.radius = round2(v); })));
  }
}

function syncFields() {
  const inputs = $('det-fields').querySelectorAll('input');
  const det = state.det;
  const values = det.kind === 'rect' ? det.rect
    : det.kind === 'annulus' ? [round2(det.center[0]), round2(det.center[1]), det.inner, det.outer]
      : [round2(det.center[0]), round2(det.center[1]), round2(det.radius)];
  inputs.forEach((input, i) => {
    if (document.activeElement !== input) input.value = String(values[i]);
  });
}

function pointIn(canvas, event, scale) {
  const box = canvas.getBoundingClientRect();
  return { x: event.clientX - box.left, y: event.clientY - box.top, scale };
}

function wireScan() {
  const overlay = $('scan-overlay');
  const at = (event) => {
    const p = pointIn(overlay, event, state.scanScale);
    return [Math.floor(p.y / state.scanScale), Math.floor(p.x / state.scanScale)];
  };
  overlay.addEventListener('pointermove', (event) => {
    if (state.pinned) return;
    const [row, col] = at(event);
    showCursor(row, col, false);
  });
  overlay.addEventListener('pointerleave', () => {
    if (!state.pinned) showMean();
  });
  overlay.addEventListener('pointerdown', (event) => {
    const [row, col] = at(event);
    state.pinned = true;
    showCursor(row, col, true);
  });
  document.addEventListener('keydown', (event) => {
    const tag = event.target && event.target.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') return;
    const moves = {
      ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
      w: [-1, 0], s: [1, 0], a: [0, -1], d: [0, 1], W: [-1, 0], S: [1, 0], A: [0, -1], D: [0, 1],
    };
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    const [rows, cols] = scanShape();
    const c = state.cursor || { row: Math.floor(rows / 2), col: Math.floor(cols / 2) };
    showCursor(c.row + move[0], c.col + move[1], true);
  });
}

function wireDetector() {
  const overlay = $('dp-overlay');
  const at = (event) => {
    const p = pointIn(overlay, event, state.dpScale);
    return [p.y / state.dpScale - 0.5, p.x / state.dpScale - 0.5];
  };
  overlay.addEventListener('pointerdown', (event) => {
    const [row, col] = at(event);
    const g = grab(state.det, row, col, 6 / state.dpScale);
    state.drag = { det: state.det, row, col, edge: g.edge };
    overlay.setPointerCapture(event.pointerId);
    event.preventDefault();
  });
  overlay.addEventListener('pointermove', (event) => {
    const [row, col] = at(event);
    if (state.drag) {
      const next = dragTo(state.drag, row, col, state.detShape);
      if (JSON.stringify(next) !== JSON.stringify(state.det)) {
        state.det = next;
        detectorChanged();
      }
    } else {
      const g = grab(state.det, row, col, 6 / state.dpScale);
      overlay.style.cursor = g.edge === null ? 'move' : 'nwse-resize';
    }
    dpReadout(row, col);
  });
  const end = (event) => {
    if (state.drag && overlay.hasPointerCapture(event.pointerId)) overlay.releasePointerCapture(event.pointerId);
    state.drag = null;
  };
  overlay.addEventListener('pointerup', end);
  overlay.addEventListener('pointercancel', end);
  $('det-kind').addEventListener('change', () => {
    state.det = withKind(state.det, $('det-kind').value);
    buildFields();
    detectorChanged();
  });
  $('show-mean').addEventListener('click', showMean);
}

function selectFile(k) {
  if (k === state.selected) return;
  state.selected = k;
  state.pattern = null;
  if (state.cursor) {
    const [rows, cols] = scanShape();
    state.cursor = { row: Math.min(state.cursor.row, rows - 1), col: Math.min(state.cursor.col, cols - 1) };
    if (state.dpMode === 'cursor') patterns.submit({ file: k, row: state.cursor.row, col: state.cursor.col });
  }
  renderMeta();
  drawScan();
  drawThumbs();
  drawDp();
  loadMean(k);
  const dpc = $('dpc-image');
  dpc.getContext('2d').clearRect(0, 0, dpc.width, dpc.height);
  $('dpc-title').textContent = '';
  $('dpc-readout').textContent = 'not computed yet';
  updateExports();
  if (smallFile(file())) computeDpc();
}

// Small enough to compute CoM and iDPC at once, without being asked.
function smallFile(f) {
  return f.shape[0] * f.shape[1] * f.shape[2] * f.shape[3] <= (1 << 24);
}

function wireSettings() {
  for (const prefix of ['scan', 'dp']) {
    fillSelect($(prefix + '-cmap'), COLORMAPS.filter((c) => c !== 'diverging'), prefix === 'scan' ? 'gray' : 'magma');
    fillSelect($(prefix + '-contrast'), CONTRASTS, prefix === 'scan' ? '0.5,99.5' : '0,100');
  }
  for (const id of ['scan-cmap', 'scan-contrast', 'scan-scale']) {
    $(id).addEventListener('change', () => { drawScan(); drawThumbs(); });
  }
  for (const id of ['dp-cmap', 'dp-contrast', 'dp-scale']) $(id).addEventListener('change', drawDp);
  $('dpc-kind').addEventListener('change', () => { drawDpc(); updateExports(); });
  $('dpc-compute').addEventListener('click', computeDpc);
}

async function start() {
  loading++;
  try {
    state.info = await getJson('/api/info');
    state.files = state.info.files;
    state.detShape = state.info.detector_shape;
    $('title').textContent = state.files.length === 1 ? state.files[0].name : `${state.files.length} files, one detector`;
    wireSettings();
    wireScan();
    wireDetector();
    renderMeta();
    let centre = [(state.detShape[0] - 1) / 2, (state.detShape[1] - 1) / 2];
    let radius = Math.min(state.detShape[0], state.detShape[1]) / 6;
    let defaultFound = false;
    busyStart('the default detector');
    try {
      const d = await getJson('/api/detector', { file: 0, detector: 'bf' }).finally(() => busyEnd('the default detector'));
      centre = d.center;
      radius = d.radius;
      defaultFound = true;
      const meanFrom = { recorded: 'recorded in the file', cached: 'kept from an earlier open', computed: 'computed from every scan' }[d.mean_from];
      $('origin').textContent = `detector from the ${d.center_radius_from}` + (meanFrom ? `; mean pattern ${meanFrom}` : '');
    } catch (error) {
      setStatus('no detector calibration or estimate (' + error.message + '); starting from the detector centre');
    }
    state.det = makeDetector('bf', centre, radius, state.detShape, defaultFound);
    buildFields();
    drawDp();
    live.submit(state.det);
    if (state.info.live) pollRecording();
  } catch (error) {
    setStatus('cannot start: ' + error.message);
  } finally {
    loading--;
  }
}

start();
