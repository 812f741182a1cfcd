#!/bin/sh
# End-to-end tests of the qem command: usage, save/info/verify/export round
# trip, refusals with their messages and exit codes, and never overwriting.
# usage: test_cli.sh QEM QEM_SYNTH NPY_FIXTURE
set -u
QEM=$1
SYNTH=$2
NPY=$3
name=cli_qem
. "$(dirname "$0")/harness.sh"

expect 2 "no arguments" -- "$QEM"
expect 0 "--help" -- "$QEM" --help
contains "$T/out" "save SRC OUT.qem"
contains "$T/out" "dp FILE (--scan"
expect 0 "--version" -- "$QEM" --version
contains "$T/out" "qem 0.2.0"
expect 0 "help save" -- "$QEM" help save
contains "$T/out" "--chunk-scans"
expect 0 "save --help" -- "$QEM" save --help
contains "$T/out" "--valid"
expect 2 "unknown command" -- "$QEM" frobnicate
expect 2 "unknown option" -- "$QEM" save --bogus a.npy b.qem
expect 2 "missing argument" -- "$QEM" save only.npy
expect 2 "bad thread count" -- "$QEM" verify x.qem --threads 0
expect 2 "--threads past the library's limit" -- "$QEM" verify x.qem --threads 1025
contains "$T/err" "1 to 1024"

# A synthetic acquisition through save, info, verify and export.
expect 0 "synth" -- "$SYNTH" "$T/a.npy" --shape 8,8,32,32 --dose 3
expect 0 "save" -- "$QEM" save "$T/a.npy" "$T/a.qem" --chunk-scans 20
contains "$T/out" "ratio"
expect 0 "info" -- "$QEM" info "$T/a.qem"
contains "$T/out" "runtime-column-rans-spatial-v2"
contains "$T/out" "8 x 8 scan positions, 32 x 32 detector pixels"
contains "$T/out" "chunks             4"
contains "$T/out" "lossless_storage"
expect 0 "info --json" -- "$QEM" info --json "$T/a.qem"
contains "$T/out" '"compression_ratio"'
contains "$T/out" '"dtype": "uint16"'
expect 0 "verify" -- "$QEM" verify "$T/a.qem"
contains "$T/out" "^OK"
expect 0 "export" -- "$QEM" export "$T/a.qem" "$T/b.npy"
if cmp -s "$T/a.npy" "$T/b.npy"; then ok; else bad "exported .npy differs from the source"; fi
expect 0 "quiet save prints nothing" -- "$QEM" save --quiet "$T/a.npy" "$T/q.qem"
if [ -s "$T/out" ]; then bad "--quiet printed output"; else ok; fi

# A validity mask changes the sums, never the counts.
expect 0 "mask fixture" -- "$NPY" mask "$T/mask.npy"
expect 0 "u16 fixture" -- "$NPY" u16 "$T/u16.npy"
expect 0 "save --valid" -- "$QEM" save "$T/u16.npy" "$T/m.qem" --valid "$T/mask.npy"
expect 0 "info masked" -- "$QEM" info "$T/m.qem"
contains "$T/out" "63 of 64 detector pixels"
expect 0 "verify masked" -- "$QEM" verify "$T/m.qem"
expect 0 "export masked" -- "$QEM" export "$T/m.qem" "$T/m.npy"
if cmp -s "$T/u16.npy" "$T/m.npy"; then ok; else bad "masked export differs"; fi
expect 1 "mask of the wrong shape" -- "$QEM" save "$T/a.npy" "$T/w.qem" --valid "$T/mask.npy"
contains "$T/err" "detector shape"

