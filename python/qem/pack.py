"""Lossless Pack Format v1 from Python: qem.pack.inspect and
qem.pack.produce mirror ``qem pack inspect`` and ``qem pack produce``."""
from __future__ import annotations

import json
import os
from typing import Any, Dict

from . import _args, _qem
from ._progress import reporter


def inspect(src, *, dataset=None, scan_shape=None, raw_shape=None, raw_dtype=None,
            raw_offset=0, raw_frame_header=0, progress=None) -> Dict[str, Any]:
    """Authenticates every member of a source and describes it as the pack
    producer sees it (shape, dtype, logical bytes, bad pixels and their
    digest, mask identity, source identity). Refuses what cannot be packed
    (float32 data) saying why."""
    acquisition = _args.acquisition(scan_shape, raw_shape, raw_offset, raw_frame_header)
    with reporter(progress, "hashing", "bytes") as callback:
        return json.loads(_qem.pack_inspect(os.fspath(src), dataset=dataset, raw_dtype=raw_dtype,
                                            **acquisition, progress=callback))


def produce(src, dest, *, profile="u16-lz4", exclude=None, dataset=None, scan_shape=None,
            raw_shape=None, raw_dtype=None, raw_offset=0, raw_frame_header=0,
            progress=None) -> Dict[str, Any]:
    """Produces a Lossless Pack Format v1 file from any detector file that
    holds counts: inspect, plan, re-authenticate, one shard at a time, then
    DEST.receipt.json and DEST published as one commit (never overwriting;
    a failure publishes nothing).

    profile: "u16-lz4" (exact uint16, LZ4 blocks; excluded pixels retained
        exactly) or "u8-bitpacked" (exact uint8: every admitted count <= 255,
        each excluded pixel one constant raw value).
    exclude: pixels to exclude besides those the detector flags: a
        boolean detector mask, or the path of a .npy mask (as ``qem pack
        produce --exclude``).
    Returns the receipt (a dict)."""
    dest = os.fspath(dest)
    acquisition = _args.acquisition(scan_shape, raw_shape, raw_offset, raw_frame_header)
    with reporter(progress, "packing", "shards") as callback:
        _qem.pack_produce(os.fspath(src), dest, dataset=dataset, raw_dtype=raw_dtype,
                          **acquisition, profile=profile,
                          exclude=None if exclude is None else _args.mask(exclude),
                          progress=callback)
    with open(dest + ".receipt.json") as f:
        return json.load(f)
