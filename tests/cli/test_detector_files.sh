#!/bin/sh
# Real detector files (and small ones made here) through both writers:
# qem save and qem pack produce, exported again and compared with the
# reference arrays bit for bit; qem inspect; exact uint32 narrowing.
# usage: test_detector_files.sh QEM PYTHON (fixtures in $QEM_SHARED_DIR)
set -u
QEM=$1
PY=$2
name=cli_detector_files
. "$(dirname "$0")/harness.sh"
: "${QEM_SHARED_DIR:?QEM_SHARED_DIR must name the shared fixtures}"
D="$QEM_SHARED_DIR/fixtures/detectors"

# same_array EXPORTED.npy REFERENCE.npy [DTYPE]: equal values and C-order
# bytes after reshaping the reference to the exported 4D shape (and
# casting it to DTYPE, for narrowed sources).
same_array() {
    if "$PY" - "$@" <<'EOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if len(sys.argv) > 3:
    ref = np.where(ref > 65535, 65535, ref).astype(sys.argv[3])
sys.exit(0 if got.dtype == ref.dtype and got.size == ref.size
         and np.array_equal(got.reshape(-1), ref.reshape(-1))
         and got.tobytes() == np.ascontiguousarray(ref).tobytes() else 1)
EOF
    then ok; else bad "$1 differs from $2"; fi
}

# --- Dectris Arina: master + bitshuffle/LZ4 uint32 data file ------------------
A="$D/arina/test_00_master.h5"
expect 1 "arina without a scan shape" -- "$QEM" save "$A" "$T/a.qem"
contains "$T/err" "--scan-shape"
expect 0 "arina save" -- "$QEM" save "$A" "$T/a.qem" --scan-shape 4,4
expect 0 "arina export" -- "$QEM" export "$T/a.qem" "$T/a.npy"
same_array "$T/a.npy" "$D/arina/test_00_data_000001.npy" uint16
expect 0 "arina info" -- "$QEM" info --json "$T/a.qem"
contains "$T/out" '"family": "arina"'
contains "$T/out" '"sample_type": "uint32"'
contains "$T/out" '"max_admitted_value": 0'
contains "$T/out" '"countrate_correction_applied"'
contains "$T/out" '"source_format": "arina"'
contains "$T/out" '"calibration_from_source": "none'
expect 0 "arina verify" -- "$QEM" verify "$T/a.qem"
expect 0 "arina pack" -- "$QEM" pack produce "$A" "$T/a.h5" --scan-shape 4,4
contains "$T/a.h5.receipt.json" '"sampleType": "uint32"'
contains "$T/a.h5.receipt.json" '"maximumAdmittedValue": 0'
contains "$T/a.h5.receipt.json" '"family": "arina"'
expect 0 "arina pack export" -- "$QEM" export --raw "$T/a.h5" "$T/ap.npy"
same_array "$T/ap.npy" "$D/arina/test_00_data_000001.npy" uint16
expect 1 "arina u8 pack, 16 scans" -- "$QEM" pack produce "$A" "$T/a8.h5" --scan-shape 4,4 --profile u8-bitpacked
contains "$T/err" "multiple of 32; 16 is not"
absent "$T/a8.h5"
expect 0 "arina inspect" -- "$QEM" inspect "$A" --scan-shape 4,4 --json
contains "$T/out" '"stored_as": "uint16"'
contains "$T/out" '"identity_sha256"'
expect 0 "arina inspect, human" -- "$QEM" inspect "$A" --scan-shape 4,4
contains "$T/out" "uint32, stored as uint16"
contains "$T/out" "test_00_data_000001.h5"

# --- Dectris Eiger data file opened on its own (a plain HDF5 dataset) --------
E="$D/eiger/eiger2_simread7_2datafiles_4images_bslz4_data_000001.h5"
expect 0 "eiger save" -- "$QEM" save "$E" "$T/e.qem" --scan-shape 1,2
expect 0 "eiger export" -- "$QEM" export "$T/e.qem" "$T/e.npy"
same_array "$T/e.npy" "$D/eiger/eiger2_simread7_2datafiles_4images_bslz4_data_000001.npy"
expect 0 "eiger pack" -- "$QEM" pack produce "$E" "$T/e.h5" --scan-shape 1,2
expect 0 "eiger pack export" -- "$QEM" export --raw "$T/e.h5" "$T/ep.npy"
same_array "$T/ep.npy" "$D/eiger/eiger2_simread7_2datafiles_4images_bslz4_data_000001.npy"

# --- uint32 at the uint16 limit: 65535 passes, 65536 fails naming it ---------
"$PY" - "$T" <<'EOF'
import sys, numpy as np
a = np.zeros((2, 3, 4, 5), '<u4'); a[1, 2, 3, 4] = 65535
np.save(sys.argv[1] + '/limit.npy', a)
a[0, 1, 2, 3] = 65536
np.save(sys.argv[1] + '/over.npy', a)
np.save(sys.argv[1] + '/big_endian.npy', a.astype('>u4') // 2)
np.save(sys.argv[1] + '/stack.npy', (np.arange(6 * 4 * 5) % 251).astype('>u2').reshape(6, 4, 5))
EOF
expect 0 "uint32 at 65535" -- "$QEM" save "$T/limit.npy" "$T/limit.qem"
expect 0 "its export" -- "$QEM" export "$T/limit.qem" "$T/limit_back.npy"
same_array "$T/limit_back.npy" "$T/limit.npy" uint16
expect 1 "uint32 at 65536" -- "$QEM" save "$T/over.npy" "$T/over.qem"
contains "$T/err" "scan position (0, 1), detector pixel (2, 3) holds 65536"
absent "$T/over.qem"
expect 1 "uint32 at 65536, pack" -- "$QEM" pack produce "$T/over.npy" "$T/over.h5"
contains "$T/err" "holds 65536"
absent "$T/over.h5"
absent "$T/over.h5.receipt.json"
expect 0 "big-endian uint32" -- "$QEM" save "$T/big_endian.npy" "$T/be.qem"
expect 0 "its export" -- "$QEM" export "$T/be.qem" "$T/be_back.npy"
same_array "$T/be_back.npy" "$T/big_endian.npy" uint16
expect 0 "big-endian 3D stack" -- "$QEM" save "$T/stack.npy" "$T/stack.qem" --scan-shape 2,3
expect 0 "its export" -- "$QEM" export "$T/stack.qem" "$T/stack_back.npy"
same_array "$T/stack_back.npy" "$T/stack.npy" uint16

# --- formats read elsewhere are named ------------------------------------------
printf '\000\000\000\004rest of a DM4 header' >"$T/image.dm4"
expect 1 "a DM4 file" -- "$QEM" save "$T/image.dm4" "$T/x.qem"
contains "$T/err" "Gatan Digital Micrograph"
printf 'IMGBLO\002\001rest' >"$T/scan.blo"
expect 1 "a blockfile" -- "$QEM" inspect "$T/scan.blo"
contains "$T/err" "blockfile"
absent "$T/x.qem"

finish
