"""Products of qem files on a Dask cluster (dask.distributed), exactly.

Each task opens its file by path on its worker (one opened file per worker
process and file version is kept between tasks) and computes the partial
result of its range of scans with the library's partitioned primitives
(``qem_products_*_part``); partial results merge on the cluster in a
pairwise tree over the partitions in order:

* per-scan products (``virtual``, ``com``, ``virtual_series``) are
  concatenated: every scan's value is computed inside one task, so they
  are bit for bit the single-process result for every kind of data;
* pattern products (``mean``, ``region``) add per-pixel sums: counts in
  uint64, exactly, so any partitioning gives the single-process bits;
  float data as float64 Neumaier (sum, compensation) pairs merged by
  Neumaier addition in the tree, then rounded to float32 once: within one
  float32 rounding of the single-process value (equal when there is one
  partition); maxima merge by max, exactly.

``client=None`` uses the current dask.distributed client, else Dask's
local scheduler. ``partition`` is the scans per task; by default whole
natural units (.qem chunks, pack shards) grouped to about 512 MiB of
logical data per task, and to at least two tasks per worker thread where
the units allow. See doc/distributed.md.
"""
import numpy as np

from . import _args
from ._dask import stamp_of, worker_file

_TASK_BYTES = 512 << 20


def _client(client):
    if client is not None:
        return client
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None  # no cluster: Dask's local scheduler


def _compute(client, items):
    import dask

    if client is None:
        return list(dask.compute(*items))
    return client.gather(client.compute(list(items)))


def _partition(partition):
    return _args.optional(partition, "partition", 1, _args.INT64_MAX, " (scans per task)")


