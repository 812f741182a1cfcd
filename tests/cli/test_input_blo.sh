#!/bin/sh
# HyperSpy's real NanoMegas blockfiles through both writers and back, bit
# for bit against HyperSpy's own reading (hyperspy.api.load, the reference):
# qem inspect (human and --json), qem save, qem export, qem verify, qem pack
# produce and qem export --raw. HyperSpy returns (NY, NX, DP_SZ, DP_SZ)
# uint8, the shape and orientation qem reads.
# usage: test_input_blo.sh QEM PYTHON [HYPERSPY_TESTS_IO]
set -u
QEM=$1
PY=$2
IO=${3:-/usr/lib/python3/dist-packages/hyperspy/tests/io}
name=cli_input_blo
. "$(dirname "$0")/harness.sh"

# same_array EXPORTED.npy REFERENCE.npy [DTYPE]: equal values and C-order
# bytes (the reference cast to DTYPE first, for a pack's uint16).
same_array() {
    if "$PY" - "$@" <<'PYEOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if len(sys.argv) > 3:
    ref = ref.astype(sys.argv[3])
sys.exit(0 if got.dtype == ref.dtype and got.shape == ref.shape
         and got.tobytes() == np.ascontiguousarray(ref).tobytes() else 1)
PYEOF
    then ok; else bad "$1 differs from $2"; fi
}

for stem in test1 test2; do
    B="$IO/blockfile_data/$stem.blo"
    if [ ! -f "$B" ]; then
        bad "$B is missing (install python3-hyperspy)"
        continue
    fi
    # HyperSpy's reading: the reference array and its shape.
    if "$PY" - "$B" "$T/$stem.ref.npy" >"$T/shape" 2>"$T/pyerr" <<'PYEOF'
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import logging
logging.disable(logging.WARNING)
import hyperspy.api as hs
s = hs.load(sys.argv[1])
data = np.asarray(s.data)
np.save(sys.argv[2], data)
print(",".join(str(d) for d in data.shape))
PYEOF
    then ok; else bad "HyperSpy cannot read $B"; cat "$T/pyerr" >&2; continue; fi
    shape=$(cat "$T/shape")
    expect 0 "$stem inspect --json" -- "$QEM" inspect --json "$B"
    contains "$T/out" '"family": "blo"'
    contains "$T/out" '"sample_type": "uint8"'
    contains "$T/out" "\"file\": \"$stem.blo\""
    contains "$T/out" '"scan_sampling_row"'
    "$PY" -c 'import json, sys
print(",".join(str(d) for d in json.load(open(sys.argv[1]))["shape"]))' "$T/out" >"$T/qshape"
    qshape=$(cat "$T/qshape")
    if [ "$qshape" = "$shape" ]; then
        ok
    else
        bad "$stem: qem's shape $qshape, HyperSpy's $shape"
    fi
    expect 0 "$stem inspect" -- "$QEM" inspect "$B"
    contains "$T/out" "blo"
    contains "$T/out" "$stem.blo"
    expect 0 "$stem save" -- "$QEM" save "$B" "$T/$stem.qem"
    expect 0 "$stem export" -- "$QEM" export "$T/$stem.qem" "$T/$stem.npy"
    same_array "$T/$stem.npy" "$T/$stem.ref.npy"
    expect 0 "$stem verify" -- "$QEM" verify "$T/$stem.qem"
    expect 0 "$stem info" -- "$QEM" info --json "$T/$stem.qem"
    contains "$T/out" '"family": "blo"'
    expect 0 "$stem pack" -- "$QEM" pack produce "$B" "$T/$stem.h5"
    contains "$T/$stem.h5.receipt.json" '"family": "blo"'
    expect 0 "$stem pack export" -- "$QEM" export --raw "$T/$stem.h5" "$T/${stem}p.npy"
    same_array "$T/${stem}p.npy" "$T/$stem.ref.npy" uint16
    # The header's scan shape given again: the same; transposed: refused.
    rows=${shape%%,*}
    rest=${shape#*,}
    cols=${rest%%,*}
    expect 0 "$stem with its scan shape" -- "$QEM" inspect "$B" --scan-shape "$rows,$cols"
    expect 1 "$stem with another scan shape" -- "$QEM" inspect "$B" --scan-shape "$cols,$rows"
    contains "$T/err" "contradicts"
done

# A truncated copy is refused, naming the file and the sizes.
cp "$IO/blockfile_data/test2.blo" "$T/cut.blo" && truncate -s -1 "$T/cut.blo"
expect 1 "a truncated blockfile" -- "$QEM" save "$T/cut.blo" "$T/cut.qem"
contains "$T/err" "cut.blo"
contains "$T/err" "truncated"
absent "$T/cut.qem"

finish
