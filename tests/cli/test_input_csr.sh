#!/bin/sh
# LiberTEM raw_csr sparse sets, written here by numpy and scipy.sparse as
# LiberTEM's own test fixture writes them (a TOML descriptor, then
# csr.indptr/indices/data .tofile()), through both writers: qem save and
# qem pack produce, exported again and compared bit for bit with the dense
# array scipy.sparse's toarray() gives (LiberTEM's densification);
# qem inspect (human and --json) and qem verify. HyperSpy has no reader for
# this layout, so scipy is the reference.
# usage: test_input_csr.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_input_csr
. "$(dirname "$0")/harness.sh"

# same_array EXPORTED.npy REFERENCE.npy [DTYPE]: equal dtype, values and
# C-order bytes (the reference cast to DTYPE first: a pack's default
# profile stores uint8 samples as uint16).
same_array() {
    if "$PY" - "$@" <<'EOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if len(sys.argv) > 3:
    assert np.array_equal(ref.astype(sys.argv[3]), ref)
    ref = ref.astype(sys.argv[3])
sys.exit(0 if got.dtype == ref.dtype and got.shape == ref.shape
         and got.tobytes() == np.ascontiguousarray(ref).tobytes() else 1)
EOF
    then ok; else bad "$1 differs from $2"; fi
}

mkdir -p "$T/counts" "$T/events" "$T/signed" "$T/float"
"$PY" - "$T" <<'EOF' || bad "building the raw_csr sets"
import sys, numpy as np, scipy.sparse as sp
t = sys.argv[1]
rng = np.random.default_rng(30)

def write(folder, nav, sig, m, indptr_dtype, indices_dtype, data_dtype):
    with open(f"{folder}/sparse.toml", "w") as f:
        f.write(f"""
[params]
filetype = "raw_csr"
nav_shape = [{nav[0]}, {nav[1]}]
sig_shape = [{sig[0]}, {sig[1]}]

[raw_csr]
indptr_file = "rowind.dat"
indptr_dtype = "{indptr_dtype}"

indices_file = "coords.dat"
indices_dtype = "{indices_dtype}"

data_file = "values.dat"
data_dtype = "{data_dtype}"
""")
    m.indptr.astype(indptr_dtype).tofile(f"{folder}/rowind.dat")
    m.indices.astype(indices_dtype).tofile(f"{folder}/coords.dat")
    m.data.astype(data_dtype).tofile(f"{folder}/values.dat")
    dense = sp.csr_matrix((m.data.astype(data_dtype), m.indices, m.indptr),
                          shape=m.shape).toarray()
    return dense.reshape(tuple(nav) + tuple(sig))

# Counts: uint16 frames, about one pixel in 8 hit, from a dense array.
nav, sig = (4, 8), (16, 12)
dense = ((rng.random(nav + sig) < 0.125) * rng.integers(1, 4000, nav + sig)).astype("<u2")
m = sp.csr_matrix(dense.reshape(32, -1))
ref = write(f"{t}/counts", nav, sig, m, "<i4", "<i4", "<u2")
assert np.array_equal(ref, dense)
np.save(f"{t}/counts.npy", ref)

# Electron events: one entry per event, value 1, the same pixel repeatedly
# in a frame (duplicates add), indices unsorted; uint8 counts.
nav, sig = (4, 8), (16, 16)
frames, pixels = nav[0] * nav[1], sig[0] * sig[1]
events = rng.integers(0, 40, frames)
indptr = np.concatenate([[0], np.cumsum(events)]).astype(np.int64)
indices = rng.integers(0, pixels // 4, indptr[-1]).astype(np.uint32)
data = np.ones(indptr[-1], np.uint8)
m = sp.csr_matrix((data, indices, indptr), shape=(frames, pixels))
ref = write(f"{t}/events", nav, sig, m, ">u8", "<u4", "|u1")
assert ref.max() > 1
np.save(f"{t}/events.npy", ref)

# Signed big-endian int32 values in 0..65535: settled to uint16.
nav, sig = (2, 16), (8, 8)
dense = ((rng.random(nav + sig) < 0.3) * rng.integers(1, 65535, nav + sig)).astype(">i4")
m = sp.csr_matrix(dense.reshape(32, -1))
ref = write(f"{t}/signed", nav, sig, m, "int64", "int16", ">i4")
np.save(f"{t}/signed.npy", ref.astype("<u2"))

# float32 values.
nav, sig = (2, 3), (8, 8)
dense = ((rng.random(nav + sig) < 0.3) * rng.normal(0, 100, nav + sig)).astype("<f4")
m = sp.csr_matrix(dense.reshape(6, -1))
ref = write(f"{t}/float", nav, sig, m, "<i4", "<i4", "float32")
np.save(f"{t}/float.npy", ref)
EOF

for set in counts events signed; do
    S="$T/$set/sparse.toml"
    expect 0 "$set inspect" -- "$QEM" inspect "$S"
    contains "$T/out" "csr"
    contains "$T/out" "rowind.dat"
    contains "$T/out" "coords.dat"
    contains "$T/out" "values.dat"
    expect 0 "$set inspect --json" -- "$QEM" inspect --json "$S"
    contains "$T/out" '"family": "csr"'
    contains "$T/out" '"flagged_pixels": 0'
    contains "$T/out" '"file": "values.dat"'
    contains "$T/out" '"duplicates"'
    expect 0 "$set save" -- "$QEM" save "$S" "$T/$set.qem"
    expect 0 "$set export" -- "$QEM" export "$T/$set.qem" "$T/$set-s.npy"
    same_array "$T/$set-s.npy" "$T/$set.npy"
    expect 0 "$set verify" -- "$QEM" verify "$T/$set.qem"
    expect 0 "$set info" -- "$QEM" info --json "$T/$set.qem"
    contains "$T/out" '"family": "csr"'
    expect 0 "$set pack" -- "$QEM" pack produce "$S" "$T/$set.h5"
    contains "$T/$set.h5.receipt.json" '"family": "csr"'
    expect 0 "$set pack export" -- "$QEM" export --raw "$T/$set.h5" "$T/$set-p.npy"
    same_array "$T/$set-p.npy" "$T/$set.npy" uint16
done
expect 0 "events inspect" -- "$QEM" inspect --json "$T/events/sparse.toml"
contains "$T/out" '"sample_type": "uint8"'
contains "$T/out" '"byte_order": "big-endian"'
expect 0 "signed inspect" -- "$QEM" inspect --json "$T/signed/sparse.toml"
contains "$T/out" '"sample_type": "int32"'
contains "$T/out" '"stored_as": "uint16"'

# float32 samples: saved and exported as they are.
expect 0 "float save" -- "$QEM" save "$T/float/sparse.toml" "$T/float.qem"
expect 0 "float export" -- "$QEM" export "$T/float.qem" "$T/float-s.npy"
same_array "$T/float-s.npy" "$T/float.npy"

# A pixel index past the detector: refused while reading, nothing written.
cp -r "$T/counts" "$T/broken"
"$PY" -c "
import numpy as np, sys
c = np.fromfile(sys.argv[1], '<i4'); c[-1] = 16 * 12; c.tofile(sys.argv[1])" "$T/broken/coords.dat"
expect 1 "index out of range" -- "$QEM" save "$T/broken/sparse.toml" "$T/broken.qem"
contains "$T/err" "names pixel 192"
absent "$T/broken.qem"

finish
