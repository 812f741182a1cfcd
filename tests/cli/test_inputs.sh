#!/bin/sh
# The detector families end to end through the command line: every real
# Merlin .mib and EMPAD file of fixtures/detectors saved with `qem save`
# and exported equal to its reference array (numpy compares the values;
# the .qem is 4D, so the data are compared flattened); `qem pack produce`
# and `qem export --raw` where the pack profile admits the counts (MIB
# U08/U16/U32 counts that fit), the float EMPAD refused by the pack; the
# RAW-mode MIB refused; raw binary with an offset and frame headers.
# usage: test_inputs.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_inputs
. "$(dirname "$0")/harness.sh"
: "${QEM_SHARED_DIR:?QEM_SHARED_DIR must name the shared fixtures}"
DET=$QEM_SHARED_DIR/fixtures/detectors

# same EXPORTED.npy REFERENCE.npy [values]: the same values in the same
# order, and the same dtype unless the reference is uint32 (stored as
# uint16) or "values" is given (a pack's --raw export is uint16).
same() {
    if "$PY" - "$1" "$2" "${3:-dtype}" <<'EOF'
import sys
import numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if sys.argv[3] == "dtype" and ref.dtype != np.uint32 and got.dtype != ref.dtype:
    sys.exit("dtype %s, reference %s" % (got.dtype, ref.dtype))
if got.size != ref.size or not np.array_equal(got.reshape(-1), ref.reshape(-1)):
    sys.exit("values differ from the reference")
if ref.dtype == np.float32 and got.reshape(-1).view(np.uint32).tobytes() != ref.reshape(-1).view(np.uint32).tobytes():
    sys.exit("float bits differ")
EOF
    then ok; else bad "$1 differs from $2"; fi
}

# mib NAME PROFILE [SAVE OPTIONS...]: save + export, then produce + export
# --raw (PROFILE "u16-only": a uint8 file whose scan count is no multiple
# of 32, which the uint8 profile refuses saying why). NAME is a file
# of fixtures/detectors/mib, else one made in $T.
mib() {
    stem=$1; profile=$2; shift 2
    src=$DET/mib/$stem.mib
    ref=$DET/mib/$stem.file-order.npy
    [ -f "$src" ] || { src=$T/$stem.mib; ref=$T/$stem.file-order.npy; }
    expect 0 "save $stem" -- "$QEM" save --quiet "$src" "$T/$stem.qem" "$@"
    expect 0 "export $stem" -- "$QEM" export --quiet "$T/$stem.qem" "$T/$stem.npy"
    same "$T/$stem.npy" "$ref"
    expect 0 "info $stem" -- "$QEM" info --json "$T/$stem.qem"
    contains "$T/out" '"source_format": "mib"'
    if [ "$profile" = u16-only ]; then
        expect 1 "produce $stem u8" -- "$QEM" pack produce "$src" "$T/$stem.h5" "$@" \
            --profile u8-bitpacked
        contains "$T/err" "multiple of 32"
        absent "$T/$stem.h5"
        profile=u16-lz4
    fi
    expect 0 "produce $stem" -- "$QEM" pack produce --quiet "$src" "$T/$stem.h5" \
        --profile "$profile" "$@"
    expect 0 "export --raw $stem" -- "$QEM" export --quiet --raw "$T/$stem.h5" "$T/$stem.raw.npy"
    same "$T/$stem.raw.npy" "$ref" values
}

# --- Merlin ------------------------------------------------------------------
# The uint8 (bitpacked) profile takes scans in multiples of 32 only: the 8-
# and 1-frame U08 files are packed widened by the uint16 profile. A
# 32-frame U08 file made of the 8 real frames 4 times over (real headers,
# renumbered 1 to 32) has a uint8 pack.
"$PY" - "$DET/mib" "$T" <<'EOF' || bad "32-frame U08 file"
import sys
import numpy as np
src, t = sys.argv[1], sys.argv[2]
data = open(src + "/001_4x2_6bit.mib", "rb").read()
record = 384 + 256 * 256
with open(t + "/u08x32.mib", "wb") as f:
    for k in range(32):
        r = bytearray(data[(k % 8) * record:(k % 8 + 1) * record])
        r[4:10] = b"%06d" % (k + 1)
        f.write(r)
