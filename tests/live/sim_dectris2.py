#!/usr/bin/python3
"""A DECTRIS SIMPLON stream V2 detector, replayed: serves a real Arina
acquisition (or synthetic uint32 counts) frame by frame on a ZeroMQ PUSH
socket, one self-described CBOR message (start, image, end) per ZeroMQ
message, as the detector's stream V2 interface does, for `qem record
dectris2://` and tests/unit/test_live_dectris2.c.

Prints "PORT <n>" once bound, then serves one series and exits. The
sources (and their pixel masks) are sim_dectris.py's. Needs numpy, h5py,
pyzmq, cbor2, bitshuffle and lz4 (scripts/install-deps)."""
import argparse
import os
import struct
import sys
import time

import cbor2
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim_dectris  # noqa: E402  (the sources and the bitshuffle framing)

CORRUPTIONS = ("cbor", "order", "repeat", "shape", "size", "lz4", "nostart", "compression",
               "dtype", "series", "multipart", "channel")
TYPED_TAG = {"uint8": 64, "uint16": 69, "uint32": 70, "float32": 85}
SELF_DESCRIBED = b"\xd9\xd9\xf7"


def lz4_hdf5(raw, block):
    """LZ4 in the HDF5 LZ4 filter's framing: 8-byte big-endian total bytes,
    4-byte big-endian block bytes, then per block its 4-byte big-endian
    size and LZ4 data (or the block as it is when LZ4 does not shrink it)."""
    import lz4.block

    out = [struct.pack(">QI", len(raw), block)]
    for at in range(0, len(raw), block):
        piece = raw[at:at + block]
        packed = lz4.block.compress(piece, store_size=False)
        if len(packed) >= len(piece):
            packed = piece
        out.append(struct.pack(">I", len(packed)) + packed)
    return b"".join(out)


def typed(array, compression, chunk=None, lz4_block=65536):
    """An RFC 8746 multi-dimensional array (tag 40) of a typed array, its
    bytes raw or in DECTRIS's compressed byte string (tag 56500)."""
    array = np.ascontiguousarray(array, array.dtype.newbyteorder("<"))
    name = array.dtype.newbyteorder("=").name
    raw = array.tobytes()
    if compression == "none":
        content = raw
    elif compression == "lz4":
        content = cbor2.CBORTag(56500, ["lz4", 0, lz4_hdf5(raw, lz4_block)])
    else:
        blob = chunk if chunk is not None else sim_dectris.bitshuffle_lz4(array)
        content = cbor2.CBORTag(56500, ["bslz4", array.itemsize, blob])
    return cbor2.CBORTag(40, [list(array.shape), cbor2.CBORTag(TYPED_TAG[name], content)])


