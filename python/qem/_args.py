"""The one check of the package's integer arguments. Each is taken as a
Python or numpy integer inside its stated range, or refused by name with
that range: nothing is wrapped around, truncated or read as a bool on its
way into the library. The ranges are the CLI's where it has one."""
import math
import operator
import os

import numpy as np

from . import _qem

MAX_THREADS = _qem.MAX_THREADS  # libqem's QEM_MAX_THREADS
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
CHUNK_SCANS_MAX = 1 << 24      # qem save --chunk-scans
RAW_OFFSET_MAX = 1 << 62       # --raw-offset
RAW_FRAME_HEADER_MAX = 1 << 30  # --raw-frame-header


def integer(value, name, low, high, note=""):
    """`value` as an int in [low, high]; TypeError for a bool or anything
    that is not an integer (a float is never truncated), ValueError naming
    `name` and the range otherwise. `note` follows the range."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}{note}, not {number}")
    return number


def optional(value, name, low, high, note=""):
    """None (the default) or integer(...)."""
    return None if value is None else integer(value, name, low, high, note)


def integers(values, name, count, low, high):
    """`count` integers, each in [low, high], as a tuple."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be {count} integers, not {type(values).__name__}")
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be {count} integers, not {type(values).__name__}") \
            from None
    if len(items) != count:
        raise ValueError(f"{name} must be {count} integers, not {len(items)}")
    return tuple(integer(v, f"{name}[{k}]", low, high) for k, v in enumerate(items))


def threads(value):
    """The library's thread count: None or 0 is every core."""
    number = optional(value, "threads", 0, MAX_THREADS, " (0 or None: every core)")
    return 0 if number is None else number


def chunk_scans(value):
    """Scans per chunk, as ``qem save --chunk-scans``; 0 to the library
    means its default (None here)."""
    number = optional(value, "chunk_scans", 1, CHUNK_SCANS_MAX, " (None: 512)")
    return 0 if number is None else number


def shape_lengths(shape, name):
    """An array's shape as ints; a length that is unknown (NaN, as a Dask
    array's after boolean indexing) is refused saying so."""
    lengths = tuple(shape)
    if any(isinstance(n, float) and math.isnan(n) for n in lengths):
        raise ValueError(f"{name} {lengths} has lengths that are unknown (NaN): a Dask array "
                         "whose chunk sizes are unknown; call data.compute_chunk_sizes() "
                         "first (it computes them) and save the result")
    return tuple(integer(n, name, 0, INT64_MAX) for n in lengths)


def acquisition(scan_shape, raw_shape, raw_offset, raw_frame_header):
    """The acquisition keywords every reader of detector files takes."""
    return dict(
        scan_shape=None if scan_shape is None else integers(scan_shape, "scan_shape", 2, 1,
                                                            UINT32_MAX),
        raw_shape=None if raw_shape is None else integers(raw_shape, "raw_shape", 4, 1,
                                                          UINT32_MAX),
        raw_offset=integer(raw_offset, "raw_offset", 0, RAW_OFFSET_MAX),
        raw_frame_header=integer(raw_frame_header, "raw_frame_header", 0,
                                 RAW_FRAME_HEADER_MAX))


def mask(value):
    """A mask argument that may also be the path of a .npy mask (str,
    bytes, os.PathLike, numpy.str_): a path as str or bytes, for the
    library to read as the CLI reads one; anything else as an array."""
    if isinstance(value, (str, bytes, os.PathLike)):
        path = os.fspath(value)
        return bytes(path) if isinstance(path, bytes) else str(path)
    return np.asarray(value)


def resident(value):
    """qem_open_options.resident for the `resident` argument: False (read
    per use), True or "copy" (the body copied into memory) or "mapped"
    (the file mapped read-only)."""
    if value is False or value is None:
        return 0
    if value is True or value == "copy":
        return 1
    if value == "mapped":
        return 2
    raise ValueError(f"resident must be False, True, 'copy' or 'mapped', not {value!r}")
