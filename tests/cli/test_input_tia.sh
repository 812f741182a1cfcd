#!/bin/sh
# Thermo Fisher/FEI TIA .ser series (HyperSpy's test files, Debian
# python3-hyperspy) through both writers and back, bit for bit against
# HyperSpy's own reading: `hyperspy.api.load` gives the reference, whose
# rows are flipped back (HyperSpy returns each frame upside down; qem keeps
# the file's row order) and which is reshaped to qem's 4D shape. Every
# 2D-image .ser there is read: 4D sets, single images and stacks with
# --scan-shape, an interrupted series (its valid frames); 1D spectra are
# refused, and so is an .emi with several series.
# usage: test_input_tia.sh QEM PYTHON (files in $QEM_HYPERSPY_IO)
set -u
QEM=$1
PY=$2
name=cli_input_tia
. "$(dirname "$0")/harness.sh"
IO=${QEM_HYPERSPY_IO:-/usr/lib/python3/dist-packages/hyperspy/tests/io}
if [ ! -d "$IO/FEI_new" ]; then
    echo "$name: $IO/FEI_new missing (install python3-hyperspy)" >&2
    exit 1
fi

# references [STEM SER ROWS COLUMNS]...: for each, $T/STEM.ref.npy, HyperSpy's
# array of SER with its rows flipped back to the file's order, the first
# ROWS x COLUMNS frames (an interrupted series: HyperSpy pads the missing
# ones with zeros) as (ROWS, COLUMNS, detector rows, detector columns).
# One Python for all: importing HyperSpy takes seconds.
references() {
    "$PY" - "$T" "$@" <<'EOF' || bad "HyperSpy cannot read the references"
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import hyperspy.api as hs
out, args = sys.argv[1], sys.argv[2:]
for i in range(0, len(args), 4):
    stem, src, rows, cols = args[i], args[i + 1], int(args[i + 2]), int(args[i + 3])
    data = np.asarray(hs.load(src).data)
    ny, nx = data.shape[-2:]
    frames = data.reshape(-1, ny, nx)[: rows * cols]
    np.save("%s/%s.ref.npy" % (out, stem),
            np.ascontiguousarray(frames[:, ::-1, :].reshape(rows, cols, ny, nx)))
EOF
}

# same GOT.npy REF.npy: the same 4D shape, and every value equal to the
# reference's exactly (int32 stored as uint16 or float32, which the open
# proved lossless), float bits included.
same() {
    if "$PY" - "$1" "$2" <<'EOF'
import sys
import numpy as np
got, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
if got.shape != ref.shape:
    sys.exit("shape %s, reference %s" % (got.shape, ref.shape))
conv = ref.astype(got.dtype)
if not np.array_equal(conv.astype(ref.dtype), ref):
    sys.exit("the reference does not fit %s" % got.dtype)
if got.tobytes() != np.ascontiguousarray(conv).tobytes():
    sys.exit("values differ from the reference")
EOF
    then ok; else bad "$1 differs from $2"; fi
}

# tia NAME SER ROWS COLUMNS STORED PACK [OPTIONS...]: save, export, verify,
# info, inspect; PACK "pack" also produces a pack and exports it --raw.
tia() {
    stem=$1; src=$2; rows=$3; cols=$4; stored=$5; pack=$6; shift 6
    expect 0 "save $stem" -- "$QEM" save --quiet "$src" "$T/$stem.qem" "$@"
    expect 0 "export $stem" -- "$QEM" export --quiet "$T/$stem.qem" "$T/$stem.npy"
    same "$T/$stem.npy" "$T/$stem.ref.npy"
    expect 0 "verify $stem" -- "$QEM" verify "$T/$stem.qem"
    expect 0 "info $stem" -- "$QEM" info --json "$T/$stem.qem"
    contains "$T/out" '"source_format": "tia"'
    expect 0 "inspect $stem" -- "$QEM" inspect --json "$src" "$@"
    contains "$T/out" '"family": "tia"'
    contains "$T/out" "\"stored_as\": \"$stored\""
    contains_text "$T/out" "\"shape\": [
    $rows,
    $cols,"
    if [ "$pack" = pack ]; then
        expect 0 "produce $stem" -- "$QEM" pack produce --quiet "$src" "$T/$stem.h5" "$@"
        contains "$T/$stem.h5.receipt.json" '"family": "tia"'
        expect 0 "export --raw $stem" -- "$QEM" export --quiet --raw "$T/$stem.h5" \
            "$T/$stem.raw.npy"
        same "$T/$stem.raw.npy" "$T/$stem.ref.npy"
    else
        expect 1 "produce $stem (float32)" -- "$QEM" pack produce --quiet "$src" "$T/$stem.h5" "$@"
        contains "$T/err" "packs hold exact"
        absent "$T/$stem.h5"
    fi
}

