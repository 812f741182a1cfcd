"""Dask graphs over qem files. Every task names its file by path and the
stamp (device, inode, size, modification time) it had when the graph was
made; a process keeps one opened File per path and stamp between tasks, so
a file that changed or vanished fails the task with the library's error
instead of giving stale data. Nothing unpicklable is in a graph."""
import os
import threading

import numpy as np

from ._errors import ChangedError, FileSystemError

_QEM_E_CHANGED = 27
_QEM_E_IO = 3
_opened = {}
_opened_lock = threading.Lock()


def stamp_of(path):
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def worker_file(path, options, stamp):
    """The File for (path, options) in this process, checked against the
    stamp the graph recorded."""
    from ._file import File

    try:
        now = stamp_of(path)
    except OSError as e:
        raise FileSystemError(f"cannot open '{path}': {e.strerror}; it was there when the "
                              "computation was set up", _QEM_E_IO, "io error", "io") from None
    if now != tuple(stamp):
        raise ChangedError(f"'{path}' changed after the computation was set up; open it again "
                           "and recompute", _QEM_E_CHANGED, "file changed", "io")
    # Dask runs a task per worker thread, so each task's library calls use
    # one thread unless the graph's maker chose a number.
    if options.get("threads") is None:
        options = dict(options, threads=1)
    key = (path, tuple(sorted(options.items())), now)
    with _opened_lock:
        f = _opened.get(key)
        if f is None or f.closed:
            for old in [k for k in _opened if k[0] == path]:
                try:
                    _opened.pop(old).close()
                except RuntimeError:
                    pass  # still read by another thread; it closes when dropped
            f = _opened[key] = File(path, **options)
    return f


def read_scans(path, options, stamp, first, end, shape):
    """Scans [first, end) as an array of `shape`."""
    f = worker_file(path, options, stamp)
    out = np.empty((end - first,) + tuple(f.shape[2:]), dtype=f.dtype)
    if end > first:
        f._gather(np.arange(first, end, dtype=np.int64), out, range(f.shape[2]),
                  range(f.shape[3]))
    return out.reshape(shape)


def _row_bounds(f):
    """Chunks of whole scan rows, each close to one natural unit."""
    rows, columns = f.shape[0], f.shape[1]
    unit = max(end - first for first, end in f.chunks) if f.chunks else rows * columns
    step = max(1, round(unit / columns))
    return [(r, min(r + step, rows)) for r in range(0, rows, step)]


def file_array(f, flat):
    import dask.array as da
    from dask.base import tokenize

    stamp = f._stamp
    options = dict(f._options)
    name = "qem-read-" + tokenize(f.path, options, stamp, flat)
    graph = {}
    if flat:
        bounds = [tuple(c) for c in f.chunks]
        for i, (first, end) in enumerate(bounds):
            graph[(name, i, 0, 0)] = (read_scans, f.path, options, stamp, first, end,
                                      (end - first,) + f.shape[2:])
        chunks = (tuple(e - s for s, e in bounds), (f.shape[2],), (f.shape[3],))
    else:
        bounds = _row_bounds(f)
        columns = f.shape[1]
        for i, (r0, r1) in enumerate(bounds):
            graph[(name, i, 0, 0, 0)] = (read_scans, f.path, options, stamp, r0 * columns,
                                         r1 * columns, (r1 - r0,) + f.shape[1:])
        chunks = (tuple(r1 - r0 for r0, r1 in bounds), (columns,), (f.shape[2],),
                  (f.shape[3],))
    return da.Array(graph, name, chunks, dtype=f.dtype)
