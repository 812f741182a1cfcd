#!/usr/bin/python3
"""A DECTRIS SIMPLON stream V1 detector, replayed: serves a real Arina
acquisition (or synthetic uint32 counts) frame by frame on a ZeroMQ PUSH
socket, as the detector's stream interface does, for `qem record
dectris://` and tests/unit/test_live_dectris.c.

Prints "PORT <n>" once bound, then serves one series and exits.
Needs numpy, h5py, pyzmq, bitshuffle and lz4 (scripts/install-deps)."""
import argparse
import hashlib
import json
import os
import struct
import sys
import time

import numpy as np
import zmq

FIXTURE = "/work/shared/fixtures/detectors/arina/test_00_master.h5"
DETECTOR = "/entry/instrument/detector"
SPECIFIC = DETECTOR + "/detectorSpecific"
CORRUPTIONS = ("size", "json", "order", "repeat", "shape", "lz4", "nohead")


def bitshuffle_lz4(frame):
    """bitshuffle + LZ4 in the HDF5 filter's framing: 8-byte big-endian
    total bytes, 4-byte big-endian block bytes, then the blocks."""
    import bitshuffle

    block = 8192 // frame.itemsize  # the filter's default block
    body = bitshuffle.compress_lz4(np.ascontiguousarray(frame), block).tobytes()
    return struct.pack(">QI", frame.nbytes, block * frame.itemsize) + body


def arina_source(path):
    """Frames, config, pixel mask, flatfield of an Arina master file; the
    frames' own bitshuffle chunks where the file stores one per frame."""
    import h5py

    master = h5py.File(path, "r")
    spec = master[SPECIFIC]
    det = master[DETECTOR]

    def value(node, key):
        v = node[key][()]
        return v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v

    config = {
        "x_pixels_in_detector": value(spec, "x_pixels_in_detector"),
        "y_pixels_in_detector": value(spec, "y_pixels_in_detector"),
        "nimages": value(spec, "nimages"),
        "ntrigger": value(spec, "ntrigger"),
        "bit_depth_image": value(det, "bit_depth_image"),
        "count_time": value(det, "count_time"),
        "frame_time": value(det, "frame_time"),
        "detector_serial_number": value(det, "detector_number"),
        "description": value(det, "description"),
        "software_version": value(spec, "software_version"),
        "photon_energy": value(spec, "photon_energy"),
    }
    datasets = [master["/entry/data"][k] for k in sorted(master["/entry/data"].keys())]

    def frames():
        for d in datasets:
            whole_chunks = d.chunks is not None and d.chunks[0] == 1 and \
                tuple(d.chunks[1:]) == tuple(d.shape[1:])
            for n in range(d.shape[0]):
                chunk = None
                if whole_chunks:
                    mask, chunk = d.id.read_direct_chunk((n, 0, 0))
                    chunk = chunk if mask == 0 else None
                yield d[n], chunk

    mask = spec["pixel_mask"][()].astype("<u4")
    flat = spec["flatfield"][()].astype("<f4")
    return frames, config, mask, flat


