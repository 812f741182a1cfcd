#!/bin/sh
# Gatan K2 IS and PNDetector FRMS6 acquisitions through both writers. No
# public file of either exists and HyperSpy reads neither, so numpy writes
# them here from the format facts (LiberTEM's k2is.py and frms6.py; see
# tests/unit/test_input_k2is.c and test_input_frms6.c) with the reference
# arrays; qem save, export, pack produce, export --raw, inspect --json and
# verify are compared with them bit for bit.
# usage: test_input_k2frms.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_input_k2frms
. "$(dirname "$0")/harness.sh"

same_array() {
    if "$PY" - "$1" "$2" <<'EOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if got.dtype == ref.dtype and got.shape == ref.shape
         and got.tobytes() == ref.tobytes() else 1)
EOF
    then ok; else bad "$1 differs from $2"; fi
}

mkdir "$T/k2" "$T/f6"
"$PY" - "$T" <<'EOF' || bad "writing the acquisitions"
import sys, numpy as np
T = sys.argv[1]
rng = np.random.default_rng(5)

# K2 IS: 8 sectors; 2 frames with the shutter flag (ids 7, 8) after frame 6
# without it; each sector begins with 5 blocks of frame 5 (a partial frame).
frames = rng.integers(0, 4096, size=(4, 1860, 2048), dtype=np.uint16)  # ids 5..8
def block(sector, b, fid, shutter):
    x0, y0 = 256 - 16 * (b % 16 + 1), 930 * (b // 16)
    h = bytearray(40)
    h[0:4] = (0xFFFF0055).to_bytes(4, "big")
    h[8], h[9] = 1, 1 if shutter else 0
    h[20:22], h[22:24] = (256).to_bytes(2, "big"), (1860).to_bytes(2, "big")
    h[24:28] = fid.to_bytes(4, "big")
    for at, v in ((28, x0), (30, y0), (32, x0 + 15), (34, y0 + 929)):
        h[at:at + 2] = v.to_bytes(2, "big")
    h[36:40] = (0x5758).to_bytes(4, "big")
    px = frames[fid - 5, y0:y0 + 930, 256 * sector + x0:256 * sector + x0 + 16]
    px = px.reshape(-1, 2).astype(np.uint32)
    a, c = px[:, 0], px[:, 1]
    packed = np.stack([a & 0xFF, (a >> 8) | ((c & 0xF) << 4), c >> 4], axis=1)
    return bytes(h) + packed.astype(np.uint8).tobytes()
for s in range(8):
    with open(f"{T}/k2/Capture_{s + 1}.bin", "wb") as f:
        for b in range(27, 32):
            f.write(block(s, b, 5, False))
        for fid in (6, 7, 8):
            for b in range(32):
                f.write(block(s, b, fid, fid >= 7))
open(f"{T}/k2/Capture_.gtg", "wb").write(bytes([0, 0, 0, 4]) + bytes(24))
np.save(f"{T}/k2_ref.npy", frames[2:4].reshape(1, 2, 1860, 2048))

# FRMS6: 20 x 12 stored frames (folded), 2 dark frames, 3 + 3 signal frames.
W, H = 20, 12
def frms6(path, stack):
    head = bytearray(1024)
    head[0:2], head[2:4], head[7] = (1024).to_bytes(2, "little"), (64).to_bytes(2, "little"), 6
    head[88:90], head[90:92] = W.to_bytes(2, "little"), H.to_bytes(2, "little")
    head[1020:1024] = len(stack).to_bytes(4, "little")
    with open(path, "wb") as f:
        f.write(head)
        for k, fr in enumerate(stack):
            fh = bytearray(64)
            fh[12:16] = k.to_bytes(4, "little")
            f.write(bytes(fh) + fr.astype("<u2").tobytes())
stored = rng.integers(0, 65536, size=(6, H, W), dtype=np.uint16)
frms6(f"{T}/f6/m_000.frms6", rng.integers(0, 65536, size=(2, H, W), dtype=np.uint16))
frms6(f"{T}/f6/m_001.frms6", stored[:3])
frms6(f"{T}/f6/m_002.frms6", stored[3:])
open(f"{T}/f6/m.hdr", "w").write(
    "[measurementInfo]\ndarkFrames=2\nsignalFrames=6\nstemImageSize=2x3\n"
    "readoutMode=\"bin: 1, windowing: 24 x 10 \"\n")
# unfolded: the top half is the left half; the bottom half is the right
# half turned by 180 degrees
top = stored[:, :, : W // 2]
bottom = stored[:, ::-1, ::-1][:, :, : W // 2]
np.save(f"{T}/f6_ref.npy", np.concatenate([top, bottom], axis=1).reshape(2, 3, 2 * H, W // 2))
EOF

# --- K2 IS --------------------------------------------------------------------
K="$T/k2/Capture_3.bin"
expect 1 "k2is without a scan shape" -- "$QEM" save "$K" "$T/k.qem"
contains "$T/err" "--scan-shape"
expect 0 "k2is inspect" -- "$QEM" inspect --json "$K" --scan-shape 1,2
contains "$T/out" '"k2is"'
contains "$T/out" 'Capture_8.bin'
contains "$T/out" 'Capture_.gtg'
expect 0 "k2is save" -- "$QEM" save "$K" "$T/k.qem" --scan-shape 1,2
expect 0 "k2is export" -- "$QEM" export "$T/k.qem" "$T/k.npy"
same_array "$T/k.npy" "$T/k2_ref.npy"
expect 0 "k2is verify" -- "$QEM" verify "$T/k.qem"
expect 0 "k2is info" -- "$QEM" info --json "$T/k.qem"
contains "$T/out" '"first_frame_id": 7'
# A 1860 x 2048 detector is beyond the uint16/LZ4 pack profile's 27-bit
# descriptor offsets: the pack producer refuses it, whatever the source.
expect 1 "k2is pack" -- "$QEM" pack produce "$K" "$T/k.h5" --scan-shape 1,2
contains "$T/err" "27-bit"
absent "$T/k.h5"
# A .gtg stating the scan (a DM4 tag file; LiberTEM reads its SI Dimensions
# Size Y, Size X as the scan rows, columns): no --scan-shape needed.
"$PY" - "$T/k2/Capture_.gtg" <<'EOF'
import struct, sys
def data(name, v):  # a long, little-endian values
    body = b"%%%%" + struct.pack(">QQ", 1, 3) + struct.pack("<i", v)
    return b"\x15" + struct.pack(">H", len(name)) + name + struct.pack(">Q", len(body)) + body
def group(name, tags):
    body = b"\x00\x00" + struct.pack(">Q", len(tags)) + b"".join(tags)
    return b"\x14" + struct.pack(">H", len(name)) + name + struct.pack(">Q", len(body)) + body
root = b"\x01\x00" + struct.pack(">Q", 1) + group(b"SI Dimensions",
                                                [data(b"Size X", 2), data(b"Size Y", 1)])
open(sys.argv[1], "wb").write(struct.pack(">IQI", 4, len(root), 1) + root + bytes(8))
EOF
expect 0 "k2is inspect, scan from the .gtg" -- "$QEM" inspect --json "$K"
contains "$T/out" '"SI Dimensions/Size X": 2'
contains "$T/out" "the .gtg's SI Dimensions"
expect 0 "k2is save, scan from the .gtg" -- "$QEM" save "$K" "$T/kg.qem"
expect 0 "k2is export, scan from the .gtg" -- "$QEM" export "$T/kg.qem" "$T/kg.npy"
same_array "$T/kg.npy" "$T/k2_ref.npy"
expect 1 "k2is, --scan-shape against the .gtg" -- "$QEM" inspect "$K" --scan-shape 2,1
contains "$T/err" "contradicts"

# --- FRMS6 ----------------------------------------------------------------------
F="$T/f6/m_001.frms6"
expect 0 "frms6 inspect" -- "$QEM" inspect --json "$F"
contains "$T/out" '"frms6"'
contains "$T/out" 'm_000.frms6'
contains "$T/out" 'm.hdr'
expect 0 "frms6 save" -- "$QEM" save "$F" "$T/f.qem"
expect 0 "frms6 export" -- "$QEM" export "$T/f.qem" "$T/f.npy"
same_array "$T/f.npy" "$T/f6_ref.npy"
expect 0 "frms6 verify" -- "$QEM" verify "$T/f.qem"
expect 0 "frms6 info" -- "$QEM" info --json "$T/f.qem"
contains "$T/out" '"dark_frames_subtracted": false'
expect 0 "frms6 pack" -- "$QEM" pack produce "$F" "$T/f.h5"
expect 0 "frms6 pack export" -- "$QEM" export --raw "$T/f.h5" "$T/fp.npy"
same_array "$T/fp.npy" "$T/f6_ref.npy"
rm "$T/f6/m.hdr"
expect 1 "frms6 without its .hdr" -- "$QEM" save "$F" "$T/f2.qem"
contains "$T/err" "m.hdr"

finish