# Refusals: existing destinations, unsupported inputs, damaged files.
cp "$T/a.qem" "$T/keep.qem"
expect 1 "existing destination" -- "$QEM" save "$T/a.npy" "$T/a.qem"
contains "$T/err" "already exists"
if cmp -s "$T/a.qem" "$T/keep.qem"; then ok; else bad "existing destination was altered"; fi
# ... said before any work: even a source that is not there comes second.
cp "$T/a.npy" "$T/taken.npy"
for c in "export $T/nowhere.qem $T/taken.npy" "mean $T/nowhere.qem -o $T/taken.npy" \
         "com $T/nowhere.qem -o $T/taken.npy" "save $T/nowhere.npy $T/a.qem"; do
    # shellcheck disable=SC2086
    expect 1 "existing destination first: $c" -- "$QEM" $c
    contains "$T/err" "already exists"
done
if cmp -s "$T/a.npy" "$T/taken.npy"; then ok; else bad "existing destination was altered"; fi
expect 1 "existing export destination" -- "$QEM" export "$T/a.qem" "$T/b.npy"

# float32: every bit kept; a dark plane is recorded but never applied.
expect 0 "f32 fixture" -- "$NPY" f32 "$T/f.npy"
expect 0 "dark fixture" -- "$NPY" dark "$T/dark.npy"
expect 0 "float32 save" -- "$QEM" save "$T/f.npy" "$T/f.qem" --dark "$T/dark.npy"
contains "$T/out" "float32-bit-lanes-rans-v1"
expect 0 "float32 info" -- "$QEM" info "$T/f.qem"
contains "$T/out" "mean-dark plane"
contains "$T/out" "mean_dark_subtraction"
expect 0 "float32 verify" -- "$QEM" verify "$T/f.qem"
expect 0 "float32 export" -- "$QEM" export "$T/f.qem" "$T/f2.npy"
if cmp -s "$T/f.npy" "$T/f2.npy"; then ok; else bad "float32 export differs from the source"; fi
expect 2 "float32 with a mask" -- "$QEM" save "$T/f.npy" "$T/fm.qem" --valid "$T/mask.npy"
contains "$T/err" "validity mask"
expect 2 "dark for counts" -- "$QEM" save "$T/u16.npy" "$T/ud.qem" --dark "$T/dark.npy"

# Calibration: recorded quantities and overrides, shown apart; kept on re-save.
cat > "$T/cal.json" <<'JSON'
{"quantities": {"electron_source/accelerating_voltage": {"value": 300000, "unit": "V"},
                "scan_controller/regular_scan/pixel_size_row": {"value": 0.5, "unit": "nm"},
                "scan_controller/regular_scan/pixel_size_column": {"value": 0.5, "unit": "nm"}},
 "overrides": {"illumination_system/semi_convergence_angle":
                  {"value": 21.4, "unit": "mrad", "evidence": "aperture calibration 2026-11"}}}
JSON
expect 0 "save --calibration" -- "$QEM" save "$T/u16.npy" "$T/c.qem" --calibration "$T/cal.json"
expect 0 "info calibration" -- "$QEM" info "$T/c.qem"
contains "$T/out" "accelerating_voltage = 300 kV"
contains "$T/out" "scan_row = 5 angstrom"
contains "$T/out" "semi_convergence_angle = 21.4 mrad (user_override)"
expect 0 "re-save" -- "$QEM" save "$T/c.qem" "$T/c2.qem" --chunk-scans 5
expect 0 "info re-saved" -- "$QEM" info "$T/c2.qem"
contains "$T/out" "semi_convergence_angle = 21.4 mrad (user_override)"
contains "$T/out" "chunks             3"
echo '{"overrides": {"illumination_system/semi_convergence_angle": {"value": 21.4, "unit": "mrad"}}}' > "$T/noev.json"
expect 1 "override without evidence" -- "$QEM" save "$T/u16.npy" "$T/n.qem" --calibration "$T/noev.json"
contains "$T/err" "evidence"
expect 0 "3d fixture" -- "$NPY" 3d "$T/s.npy"
expect 1 "3D source" -- "$QEM" save "$T/s.npy" "$T/s.qem"
contains "$T/err" "--scan-shape"
expect 2 "not .qem" -- "$QEM" save "$T/a.npy" "$T/a.h5"
expect 1 "missing source" -- "$QEM" save "$T/none.npy" "$T/n.qem"
expect 1 "info of a non-QEM file" -- "$QEM" info "$T/a.npy"
contains "$T/err" "neither a .qem file nor a Lossless Pack Format v1 file (it is a .npy array"
if ls -a "$T" | grep -q '^\.qem-'; then bad "temporary files left behind"; else ok; fi

