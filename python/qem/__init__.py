"""qem: lossless, compact 4D-STEM data from Python.

Open any ``.qem`` file or Lossless Pack Format v1 pack and index it like a
numpy array without expanding it; compute products on the encoded data;
save from numpy, Dask, h5py or HyperSpy, exactly and in bounded memory.

    import qem
    with qem.open("scan.qem") as f:
        pattern = f[10, 20]                  # one diffraction pattern
        bf = f.virtual(detector="bf")        # exact virtual bright field
        block = f.read(scan_region=(0, 8, 0, 8))
    qem.save("copy.qem", array)              # numpy, memmap, Dask, h5py, HyperSpy
    qem.convert("scan.mib", "scan.qem")      # any detector file the library reads
    qem.record("merlin://detector", "live.qem")  # a detector's live stream

Every call that decodes, encodes or computes releases the GIL; Ctrl-C stops
a long call at its next unit and leaves nothing behind. Errors are
:class:`qem.Error` subclasses carrying the library's message.
"""
from __future__ import annotations

import os as _os

from . import _qem
from ._errors import (CancelledError, ChangedError, ChecksumError, Error, ExistsError,
                      FileSystemError, FormatError, LimitError, UnsupportedError, UsageError)
from ._file import DPCResult, File, Session
from ._save import convert, inspect, save
from ._record import record
from . import pack

__version__ = _qem.version()
LIBRARY_VERSION = _qem.LIBRARY_VERSION


def open(path, *, threads=None, verify=True, raw=False, expect_sha256=None,
         progress=None, resident=False, cache_dir=None) -> File:
    """Opens a ``.qem`` file or a pack (recognised by content) as a
    :class:`qem.File`; use it as a context manager.

    threads: decode threads per call, 0 to 1024 (None or 0: every core).
    verify: .qem files: check every 64 MiB body block's SHA-256 while
        opening (True), or the first time a read touches it (False; every
        block is still checked before its bytes are decoded). A pack
        always authenticates every shard while it loads.
    raw: packs: read the raw reconstruction (excluded pixels' retained or
        constant values) instead of the mask-applied working array;
        UnsupportedError where the file does not keep them. Scaled .qem
        files: the stored uint16 codes instead of restored float32 values.
    expect_sha256: the whole file's SHA-256 it must have (64 hex digits).
    progress: True for a bar, or a callable(done, total): while a .qem file
        is hashed on opening (bytes; expect_sha256, then the body blocks) or
        a pack loads (shards). Ctrl-C, or an exception it raises, stops it.
    resident: .qem files: hold the encoded body in memory (checked once
        while opening, whatever verify says): reads and products then
        decode from memory, with no copy out of the file per call. True (or
        "copy") reads it into memory of its own (the body's size,
        ``file_bytes``); "mapped" maps the file read-only instead (no copy:
        the page cache's pages, so opening costs only the hashing), and the
        file must then not be rewritten in place while open (a change is
        refused with qem.ChangedError on the next read). Packs are always
        held whole.
    cache_dir: a folder where the mean pattern's exact pixel sums and the
        default detector's image of a file that does not record them are
        kept between opens, keyed by the file's content (a changed file is
        another key), so the second open's mean, calibration estimate and
        default BF image are immediate. None keeps nothing. Files qem
        writes record them; see ``f.sums_origin`` and ``f.last_origin``.
    """
    return File(path, threads=threads, verify=verify, raw=raw, expect_sha256=expect_sha256,
                progress=progress, resident=resident, cache_dir=cache_dir)


def session(files, keep_mib=0) -> Session:
    """A detector session over several opened files (a tilt or time
    series): ``set_mask`` updates every file's image, all or none;
    ``keep_mib`` keeps recent masks' images (see qem.Session)."""
    return Session(files, keep_mib=keep_mib)


def identify(path) -> str:
    """What a file is by its signature: 'qem', 'pack', 'npy', 'hdf5' or
    'unknown'."""
    return _qem.identify(_os.fspath(path))


def __getattr__(name):
    # qem.dask imports Dask: only when asked for.
    if name == "dask":
        import importlib

        return importlib.import_module(".dask", __name__)
    raise AttributeError(f"module 'qem' has no attribute {name!r}")


__all__ = ["open", "save", "convert", "inspect", "record", "session", "identify", "pack", "File",
           "Session", "DPCResult", "Error", "UsageError", "FileSystemError", "ExistsError",
           "ChangedError", "FormatError", "ChecksumError", "UnsupportedError", "LimitError",
           "CancelledError", "__version__"]
