#!/bin/sh
# HyperSpy's TVIPS files through both writers, compared bit for bit with
# what HyperSpy itself reads from them (hyperspy.api.load with the same
# scan shape): qem save + export, qem pack produce + export --raw, qem
# inspect --json, qem verify.
# usage: test_input_tvips.sh QEM PYTHON [HYPERSPY_IO]
set -u
QEM=$1
PY=$2
IO=${3:-/usr/lib/python3/dist-packages/hyperspy/tests/io}
name=cli_input_tvips
. "$(dirname "$0")/harness.sh"
D="$IO/tvips_files"

# same_array GOT.npy REF.npy: same dtype, values and C-order bytes.
same_array() {
    if "$PY" - "$@" <<'PYEOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if got.dtype == ref.dtype and got.shape == ref.shape
         and got.tobytes() == np.ascontiguousarray(ref).tobytes() else 1)
PYEOF
    then ok; else bad "$1 differs from $2"; fi
}

for spec in test_tvips_2233_000:2,2 test_tvips_2345_000:2,3 test_tvips_2345_split_000:2,3; do
    f=${spec%%:*}
    scan=${spec#*:}
    src="$D/$f.tvips"
    # HyperSpy's reading, the reference (frames in stored order, rows x columns).
    if "$PY" - "$src" "$scan" "$T/$f.ref.npy" <<'PYEOF' 2>"$T/err"
import sys, warnings, numpy as np
warnings.simplefilter("ignore")
import hyperspy.api as hs
rows, cols = (int(v) for v in sys.argv[2].split(","))
s = hs.load(sys.argv[1], scan_shape=(rows, cols), lazy=False)
np.save(sys.argv[3], np.ascontiguousarray(s.data))
PYEOF
    then ok; else bad "$f: HyperSpy could not read it"; cat "$T/err" >&2; continue; fi
    expect 0 "$f save" -- "$QEM" save "$src" "$T/$f.qem" --scan-shape "$scan"
    expect 0 "$f export" -- "$QEM" export "$T/$f.qem" "$T/$f.npy"
    same_array "$T/$f.npy" "$T/$f.ref.npy"
    expect 0 "$f verify" -- "$QEM" verify "$T/$f.qem"
    expect 0 "$f pack" -- "$QEM" pack produce "$src" "$T/$f.h5" --scan-shape "$scan"
    contains "$T/$f.h5.receipt.json" '"family": "tvips"'
    expect 0 "$f pack export" -- "$QEM" export --raw "$T/$f.h5" "$T/$f.p.npy"
    same_array "$T/$f.p.npy" "$T/$f.ref.npy"
    expect 0 "$f inspect" -- "$QEM" inspect --json "$src" --scan-shape "$scan"
    contains "$T/out" '"family": "tvips"'
    contains "$T/out" '"sample_type": "uint16"'
    contains "$T/out" '"high_tension_kv": 200'
done
# The split series: every part a member, in order.
expect 0 "split inspect" -- "$QEM" inspect "$D/test_tvips_2345_split_000.tvips" --scan-shape 2,3
contains "$T/out" "test_tvips_2345_split_001.tvips"
contains "$T/out" "test_tvips_2345_split_002.tvips"
# No scan shape for several frames: refused naming the option.
expect 1 "no scan shape" -- "$QEM" inspect "$D/test_tvips_2233_000.tvips"
contains "$T/err" "--scan-shape"
# A later part alone has no series header: not taken for a recording.
expect 1 "a later part alone" -- "$QEM" inspect "$D/test_tvips_2345_split_001.tvips"
finish