def _partitions(f, partition, threads=1):
    """(first, end) scan ranges: whole natural units up to ~512 MiB and at
    least two tasks per worker thread where the units allow, or
    `partition` scans each."""
    scans = f.shape[0] * f.shape[1]
    partition = _partition(partition)
    if partition is not None:
        step = partition
        return [(s, min(s + step, scans)) for s in range(0, scans, step)]
    scan_bytes = f.shape[2] * f.shape[3] * f.dtype.itemsize
    target = min(_TASK_BYTES, -(-scans * scan_bytes // (2 * max(1, threads))))
    parts, first, end = [], 0, 0
    for a, b in f.chunks:
        if end > first and (b - first) * scan_bytes > target:
            parts.append((first, end))
            first = a
        end = b
    parts.append((first, end))
    return parts


class _Source:
    """What a task needs to open a file: path, options, the stamp."""

    def __init__(self, path, options=None):
        from ._file import File

        self.path = str(path)
        with File(self.path, **(options or {})) as f:
            self.shape, self.dtype, self.chunks = f.shape, f.dtype, f.chunks
            self.options = dict(f._options)
            self.valid = f.valid
        self.stamp = stamp_of(self.path)

    def mask(self, mask, detector, geometry, required):
        from ._file import File

        with File(self.path, **self.options) as f:
            return f._mask(mask, detector, geometry, required)


def _part(path, options, stamp, kind, first, end, arg):
    c = worker_file(path, options, stamp)._c
    if kind == "virtual":
        return c.virtual_part(arg, first, end - first).reshape(-1)
    if kind == "com":
        return c.com_part(arg, first, end - first).reshape(-1, 2)
    # "patterns": arg = (ranges, with_max); rows of a region are ranges.
    ranges, with_max = arg
    acc = None
    for a, b in ranges:
        acc = _merge(acc, c.patterns_part(a, b - a, with_max))
    return acc


def _neumaier(a, b):
    """(sum, compensation) pairs added elementwise, Neumaier's way, as the
    library adds (a non-finite sum carries no compensation)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a[..., 0] + b[..., 0]
        big = np.abs(a[..., 0]) >= np.abs(b[..., 0])
        c = np.where(big, (a[..., 0] - s) + b[..., 0], (b[..., 0] - s) + a[..., 0])
        finite = np.isfinite(a[..., 0]) & np.isfinite(b[..., 0]) & np.isfinite(s)
        comp = np.where(finite, a[..., 1] + b[..., 1] + c, 0.0)
    return np.stack([s, comp], axis=-1)


def _merge(a, b):
    if a is None:
        return b
    (sa, ma), (sb, mb) = a, b
    total = sa + sb if sa.dtype == np.uint64 else _neumaier(sa, sb)
    return total, (None if ma is None else np.maximum(ma, mb))


def _tree(items, merge):
    from dask import delayed

    while len(items) > 1:
        items = [delayed(merge)(items[i], items[i + 1]) if i + 1 < len(items) else items[i]
                 for i in range(0, len(items), 2)]
    return items[0]


def _concatenate(parts):
    return np.concatenate(parts)


def _threads(client):
    if client is None:
        import os

        return os.cpu_count() or 1
    return max(1, sum(client.nthreads().values()))


def _per_scan(src, kind, arg, partition, threads):
    from dask import delayed

    parts = [delayed(_part)(src.path, src.options, src.stamp, kind, a, b, arg)
             for a, b in _partitions(src, partition, threads)]
    return delayed(_concatenate)(parts)


def _patterns(src, rows, cols, with_max, partition, threads):
    """The merged (sum, max) of the scans of rows x cols."""
    from dask import delayed

    partition = _partition(partition)
    columns = src.shape[1]
    if cols == (0, columns):  # whole rows: one range, cut by partitions
        first, end = rows[0] * columns, rows[1] * columns
        cuts = [(max(a, first), min(b, end)) for a, b in _partitions(src, partition, threads)
                if a < end and b > first]
        groups = [[c] for c in cuts]
    else:  # one range per row, rows grouped to about a partition each
        per = max(1, (partition or max(b - a for a, b in src.chunks)) // (cols[1] - cols[0]))
        ranges = [(r * columns + cols[0], r * columns + cols[1]) for r in range(*rows)]
        groups = [ranges[k:k + per] for k in range(0, len(ranges), per)]
    parts = [delayed(_part)(src.path, src.options, src.stamp, "patterns", g[0][0], g[-1][1],
                            (g, with_max)) for g in groups]
    return _tree(parts, _merge)


def _paths(paths):
    single = not isinstance(paths, (list, tuple))
    return ([paths] if single else list(paths)), single


def _geometry(center, radius, inner, outer, unit, semiangle):
    return dict(center=center, radius=radius, inner=inner, outer=outer, unit=unit,
                semiangle=semiangle)


def virtual(paths, mask=None, *, detector=None, center=None, radius=None, inner=None,
            outer=None, unit="px", semiangle=None, client=None, partition=None):
    """The virtual image of a file (or a list of files, each with its own
    named-detector resolution), as File.virtual gives it, computed on the
    cluster; bit for bit the single-process image."""
    items, single = _paths(paths)
    sources = [_Source(p) for p in items]
    geometry = _geometry(center, radius, inner, outer, unit, semiangle)
    client = _client(client)
    graphs = [_per_scan(s, "virtual", s.mask(mask, detector, geometry, True), partition,
                        _threads(client)) for s in sources]
    images = [im.reshape(s.shape[:2]) for im, s in zip(_compute(client, graphs), sources)]
    return images[0] if single else images


def virtual_series(paths, mask=None, *, detector=None, center=None, radius=None, inner=None,
                   outer=None, unit="px", semiangle=None, client=None, partition=None):
    """One detector over a series of files (a tilt or time series): the
    mask (or the named detector, resolved on the first file) is the same
    for every file; all images are computed together, or the call fails."""
    items = list(paths)
    if not items:
        raise ValueError("a series needs at least one file")
    sources = [_Source(p) for p in items]
    shapes = {s.shape[2:] for s in sources}
    if len(shapes) != 1:
        raise ValueError(f"the files of a series share one detector shape, not {sorted(shapes)}")
    m = sources[0].mask(mask, detector, _geometry(center, radius, inner, outer, unit, semiangle),
                        True)
    client = _client(client)
    graphs = [_per_scan(s, "virtual", m, partition, _threads(client)) for s in sources]
    return [im.reshape(s.shape[:2]) for im, s in zip(_compute(client, graphs), sources)]


def _com_finish(com, shape, subtract_mean):
    com = com.reshape(shape[0], shape[1], 2)
    if subtract_mean:  # as the library: a sequential float64 sum over frames with a CoM
        for k in range(2):
            v = com[..., k].reshape(-1)
            keep = v[~np.isnan(v)].astype(np.float64)
            mean = np.float32(np.cumsum(keep)[-1] / keep.size) if keep.size else np.float32(0)
            com[..., k] = v.reshape(shape[:2]) - mean
    return com


def com(paths, mask=None, subtract_mean=False, *, detector=None, center=None, radius=None,
        inner=None, outer=None, unit="px", semiangle=None, client=None, partition=None):
    """Centre of mass per scan (rows, cols, 2) as File.com gives it, on the
    cluster; bit for bit the single-process result."""
    items, single = _paths(paths)
    sources = [_Source(p) for p in items]
    geometry = _geometry(center, radius, inner, outer, unit, semiangle)
    client = _client(client)
    graphs = [_per_scan(s, "com", s.mask(mask, detector, geometry, False), partition,
                        _threads(client)) for s in sources]
    out = [_com_finish(c, s.shape, subtract_mean)
           for c, s in zip(_compute(client, graphs), sources)]
    return out[0] if single else out


def _pattern_finish(total, n, reduce, maximum):
    if reduce == "max":
        return maximum
    if total.dtype == np.uint64:
        return total if reduce == "sum" else (total.astype(np.float64) / n).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        value = total[..., 0] + total[..., 1]
        return (value if reduce == "sum" else value / n).astype(np.float32)


def region(paths, r0, r1, c0, c1, reduce="sum", *, client=None, partition=None):
    """A reduction over the scan rectangle [r0, r1) x [c0, c1) as
    File.region gives it ("sum" and "max" of counts exact uint64, "mean"
    float32), on the cluster."""
    if reduce not in ("sum", "mean", "max"):
        raise ValueError(f"reduce must be 'sum', 'mean' or 'max', not {reduce!r}")
    r0, r1, c0, c1 = (_args.integer(v, name, 0, _args.INT64_MAX)
                      for v, name in zip((r0, r1, c0, c1), ("r0", "r1", "c0", "c1")))
    items, single = _paths(paths)
    sources = [_Source(p) for p in items]
    for s in sources:
        if not (0 <= r0 < r1 <= s.shape[0] and 0 <= c0 < c1 <= s.shape[1]):
            raise ValueError(f"the region ({r0}, {r1}, {c0}, {c1}) must lie in the "
                             f"{s.shape[0]} x {s.shape[1]} scan, stops exclusive")
    client = _client(client)
    graphs = [_patterns(s, (r0, r1), (c0, c1), reduce == "max", partition, _threads(client))
              for s in sources]
    n = (r1 - r0) * (c1 - c0)
    out = [_pattern_finish(t, n, reduce, m) for (t, m) in _compute(client, graphs)]
    return out[0] if single else out


def mean(paths, *, client=None, partition=None):
    """The mean diffraction pattern as File.mean gives it, on the cluster."""
    items, single = _paths(paths)
    sources = [_Source(p) for p in items]
    client = _client(client)
    graphs = [_patterns(s, (0, s.shape[0]), (0, s.shape[1]), False, partition, _threads(client))
              for s in sources]
    out = [_pattern_finish(t, s.shape[0] * s.shape[1], "mean", None)
           for (t, _), s in zip(_compute(client, graphs), sources)]
    return out[0] if single else out