N=$IO/FEI_new
O=$IO/FEI_old
references d4 "$N/16x16-diffraction_imagel_5x5x256x256_EDS_2.ser" 5 5 \
    search "$N/128x128-TEM_search_1.ser" 1 1 \
    sum1 "$N/128x128_TEM_acquire-sum1_1.ser" 1 1 \
    preview "$N/128x128x5-diffraction_preview_1.ser" 1 5 \
    line "$N/16x16-line_profile_horizontal_5x128x128_EDS_2.ser" 1 5 \
    bf1 "$O/16x16_STEM_BF_DF_acquire_1.ser" 1 1 \
    bf2 "$O/16x16_STEM_BF_DF_acquire_2.ser" 1 1 \
    sbf1 "$O/16x16_STEM_BF_DF_search_1.ser" 1 1 \
    sbf2 "$O/16x16_STEM_BF_DF_search_2.ser" 1 1 \
    pbf1 "$O/16x16x5_STEM_BF_DF_preview_1.ser" 5 1 \
    pbf2 "$O/16x16x5_STEM_BF_DF_preview_2.ser" 5 1 \
    tem "$O/64x64_TEM_images_acquire_1.ser" 1 1 \
    dif "$O/64x64_diffraction_acquire_1.ser" 1 1 \
    tem5 "$O/64x64x5_TEM_preview_1.ser" 5 1 \
    scanning "$O/03_Scanning Preview_1.ser" 5 1

# --- 4D: the 5 x 5 scan of 256 x 256 diffraction patterns (int32) -------------
D4=$N/16x16-diffraction_imagel_5x5x256x256_EDS_2.ser
tia d4 "$D4" 5 5 float32 nopack
expect 0 "inspect d4, human" -- "$QEM" inspect "$D4"
contains "$T/out" "16x16-diffraction_imagel_5x5x256x256_EDS.emi"
contains "$T/out" "scan_sampling_row"
contains "$T/out" "accelerating_voltage = 200 kV"
expect 0 "inspect d4 --json" -- "$QEM" inspect --json "$D4"
contains "$T/out" '"series_version": "0x0220"'
contains "$T/out" '"read_as": "int32"'
contains "$T/out" '"microscope": "Microscope TalosF200X 200 kV D6308 XTwin"'
contains "$T/out" '"camera_length_m": "0.260"'
contains "$T/out" '"role": "data"'
contains "$T/out" '"scan_shape_from": "the dimension arrays'
expect 1 "d4 against its own scan shape" -- "$QEM" inspect "$D4" --scan-shape 1,25
contains "$T/err" "contradicts the scan shape 5x5"

# --- single images and stacks (a stack needs --scan-shape) ---------------------
tia search "$N/128x128-TEM_search_1.ser" 1 1 uint16 pack
tia sum1 "$N/128x128_TEM_acquire-sum1_1.ser" 1 1 float32 nopack
expect 1 "a stack without a scan shape" -- "$QEM" inspect "$N/128x128x5-diffraction_preview_1.ser"
contains "$T/err" "--scan-shape"
tia preview "$N/128x128x5-diffraction_preview_1.ser" 1 5 float32 nopack --scan-shape 1,5
tia line "$N/16x16-line_profile_horizontal_5x128x128_EDS_2.ser" 1 5 float32 nopack \
    --scan-shape 1,5
