"""qem.save (from numpy, memmaps, Dask, h5py, HyperSpy or an iterable of
blocks, block by block) and qem.convert (from any detector file the C
library reads)."""
from __future__ import annotations

import json
import mmap
import os
from typing import Any, Dict, Union

import numpy as np

from . import _args, _qem
from ._progress import reporter

# A block handed to the writer: about this many bytes of scans.
_BLOCK_BYTES = 64 << 20
_STORED = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.float32))


def _json_text(value, name):
    """A dict (or a path to a JSON file, or JSON text) as JSON text."""
    if value is None:
        return None
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, (str, os.PathLike)) and os.path.exists(value):
        with open(value) as f:
            return f.read()
    if isinstance(value, str):
        return value
    raise TypeError(f"{name} must be a dict, JSON text or the path of a JSON file")


def _stored_dtype(source, requested):
    """The dtype written for a source dtype: uint8, uint16 and float32 as
    they are; other unsigned/signed integers as uint16 (each block checked
    to fit exactly); float16/float64 as float32 (each block checked to
    convert without changing a value)."""
    source = np.dtype(source)
    if requested is not None:
        requested = np.dtype(requested)
        if requested not in _STORED:
            raise ValueError(f"dtype must be uint8, uint16 or float32, not {requested}")
        return requested
    if source.kind == "b":
        raise TypeError("the data are booleans, not counts; save data.astype('u1') if they "
                        "are counts")
    if source.newbyteorder("=") in _STORED:
        return source.newbyteorder("=")
    if source.kind in "iu":
        return np.dtype(np.uint16)
    if source.kind == "f":
        return np.dtype(np.float32)
    raise TypeError(f"qem stores uint8, uint16 or float32 values, not {source}")


def _convert(block, dtype, first_scan, columns):
    """`block` in the stored dtype, exactly, or a ValueError naming the
    first value that does not fit."""
    if block.dtype == dtype:
        return np.ascontiguousarray(block)
    if dtype.kind == "u":
        info = np.iinfo(dtype)
        if block.dtype.kind == "f":
            bad = ~np.isfinite(block) | (block != np.round(block)) | (block < 0) | \
                  (block > info.max)
        else:
            bad = (block < 0) | (block > info.max)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            back = block.astype(dtype).astype(block.dtype)
        bad = ~((back == block) | (np.isnan(back) & np.isnan(block))) if block.dtype.kind == "f" \
            else back != block
    if bad.any():
        at = np.unravel_index(int(np.argmax(bad.reshape(-1))), block.shape)
        scan = first_scan + at[0]
        raise ValueError(f"scan position ({scan // columns}, {scan % columns}), detector pixel "
                         f"({at[1]}, {at[2]}) holds {block[at]!r}, which {dtype} cannot hold "
                         "exactly; nothing was written (values are never clipped)")
    return np.ascontiguousarray(block.astype(dtype))


def _materialize(block):
    if hasattr(block, "compute"):  # Dask
        block = block.compute()
    return np.asarray(block)


class _PageReleaser:
    """After a block of a read-only or shared np.memmap has been copied into
    the writer, its pages leave this process's mapping (they stay in the
    page cache), so saving a memmap holds no more than one block."""

    def __init__(self, data):
        self.mm = None
        mm = getattr(data, "_mmap", None)
        if isinstance(data, np.memmap) and isinstance(mm, mmap.mmap) and \
                getattr(data, "mode", "c") in ("r", "r+") and hasattr(mm, "madvise"):
            self.mm = mm
            self.base = np.frombuffer(mm, dtype=np.uint8).__array_interface__["data"][0]
            self.size = len(mm)

    def release(self, block):
        if self.mm is None or not isinstance(block, np.ndarray) or not block.flags.c_contiguous:
            return
        start = block.__array_interface__["data"][0] - self.base
        end = start + block.nbytes
        if start < 0 or end > self.size:
            return
        start -= start % mmap.PAGESIZE
        self.mm.madvise(mmap.MADV_DONTNEED, start, end - start)