# Pack production: inspect, plan, produce in both profiles, then our reader.
expect 0 "pack --help" -- "$QEM" pack --help
contains "$T/out" "re-authenticates"
expect 0 "pack source" -- "$SYNTH" "$T/pk.npy" --shape 8,8,32,32 --dose 3 --dtype uint16
expect 0 "pack inspect" -- "$QEM" pack inspect "$T/pk.npy"
contains "$T/out" "(8, 8, 32, 32)"
contains "$T/out" "source identity"
expect 0 "pack inspect --json" -- "$QEM" pack inspect --json "$T/pk.npy"
contains "$T/out" '"role": "master"'
expect 0 "pack plan" -- "$QEM" pack plan "$T/pk.npy"
contains "$T/out" "1 shards of 64 scan positions"
expect 1 "pack plan short of disk" -- "$QEM" pack plan "$T/pk.npy" --available-disk 100
contains "$T/err" "100 are available"
expect 2 "pack plan bad profile" -- "$QEM" pack plan "$T/pk.npy" --profile u12
expect 0 "pack produce" -- "$QEM" pack produce "$T/pk.npy" "$T/pk.h5"
contains "$T/out" "pk.h5.receipt.json"
expect 0 "produced pack verifies" -- "$QEM" verify "$T/pk.h5"
expect 0 "produced pack exports" -- "$QEM" export --raw "$T/pk.h5" "$T/pk_back.npy"
if cmp -s "$T/pk.npy" "$T/pk_back.npy"; then ok; else bad "produced pack differs from its source"; fi
expect 1 "pack produce over an existing pack" -- "$QEM" pack produce "$T/pk.npy" "$T/pk.h5"
contains "$T/err" "already exists"
expect 1 "u8 profile of hot counts" -- "$QEM" pack produce "$T/pk.npy" "$T/pk8.h5" --profile u8-bitpacked
contains "$T/err" "use the uint16/LZ4 profile"
if [ -e "$T/pk8.h5" ] || [ -e "$T/pk8.h5.receipt.json" ]; then bad "a refused produce left files"; else ok; fi
expect 0 "hot fixture" -- "$NPY" hot "$T/hot.npy"
expect 0 "hot mask fixture" -- "$NPY" hotmask "$T/hotmask.npy"
expect 1 "u8 profile without the hot pixel excluded" -- "$QEM" pack produce "$T/hot.npy" "$T/h8.h5" --profile u8-bitpacked
contains "$T/err" "detector pixel 9 holds 4000"
expect 0 "u8 profile with it excluded" -- "$QEM" pack produce "$T/hot.npy" "$T/h8.h5" --profile u8-bitpacked --exclude "$T/hotmask.npy"
expect 0 "u8 pack info" -- "$QEM" info "$T/h8.h5"
contains "$T/out" "exact-uint8-bitpacked"
expect 0 "u8 pack raw export" -- "$QEM" export --raw "$T/h8.h5" "$T/h8.npy"
if cmp -s "$T/hot.npy" "$T/h8.npy"; then ok; else bad "u8 pack differs from its source"; fi
expect 0 "uint8 source" -- "$SYNTH" "$T/u8src.npy" --shape 4,8,8,8 --dtype uint8
expect 0 "inspect a uint8 source" -- "$QEM" pack inspect "$T/u8src.npy"
contains "$T/out" "npy, uint8"
expect 0 "uint16 profile of a uint8 source" -- "$QEM" pack produce --quiet "$T/u8src.npy" "$T/u16of8.h5"
expect 0 "uint8 profile of a uint8 source" -- "$QEM" pack produce "$T/u8src.npy" "$T/u8.h5" --profile u8-bitpacked
expect 0 "uint8 pack verifies" -- "$QEM" verify "$T/u8.h5"
expect 0 "uint16-of-uint8 pack verifies" -- "$QEM" verify "$T/u16of8.h5"
expect 0 "u8 pack raw export" -- "$QEM" export --quiet --raw "$T/u8.h5" "$T/u8raw.npy"
expect 0 "u16 pack of u8 raw export" -- "$QEM" export --quiet --raw "$T/u16of8.h5" "$T/u16of8raw.npy"
if cmp -s "$T/u8raw.npy" "$T/u16of8raw.npy"; then ok; else bad "the two profiles of a uint8 source differ"; fi

