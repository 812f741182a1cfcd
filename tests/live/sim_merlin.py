#!/usr/bin/python3
"""Replays a Merlin acquisition over TCP as a Merlin data port does.

Every message is b"MPX," + ten decimal digits (the payload's length plus
one) + b"," + the payload: first the acquisition header (the .hdr text),
then one .mib frame record (its MQ1 header and samples) per frame.

    sim_merlin.py FILE.mib [--port N] [--port-file F] [--fps R]
                  [--stop-after K] [--corrupt KIND@FRAME] [--repeat N]
    sim_merlin.py --synthetic R,C,H,W [--seed S] [--save F.mib] ...

It listens on 127.0.0.1 (port 0: any free port), writes the port to
--port-file (or stdout), serves one connection and exits. --synthetic
makes a 12-bit (U16) acquisition of R x C frames of H x W Poisson counts;
--save also writes it as a .mib + .hdr for `qem save`.
"""
import argparse
import socket
import sys
import time

import numpy as np

HEADER_BYTES_SINGLE = 384


def mpx(payload):
    return b"MPX,%010d," % (len(payload) + 1) + payload


def read_mib(path):
    """The .hdr text and the frame records of a .mib (uniform records)."""
    data = open(path, "rb").read()
    fields = data[:64].split(b",")
    header = int(fields[2])
    width, height = int(fields[4]), int(fields[5])
    item = {b"U08": 1, b"U16": 2, b"U32": 4}.get(fields[6].strip())
    # RAW mode (R64) packs counter bits: served as one record per file.
    record = header + width * height * item if item else len(data)
    frames = [data[k:k + record] for k in range(0, len(data), record)]
    hdr_path = path[:-4] + ".hdr"
    hdr = open(hdr_path, "rb").read()
    return hdr, frames, header


def renumber(record, number, header):
    fields = record[:header].split(b",")
    fields[1] = b"%06d" % number
    head = b",".join(fields)[:header]
    return head + record[header:]


def hdr_text(frames, fpt, depth):
    lines = [
        "HDR,\t",
        "Time and Date Stamp (day, mnth, yr, hr, min, s):\t02/12/2026 10:00:00",
        "Chip ID:\tW000_X00, - , - , - ",
        "Assembly Size (NX1, 2X2):\t   1x1",
        "Counter Depth (number):\t%d" % depth,
        "Frames in Acquisition (Number):\t%d" % frames,
        "Frames per Trigger (Number):\t%d" % fpt,
        "End\t",
    ]
    return ("\n".join(lines)).encode().ljust(2048, b" ")


def synthetic_header(number, width, height):
    head = ("MQ1,%06d,%05d,01,%04d,%04d,U16,   1x1,01,2026-12-02 10:00:00.000000,"
            "0.001000,0,0,0,MQ1A,2026-12-02T10:00:00.000000000Z,1000000ns,12,"
            % (number, HEADER_BYTES_SINGLE, width, height)).encode()
    return head.ljust(HEADER_BYTES_SINGLE, b"\0")


def synthetic(shape, seed, pool=256):
    """12-bit counts, a bright disc on a dim background: `pool` distinct
    frames (all of them for a short scan) cycled, each frame record
    returned as (header, samples) so that nothing large is copied."""
    rows, cols, height, width = shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    disc = ((yy - height / 2) ** 2 + (xx - width / 2) ** 2) < (height / 6) ** 2
    lam = np.where(disc, 40.0, 0.5)
    count = rows * cols
    blocks = [np.minimum(rng.poisson(lam), 4095).astype(">u2").tobytes()
              for _ in range(min(pool, count))]

    class Frames:
        def __len__(self):
            return count

        def __getitem__(self, k):
            if k >= count:
                raise IndexError(k)
            return synthetic_header(k + 1, width, height) + blocks[k % len(blocks)]

    return hdr_text(count, cols, 12), Frames(), HEADER_BYTES_SINGLE


def corrupt(kind, record, header, number):
    if kind == "size":  # a frame shorter than its header says
        return record[:-2]
    if kind == "header":  # not an MQ1 header
        return b"XQ1" + record[3:]
    if kind == "repeat":  # the previous frame's number again
        return renumber(record, number - 1, header)
    if kind == "skip":  # a frame number missing
        return renumber(record, number + 1, header)
    if kind == "shape":  # a different width
        fields = record[:header].split(b",")
        fields[4] = b"%04d" % (int(fields[4]) // 2)
        return b",".join(fields)[:header] + record[header:]
    raise SystemExit("unknown corruption " + kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mib", nargs="?")
    ap.add_argument("--synthetic")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--fps", type=float, default=0)
    ap.add_argument("--stop-after", type=int)
    ap.add_argument("--corrupt")
    ap.add_argument("--prefix-corrupt", action="store_true",
                    help="the first frame's message prefix is not MPX")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--report", help="write the send times as JSON here at the end")
    ap.add_argument("--hot", type=int, metavar="FRAME",
                    help="U32 frames: pixel (0, 1) of frame FRAME (from 1) holds 70000")
    ap.add_argument("--hold", type=float, default=0,
                    help="seconds to keep the connection open after the last frame")
    a = ap.parse_args()

    if a.synthetic:
        shape = tuple(int(v) for v in a.synthetic.split(","))
        hdr, frames, header = synthetic(shape, a.seed)
    else:
        hdr, frames, header = read_mib(a.mib)
    if a.repeat > 1:
        frames = [renumber(frames[k % len(frames)], k + 1, header)
                  for k in range(len(frames) * a.repeat)]
        if not a.synthetic:
            hdr = hdr.replace(b"Frames in Acquisition (Number):\t%d" % (len(frames) // a.repeat),
                              b"Frames in Acquisition (Number):\t%d" % len(frames))
    if a.save:
        with open(a.save, "wb") as f:
            for r in frames:
                f.write(r)
        open(a.save[:-4] + ".hdr", "wb").write(hdr)
        return
    bad_kind, bad_frame = None, None
    if a.corrupt:
        bad_kind, at = a.corrupt.split("@")
        bad_frame = int(at)

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", a.port))
    server.listen(1)
    port = server.getsockname()[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        import os
        os.rename(a.port_file + ".tmp", a.port_file)
    else:
        print(port, flush=True)
    conn, _ = server.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        conn.sendall(mpx(hdr))
        t0 = time.monotonic()
        sent = 0
        for k in range(len(frames)):
            record = frames[k]
            if a.stop_after is not None and k >= a.stop_after:
                break
            if bad_frame is not None and k + 1 == bad_frame:
                record = corrupt(bad_kind, record, header, k + 1)
            if a.hot is not None and k + 1 == a.hot:
                if record[:header].split(b",")[6].strip() != b"U32":
                    raise SystemExit("--hot needs U32 frames")
                record = record[:header + 4] + (70000).to_bytes(4, "big") + record[header + 8:]
            message = mpx(record)
            if a.prefix_corrupt and k == 0:
                message = b"MPY" + message[3:]
            conn.sendall(message)
            sent += 1
            if a.fps:
                delay = t0 + (k + 1) / a.fps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        t_last = time.monotonic()
        if a.report:
            import json
            with open(a.report, "w") as f:
                json.dump({"frames": sent, "seconds": t_last - t0}, f)
        if a.hold:
            time.sleep(a.hold)
    except (BrokenPipeError, ConnectionResetError):
        pass
    conn.close()
    server.close()


if __name__ == "__main__":
    sys.exit(main())