def _blocks_of_array(data, shape4):
    """(first scan, block) pairs of about _BLOCK_BYTES, in scan order."""
    rows, columns, dr, dc = shape4
    itemsize = np.dtype(data.dtype).itemsize
    scan_bytes = dr * dc * itemsize
    if data.ndim == 3:  # a frame stack with a scan shape
        step = max(1, _BLOCK_BYTES // scan_bytes)
        for first in range(0, rows * columns, step):
            yield first, data[first:first + step]
        return
    row_bytes = columns * scan_bytes
    if row_bytes <= _BLOCK_BYTES:
        step = max(1, _BLOCK_BYTES // row_bytes)
        for r in range(0, rows, step):
            block = data[r:r + step]
            yield r * columns, block
    else:
        step = max(1, _BLOCK_BYTES // scan_bytes)
        for r in range(rows):
            for c in range(0, columns, step):
                yield r * columns + c, data[r, c:c + step]


def _shape_of(data_shape, scan_shape):
    """The 4D shape from the data's (checked integers) and scan_shape."""
    if scan_shape is not None:
        scan_shape = _args.integers(scan_shape, "scan_shape", 2, 1, _args.UINT32_MAX)
    if len(data_shape) == 4:
        if scan_shape is not None and scan_shape != data_shape[:2]:
            raise ValueError(f"scan_shape {scan_shape} contradicts the data's "
                             f"{data_shape[:2]}; omit it")
        return data_shape
    if len(data_shape) == 3:
        if scan_shape is None:
            raise ValueError("3D data (frames, rows, columns) need scan_shape=(rows, columns)")
        r, c = scan_shape
        if r * c != data_shape[0]:
            raise ValueError(f"scan_shape {r}x{c} holds {r * c} frames; the data have "
                             f"{data_shape[0]}")
        return (r, c) + data_shape[1:]
    raise ValueError(f"4D-STEM data are 4D (or 3D with scan_shape), not {len(data_shape)}D")


def _encode_chunk(block, dtype_name, shape4, first, chunk_scans, valid, threads):
    """A Dask task: one chunk's scans, converted exactly, encoded."""
    block = np.asarray(block).reshape(-1, shape4[2], shape4[3])
    block = _convert(block, np.dtype(dtype_name), first, shape4[1])
    return _qem.encode_scans(dtype_name, shape4, first, block, chunk_scans=chunk_scans,
                             valid=valid, threads=threads)


def _save_on_cluster(writer, data, shape4, stored, chunk_scans, valid, client, max_in_flight,
                     callback):
    """Chunks encoded on the workers, written here in order. The client
    holds one encoded chunk at a time; at most max_in_flight chunks are
    being computed or wait on the cluster."""
    import collections

    from dask import delayed

    scans = shape4[0] * shape4[1]
    firsts = _qem.save_chunks(stored.name, shape4, chunk_scans=chunk_scans, valid=valid)
    bounds = list(zip(firsts, firsts[1:] + [scans]))
    flat = data.reshape((scans,) + tuple(shape4[2:])) if data.ndim == 4 else data
    if max_in_flight is None:
        max_in_flight = 2 * max(1, sum(client.nthreads().values()))
    pending = collections.deque()
    done = 0
    try:
        for first, end in bounds:
            task = delayed(_encode_chunk)(flat[first:end], stored.name, tuple(shape4), first,
                                          chunk_scans, valid, 1)
            pending.append((client.compute(task), end - first))
            while len(pending) >= max_in_flight or (pending and first == bounds[-1][0]):
                future, n = pending.popleft()
                writer.append_encoded(future.result(), n)
                done += n
                if callback:
                    callback(done, scans)
    finally:
        for future, _ in pending:
            future.cancel()


def save(path, data, *, scan_shape=None, shape=None, dtype=None, chunk_scans=None, valid=None,
         dark=None, calibration=None, metadata=None, threads=None, progress=None, client=None,
         max_in_flight=None) -> Union[str, bytes]:
    """Saves 4D-STEM data losslessly as a .qem file, block by block, never
    holding the whole array.

    data: a numpy array or memmap, a Dask array, an h5py dataset (anything
        with shape, dtype and slicing), a HyperSpy signal (its axes' scales
        and units and its microscope metadata become schema-2 calibration),
        or an iterable of blocks of whole scans with ``shape=`` (4D) and
        ``dtype=``. 4D (scan rows, scan columns, detector rows, columns), or
        3D frames with ``scan_shape=``.
    dtype: what to store (uint8, uint16 or float32); by default the data's
        own, other integers as uint16 and other floats as float32, each
        value checked to fit exactly (a value that does not is an error
        naming it; nothing is ever clipped).
    valid: boolean detector mask (False = invalid pixel; integer data).
    dark: float32 mean-dark plane recorded with float data (never
        subtracted from the stored values).
    calibration: a calibration file (dict, JSON text or a path;
        doc/metadata.md), applied on top of what a HyperSpy signal gives.
    metadata: a dict kept as the header's free-form metadata.
    chunk_scans, threads: as ``qem save``; progress: True for a bar.

    client: a dask.distributed Client: the chunks of a Dask array are
        encoded on its workers (at most ``max_in_flight`` at a time, default
        twice the workers' threads) and written here in order; the file is
        byte for byte the one a local save writes.

    The file appears complete or not at all; an existing path raises
    FileExistsError (qem never overwrites). Ctrl-C stops and leaves nothing.
    """
    path = os.fspath(path)
    threads = _args.threads(threads)
    chunk_scans = _args.chunk_scans(chunk_scans)
    max_in_flight = _args.optional(max_in_flight, "max_in_flight", 1, _args.INT64_MAX,
                                   " (None: twice the workers' threads)")
    source_facts = {}
    calibration_doc = None
    source_format = None
    if hasattr(data, "axes_manager") and hasattr(data, "data"):  # HyperSpy
        from ._hyperspy import signal_calibration

        calibration_doc, source_facts = signal_calibration(data)
        data = data.data
        source_format = "hyperspy"
    user_calibration = _json_text(calibration, "calibration")
    if calibration_doc and user_calibration:
        user = json.loads(user_calibration)
        for section in ("quantities", "overrides"):
            if section in user:
                calibration_doc.setdefault(section, {}).update(user[section])
        calibration_text = json.dumps(calibration_doc)
    else:
        calibration_text = json.dumps(calibration_doc) if calibration_doc else user_calibration
    metadata_text = _json_text(metadata, "metadata")

    array_like = hasattr(data, "shape") and hasattr(data, "dtype") and \
        hasattr(data, "__getitem__")
    if array_like:
        data_shape = _args.shape_lengths(data.shape, "the data's shape")
        if shape is not None and tuple(shape) != data_shape:
            raise ValueError(f"shape {tuple(shape)} contradicts the data's {data_shape}")
        shape4 = _shape_of(data_shape, scan_shape)
        source_dtype = np.dtype(data.dtype)
        kind = type(data).__module__.split(".")[0]
        source_format = source_format or {"numpy": "numpy", "dask": "dask",
                                          "h5py": "h5py"}.get(kind, kind)
        blocks = _blocks_of_array(data, shape4)
    else:
        if shape is None or dtype is None:
            raise TypeError("an iterable of blocks needs shape= (4D) and dtype=")
        try:
            iterator = iter(data)
        except TypeError:
            raise TypeError("data must be an array (numpy, Dask, h5py), a HyperSpy signal or "
                            "an iterable of blocks") from None
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__") or \
                len(shape) not in (3, 4):
            raise ValueError("shape= is the data's 4D shape (or 3D with scan_shape=)")
        shape = _args.integers(shape, "shape", len(shape), 1, _args.UINT32_MAX)
        shape4 = _shape_of(shape, scan_shape)
        source_dtype = np.dtype(dtype)
        source_format = source_format or "iterable"
        blocks = ((None, b) for b in iterator)
    stored = _stored_dtype(source_dtype, dtype if array_like else None)
    source_facts.setdefault("family", "python")
    source_facts.update({"source_format": source_format, "sample_type": str(source_dtype),
                         "stored_as": str(stored)})
    if stored != source_dtype.newbyteorder("="):
        source_facts["conversion"] = ("exact: every value checked while reading to equal its "
                                      f"{stored} value; refused otherwise")
    pixels = shape4[2] * shape4[3]
    writer = _qem.Writer(
        path, stored.name, shape4, chunk_scans=chunk_scans, threads=threads,
        valid=None if valid is None else np.asarray(valid),
        dark=None if dark is None else np.asarray(dark, dtype=np.float32),
        calibration=calibration_text, metadata=metadata_text,
        source_metadata=json.dumps(source_facts), source_format=source_format,
        progress=None)
    pages = _PageReleaser(data) if array_like else None
    if client is not None and not (array_like and hasattr(data, "dask")):
        writer.abort()
        raise TypeError("client= encodes a Dask array on the cluster; this data is not one")
    try:
        with reporter(progress, "saving", "scans") as callback:
            if client is not None:
                _save_on_cluster(writer, data, shape4, stored, chunk_scans,
                                 None if valid is None else np.asarray(valid), client,
                                 max_in_flight, callback)
                writer.finish()
                return path
            done = 0
            total = shape4[0] * shape4[1]
            for first, block in blocks:
                raw = block
                block = _materialize(block)
                if block.size % pixels:
                    raise ValueError(f"a block of {block.size} values is not whole scans of "
                                     f"{shape4[2]}x{shape4[3]} pixels")
                block = block.reshape(-1, shape4[2], shape4[3])
                if first is None:
                    first = done
                    if block.dtype != source_dtype:
                        raise TypeError(f"a block of dtype {block.dtype}; dtype= says "
                                        f"{source_dtype}")
                writer.append(_convert(block, stored, first, shape4[1]))
                if pages is not None:
                    pages.release(raw)
                done += block.shape[0]
                if callback:
                    callback(done, total)
            writer.finish()
    finally:
        writer.abort()  # no-op after finish; otherwise nothing is published
    return path


def convert(src, dest, *, dataset=None, scan_shape=None, raw_shape=None, raw_dtype=None,
            raw_offset=0, raw_frame_header=0, chunk_scans=None, threads=None, calibration=None,
            metadata=None, progress=None) -> Union[str, bytes]:
    """Saves any detector file the library reads (.npy, an HDF5 dataset, a
    Dectris Arina/Eiger master, a Merlin .mib, an EMPAD .xml, Gatan DM3/DM4
    or K2 IS, TIA .ser/.emi, Velox or Berkeley EMD, NanoMegas .blo, MRC,
    TVIPS, StreamPix .seq, FRMS6, a LiberTEM raw_csr descriptor, raw binary
    described by raw_shape/raw_dtype/raw_offset/raw_frame_header, or a .qem
    file to re-save) as .qem, as ``qem save`` does: recognised by content,
    one window of frames in memory, uint32 stored as uint16 only when every
    admitted value fits, signed and float64 samples as uint16 or float32
    only when every value is exact there, flagged pixels invalid, members
    authenticated (doc/inputs.md)."""
    acquisition = _args.acquisition(scan_shape, raw_shape, raw_offset, raw_frame_header)
    chunk_scans = _args.chunk_scans(chunk_scans)
    threads = _args.threads(threads)
    with reporter(progress, "saving", "scans") as callback:
        _qem.save_file(os.fspath(src), os.fspath(dest), dataset=dataset, raw_dtype=raw_dtype,
                       chunk_scans=chunk_scans, threads=threads, **acquisition,
                       calibration=_json_text(calibration, "calibration"),
                       metadata=_json_text(metadata, "metadata"), progress=callback)
    return os.fspath(dest)


def inspect(src, *, dataset=None, scan_shape=None, raw_shape=None, raw_dtype=None, raw_offset=0,
            raw_frame_header=0, progress=None) -> Dict[str, Any]:
    """Describes any detector file as ``qem inspect --json`` does (every
    member authenticated): family, shape, sample type and what would be
    stored, flagged pixels, members and digests, facts, calibration, size
    bounds."""
    acquisition = _args.acquisition(scan_shape, raw_shape, raw_offset, raw_frame_header)
    with reporter(progress, "hashing", "bytes") as callback:
        return json.loads(_qem.inspect(os.fspath(src), dataset=dataset, raw_dtype=raw_dtype,
                                       **acquisition, progress=callback))
