// Talking to the qem view server: the token goes in a header with every
// request; live work runs through LatestOnly so moves never queue.
import { parseNpy, parseNpyList } from '/page/npy.js';

export const token = new URL(window.location.href).searchParams.get('token') || '';

export function query(params) {
  const parts = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    parts.push(encodeURIComponent(key) + '=' + encodeURIComponent(String(value)));
  }
  return parts.join('&');
}

// A URL that carries the token itself (downloads, links).
export function tokenUrl(path, params) {
  const q = query({ ...params, token });
  return path + '?' + q;
}

async function get(path, params) {
  const q = query(params || {});
  const response = await fetch(q ? path + '?' + q : path, {
    headers: { 'X-Qem-Token': token },
    cache: 'no-store',
  });
  if (!response.ok) {
    const text = await response.text();
    const error = new Error(text.trim() || response.statusText);
    error.status = response.status;
    throw error;
  }
  return response;
}

export async function getJson(path, params) {
  return (await get(path, params)).json();
}

// One array, with the response's headers beside it.
export async function getNpy(path, params) {
  const response = await get(path, params);
  return { ...parseNpy(await response.arrayBuffer()), headers: response.headers };
}

// The live detector path: the images of every file and the server's
// figures from the response headers.
export async function getLive(params) {
  const started = performance.now();
  const response = await get('/api/live', params);
  const images = parseNpyList(await response.arrayBuffer());
  const header = (name) => response.headers.get(name);
  return {
    images,
    seq: Number(header('X-Qem-Seq')),
    computeMs: Number(header('X-Qem-Compute-Ms')),
    pixelsChanged: Number(header('X-Qem-Pixels-Changed')),
    maskPixels: Number(header('X-Qem-Mask-Pixels')),
    fullRecomputation: header('X-Qem-Full-Recomputation') === '1',
    fromKept: header('X-Qem-From-Kept') === '1',
    fromRecorded: header('X-Qem-From-Recorded') === '1',
    fromCached: header('X-Qem-From-Cached') === '1',
    roundTripMs: performance.now() - started,
  };
}

// At most one request in flight; while it runs, newer submissions replace
// each other and only the latest is sent next. A result is handed on only
// when it is newer than every result handed on before, so no stale image
// is drawn after a newer one.
export class LatestOnly {
  constructor(send, onResult, onError) {
    this.send = send;
    this.onResult = onResult;
    this.onError = onError;
    this.pending = null;
    this.inflight = false;
    this.issued = 0;
    this.shown = 0;
    this.dropped = 0;
  }

  submit(request) {
    if (this.pending) this.dropped++;
    this.pending = request;
    if (!this.inflight) this.pump();
  }

  busy() {
    return this.inflight || this.pending !== null;
  }

  async pump() {
    this.inflight = true;
    while (this.pending) {
      const request = this.pending;
      this.pending = null;
      const seq = ++this.issued;
      try {
        const result = await this.send(request, seq);
        if (seq > this.shown) {
          this.shown = seq;
          this.onResult(result, request, seq);
        }
      } catch (error) {
        this.onError(error, request);
      }
    }
    this.inflight = false;
  }
}
