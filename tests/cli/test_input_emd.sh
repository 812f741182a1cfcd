#!/bin/sh
# Berkeley EMD and Velox EMD files through both writers, against HyperSpy's
# own reading of the same files (hyperspy.api.load, the reference): qem
# save, export, pack produce (integer data), export --raw, inspect --json,
# verify; refusals of what is not 4D-STEM frames.
# usage: test_input_emd.sh QEM PYTHON (HyperSpy's test files in
# $QEM_HYPERSPY_IO, default Debian's python3-hyperspy)
set -u
QEM=$1
PY=$2
name=cli_input_emd
. "$(dirname "$0")/harness.sh"
HS=${QEM_HYPERSPY_IO:-/usr/lib/python3/dist-packages/hyperspy/tests/io}
E="$HS/emd_files"
[ -f "$E/Si100_4D.emd" ] || { echo "HyperSpy's EMD test files are missing ($E)" >&2; exit 1; }

# reference FILE OUT.npy KEYWORDS...: HyperSpy's array of FILE (a Python
# expression of keyword arguments to hs.load, then `then` applied to the
# data) saved as OUT.npy.
reference() {
    "$PY" - "$@" <<'PYEOF' 2>"$T/hs.err"
import sys, warnings
warnings.simplefilter("ignore")
import logging
logging.disable(logging.CRITICAL)
import numpy as np
import hyperspy.api as hs
path, out, kwargs, then = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
s = hs.load(path, **eval(kwargs))
data = eval(then, {"np": np, "d": s.data})
np.save(out, np.ascontiguousarray(data))
PYEOF
    if [ $? -eq 0 ]; then ok; else bad "HyperSpy could not read $1"; cat "$T/hs.err" >&2; fi
}

# same_values GOT.npy REF.npy [DTYPE]: every value equal, C order, after
# reshaping the reference to the 4D shape qem gives (REF cast to DTYPE
# when HyperSpy widened it: Velox images come back as float64).
same_values() {
    if "$PY" - "$@" <<'PYEOF'
import sys, numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if len(sys.argv) > 3:
    cast = ref.astype(sys.argv[3])
    assert np.array_equal(cast.astype(ref.dtype), ref), "the cast would change values"
    ref = cast
ok = got.dtype == ref.dtype and got.size == ref.size and \
    got.tobytes() == np.ascontiguousarray(ref).reshape(got.shape).tobytes()
sys.exit(0 if ok else 1)
PYEOF
    then ok; else bad "$1 differs from $2"; fi
}

# --- Berkeley EMD: prismatic 4D-STEM simulation, two datacubes ------------------
S="$E/Si100_4D.emd"
G=4DSTEM_simulation/data/datacubes/CBED_array_depth0001
expect 1 "two datacubes, none chosen" -- "$QEM" inspect "$S"
contains "$T/err" "2 4D data groups"
contains "$T/err" "CBED_array_depth0000"
contains "$T/err" "CBED_array_depth0001"
contains "$T/err" "--dataset"
expect 1 "a group that is not there" -- "$QEM" inspect "$S" --dataset /nothing/here
contains "$T/err" "has no data group '/nothing/here'"
expect 1 "a scan shape that contradicts the 4D array" -- \
    "$QEM" inspect "$S" --dataset "$G" --scan-shape 1,121
contains "$T/err" "contradicts"
# HyperSpy returns prismatic's datacube as stored: (R_x, R_y, Q_x, Q_y) =
# qem's (scan rows, scan columns, detector rows, detector columns).
reference "$S" "$T/si.npy" "dict(dataset_path='$G/datacube')" "d"
expect 0 "emd inspect" -- "$QEM" inspect "$S" --dataset "$G" --json
contains "$T/out" '"family": "emd"'
contains "$T/out" '"sample_type": "float32"'
contains "$T/out" '"emd_version": "0.5"'
contains "$T/out" '"name": "R_x"'
contains "$T/out" '"name": "Q_y"'
contains "$T/out" "\"data_group\": \"/$G\""
expect 0 "emd inspect, human" -- "$QEM" inspect "$S" --dataset "$G/datacube"
contains "$T/out" "(11, 11, 8, 8)"
expect 0 "emd save" -- "$QEM" save "$S" "$T/si.qem" --dataset "$G"
expect 0 "emd export" -- "$QEM" export "$T/si.qem" "$T/si_q.npy"
same_values "$T/si_q.npy" "$T/si.npy"
expect 0 "emd verify" -- "$QEM" verify "$T/si.qem"
expect 0 "emd info" -- "$QEM" info --json "$T/si.qem"
contains "$T/out" '"family": "emd"'
expect 1 "float32 into a pack" -- "$QEM" pack produce "$S" "$T/si.h5" --dataset "$G"
absent "$T/si.h5"