tia bf1 "$O/16x16_STEM_BF_DF_acquire_1.ser" 1 1 uint16 pack
tia bf2 "$O/16x16_STEM_BF_DF_acquire_2.ser" 1 1 uint16 pack
tia sbf1 "$O/16x16_STEM_BF_DF_search_1.ser" 1 1 uint16 pack
tia sbf2 "$O/16x16_STEM_BF_DF_search_2.ser" 1 1 uint16 pack
tia pbf1 "$O/16x16x5_STEM_BF_DF_preview_1.ser" 5 1 uint16 pack --scan-shape 5,1
tia pbf2 "$O/16x16x5_STEM_BF_DF_preview_2.ser" 5 1 uint16 pack --scan-shape 5,1
tia tem "$O/64x64_TEM_images_acquire_1.ser" 1 1 float32 nopack
tia dif "$O/64x64_diffraction_acquire_1.ser" 1 1 float32 nopack
tia tem5 "$O/64x64x5_TEM_preview_1.ser" 5 1 float32 nopack --scan-shape 5,1

# --- an interrupted series: 5 valid elements of 200 ------------------------------
expect 1 "interrupted, no scan shape" -- "$QEM" inspect "$O/03_Scanning Preview_1.ser"
contains "$T/err" "holds 5 frames"
tia scanning "$O/03_Scanning Preview_1.ser" 5 1 uint16 pack --scan-shape 5,1
expect 0 "interrupted facts" -- "$QEM" inspect --json "$O/03_Scanning Preview_1.ser" \
    --scan-shape 5,1
contains "$T/out" '"valid_elements": 5'
contains "$T/out" '"total_elements": 200'
contains "$T/out" "interrupted"

# --- opening the .emi -------------------------------------------------------------
expect 0 "the .emi of one series" -- "$QEM" inspect --json "$O/64x64_TEM_images_acquire.emi"
contains "$T/out" '"file": "64x64_TEM_images_acquire_1.ser"'
id_emi=$(grep identity_sha256 "$T/out")
expect 0 "its .ser" -- "$QEM" inspect --json "$O/64x64_TEM_images_acquire_1.ser"
id_ser=$(grep identity_sha256 "$T/out")
if [ -n "$id_ser" ] && [ "$id_emi" = "$id_ser" ]; then ok; else bad "the .emi, its .ser differ"; fi
expect 0 "save through the .emi" -- "$QEM" save --quiet "$O/64x64_TEM_images_acquire.emi" \
    "$T/emi.qem"
expect 0 "its export" -- "$QEM" export --quiet "$T/emi.qem" "$T/emi.npy"
same "$T/emi.npy" "$T/tem.ref.npy"
expect 1 "an .emi of two series" -- "$QEM" inspect "$N/16x16-diffraction_imagel_5x5x256x256_EDS.emi"
contains "$T/err" "16x16-diffraction_imagel_5x5x256x256_EDS_1.ser"
contains "$T/err" "16x16-diffraction_imagel_5x5x256x256_EDS_2.ser"
contains "$T/err" "open the .ser"

# --- without its .emi: read, and said ----------------------------------------------
cp "$O/16x16_STEM_BF_DF_acquire_1.ser" "$T/alone_1.ser"
expect 0 "a .ser alone" -- "$QEM" inspect --json "$T/alone_1.ser"
contains "$T/out" "'alone.emi' is not beside the .ser"
lacks "$T/out" '"role": "data"'

# --- refused ---------------------------------------------------------------------------
for s in "$N/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser" \
    "$O/16x16-point_spectrum-1x1024_1.ser" \
    "$O/X - Au NP EELS_2.ser"; do
    expect 1 "spectra $s" -- "$QEM" inspect "$s"
    contains "$T/err" "1D spectra"
done
expect 1 "an .emi whose series are spectra" -- "$QEM" save \
    "$N/16x16-spectrum_image_5x5x4000-not_square.emi" "$T/x.qem"
contains "$T/err" "1D spectra"
absent "$T/x.qem"

finish
