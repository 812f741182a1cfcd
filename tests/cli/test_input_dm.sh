#!/bin/sh
# Gatan Digital Micrograph DM3/DM4 files (HyperSpy's own test files, from
# Debian's python3-hyperspy) through both writers, compared bit for bit
# with what hyperspy.api.load returns for the same file: qem save and
# export, qem pack produce and export --raw (integer data), inspect --json,
# verify. HyperSpy's array is qem's reshaped to 4D: a 2D image is one
# frame (1 x 1 scan), a 3D stack (z, y, x) is z frames (--scan-shape).
# usage: test_input_dm.sh QEM PYTHON [HYPERSPY_IO]
set -u
QEM=$1
PY=$2
H=${3:-/usr/lib/python3/dist-packages/hyperspy/tests/io}
name=cli_input_dm
. "$(dirname "$0")/harness.sh"

# HyperSpy's arrays of every file checked below, in one Python run
# (importing HyperSpy takes seconds): "STEM SRC [INDEX]" lines on stdin,
# T/STEM.ref.npy out (signal INDEX when it returns several).
references() {
    cat >"$T/list"
    "$PY" - "$T" <<'PYEOF'
import sys, warnings, numpy as np
warnings.simplefilter("ignore")
import logging; logging.disable(logging.CRITICAL)
import hyperspy.api as hs
for line in open(sys.argv[1] + "/list"):
    stem, src, *index = line.split()
    s = hs.load(src)
    if isinstance(s, list):
        s = s[int(index[0]) if index else 0]
    np.save("%s/%s.ref.npy" % (sys.argv[1], stem), np.asarray(s.data))
PYEOF
}

# same EXPORTED.npy REFERENCE.npy: equal values in C order (the reference
# converted to the exported dtype exactly: every value must survive).
same() {
    if "$PY" - "$@" <<'PYEOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
conv = ref.astype(got.dtype)
sys.exit(0 if got.size == ref.size and np.array_equal(conv.astype(ref.dtype), ref)
         and got.reshape(-1).tobytes() == np.ascontiguousarray(conv).reshape(-1).tobytes()
         else 1)
PYEOF
    then ok; else bad "$1 differs from HyperSpy's $2"; fi
}

# check STEM SRC SCAN_OPTS PACK(0/1)
check() {
    stem=$1 src=$2 scan=$3 pack=$4
    if [ -f "$T/$stem.ref.npy" ]; then ok; else bad "no HyperSpy reference for $src"; fi
    # shellcheck disable=SC2086
    expect 0 "save $stem" -- "$QEM" save --quiet "$src" "$T/$stem.qem" $scan
    expect 0 "export $stem" -- "$QEM" export --quiet "$T/$stem.qem" "$T/$stem.npy"
    same "$T/$stem.npy" "$T/$stem.ref.npy"
    expect 0 "verify $stem" -- "$QEM" verify "$T/$stem.qem"
    expect 0 "info $stem" -- "$QEM" info --json "$T/$stem.qem"
    contains "$T/out" '"family": "dm"'
    # shellcheck disable=SC2086
    expect 0 "inspect $stem" -- "$QEM" inspect --json "$src" $scan
    contains "$T/out" '"family": "dm"'
    contains "$T/out" '"dm_version"'
    if [ "$pack" = 1 ]; then
        # shellcheck disable=SC2086
        expect 0 "produce $stem" -- "$QEM" pack produce --quiet "$src" "$T/$stem.h5" $scan
        expect 0 "export --raw $stem" -- "$QEM" export --quiet --raw "$T/$stem.h5" \
            "$T/$stem.raw.npy"
        same "$T/$stem.raw.npy" "$T/$stem.ref.npy"
        contains "$T/$stem.h5.receipt.json" '"family": "dm"'
    fi
}

{
    for v in 3 4; do
        for key in 1 6 7 9 10 11; do
            echo "s${v}_$key $H/dm${v}_3D_data/test-$key.dm$v"
            echo "i${v}_$key $H/dm${v}_2D_data/test-$key.dm$v"
        done
        for key in 2 12; do echo "s${v}_$key $H/dm${v}_3D_data/test-$key.dm$v"; done
    done
    echo "stem $H/dm3_2D_data/test_STEM_image.dm3"
    echo "diffraction $H/dm3_2D_data/test_diffraction_pattern.dm3"
    echo "multi $H/dm3_2D_data/multi_signal.dm3 0"
} | references
if [ $? -eq 0 ]; then ok; else bad "HyperSpy could not load the files"; fi

# Every type qem reads, 3D stacks and 2D images, both versions.
for v in 3 4; do
    for key in 1 6 7 9 10 11; do
        check "s${v}_$key" "$H/dm${v}_3D_data/test-$key.dm$v" "--scan-shape 2,1" 1
        check "i${v}_$key" "$H/dm${v}_2D_data/test-$key.dm$v" "" 1
    done
    for key in 2 12; do
        check "s${v}_$key" "$H/dm${v}_3D_data/test-$key.dm$v" "--scan-shape 1,2" 0
    done
done
# Real acquisitions: a STEM image (uint32), a diffraction pattern (int32,
# its 1/nm calibration taken), the image of a file holding several
# (HyperSpy's first signal is it).
check stem "$H/dm3_2D_data/test_STEM_image.dm3" "" 1
check diffraction "$H/dm3_2D_data/test_diffraction_pattern.dm3" "" 1
expect 0 "inspect diffraction" -- "$QEM" inspect "$H/dm3_2D_data/test_diffraction_pattern.dm3"
contains "$T/out" "detector_sampling_row"
# A stack builder stack (3 frames of uint32 above 65535): refused, exactly.
SB="$H/dm_stackbuilder_plugin/test_stackbuilder_imagestack.dm3"
expect 1 "stack above uint16" -- "$QEM" save "$SB" "$T/x.qem" --scan-shape 3,1
contains "$T/err" "does not fit the uint16 storage of a uint32 acquisition"
absent "$T/x.qem"
check multi "$H/dm3_2D_data/multi_signal.dm3" "" 1

# Refused, each naming what: complex, RGB, bool, a spectrum, a spectrum image.
for f in dm3_3D_data/test-3.dm3 dm4_3D_data/test-13.dm4 dm3_3D_data/test-23.dm3 \
         dm4_3D_data/test-14.dm4 dm4_3D_data/test-28.dm4; do
    expect 1 "refuse $f" -- "$QEM" save "$H/$f" "$T/x.qem" --scan-shape 2,1
    contains "$T/err" "Gatan Digital Micrograph"
    contains "$T/err" "samples (DataType"
done
expect 1 "refuse a spectrum" -- "$QEM" inspect "$H/dm3_1D_data/test-EELS_spectrum.dm3"
contains "$T/err" "spectrum (1 dimension)"
expect 1 "refuse a spectrum image" -- "$QEM" inspect "$H/dm4_3D_data/EELS_SI.dm4"
contains "$T/err" "Spectrum image"
expect 1 "a stack without its scan shape" -- "$QEM" save "$H/dm4_3D_data/test-10.dm4" "$T/x.qem"
contains "$T/err" "--scan-shape"
absent "$T/x.qem"
finish