# --- Berkeley EMD 0.2: an int32 3D stack named with a scan shape --------------
X="$E/example_signal.emd"
XS="--dataset /signals/__unnamed__ --scan-shape 1,3"
expect 1 "a 3D array only" -- "$QEM" inspect "$X"
contains "$T/err" "holds no 4D data group"
contains "$T/err" "/signals/__unnamed__ (3D)"
expect 1 "a 3D array without a scan shape" -- "$QEM" inspect "$X" --dataset /signals/__unnamed__
contains "$T/err" "--scan-shape"
# HyperSpy transposes every EMD array but prismatic's datacube (it reads
# the axes as Fortran order): qem reads the array as stored, so the
# reference is HyperSpy's data transposed back.
reference "$X" "$T/x.npy" "dict()" "np.transpose(d)"
expect 0 "int32 emd inspect" -- "$QEM" inspect "$X" $XS --json
contains "$T/out" '"sample_type": "int32"'
contains "$T/out" '"stored_as": "uint16"'
expect 0 "int32 emd save" -- "$QEM" save "$X" "$T/x.qem" $XS
expect 0 "int32 emd export" -- "$QEM" export "$T/x.qem" "$T/x_q.npy"
same_values "$T/x_q.npy" "$T/x.npy" uint16
expect 0 "int32 emd verify" -- "$QEM" verify "$T/x.qem"
expect 0 "int32 emd pack" -- "$QEM" pack produce "$X" "$T/x.h5" $XS
expect 0 "int32 emd pack export" -- "$QEM" export --raw "$T/x.h5" "$T/x_p.npy"
same_values "$T/x_p.npy" "$T/x.npy" uint16
expect 1 "a 2D EMD array" -- "$QEM" inspect "$E/example_image.emd" --dataset /signals/__unnamed__
contains "$T/err" "2 dimensions"

# --- Velox: an int16 TEM image stack -------------------------------------------
V="$E/fei_example_tem_stack.emd"
expect 1 "velox stack without a scan shape" -- "$QEM" inspect "$V"
contains "$T/err" "2 frames"
# HyperSpy gives (frames, y, x) as float64; frame k of qem is Data[:, :, k].
reference "$V" "$T/v.npy" "dict()" "d"
expect 0 "velox inspect" -- "$QEM" inspect "$V" --scan-shape 1,2 --json
contains "$T/out" '"family": "velox"'
contains "$T/out" '"sample_type": "int16"'
contains "$T/out" '"format": "Velox"'
contains "$T/out" '"scan_shape_from": "the caller"'
contains "$T/out" '"InstrumentClass"'
expect 0 "velox save" -- "$QEM" save "$V" "$T/v.qem" --scan-shape 1,2
expect 0 "velox export" -- "$QEM" export "$T/v.qem" "$T/v_q.npy"
same_values "$T/v_q.npy" "$T/v.npy" uint16
expect 0 "velox verify" -- "$QEM" verify "$T/v.qem"
expect 0 "velox pack" -- "$QEM" pack produce "$V" "$T/v.h5" --scan-shape 1,2
contains "$T/v.h5.receipt.json" '"family": "velox"'
expect 0 "velox pack export" -- "$QEM" export --raw "$T/v.h5" "$T/v_p.npy"
same_values "$T/v_p.npy" "$T/v.npy" uint16

# Complex (FFT) and several images.
expect 1 "velox complex FFT" -- "$QEM" inspect "$E/fei_example_complex_fft.emd"
contains "$T/err" "compound records (complex"
D="$E/fei_example_dpc_titles.emd"
expect 1 "velox, nine images" -- "$QEM" inspect "$D"
contains "$T/err" "holds 9 images"
expect 0 "velox, one image named" -- \
    "$QEM" inspect "$D" --dataset /Data/Image/643dbd384d1a4ac99526e39d4c1768d4 --json
