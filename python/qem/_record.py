"""qem.record: a detector's live stream into a .qem while the scan runs."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Union

from . import _args, _qem


def _seconds_ms(value, name):
    if value is None:
        return 0
    seconds = float(value)
    if not seconds > 0 or seconds > 86400:
        raise ValueError(f"{name} must be a number of seconds in (0, 86400], not {value!r}")
    return max(1, int(round(seconds * 1000)))


def _text(value, what):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, (os.PathLike, bytes)):
        with open(value, encoding="utf-8") as f:
            return f.read()
    raise TypeError(f"{what} must be a dict, JSON text or None")


def record(url: str, path: Union[str, os.PathLike], scan_shape=None, progress=None, *,
           chunk_scans=None, threads=None, queue_bytes=None, spill_dir=None,
           connect_timeout=None, idle_timeout=None, calibration=None,
           metadata=None) -> Dict[str, Any]:
    """Records a detector's live stream into ``path`` (.qem) as it arrives,
    as ``qem record`` does, and returns when the acquisition ended and the
    file is published.

    url: ``"merlin://HOST[:PORT]"`` (a Quantum Detectors Merlin data port,
        default 6342), ``"dectris://HOST[:PORT]"`` (a DECTRIS SIMPLON
        stream interface, V1 over ZeroMQ, default 9999) or
        ``"dectris2://HOST[:PORT]"`` (its stream V2, CBOR, default 31001).
    scan_shape: (rows, columns); None takes what the stream's header states
        (a Merlin's frames per trigger); required for a DECTRIS stream.
    progress: a callable given a dict (expected, received, encoded, queued,
        spilled, seconds) about ten times a second. Raising in it, or
        Ctrl-C, stops the recording: the frames received are published
        (marked incomplete) and the exception is raised again.
    queue_bytes: frames wait in memory up to this many bytes (default 256
        MiB), then in a spill file in ``spill_dir`` (default: the output's
        folder); none is ever dropped.
    connect_timeout: seconds to wait for the stream's header (default 10);
    idle_timeout: seconds without a frame after which the stream counts as
        ended (default: wait for the end of the acquisition).

    The body is the one ``qem.convert`` writes from the same frames in a
    file. Returns a dict: path, published, complete (False when the stream
    ended early: the frames received are stored exact, the last scan row
    completed with zeros, and source_metadata.live_acquisition says how
    many arrived), expected, received, spilled, shape, seconds,
    publish_seconds (from the last frame to publication). A message that
    breaks the protocol raises qem.FormatError naming the frame, after the
    frames before it are published the same way."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str such as 'merlin://HOST', not "
                        f"{type(url).__name__}")
    shape = None if scan_shape is None else _args.integers(scan_shape, "scan_shape", 2, 1,
                                                           _args.UINT32_MAX)
    if progress is not None and not callable(progress):
        raise TypeError("progress must be None or a callable(dict)")
    kwargs = dict(
        chunk_scans=_args.chunk_scans(chunk_scans), threads=_args.threads(threads),
        queue_bytes=0 if queue_bytes is None else _args.integer(queue_bytes, "queue_bytes", 1,
                                                                _args.INT64_MAX),
        spill_dir=None if spill_dir is None else os.fspath(spill_dir),
        connect_timeout_ms=_seconds_ms(connect_timeout, "connect_timeout"),
        idle_ms=_seconds_ms(idle_timeout, "idle_timeout"),
        calibration=_text(calibration, "calibration"), metadata=_text(metadata, "metadata"),
        progress=progress)
    if shape is not None:
        kwargs["scan_shape"] = shape
    return _qem.record(url, os.fspath(path), **kwargs)