# Products: every command, every output format, and the refusals.
expect 0 "products source" -- "$SYNTH" "$T/pr.npy" --shape 8,8,48,48 --dose 20
expect 0 "products .qem" -- "$QEM" save --quiet "$T/pr.npy" "$T/pr.qem"
expect 0 "products pack" -- "$QEM" pack produce --quiet "$T/pr.npy" "$T/pr.h5"
expect 0 "virtual bf" -- "$QEM" virtual "$T/pr.qem" --detector bf -o "$T/bf.npy"
contains "$T/err" "from the estimate"
expect 0 "virtual bf from the pack" -- "$QEM" virtual "$T/pr.h5" --detector bf -o "$T/bfp.npy"
if cmp -s "$T/bf.npy" "$T/bfp.npy"; then ok; else bad ".qem and pack virtual images differ"; fi
# --device cuda: the same image on a usable GPU, else refused saying why
# (never computed on the CPU instead); .qem files are refused either way.
if "$QEM" virtual "$T/pr.h5" --detector bf --device cuda -o "$T/bfg.npy" 2>"$T/err"; then
    if cmp -s "$T/bfp.npy" "$T/bfg.npy"; then ok; else bad "GPU and CPU virtual images differ"; fi
else
    contains "$T/err" "cuda: "
    if [ -e "$T/bfg.npy" ]; then bad "a refused --device cuda wrote its output"; else ok; fi