contains "$T/out" '"sample_type": "uint16"'
expect 1 "velox, an image that is not there" -- "$QEM" inspect "$D" --dataset /Data/Image/nope
contains "$T/err" "has no image"

# --- Velox files of HyperSpy's zip (unzipped here, never into the repo) ---------
"$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
    "$E/fei_emd_files.zip" "$T/zip" || bad "cannot unzip fei_emd_files.zip"
Z="$T/zip/fei_emd_si.emd"
# A HAADF stack of 5 frames beside EDS spectrum streams: the image is read.
reference "$Z" "$T/z.npy" "dict(select_type='images', load_SI_image_stack=True)" "d"
expect 0 "velox SI image inspect" -- "$QEM" inspect "$Z" --scan-shape 1,5 --json
contains "$T/out" '"SpectrumStream": 1'
contains "$T/out" '"frames_from_camera": false'
expect 0 "velox SI image save" -- "$QEM" save "$Z" "$T/z.qem" --scan-shape 1,5
expect 0 "velox SI image export" -- "$QEM" export "$T/z.qem" "$T/z_q.npy"
same_values "$T/z_q.npy" "$T/z.npy" uint16
expect 0 "velox SI image pack" -- "$QEM" pack produce "$Z" "$T/z.h5" --scan-shape 1,5
expect 0 "velox SI image pack export" -- "$QEM" export --raw "$T/z.h5" "$T/z_p.npy"
same_values "$T/z_p.npy" "$T/z.npy" uint16
expect 1 "velox spectrum stream named" -- \
    "$QEM" inspect "$Z" --dataset /Data/SpectrumStream/ca60be96f3d5453cb0cebe70ec2649ea
contains "$T/err" "EDS spectra, not 4D-STEM"
expect 1 "velox spectra only" -- "$QEM" inspect "$T/zip/fei_emd_spectrum.emd"
contains "$T/err" "holds only EDS spectra"
# Chunks never written (HyperSpy reads zeros): refused.
expect 1 "velox camera image without its chunks" -- "$QEM" inspect "$T/zip/1532 Camera Ceta.emd"
contains "$T/err" "stores only 0 of its 49 chunks"
# A single image of one frame: scan shape 1x1.
expect 0 "velox one frame" -- "$QEM" inspect "$T/zip/fei_emd_image.emd" --json
contains "$T/out" '"scan_shape_from": "one frame"'
reference "$T/zip/fei_emd_image.emd" "$T/i.npy" "dict()" "d"
expect 0 "velox one frame save" -- "$QEM" save "$T/zip/fei_emd_image.emd" "$T/i.qem"
expect 0 "velox one frame export" -- "$QEM" export "$T/i.qem" "$T/i_q.npy"
same_values "$T/i_q.npy" "$T/i.npy" uint16

# EMD 1.0 as h5py writes it (emdfile, py4DSTEM >= 0.14): variable-length
# UTF-8 string attributes ("array", "root"), read in the file's character
# set; the values against numpy's array.
"$PY" - "$T" <<'PYEOF'
import sys
import h5py
import numpy as np
t = sys.argv[1]
v = (np.arange(2 * 3 * 4 * 5) * 7 % 1000).astype("<u2").reshape(2, 3, 4, 5)
np.save(t + "/h5py_ref.npy", v)
with h5py.File(t + "/h5py.emd", "w") as f:
    f.attrs["version_major"] = 1
    f.attrs["version_minor"] = 0
    root = f.create_group("root")
    root.attrs["emd_group_type"] = "root"
    g = root.create_group("datacube")
    g.attrs["emd_group_type"] = "array"
    g.create_dataset("data", data=v)
    for k, name in enumerate(("Rx", "Ry", "Qx", "Qy")):
        d = g.create_dataset("dim%d" % k, data=np.arange(v.shape[k]))
        d.attrs["name"] = name
        d.attrs["units"] = "pixels"
PYEOF
expect 0 "h5py EMD 1.0 save" -- "$QEM" save --quiet "$T/h5py.emd" "$T/h5py.qem"
expect 0 "h5py EMD 1.0 export" -- "$QEM" export --quiet "$T/h5py.qem" "$T/h5py_q.npy"
same_values "$T/h5py_q.npy" "$T/h5py_ref.npy"

finish
