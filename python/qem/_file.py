"""qem.File: an opened .qem file or pack, indexed like a numpy array and
decoded only where asked."""
import json
import math
import operator
import os

import numpy as np

from . import _args, _qem
from ._errors import LimitError
from ._progress import reporter

_DETECTORS = {"bf": 1, "abf": 2, "adf": 3, "haadf": 4, "df": 5, "annulus": 6}
_REDUCE = {"sum": 0, "mean": 1, "max": 2}


def _available_memory():
    """MemAvailable in bytes, or None where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_fits(nbytes, what):
    available = _available_memory()
    if available is not None and nbytes > 0.8 * available:
        raise LimitError(
            f"{what} needs {nbytes / 2**30:.1f} GiB and {available / 2**30:.1f} GiB of memory "
            "are available; index a part of it (f[r0:r1], f.read(scan_region=...)) or use "
            "f.to_dask()")


def _axis_index(key, size, axis):
    """An integer (the axis dropped) or a range (kept), as numpy reads it."""
    if isinstance(key, (bool, np.bool_)):
        raise TypeError("boolean indices are not supported; use integers and slices")
    if isinstance(key, slice):
        return range(*key.indices(size))
    try:
        i = operator.index(key)
    except TypeError:
        raise TypeError(
            "qem files take integers, slices and ...; for arbitrary scan positions use "
            "f.read(scan_indices=...)") from None
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")
    return i + size if i < 0 else i


def _normalize(key, shape):
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is None for k in key):
        raise TypeError("qem files do not add axes (None); index the result instead")
    ellipses = sum(1 for k in key if k is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        i = next(n for n, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (4 - len(key) + 1) + key[i + 1:]
    if len(key) > 4:
        raise IndexError(f"too many indices: a qem file has 4 dimensions, {len(key)} given")
    key = key + (slice(None),) * (4 - len(key))
    return [_axis_index(k, n, axis) for axis, (k, n) in enumerate(zip(key, shape))]


def _region(region, rows, columns, name):
    if region is None:
        return range(rows), range(columns)
    try:
        r0, r1, c0, c1 = (operator.index(v) for v in region)
    except (TypeError, ValueError):
        raise TypeError(f"{name} is (r0, r1, c0, c1), four integers") from None
    if not (0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= columns):
        raise ValueError(f"{name} {tuple(region)} must satisfy 0 <= r0 < r1 <= {rows} and "
                         f"0 <= c0 < c1 <= {columns} (stops exclusive)")
    return range(r0, r1), range(c0, c1)


def _optional_float(value, name):
    if value is None:
        return math.nan
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite")
    return value


class DPCResult:
    """What :meth:`File.dpc` found: ``rotation`` (degrees), ``exchanged``
    (whether the CoM components were swapped), ``com`` (mean-subtracted
    centre of mass, rows x cols x 2), ``aligned`` (rotated components),
    ``idpc`` (the integrated phase) and ``ffts`` (2-D FFTs performed)."""

    def __init__(self, d):
        self.rotation = d["rotation_degrees"]
        self.exchanged = d["exchanged"]
        self.com = d["com"]
        self.aligned = d["aligned"]
        self.idpc = d["idpc"]
        self.ffts = d["ffts"]

    def __repr__(self):
        return (f"DPCResult(rotation={self.rotation:.4f}, exchanged={self.exchanged}, "
                f"idpc shape={self.idpc.shape})")


class Session:
    """A detector session: ``set_mask(mask)`` returns the new virtual image
    (a list of them for a series), computed the first time and afterwards
    updated by adding and subtracting only the pixels whose membership
    changed (integer data). A series changes all together or not at all.
    ``keep_mib``: MiB of recent masks' images kept, least recently used
    out, so a mask set again is a copy (``stats["from_kept"]``); 0 keeps
    none. ``stats`` holds the counters of the last update."""

    def __init__(self, files, keep_mib=0):
        files = list(files)
        if not files or not all(isinstance(f, File) for f in files):
            raise TypeError("a session takes one or more qem.File objects")
        keep = _args.integer(keep_mib, "keep_mib", 0, 1 << 20)
        self._files = files
        self._single = len(files) == 1
        self._s = _qem.Session([f._c for f in files], keep_mib=keep)

    def set_mask(self, mask):
        images = self._s.set_mask(np.asarray(mask))
        return images[0] if self._single else images

    @property
    def images(self):
        images = self._s.images()
        return images[0] if self._single else images

    @property
    def stats(self):
        return self._s.stats()

    def close(self):
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _reopen(path, options):
    return File(path, **options)


class File:
    """An opened .qem file or Lossless Pack Format v1 pack (see qem.open).

    Attributes: ``shape`` (scan rows, scan columns, detector rows, detector
    columns), ``dtype`` (as read: uint8, uint16 or float32; the scaled codec
    gives float32 values), ``format`` ("qem" or "pack"), ``codec`` /
    ``profile``, ``metadata`` (the scientific metadata; a pack's manifest),
    ``calibration``, ``valid`` (False at invalid or excluded detector
    pixels), ``chunks`` (the natural (first, end) flat scan ranges:
    .qem chunks or pack shards), ``nbytes`` (logical), ``compression_ratio``.

    Indexing decodes only what it returns: ``f[r, c]`` (one pattern),
    ``f[r0:r1, c0:c1]``, ``f[..., d0:d1, e0:e1]``, steps and negative
    indices as numpy. ``np.asarray(f)`` reads everything after checking it
    fits in memory.
    """

    def __init__(self, path, *, threads=None, verify=True, raw=False, expect_sha256=None,
                 progress=None, resident=False, cache_dir=None):
        count = _args.threads(threads)  # None and 0: every core
        mode = _args.resident(resident)
        self._options = dict(threads=None if threads is None else count, verify=verify, raw=raw,
                             expect_sha256=expect_sha256, resident=resident,
                             cache_dir=cache_dir)
        extra = {} if cache_dir is None else {"cache_dir": os.fspath(cache_dir)}
        # Packs report shards loaded; .qem files the bytes hashed on opening.
        with reporter(progress, "opening", "") as callback:
            self._c = _qem.Container(os.fspath(path), threads=count, verify=bool(verify),
                                     raw=bool(raw), expect_sha256=expect_sha256,
                                     progress=callback, resident=mode, **extra)
        info = self._c.info()
        self._info = info
        self.path = self._c.path
        self.shape = tuple(info["shape"])
        self.dtype = np.dtype(info["dtype"])
        self.format = info["format"]
        self.codec = info.get("codec")
        self.profile = info.get("profile")
        self.raw = bool(raw)
        self.chunks = tuple(tuple(c) for c in info["chunks"])
        self.nbytes = info["scans"] * info["pixels"] * self.dtype.itemsize
        self.file_bytes = info["file_bytes"]
        self.compression_ratio = self.nbytes / self.file_bytes if self.file_bytes else math.nan
        self._header = None
        self._valid = None
        stat = os.stat(self.path)
        self._stamp = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    # --- description -------------------------------------------------------------------

    ndim = 4

    @property
    def size(self):
        return math.prod(self.shape)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        state = "closed" if self.closed else f"{self.codec or self.profile}"
        return (f"<qem.File {self.path!r} {self.format} {state} shape={self.shape} "
                f"dtype={self.dtype}>")

    @property
    def closed(self):
        return self._c.closed

    @property
    def header(self):
        """The whole .qem header (or pack manifest) as a dict."""
        if self._header is None:
            self._header = json.loads(self._c.header())
        return self._header

    @property
    def metadata(self):
        """The scientific metadata (.qem), or the manifest of a pack."""
        h = self.header
        return h.get("scientific_metadata", {}) if self.format == "qem" else h

    @property
    def summary(self):
        """What `qem info --json` prints, as a dict."""
        return json.loads(self._c.summary())

    @property
    def calibration(self):
        """Effective calibration: the microscope quantities a .qem file
        states (each ``{value, unit, source}`` or None) and ``detector``,
        the detector centre and bright-field radius the file records (or
        None)."""
        c = dict(self._c.calibration())
        c["detector"] = self._c.file_calibration()
        return c

    @property
    def valid(self):
        if self._valid is None:
            self._valid = self._c.valid()
            self._valid.flags.writeable = False
        return self._valid

    def close(self):
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __reduce__(self):
        # A File travels as its path and options, opened again where it lands.
        return (_reopen, (self.path, self._options))

    # --- reads -------------------------------------------------------------------------

    def _gather(self, flat, out, rows, columns):
        flat = np.asarray(flat, dtype=np.int64).ravel()
        order = np.argsort(flat, kind="stable")
        self._c.gather(np.ascontiguousarray(flat[order]), order.astype(np.int64),
                       np.asarray(rows, dtype=np.intp), np.asarray(columns, dtype=np.intp), out)
        return out

    def __getitem__(self, key):
        sr, sc, dr, dc = _normalize(key, self.shape)
        rows = [sr] if isinstance(sr, int) else sr
        cols = [sc] if isinstance(sc, int) else sc
        drs = [dr] if isinstance(dr, int) else dr
        dcs = [dc] if isinstance(dc, int) else dc
        n = len(rows) * len(cols)
        nbytes = n * len(drs) * len(dcs) * self.dtype.itemsize
        _check_fits(nbytes, "this selection")
        out = np.empty((n, len(drs), len(dcs)), dtype=self.dtype)
        if n and len(drs) and len(dcs):
            flat = (np.asarray(rows, np.int64)[:, None] * self.shape[1] +
                    np.asarray(cols, np.int64)[None, :])
            self._gather(flat, out, drs, dcs)
        shape = [len(k) for k in (sr, sc, dr, dc) if isinstance(k, range)]
        return out.reshape(shape)

    def read(self, scan_region=None, detector_region=None, scan_indices=None, out=None):
        """Reads a block, decoding only what it holds.

        scan_region: (r0, r1, c0, c1), stops exclusive; the result is
            (r1 - r0, c1 - c0, rows, columns). Default: every scan.
        scan_indices: flat scan positions (row * scan columns + column) in
            any order, repeats allowed; read in sorted order, returned in
            the order given: (len(scan_indices), rows, columns).
        detector_region: (d0, d1, e0, e1), stops exclusive. Default: all.
        out: a C-contiguous array of exactly that shape and the file's
            dtype, filled in place and returned.
        """
        drs, dcs = _region(detector_region, self.shape[2], self.shape[3], "detector_region")
        if scan_indices is not None:
            if scan_region is not None:
                raise ValueError("give scan_region or scan_indices, not both")
            flat = np.asarray(scan_indices)
            if flat.ndim != 1 or not (flat.dtype.kind in "iu" or flat.size == 0):
                raise TypeError("scan_indices must be a 1-D sequence of integers")
            scans = self.shape[0] * self.shape[1]
            # Checked in their own type: uint64 above 2**63 would wrap
            # around to a negative index as int64.
            if flat.size and (int(flat.min()) < -scans or int(flat.max()) >= scans):
                raise IndexError(f"scan_indices must lie in [-{scans}, {scans})")
            flat = flat.astype(np.int64)
            flat = np.where(flat < 0, flat + scans, flat)
            shape = (flat.size, len(drs), len(dcs))
        else:
            rows, cols = _region(scan_region, self.shape[0], self.shape[1], "scan_region")
            flat = (np.asarray(rows, np.int64)[:, None] * self.shape[1] +
                    np.asarray(cols, np.int64)[None, :])
            shape = (len(rows), len(cols), len(drs), len(dcs))
        if out is None:
            _check_fits(math.prod(shape) * self.dtype.itemsize, "this read")
            out = np.empty(shape, dtype=self.dtype)
        elif not isinstance(out, np.ndarray):
            raise TypeError("out must be a numpy array")
        elif out.shape != shape or out.dtype != self.dtype:
            raise ValueError(f"out must have shape {shape} and dtype {self.dtype}; it has "
                             f"{out.shape} and {out.dtype}")
        elif not (out.flags.c_contiguous and out.flags.writeable):
            raise ValueError("out must be C-contiguous and writable")
        if out.size:
            self._gather(flat, out.reshape(-1, len(drs), len(dcs)), drs, dcs)
        return out

    def __array__(self, dtype=None):
        _check_fits(self.nbytes, "the whole array")
        a = self.read()
        return a if dtype is None else a.astype(dtype, copy=False)

    # --- products ----------------------------------------------------------------------

    def _scan(self, row, column):
        r = _axis_index(row, self.shape[0], 0)
        c = _axis_index(column, self.shape[1], 1)
        if not isinstance(r, int) or not isinstance(c, int):
            raise TypeError("a scan position is two integers (row, column)")
        return r * self.shape[1] + c

    def dp(self, row, column):
        """The diffraction pattern at (row, column), as a product: counts in
        their dtype, float32 data minus the mean-dark plane (if recorded),
        scaled data restored; invalid (excluded) pixels are 0. For the
        stored values use ``f[row, column]``."""
        return self._c.frame(self._scan(row, column))

    def build_packed_copy(self, limit_bytes=None, progress=None):
        """Builds a bit-packed copy of a .qem file's counts in memory (each
        pixel's samples in tiles of 32 scans at the tile's own bit width)
        from its authenticated body, on the file's threads. From then on
        virtual images, CoM and single patterns (``f[r, c]``) read it
        instead of decoding rANS streams, with the same values: a detector
        moved over a large set is about 2.5 times faster. It takes memory
        of the order of 1.3 times the encoded body (1.2 GB for a 512 x 512
        x 192 x 192 set at dose 4); ``limit_bytes`` refuses a larger one
        (``qem.LimitError``, nothing kept). Returns ``packed_copy``.
        ``qem.UnsupportedError`` for a pack (its resident is one already)
        or float32 data. Building again is a no-op."""
        limit = 0 if limit_bytes is None else int(limit_bytes)
        if limit_bytes is not None and limit <= 0:
            raise ValueError(f"limit_bytes must be positive or None, not {limit_bytes!r}")
        with reporter(progress, "packing", "blocks") as callback:
            return self._c.build_packed_copy(limit, callback)

    @property
    def packed_copy(self):
        """The packed copy (``build_packed_copy``): ``{"bytes": ...,
        "build_s": ...}``, or None while there is none."""
        return self._c.packed_copy()

    def mean(self):
        """The mean diffraction pattern, float32: counts as the exact total
        over the scan count in float64, rounded once; float data
        compensated, dark plane subtracted once; invalid pixels 0."""
        return self._c.mean()

    @property
    def sums_origin(self):
        """Where the last whole-file pixel sums (behind ``mean()`` and the
        calibration estimate) came from: "recorded" in the file by qem's
        writer, "cached" by an earlier open (``cache_dir``), "computed"
        by a pass over every scan, or "none" before any was needed."""
        return self._c.sums_origin()

    @property
    def last_origin(self):
        """Where the exact sums behind the last virtual image, CoM or DPC
        came from: "recorded" when values the file records answered without
        decoding (a pack's prepared DPC moments, or its BF/ABF/ADF images
        when the mask is exactly theirs), "computed" after a pass over the
        encoded data, "none" before the first."""
        return self._c.last_origin()

    def region(self, r0, r1, c0, c1, reduce="sum"):
        """A reduction over the scan rectangle [r0, r1) x [c0, c1):
        ``reduce`` "sum" and "max" (counts: exact uint64) or "mean"
        (float32)."""
        if reduce not in _REDUCE:
            raise ValueError(f"reduce must be one of {sorted(_REDUCE)}, not {reduce!r}")
        rows, cols = _region((r0, r1, c0, c1), self.shape[0], self.shape[1], "the region")
        return self._c.region(rows.start, rows.stop, cols.start, cols.stop, _REDUCE[reduce])

    def detector_mask(self, detector, *, center=None, radius=None, inner=None, outer=None,
                      unit="px", semiangle=None):
        """A named detector's mask and what was used, as ``qem virtual``
        resolves it: ``detector`` bf [0, r], abf [r/2, r], adf [r, 2r] (or
        [inner, outer]), haadf [2r, 4r], df [r, inf), annulus [inner,
        outer], both ends inclusive. ``center`` (row, column) and ``radius``
        default to the file's detector calibration, else to the
        mean-diffraction-half-maximum estimate. ``unit="mrad"`` reads
        radius, inner and outer in mrad (needs the convergence semi-angle:
        the file's or ``semiangle``). Returns (mask, info)."""
        if detector not in _DETECTORS:
            raise ValueError(f"detector must be one of {sorted(_DETECTORS)}, not {detector!r}")
        if unit not in ("px", "mrad"):
            raise ValueError(f"unit must be 'px' or 'mrad', not {unit!r}")
        if center is None:
            cr = cc = math.nan
        else:
            try:
                cr, cc = (float(v) for v in center)
            except (TypeError, ValueError):
                raise TypeError("center is (row, column), two numbers") from None
        if (inner is None) != (outer is None):
            raise ValueError("give both inner and outer, or neither")
        return self._c.resolve_detector(
            _DETECTORS[detector], cr, cc, _optional_float(radius, "radius"),
            _optional_float(inner, "inner"), _optional_float(outer, "outer"), unit == "mrad",
            _optional_float(semiangle, "semiangle"))

    def _mask(self, mask, detector, geometry, required):
        if mask is not None and detector is not None:
            raise ValueError("give mask or detector, not both")
        if detector is not None:
            return self.detector_mask(detector, **geometry)[0]
        if any(v is not None for k, v in geometry.items() if k != "unit") or \
                geometry.get("unit", "px") != "px":
            raise ValueError("center, radius, inner, outer, unit and semiangle apply to a "
                             "named detector (detector=...)")
        if mask is None and required:
            raise ValueError("give a detector mask (mask=) or a named detector (detector=)")
        return None if mask is None else np.asarray(mask)

    def virtual(self, mask=None, *, detector=None, center=None, radius=None, inner=None,
                outer=None, unit="px", semiangle=None):
        """A virtual image (scan rows x columns): each pattern summed over a
        0/1 mask of the detector's shape, or over a named detector (see
        detector_mask). Counts give exact uint32 (uint64 when the mask
        could exceed it); float32 data a compensated float32 sum; scaled
        data calibrated sums. Invalid pixels never count."""
        m = self._mask(mask, detector, dict(center=center, radius=radius, inner=inner,
                                            outer=outer, unit=unit, semiangle=semiangle), True)
        return self._c.virtual(m)

    def com(self, mask=None, subtract_mean=False, *, detector=None, center=None, radius=None,
            inner=None, outer=None, unit="px", semiangle=None):
        """Centre of mass per scan position in absolute detector coordinates,
        (rows, cols, 2) float32, row component first, over ``mask`` (default
        every valid pixel): exact integer moments over the total in float64,
        rounded once. A zero-total frame is NaN and left out of the mean
        that ``subtract_mean`` removes (the DPC components)."""
        m = self._mask(mask, detector, dict(center=center, radius=radius, inner=inner,
                                            outer=outer, unit=unit, semiangle=semiangle), False)
        return self._c.com(m, bool(subtract_mean))

    def dpc(self, rotation=None, mask=None, *, detector=None, center=None, radius=None,
            inner=None, outer=None, unit="px", semiangle=None):
        """Differential phase contrast: the mean-subtracted CoM rotated by
        ``rotation`` degrees, or by the angle that minimises the mean
        squared curl (180 angles over [0, pi], with and without exchanged
        components), then integrated (iDPC). Returns a DPCResult."""
        m = self._mask(mask, detector, dict(center=center, radius=radius, inner=inner,
                                            outer=outer, unit=unit, semiangle=semiangle), False)
        return DPCResult(self._c.dpc(m, math.nan if rotation is None
                                     else _optional_float(rotation, "rotation")))

    def calibrate(self):
        """The detector centre and bright-field radius estimated from the
        mean pattern (mean-diffraction-half-maximum), with ``recorded``, the
        calibration the file itself records (or None)."""
        estimate = dict(self._c.estimate_calibration())
        estimate["recorded"] = self._c.file_calibration()
        return estimate

    def session(self, keep_mib=0):
        """A detector session over this file (see qem.Session)."""
        return Session([self], keep_mib=keep_mib)

    # --- other libraries ---------------------------------------------------------------

    def to_dask(self, flat=False):
        """A dask array reading this file lazily, each task opening it by path
        in its own process (the graph pickles). ``flat=False``: 4D, chunks of
        whole scan rows as close to the natural unit (a .qem chunk or pack
        shard) as rows allow, exactly it when the scan columns divide it.
        ``flat=True``: (scans, rows, columns) chunked exactly by the natural
        units. The detector is never split."""
        from ._dask import file_array

        return file_array(self, flat)

    def to_hyperspy(self, lazy=True):
        """A HyperSpy Signal2D over this file, navigation and signal axes
        named and calibrated from the metadata (lazy: over to_dask())."""
        from ._hyperspy import file_signal

        return file_signal(self, lazy)