fi
expect 1 "--device cuda on a .qem file" -- "$QEM" virtual "$T/pr.qem" --detector bf --device cuda -o "$T/bfq.npy"
contains "$T/err" ".qem files do not run on the GPU yet"
expect 2 "--device of another kind" -- "$QEM" virtual "$T/pr.h5" --detector bf --device tpu -o "$T/bft.npy"
expect 0 "virtual reference path" -- "$QEM" virtual "$T/pr.qem" --detector bf --reference -o "$T/bfr.npy"
if cmp -s "$T/bf.npy" "$T/bfr.npy"; then ok; else bad "fast and reference paths differ"; fi
expect 0 "virtual adf png" -- "$QEM" virtual "$T/pr.qem" --detector adf --center 24,24 --radius 6 -o "$T/adf.png"
expect 0 "virtual annulus tif json" -- "$QEM" virtual "$T/pr.h5" --detector annulus --center 24,24 --radius 6 --inner 3 --outer 9 -o "$T/ann.tif" --json
contains "$T/out" '"center_radius_from": "given"'
contains "$T/out" '"format": "tiff"'
expect 0 "annulus by its bounds needs no radius" -- "$QEM" virtual "$T/pr.qem" --detector annulus --center 24,24 --inner 3 --outer 9 -o "$T/ann2.npy" --json
contains "$T/out" '"center_radius_from": "given"'
contains "$T/out" '"radius": null'
expect 0 "mask fixture 48" -- "$NPY" mask48 "$T/m48.npy"
expect 0 "virtual mask" -- "$QEM" virtual "$T/pr.qem" --mask "$T/m48.npy" -o "$T/vm.npy"
expect 1 "virtual mask of the wrong shape" -- "$QEM" virtual "$T/pr.qem" --mask "$T/mask.npy" -o "$T/vw.npy"
expect 2 "virtual without a detector" -- "$QEM" virtual "$T/pr.qem" -o "$T/v0.npy"
expect 2 "virtual unknown detector" -- "$QEM" virtual "$T/pr.qem" --detector xyz -o "$T/v1.npy"
expect 2 "virtual bad extension" -- "$QEM" virtual "$T/pr.qem" --detector bf -o "$T/v.jpg"
expect 1 "virtual mrad without a semi-angle" -- "$QEM" virtual "$T/pr.h5" --detector bf --unit mrad -o "$T/v2.npy"
contains "$T/err" "semi-angle"
expect 0 "virtual mrad with a semi-angle" -- "$QEM" virtual "$T/pr.h5" --detector bf --unit mrad --semiangle 20 -o "$T/v3.npy"
expect 0 "mean" -- "$QEM" mean "$T/pr.h5" -o "$T/mean.tif"
expect 0 "dp region" -- "$QEM" dp "$T/pr.qem" --region 0:2,0:3 --reduce max -o "$T/rmax.npy" --json
contains "$T/out" '"dtype": "uint64"'
expect 2 "dp with scan and region" -- "$QEM" dp "$T/pr.qem" --scan 0,0 --region 0:1,0:1 -o "$T/x.npy"
expect 1 "dp empty region" -- "$QEM" dp "$T/pr.qem" --region 2:2,0:1 -o "$T/x.npy"
expect 0 "com" -- "$QEM" com "$T/pr.qem" --subtract-mean -o "$T/com.tif"
expect 1 "com as png" -- "$QEM" com "$T/pr.qem" -o "$T/com.png"
contains "$T/err" ".tif"
expect 0 "dpc" -- "$QEM" dpc "$T/pr.h5" -o "$T/phase.npy" --json
contains "$T/out" '"ffts": 2'
expect 0 "dpc fixed rotation" -- "$QEM" dpc "$T/pr.h5" --rotation 12.5 -o "$T/phase2.npy" --json
contains "$T/out" '"rotation_searched": false'
expect 0 "calibrate" -- "$QEM" calibrate "$T/pr.qem" --json
contains "$T/out" "mean-diffraction-half-maximum"
expect 0 "calibrate a pack copy" -- "$QEM" calibrate "$T/pr.h5" -o "$T/prc.h5"
expect 0 "calibrated pack info" -- "$QEM" info "$T/prc.h5"
contains "$T/out" "mean-diffraction-half-maximum"
expect 0 "calibrate a .qem copy" -- "$QEM" calibrate "$T/pr.qem" -o "$T/prc.qem"
expect 0 "virtual uses the recorded calibration" -- "$QEM" virtual "$T/prc.qem" --detector bf -o "$T/bfc.npy"
contains "$T/err" "file detector calibration"
if cmp -s "$T/bf.npy" "$T/bfc.npy"; then ok; else bad "recorded and estimated calibration give different images"; fi
expect 1 "calibrate onto an existing file" -- "$QEM" calibrate "$T/pr.h5" -o "$T/prc.h5"
expect 1 "product never overwrites" -- "$QEM" mean "$T/pr.h5" -o "$T/mean.tif"