ref = np.load(src + "/001_4x2_6bit.file-order.npy").reshape(8, 256, 256)
np.save(t + "/u08x32.file-order.npy", np.concatenate([ref] * 4).reshape(4, 8, 256, 256))
EOF
mib u08x32 u8-bitpacked --scan-shape 4,8
mib 001_4x2_6bit u16-only --scan-shape 2,4
mib Single_9_Frame_CounterDepth_12_Rows_256 u16-lz4
mib Single_1_Frame_CounterDepth_24_Rows_256 u16-lz4
mib Single_1_Frame_CounterDepth_1_Rows_256 u16-only
# The 9 frames per trigger of the .hdr give a 1 x 9 scan.
expect 0 "inspect 9-frame" -- "$QEM" inspect "$DET/mib/Single_9_Frame_CounterDepth_12_Rows_256.mib"
contains "$T/out" "(1, 9, 256, 256)"
# Without the navigation the 8-frame file does not state, refused.
expect 1 "save without scan shape" -- "$QEM" save "$DET/mib/001_4x2_6bit.mib" "$T/ns.qem"
contains "$T/err" "8 frames"
absent "$T/ns.qem"
# RAW mode: refused by name, nothing written.
for cmd in "save:qem" "pack produce:h5"; do
    # shellcheck disable=SC2086
    expect 1 "${cmd%:*} RAW mode" -- "$QEM" ${cmd%:*} \
        "$DET/mib/Single_1_Frame_CounterDepth_1_Rows_256RAW.mib" "$T/rawmode.${cmd#*:}"
    contains "$T/err" "RAW mode (data type R64)"
    contains "$T/err" "not supported"
    absent "$T/rawmode.${cmd#*:}"
done

# --- EMPAD -------------------------------------------------------------------
expect 0 "save empad" -- "$QEM" save --quiet "$DET/empad/map4x4.xml" "$T/e.qem"
expect 0 "export empad" -- "$QEM" export --quiet "$T/e.qem" "$T/e.npy"
same "$T/e.npy" "$DET/empad/map4x4.hyperspy.npy"
expect 0 "info empad" -- "$QEM" info "$T/e.qem"
contains "$T/out" "accelerating_voltage = 300 kV (EMPAD acquisition XML)"
contains "$T/out" "camera_length = 722.5 mm (EMPAD acquisition XML)"
contains "$T/out" "scan_row = 1.826537060227288 angstrom (EMPAD acquisition XML)"
expect 0 "info --json empad" -- "$QEM" info --json "$T/e.qem"
contains "$T/out" '"dropped_rows": 2'
# Packs hold integer counts: the float EMPAD is refused, nothing written.
expect 1 "produce empad" -- "$QEM" pack produce "$DET/empad/map4x4.xml" "$T/e.h5"
contains "$T/err" "float32"
absent "$T/e.h5"
# The raw file of an XML copied elsewhere must lie beside it.
mkdir "$T/x"
cp "$DET/empad/map4x4.xml" "$T/x/map.xml"
expect 1 "empad without its raw" -- "$QEM" save "$T/x/map.xml" "$T/x.qem"
contains "$T/err" "scan_x4_y4.raw"
absent "$T/x.qem"

# --- raw binary --------------------------------------------------------------
# 2 x 3 frames of 4 x 5 big-endian uint16 after 16 bytes, each behind 8.
"$PY" - "$T" <<'EOF' || bad "raw fixture"
import sys
import numpy as np
t = sys.argv[1]
v = (np.arange(2 * 3 * 4 * 5, dtype=np.uint32) * 977 % 65536).astype(np.uint16).reshape(2, 3, 4, 5)
np.save(t + "/rawref.npy", v)
with open(t + "/frames.bin", "wb") as f:
    f.write(b"\xd5" * 16)
    for frame in v.reshape(6, 4, 5):
        f.write(b"\xe7" * 8)
        f.write(frame.astype(">u2").tobytes())