def message(obj):
    return SELF_DESCRIBED + cbor2.dumps(obj)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default=sim_dectris.FIXTURE,
                   help="Arina master file (default: the fixture)")
    p.add_argument("--synthetic", metavar="R,C,H,W", help="R x C scans of H x W uint32 counts")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--port-file", help="also write the port there once bound")
    p.add_argument("--detail", choices=("all", "basic", "minimal"), default="all",
                   help="all: masks and tables; basic: none of them; minimal: no shape, "
                   "type, count or channels either (the first image tells)")
    p.add_argument("--compression", choices=("none", "lz4", "bslz4"), default="bslz4")
    p.add_argument("--lz4-block", type=int, default=65536, help="HDF5 LZ4 block bytes")
    p.add_argument("--channels", type=int, default=1, help="threshold channels served")
    p.add_argument("--series", type=int, default=1)
    p.add_argument("--fps", type=float, default=0, help="frames per second (0: at once)")
    p.add_argument("--stop-after", type=int, metavar="K", help="cut the stream after K frames")
    p.add_argument("--corrupt", metavar="KIND@FRAME", help="one of " + ", ".join(CORRUPTIONS))
    p.add_argument("--expect-npy", metavar="PATH", help="write the frames served as a .npy")
    p.add_argument("--expect-valid", metavar="PATH",
                   help="write the detector pixels the pixel mask admits as a bool .npy")
    p.add_argument("--linger-ms", type=int, default=10000)
    a = p.parse_args()

    corrupt, corrupt_at = None, -1
    if a.corrupt:
        corrupt, at = a.corrupt.split("@")
        corrupt_at = int(at)
        if corrupt not in CORRUPTIONS:
            p.error("unknown corruption " + corrupt)
    if a.synthetic:
        frames, config, mask, flat = sim_dectris.synthetic_source(a.synthetic, a.seed)
    else:
        frames, config, mask, flat = sim_dectris.arina_source(a.master)
    if a.expect_valid:
        np.save(a.expect_valid, np.asarray(mask) == 0)
    total = config["nimages"] * config.get("ntrigger", 1)
    height, width = config["y_pixels_in_detector"], config["x_pixels_in_detector"]
    channels = ["threshold_%d" % (k + 1) for k in range(a.channels)]
    dtype = "uint%d" % config["bit_depth_image"]
    unique = "sim-%d-%d" % (a.series, os.getpid())

    ctx, sock = sim_dectris.push_socket(a)

    start = {"type": "start", "series_id": a.series, "series_unique_id": unique,
             "arm_date": cbor2.CBORTag(0, "2026-01-01T00:00:00Z"),
             "count_time": config.get("count_time", 1e-4),
             "frame_time": config.get("frame_time", config.get("count_time", 1e-4)),
             "detector_description": str(config.get("description", "simulated")),
             "detector_serial_number": str(config.get("detector_serial_number", "SIM")),
             "incident_energy": float(config.get("photon_energy", 300e3)),
             "threshold_energy": {c: 1000.0 * (k + 1) for k, c in enumerate(channels)},
             "goniometer": {"omega": {"increment": 0.0, "start": 0.0}},
             "pixel_mask_enabled": a.detail == "all", "saturation_value": 2 ** 31}
    if a.detail != "minimal":
        start.update({"image_size_x": width, "image_size_y": height, "image_dtype": dtype,
                      "number_of_images": total, "channels": channels})
    if a.detail == "all":
        start["pixel_mask"] = {c: typed(np.asarray(mask, "<u4"), "none") for c in channels}
        start["flatfield"] = {c: typed(np.asarray(flat, "<f4"), "none") for c in channels}
        start["countrate_correction_lookup_table"] = cbor2.CBORTag(
            70, np.arange(16, dtype="<u4").tobytes())
    if corrupt != "nostart":
        sock.send(message(start))

    served = None
    number = 0
    t0 = time.monotonic()
    for frame, chunk in frames():
        if a.stop_after is not None and number >= a.stop_after:
            break
        data = {}
        for k, c in enumerate(channels):
            # Only the first channel is the detector's frame; the others
            # differ, so that a receiver taking the wrong one is seen.
            img = frame if k == 0 else (frame + k).astype(frame.dtype)
            use_chunk = chunk if k == 0 and a.compression == "bslz4" else None
            data[c] = typed(img, a.compression, use_chunk, a.lz4_block)
        image = {"type": "image", "series_id": a.series, "series_unique_id": unique,
                 "image_id": number, "real_time": [99, 1000000],
                 "series_date": cbor2.CBORTag(0, "2026-01-01T00:00:00Z"),
                 "start_time": [number * 100, 1000000],
                 "stop_time": [number * 100 + 99, 1000000], "data": data}
        parts = None
        if number == corrupt_at:
            first = data[channels[0]]
            dims, array = first.value
            if corrupt == "order":
                image["image_id"] = number + 1
            elif corrupt == "repeat":
                image["image_id"] = number - 1
            elif corrupt == "shape":
                first.value = [[dims[0], dims[1] + 1], array]
            elif corrupt == "size":  # raw data one byte short
                array.value = array.value[:-1]
            elif corrupt == "lz4":  # the first LZ4 block's bytes, its length kept
                z = array.value.value
                blob = z[2]
                n = struct.unpack(">I", blob[12:16])[0]
                z[2] = blob[:16] + b"\xff" * n + blob[16 + n:]
            elif corrupt == "compression":
                array.value.value[0] = "zstd"
            elif corrupt == "dtype":  # uint64 little-endian
                array.tag = 71
            elif corrupt == "series":
                image["series_id"] = a.series + 1
            elif corrupt == "channel":
                data.pop(channels[0])
                data["other"] = first
            elif corrupt == "multipart":
                parts = [message(image), b"extra"]
        if a.fps > 0:
            time.sleep(max(0.0, t0 + number / a.fps - time.monotonic()))
        body = message(image)
        if number == corrupt_at and corrupt == "cbor":
            body = body[:len(body) // 2]
        if parts:
            sock.send_multipart(parts)
        else:
            sock.send(body)
        if a.expect_npy:
            if served is None:
                count = min(total, a.stop_after) if a.stop_after is not None else total
                served = np.lib.format.open_memmap(
                    a.expect_npy, "w+", frame.dtype.newbyteorder("="), (count,) + frame.shape)
            served[number] = frame
        number += 1
    if served is not None:
        served.flush()
        del served
    if a.stop_after is None:
        # A receiver that has every frame may leave before taking the end:
        # never block on it (PUSH waits for a peer otherwise).
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        try:
            sock.send(message({"type": "end", "series_id": a.series,
                               "series_unique_id": unique}))
        except zmq.Again:
            pass
    sock.close()  # waits up to --linger-ms for the receiver to take what is queued
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