if [ -n "${QEM_SHARED_DIR:-}" ]; then
    C="$QEM_SHARED_DIR/fixtures/qem/corrupt"
    expect 1 "truncated" -- "$QEM" verify "$C/truncated.qem"
    contains "$T/err" "length disagrees"
    expect 1 "header checksum" -- "$QEM" verify "$C/flipped_header_byte.qem"
    contains "$T/err" "header checksum mismatch"
    expect 1 "body checksum" -- "$QEM" verify "$C/flipped_body_byte.qem"
    contains "$T/err" "body checksum mismatch"
    expect 1 "unknown codec" -- "$QEM" info "$C/unknown_codec_rehashed.qem"
    contains "$T/err" "update qem"
    expect 1 "bad rANS stream" -- "$QEM" verify "$C/bad_rans_stream_rehashed.qem"
    contains "$T/err" "invalid final state"
    expect 0 "upstream file verifies" -- "$QEM" verify "$QEM_SHARED_DIR/fixtures/qem/u8_sparse_lowdose.qem"

    # Packs: info, verify, export and dp work on them as on .qem files.
    P="$QEM_SHARED_DIR/fixtures/pack"
    expect 0 "pack info" -- "$QEM" info "$P/v1_u16_excluded_retained.h5"
    contains "$T/out" "exact-uint16-lz4"
    contains "$T/out" "exact_retained_payload"
    contains "$T/out" "bright-field radius 2.6 px"
    expect 0 "pack info --timings" -- "$QEM" info --timings "$P/v1_u16_4x32_16x16.h5"
    contains "$T/out" "first detector image"
    contains "$T/out" "warm page cache"
    expect 0 "pack info --json" -- "$QEM" info --json "$P/v3_upstream_test_writer_notes_v3.h5"
    contains "$T/out" '"raw_access": "exact_exclusion_constants"'
    expect 0 "pack verify" -- "$QEM" verify "$P/v1_u16_excluded_retained.h5"
    contains "$T/out" "2 payload digests verified"
    expect 0 "v3 verify" -- "$QEM" verify "$P/v3_upstream_test_writer_notes_v3.h5"
    contains "$T/out" "--expect-sha256"
    expect 0 "v3 verify with identity" -- "$QEM" verify "$P/v3_upstream_test_writer_notes_v3.h5" \
        --expect-sha256 7b26c476522683ac9e7ba2f04d5f1b8205cc9a59a3d6900ff331cb3269e1ce56
    contains "$T/out" "whole-file identity verified"
    expect 1 "v3 verify with a wrong identity" -- "$QEM" verify "$P/v3_upstream_test_writer_notes_v3.h5" \
        --expect-sha256 0b26c476522683ac9e7ba2f04d5f1b8205cc9a59a3d6900ff331cb3269e1ce56
    contains "$T/err" "expected identity"
    expect 0 "pack export" -- "$QEM" export "$P/v1_u16_4x32_16x16.h5" "$T/p.npy"
    if cmp -s "$T/p.npy" "$P/v1_u16_4x32_16x16.npy"; then ok; else bad "pack export differs from the source"; fi
    expect 0 "pack export --raw" -- "$QEM" export --raw "$P/v1_u16_excluded_retained.h5" "$T/r.npy"
    if cmp -s "$T/r.npy" "$P/v1_u16_excluded_retained.npy"; then ok; else bad "raw export differs from the source"; fi
    expect 1 "raw refused" -- "$QEM" export --raw "$P/v3_upstream_test_writer_legacy_nonportable.h5" "$T/l.npy"
    contains "$T/err" "admits only mask-applied"
    if [ -e "$T/l.npy" ]; then bad "a refused export left a file"; else ok; fi
    expect 0 "pack dp" -- "$QEM" dp "$P/v3_upstream_test_writer_notes_v3.h5" --scan 0,63 -o "$T/dp.npy"
    expect 0 "qem dp" -- "$QEM" dp "$T/a.qem" --scan 7,7 -o "$T/dpq.npy"
    expect 2 "dp without --scan" -- "$QEM" dp "$T/a.qem" -o "$T/x.npy"
    expect 1 "dp outside the scan" -- "$QEM" dp "$T/a.qem" --scan 8,0 -o "$T/x.npy"
    expect 1 "corrupt pack" -- "$QEM" verify "$P/corrupt/v3_payload_byte_flipped.h5"
    contains "$T/err" "direct payload failed SHA-256"
    expect 1 "pack with a bad CRC" -- "$QEM" info "$P/corrupt/v1_json_byte_flipped.h5"
    contains "$T/err" "CRC-32"
else
    bad "QEM_SHARED_DIR is not set; the fixture checks could not run"
fi

finish