EOF
RAWOPTS="--raw-shape 2,3,4,5 --raw-dtype >u2 --raw-offset 16 --raw-frame-header 8"
# shellcheck disable=SC2086
expect 0 "save raw" -- "$QEM" save --quiet "$T/frames.bin" "$T/r.qem" $RAWOPTS
expect 0 "export raw" -- "$QEM" export --quiet "$T/r.qem" "$T/r.npy"
same "$T/r.npy" "$T/rawref.npy"
# shellcheck disable=SC2086
expect 0 "produce raw" -- "$QEM" pack produce --quiet "$T/frames.bin" "$T/r.h5" $RAWOPTS
expect 0 "export --raw raw" -- "$QEM" export --quiet --raw "$T/r.h5" "$T/r.raw.npy"
same "$T/r.raw.npy" "$T/rawref.npy" values
# A shape the size does not match: both sizes named, nothing written.
expect 1 "raw wrong shape" -- "$QEM" save "$T/frames.bin" "$T/bad.qem" --raw-shape 2,3,4,5 \
    --raw-dtype ">u2" --raw-offset 16
contains "$T/err" "holds 304 bytes"
contains "$T/err" "exactly 256 bytes"
absent "$T/bad.qem"

# Signed and float64 samples (issue 30): int16 counts stored as uint16,
# negative int32 as float32, float64 as float32 bit for bit; a value that
# neither stores exactly refused with the range, nothing written.
"$PY" - "$T" <<'EOF'
import sys
import numpy as np
t = sys.argv[1]
v = (np.arange(2 * 3 * 4 * 5) * 977 % 30000).reshape(2, 3, 4, 5)
v.astype("<i2").tofile(t + "/i2.bin")
np.save(t + "/i2ref.npy", v.astype(np.uint16))
w = v - 100
w.astype(">i4").tofile(t + "/i4.bin")
np.save(t + "/i4ref.npy", w.astype(np.float32))
f = v / 8.0 - 3.0
f.astype("<f8").tofile(t + "/f8.bin")
np.save(t + "/f8ref.npy", f.astype(np.float32))
f[1, 2, 3, 4] = 0.1
f.astype("<f8").tofile(t + "/f8bad.bin")
EOF
for case in "i2 <i2" "i4 >i4" "f8 float64"; do
    set -- $case
    expect 0 "save $2" -- "$QEM" save --quiet "$T/$1.bin" "$T/$1.qem" --raw-shape 2,3,4,5 \
        --raw-dtype "$2"
    expect 0 "export $2" -- "$QEM" export --quiet "$T/$1.qem" "$T/$1.npy"
    same "$T/$1.npy" "$T/$1ref.npy"
done
expect 0 "produce int16" -- "$QEM" pack produce --quiet "$T/i2.bin" "$T/i2.h5" \
    --raw-shape 2,3,4,5 --raw-dtype "<i2"
expect 0 "export --raw int16 pack" -- "$QEM" export --quiet --raw "$T/i2.h5" "$T/i2p.npy"
same "$T/i2p.npy" "$T/i2ref.npy"
contains "$T/i2.h5.receipt.json" '"sampleType": "int16"'
expect 0 "inspect int32" -- "$QEM" inspect "$T/i4.bin" --raw-shape 2,3,4,5 --raw-dtype ">i4"
contains "$T/out" "int32, stored as float32"
expect 1 "float64 that rounds" -- "$QEM" save "$T/f8bad.bin" "$T/f8bad.qem" \
    --raw-shape 2,3,4,5 --raw-dtype "<f8"
contains "$T/err" "float64 values from -3 to"
contains "$T/err" "would round in float32"
absent "$T/f8bad.qem"

finish