def synthetic_source(spec, seed, pool=256):
    """Poisson counts: `pool` distinct frames cycled (so that a long
    benchmark stream is encoded once per distinct frame, not per frame)."""
    rows, cols, height, width = (int(v) for v in spec.split(","))
    rng = np.random.default_rng(seed)
    count = rows * cols
    distinct = [rng.poisson(2.0, (height, width)).astype("<u4") for _ in range(min(pool, count))]

    def frames():
        for k in range(count):
            yield distinct[k % len(distinct)], None

    config = {"x_pixels_in_detector": width, "y_pixels_in_detector": height,
              "nimages": count, "ntrigger": 1, "bit_depth_image": 32,
              "count_time": 1e-4, "detector_serial_number": "SIM-0001"}
    mask = np.zeros((height, width), "<u4")
    mask[0, 0] = 1  # one flagged pixel, so the mask's path is exercised
    mask[height - 1, width // 2] = 4
    return frames, config, mask, np.ones((height, width), "<f4")


def encode(frame, chunk, encoding):
    if encoding == "raw":
        return "<", np.ascontiguousarray(frame, frame.dtype.newbyteorder("<")).tobytes()
    if encoding == "lz4":
        import lz4.block

        raw = np.ascontiguousarray(frame, frame.dtype.newbyteorder("<")).tobytes()
        return "lz4<", lz4.block.compress(raw, store_size=False)
    bits = frame.dtype.itemsize * 8
    return "bs%d-lz4<" % bits, chunk if chunk is not None else bitshuffle_lz4(frame)


def push_socket(a):
    """The detector's PUSH socket, bound to a.host:a.port (0: any free
    port); the port printed ("PORT N") and written to a.port_file."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, a.linger_ms)
    sock.setsockopt(zmq.SNDHWM, 16)
    if a.port:
        sock.bind("tcp://%s:%d" % (a.host, a.port))
        port = a.port
    else:
        port = sock.bind_to_random_port("tcp://" + a.host)
    print("PORT %d" % port, flush=True)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(a.port_file + ".tmp", a.port_file)
    return ctx, sock


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default=FIXTURE, help="Arina master file (default: the fixture)")
    p.add_argument("--synthetic", metavar="R,C,H,W", help="R x C scans of H x W uint32 counts")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--port-file", help="also write the port there once bound")
    p.add_argument("--detail", choices=("all", "basic", "none"), default="all")
    p.add_argument("--encoding", choices=("raw", "lz4", "bs32-lz4"), default="bs32-lz4")
    p.add_argument("--series", type=int, default=1)
    p.add_argument("--fps", type=float, default=0, help="frames per second (0: at once)")
    p.add_argument("--stop-after", type=int, metavar="K", help="cut the stream after K frames")
    p.add_argument("--corrupt", metavar="KIND@FRAME", help="one of " + ", ".join(CORRUPTIONS))
    p.add_argument("--repeat", type=int, default=1, help="serve the frames N times over")
    p.add_argument("--expect-npy", metavar="PATH", help="write the frames served as a .npy")
    p.add_argument("--linger-ms", type=int, default=10000)
    p.add_argument("--report", help="write the send rate as JSON here at the end")
    p.add_argument("--expect-valid", metavar="PATH",
                   help="write the detector pixels the pixel mask admits as a bool .npy")
    a = p.parse_args()

    corrupt, corrupt_at = None, -1
    if a.corrupt:
        corrupt, at = a.corrupt.split("@")
        corrupt_at = int(at)
        if corrupt not in CORRUPTIONS:
            p.error("unknown corruption " + corrupt)
    if a.synthetic:
        frames, config, mask, flat = synthetic_source(a.synthetic, a.seed)
    else:
        frames, config, mask, flat = arina_source(a.master)
    if a.expect_valid:
        np.save(a.expect_valid, np.asarray(mask) == 0)
    config = dict(config)
    frames_per_pass = config["nimages"] * config.get("ntrigger", 1)
    config["nimages"] = config["nimages"] * a.repeat

    ctx, sock = push_socket(a)

    def js(obj):
        return json.dumps(obj).encode()

    if corrupt != "nohead":
        head = [js({"htype": "dheader-1.0", "series": a.series, "header_detail": a.detail})]
        if a.detail in ("all", "basic"):
            head.append(js(config))
        if a.detail == "all":
            head += [js({"htype": "dflatfield-1.0", "shape": [flat.shape[1], flat.shape[0]],
                         "type": "float32"}), flat.tobytes()]
            head += [js({"htype": "dpixelmask-1.0", "shape": [mask.shape[1], mask.shape[0]],
                         "type": "uint32"}), mask.tobytes()]
            table = np.zeros((2, 4), "<f4")
            head += [js({"htype": "dcountrate_table-1.0", "shape": [4, 2],
                         "type": "float32"}), table.tobytes()]
        sock.send_multipart(head)

    served = None  # a .npy written frame by frame (--expect-npy)
    total = (a.stop_after if a.stop_after is not None else 1 << 62)
    encoded = {}  # id(frame) -> (encoding, blob): each distinct frame encoded once
    number = 0
    start = time.monotonic()
    for _ in range(a.repeat):
        for frame, chunk in frames():
            if a.stop_after is not None and number >= a.stop_after:
                break
            if id(frame) not in encoded:
                encoded[id(frame)] = encode(frame, chunk, a.encoding)
            name, blob = encoded[id(frame)]
            if chunk is not None:
                del encoded[id(frame)]  # a file's frames: never seen again
            stated = number
            shape = [frame.shape[1], frame.shape[0]]
            size = len(blob)
            first = None
            if number == corrupt_at:
                if corrupt == "size":
                    blob = blob[:-1]
                elif corrupt == "json":
                    first = b'{"htype": "dimage-1.0", "frame": ' + str(number).encode()
                elif corrupt == "order":
                    stated = number + 1
                elif corrupt == "repeat":
                    stated = number - 1
                elif corrupt == "shape":
                    shape = [shape[0] + 1, shape[1]]
                elif corrupt == "lz4":  # the first LZ4 block's bytes, its length kept
                    at = 16 if name.startswith("bs") else 0
                    n = struct.unpack(">I", blob[12:16])[0] if at else len(blob)
                    blob = blob[:at] + b"\xff" * n + blob[at + n:]
            if first is None:
                first = js({"htype": "dimage-1.0", "series": a.series, "frame": stated,
                            "hash": hashlib.md5(blob).hexdigest()})
            desc = js({"htype": "dimage_d-1.0", "shape": shape,
                       "type": str(frame.dtype.newbyteorder("=").name), "encoding": name,
                       "size": size})
            tail = js({"htype": "dconfig-1.0", "start_time": number * 100,
                       "stop_time": number * 100 + 99, "real_time": 99})
            if a.fps > 0:
                time.sleep(max(0.0, start + number / a.fps - time.monotonic()))
            sock.send_multipart([first, desc, blob, tail])
            if a.expect_npy:
                if served is None:
                    frames_total = min(total, frames_per_pass * a.repeat)
                    served = np.lib.format.open_memmap(
                        a.expect_npy, "w+", frame.dtype.newbyteorder("="),
                        (frames_total,) + frame.shape)
                served[number] = frame
            number += 1
    t_last = time.monotonic()
    if served is not None:
        served.flush()
        del served
    if a.report:
        with open(a.report, "w") as f:
            json.dump({"frames": number, "seconds": t_last - start}, f)
    if a.stop_after is None:
        # A receiver that has every frame may leave before taking the end:
        # never block on it (PUSH waits for a peer otherwise).
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        try:
            sock.send_multipart([js({"htype": "dseries_end-1.0", "series": a.series})])
        except zmq.Again:
            pass
    sock.close()  # waits up to --linger-ms for the receiver to take what is queued
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
