#!/bin/sh
# The hostile-user cases of issue 12, one block per defect: inputs that are
# not regular files, signals during long work, --expect-sha256 for both
# formats, terminal injection, a source changed during save, strict
# numbers, file-size limits, the naming rule, options that cannot apply,
# and the messages. Each check failed before its fix.
# usage: test_hardening.sh QEM QEM_SYNTH NPY_FIXTURE HOSTILE_FIXTURE PYTHON
set -u
QEM=$1
SYNTH=$2
NPY=$3
HOSTILE=$4
PY=$5
name=cli_hardening
. "$(dirname "$0")/harness.sh"
: "${QEM_SHARED_DIR:?QEM_SHARED_DIR must name the shared fixtures}"
ZEROS=0000000000000000000000000000000000000000000000000000000000000000

# Files every block uses.
"$SYNTH" "$T/s.npy" --shape 8,8,48,48 --dose 20 >/dev/null || bad "synth"
"$QEM" save --quiet "$T/s.npy" "$T/s.qem" || bad "save s.qem"
"$QEM" pack produce --quiet "$T/s.npy" "$T/s.h5" || bad "produce s.h5"
"$NPY" mask48 "$T/m48.npy" || bad "mask48"
"$NPY" f32 "$T/f.npy" || bad "f32"
"$NPY" 3d "$T/stack.npy" || bad "3d"

# --- 1. non-regular inputs: refused by name within seconds ----------------
mkfifo "$T/fifo"
# quick DESCRIPTION -- COMMAND...: exit 1 within 10 s, saying "not a regular file".
quick() {
    what=$1; shift 2
    timeout -k 2 10 "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -eq 1 ] && grep -q "not a regular file" "$T/err"; then ok; else
        bad "$what: exit $got (124: it hung), wanted 1 naming a non-regular file"; cat "$T/err" >&2
    fi
}
for X in "$T/fifo" /dev/zero; do
    quick "save from $X" -- "$QEM" save "$X" "$T/o.qem"
    quick "save --valid $X" -- "$QEM" save "$T/s.npy" "$T/o.qem" --valid "$X"
    quick "save --dark $X" -- "$QEM" save "$T/f.npy" "$T/o.qem" --dark "$X"
    quick "save --calibration $X" -- "$QEM" save "$T/s.npy" "$T/o.qem" --calibration "$X"
    quick "info $X" -- "$QEM" info "$X"
    quick "verify $X" -- "$QEM" verify "$X"
    quick "export $X" -- "$QEM" export "$X" "$T/o.npy"
    quick "dp $X" -- "$QEM" dp "$X" --scan 0,0 -o "$T/o.npy"
    quick "mean $X" -- "$QEM" mean "$X" -o "$T/o.npy"
    quick "virtual $X" -- "$QEM" virtual "$X" --detector bf -o "$T/o.npy"
    quick "virtual --mask $X" -- "$QEM" virtual "$T/s.qem" --mask "$X" -o "$T/o.npy"
    quick "com $X" -- "$QEM" com "$X" -o "$T/o.npy"
    quick "com --mask $X" -- "$QEM" com "$T/s.h5" --mask "$X" -o "$T/o.npy"
    quick "dpc $X" -- "$QEM" dpc "$X" -o "$T/o.npy"
    quick "calibrate $X" -- "$QEM" calibrate "$X"
    quick "pack inspect $X" -- "$QEM" pack inspect "$X"
    quick "pack plan $X" -- "$QEM" pack plan "$X"
    quick "pack plan --exclude $X" -- "$QEM" pack plan "$T/s.npy" --exclude "$X"
    quick "pack produce $X" -- "$QEM" pack produce "$X" "$T/o.h5"
    quick "pack produce --exclude $X" -- "$QEM" pack produce "$T/s.npy" "$T/o.h5" --exclude "$X"
done
absent "$T/o.qem"
absent "$T/o.npy"
absent "$T/o.h5"
# A pipe on standard input is named as what it is, not "not a .npy file".
cat "$T/s.npy" | timeout 10 "$QEM" save /dev/stdin "$T/o.qem" 2>"$T/err"
contains "$T/err" "is not a regular file (it is a FIFO"
expect 1 "a directory" -- "$QEM" info "$T"
contains "$T/err" "'$T' is not a regular file (it is a directory)"

# --- 1. signals stop long work at once -------------------------------------
# interrupt SIGNAL WANT DESCRIPTION -- COMMAND...: sends SIGNAL after 1 s;
# the command must end within 3 s more with exit status WANT.
interrupt() {
    sig=$1; want=$2; what=$3; shift 4
    "$@" >"$T/out" 2>"$T/err" &
    pid=$!
    sleep 1
    kill -"$sig" "$pid" 2>/dev/null
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 30 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        bad "$what: still running 3 s after SIG$sig"
        kill -KILL "$pid"
    fi
    wait "$pid"
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got after SIG$sig, wanted $want"; cat "$T/err" >&2; fi
    contains "$T/err" "interrupted"
}
# A large sparse source: hashing it takes far longer than the test waits.
"$PY" -c "import numpy, sys; numpy.lib.format.open_memmap(sys.argv[1], mode='w+', dtype='<u2', shape=(64, 64, 512, 512))" "$T/big.npy" || bad "sparse source"
interrupt INT 130 "pack inspect hashing, Ctrl-C" -- "$QEM" pack inspect "$T/big.npy"
interrupt TERM 143 "pack inspect hashing, SIGTERM" -- "$QEM" pack inspect "$T/big.npy"
interrupt TERM 143 "pack produce, SIGTERM" -- "$QEM" pack produce "$T/big.npy" "$T/big.h5"
absent "$T/big.h5"
absent "$T/big.h5.receipt.json"
interrupt INT 130 "save, Ctrl-C" -- "$QEM" save "$T/big.npy" "$T/big.qem"
absent "$T/big.qem"
# Work that reports no progress (the whole-file digest) stops by the alarm.
cp "$QEM_SHARED_DIR/fixtures/pack/v1_u16_4x32_16x16.h5" "$T/tail.h5"
chmod u+w "$T/tail.h5"
truncate -s +2G "$T/tail.h5"
interrupt INT 130 "whole-file digest, Ctrl-C" -- "$QEM" verify "$T/tail.h5" --expect-sha256 "$ZEROS"
rm -f "$T/big.npy" "$T/tail.h5"

# --- 2. --expect-sha256 is checked for .qem files too ----------------------
sum=$(sha256sum "$T/s.qem" | cut -d' ' -f1)
SUM=$(echo "$sum" | tr a-f A-F)
for cmd in "verify" "info"; do
    expect 1 "$cmd .qem with a wrong identity" -- "$QEM" $cmd "$T/s.qem" --expect-sha256 "$ZEROS"
    contains "$T/err" "not the expected identity"
    expect 0 "$cmd .qem with its identity" -- "$QEM" $cmd "$T/s.qem" --expect-sha256 "$SUM"
done
contains "$T/out" "file "
expect 0 "verify says so" -- "$QEM" verify "$T/s.qem" --expect-sha256 "$sum"
contains "$T/out" "whole-file identity verified"
expect 1 "export .qem with a wrong identity" -- "$QEM" export "$T/s.qem" "$T/x.npy" --expect-sha256 "$ZEROS"
absent "$T/x.npy"
expect 1 "mean .qem with a wrong identity" -- "$QEM" mean "$T/s.qem" -o "$T/x.npy" --expect-sha256 "$ZEROS"
absent "$T/x.npy"
expect 1 "pack with a wrong identity" -- "$QEM" verify "$T/s.h5" --expect-sha256 "$ZEROS"
expect 2 "not hexadecimal" -- "$QEM" verify "$T/s.qem" --expect-sha256 "$(echo $ZEROS | sed 's/0/g/')"

# --- 4. terminal injection: every printed field escaped --------------------
"$HOSTILE" qem "$QEM_SHARED_DIR/fixtures/qem/u16_nonsquare_masked.qem" "$T/h.qem" || bad "hostile .qem"
"$HOSTILE" pack "$T/h.h5" || bad "hostile pack"
"$HOSTILE" pack-schema "$T/hs.h5" || bad "hostile pack schema"
E='\x1b[2J\x0d\x0aFAKE\x7f\u009b'
# no_controls FILE: no ESC, CR, DEL or C1 CSI byte anywhere in FILE.
no_controls() {
    if LC_ALL=C grep -q "$(printf '[\033\r\177]')" "$1" || LC_ALL=C grep -q "$(printf '\302\233')" "$1"; then
        bad "$1 holds a raw control character"; cat -A "$1" >&2
    else ok; fi
}
expect 0 "info of a hostile .qem" -- "$QEM" info "$T/h.qem"
printf '%s\n' \
    "file               $T/h.qem" \
    "container          quantem.qem, container version 1" \
    "codec              runtime-column-rans-spatial-v2 (version 1)" \
    "shape              4 x 6 scan positions, 20 x 24 detector pixels" \
    "dtype              uint16" \
    "chunks             1 (up to 24 scan positions each)" \
    "valid pixels       475 of 480 detector pixels" \
    "file size          13322 bytes (header 4456, body 8810)" \
    "uncompressed       23040 bytes" \
    "compression ratio  1.73x" \
    "metadata           quantem.scientific-metadata/2, source npy$E, coverage reader-retained" \
    "processing         lossless_storage$E" \
    "calibrated axes    none" \
    "microscope         none" \
    "overrides          electron_source/accelerating_voltage = 200 kV (user_override)" \
    "                   scan_controller/regular_scan/pixel_size_column = 3 angstrom (user_override)" \
    "                   scan_controller/regular_scan/pixel_size_row = 2 angstrom (user_override)" \
    >"$T/want"
if cmp -s "$T/out" "$T/want"; then ok; else bad "hostile .qem info differs byte for byte"; diff "$T/want" "$T/out" | cat -A >&2; fi
expect 0 "info --json of a hostile .qem" -- "$QEM" info --json "$T/h.qem"
no_controls "$T/out"
contains_text "$T/out" '"source_format": "npy\u001B[2J\r\nFAKE\u007F\u009B"'
if LC_ALL=C grep -q "$(printf '[\200-\377]')" "$T/out"; then bad "--json is not ASCII"; else ok; fi
expect 0 "info of a hostile pack" -- "$QEM" info "$T/h.h5"
contains_text "$T/out" "method estimate$E"
no_controls "$T/out"
expect 1 "a hostile pack schema, refused" -- "$QEM" info "$T/hs.h5"
contains_text "$T/err" "schema \"pack$E\" does not match"
no_controls "$T/err"
expect 0 "calibrate of a hostile pack" -- "$QEM" calibrate "$T/h.h5" -o "$T/hc.h5"
contains_text "$T/out" "(estimate$E)"
no_controls "$T/out"
no_controls "$T/err"
weird="$T/$(printf 'x\033[2Jy\rz')"
cp "$T/s.qem" "$weird.qem"
expect 0 "a hostile file name" -- "$QEM" info "$weird.qem"
contains_text "$T/out" 'x\x1b[2Jy\x0dz.qem'
no_controls "$T/out"
expect 1 "a hostile missing file name" -- "$QEM" verify "$weird.missing"
no_controls "$T/err"
expect 0 "a hostile output name" -- "$QEM" mean "$T/s.qem" -o "$weird.npy"
no_controls "$T/err"

# --- 5. a source changed during save is refused, nothing published ----------
"$SYNTH" "$T/c.npy" --shape 8,8,32,32 --dose 3 >/dev/null
size=$(stat -c %s "$T/c.npy")
# The library pauses after the first window; the source is rewritten there.
QEM_FAULT_SAVE_PAUSE_MS=1500 "$QEM" save --chunk-scans 8 "$T/c.npy" "$T/c.qem" >"$T/out" 2>"$T/err" &
pid=$!
sleep 0.5
printf 'Z' | dd of="$T/c.npy" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
wait "$pid"
got=$?
if [ "$got" -eq 1 ]; then ok; else bad "save of a changing source: exit $got, wanted 1"; fi
contains "$T/err" "changed while it was being read"
absent "$T/c.qem"
# Again with the modification time set back: the change time still tells.
touch -r "$T/s.npy" "$T/ref"
cp -p "$T/c.npy" "$T/c2.npy"
touch -r "$T/c2.npy" "$T/ref"
QEM_FAULT_SAVE_PAUSE_MS=1500 "$QEM" save --chunk-scans 8 "$T/c2.npy" "$T/c2.qem" >"$T/out" 2>"$T/err" &
pid=$!
sleep 0.5
printf 'Y' | dd of="$T/c2.npy" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
touch -r "$T/ref" "$T/c2.npy"
wait "$pid"
got=$?
if [ "$got" -eq 1 ]; then ok; else bad "save of a source rewritten with its mtime restored: exit $got, wanted 1"; fi
absent "$T/c2.qem"
# Unchanged, the save records the digest of exactly the bytes it read.
expect 0 "save records the source digest" -- "$QEM" save --chunk-scans 8 "$T/c.npy" "$T/c3.qem"
expect 0 "info --json" -- "$QEM" info --json "$T/c3.qem"
contains "$T/out" "\"sha256\": \"$(sha256sum "$T/c.npy" | cut -d' ' -f1)\""

# --- 6. numbers: strict, with their range stated ----------------------------
for v in nan inf -inf 1e400 400 0x10; do
    expect 2 "dpc --rotation $v" -- "$QEM" dpc "$T/s.qem" --rotation "$v" -o "$T/x.npy"
done
contains "$T/err" "from -360 to 360"
for v in -5 0 nan; do
    expect 2 "--semiangle $v" -- "$QEM" virtual "$T/s.qem" --detector bf --unit mrad --semiangle "$v" -o "$T/x.npy"
done
contains "$T/err" "greater than 0 and at most 1000"
for v in -5 0 99999999999999999999 4611686018427387905 12abc; do
    expect 2 "--available-memory $v" -- "$QEM" pack plan "$T/s.npy" --available-memory "$v"
done
contains "$T/err" "from 1 to 4611686018427387904"
expect 2 "--scan overflow" -- "$QEM" dp "$T/s.qem" --scan 99999999999999999999,0 -o "$T/x.npy"
contains "$T/err" "from 0 to 1099511627775"
expect 2 "--chunk-scans above 2^24" -- "$QEM" save "$T/s.npy" "$T/x.qem" --chunk-scans 99999999
contains "$T/err" "from 1 to 16777216"
expect 2 "--radius 1e308" -- "$QEM" virtual "$T/s.qem" --detector bf --radius 1e308 -o "$T/x.npy"
if [ "$(wc -c <"$T/err")" -lt 300 ]; then ok; else bad "--radius 1e308 printed $(wc -c <"$T/err") bytes"; fi
expect 2 "--center nan" -- "$QEM" virtual "$T/s.qem" --detector bf --center nan,3 -o "$T/x.npy"
expect 2 "--region reversed" -- "$QEM" dp "$T/s.qem" --region 3:2,0:1 -o "$T/x.npy"
expect 2 "--threads 0" -- "$QEM" mean "$T/s.qem" -o "$T/x.npy" --threads 0
expect 2 "--scan-shape 0" -- "$QEM" pack inspect "$T/stack.npy" --scan-shape 0,4
absent "$T/x.npy"
absent "$T/x.qem"

# --- 7. a file-size limit is a named write error, not a silent death ------
# Under a file-size limit, SIGXFSZ as the shell leaves it (default: kill).
expect 1 "save under ulimit -f" -- sh -c 'ulimit -f 16; exec "$@"' limited "$QEM" save "$T/s.npy" "$T/l.qem"
contains "$T/err" "cannot write '$T/l.qem'"
contains "$T/err" "file-size limit"
expect 1 "export under ulimit -f" -- sh -c 'ulimit -f 16; exec "$@"' limited "$QEM" export "$T/s.qem" "$T/l.npy"
contains "$T/err" "cannot write '$T/l.npy'"
expect 1 "pack produce under ulimit -f" -- sh -c 'ulimit -f 16; exec "$@"' limited "$QEM" pack produce "$T/s.npy" "$T/l.h5"
contains "$T/err" "cannot write '$T/l.h5'"
expect 1 "a TIFF under ulimit -f" -- sh -c 'ulimit -f 4; exec "$@"' limited "$QEM" dp "$T/s.qem" --region 0:8,0:8 -o "$T/l.tif"
contains "$T/err" "File too large"
absent "$T/l.qem"
absent "$T/l.npy"
absent "$T/l.h5"
absent "$T/l.tif"

# --- 8. one naming rule: the extension names the format written -------------
expect 2 "export to .qem" -- "$QEM" export "$T/s.qem" "$T/n.qem"
expect 2 "save to .h5" -- "$QEM" save "$T/s.npy" "$T/n.h5"
expect 2 "pack produce to .qem" -- "$QEM" pack produce "$T/s.npy" "$T/n.qem"
contains "$T/err" "must end in .h5 or .hdf5"
expect 2 "calibrate a pack to .txt" -- "$QEM" calibrate "$T/s.h5" -o "$T/n.txt"
expect 2 "calibrate a pack to .qem" -- "$QEM" calibrate "$T/s.h5" -o "$T/n.qem"
expect 2 "calibrate a .qem to .h5" -- "$QEM" calibrate "$T/s.qem" -o "$T/n.h5"
expect 2 "pack plan --dest .qem" -- "$QEM" pack plan "$T/s.npy" --dest "$T/n.qem"
expect 2 "mean to .jpg" -- "$QEM" mean "$T/s.qem" -o "$T/n.jpg"
for f in n.qem n.h5 n.txt n.npy n.jpg; do absent "$T/$f"; done

# --- 9. options that cannot apply are refused -------------------------------
expect 2 "dp --scan with --reduce" -- "$QEM" dp "$T/s.qem" --scan 0,0 --reduce max -o "$T/x.npy"
expect 2 "dp --region with --raw" -- "$QEM" dp "$T/s.qem" --region 0:1,0:1 --raw -o "$T/x.npy"
expect 2 "-o twice" -- "$QEM" mean "$T/s.qem" -o "$T/x.npy" -o "$T/y.npy"
contains "$T/err" "given twice"
expect 2 "--valid with float32" -- "$QEM" save "$T/f.npy" "$T/x.qem" --valid "$T/m48.npy"
expect 2 "--timings of a .qem" -- "$QEM" info "$T/s.qem" --timings
expect 2 "--codes of a pack" -- "$QEM" export "$T/s.h5" "$T/x.npy" --codes
expect 2 "geometry without a detector" -- "$QEM" virtual "$T/s.qem" --mask "$T/m48.npy" --center 3,3 -o "$T/x.npy"
expect 2 "--inner for bf" -- "$QEM" virtual "$T/s.qem" --detector bf --inner 3 --outer 5 -o "$T/x.npy"
expect 2 "--semiangle in pixels" -- "$QEM" virtual "$T/s.qem" --detector bf --semiangle 20 -o "$T/x.npy"
expect 2 "annulus without bounds" -- "$QEM" virtual "$T/s.qem" --detector annulus -o "$T/x.npy"
expect 2 "an option of another command" -- "$QEM" info "$T/s.qem" --mask "$T/m48.npy"
expect 2 "QEM_RANS_PATH=bogus" -- env QEM_RANS_PATH=bogus "$QEM" verify "$T/s.qem"
contains "$T/err" "scalar, avx2, avx2-loads, avx512 or auto"
expect 2 "qem help frob" -- "$QEM" help frob
expect 2 "qem pack frob" -- "$QEM" pack frob
expect 2 "pack plan --dest in a missing folder" -- "$QEM" pack plan "$T/s.npy" --dest "$T/no/such/p.h5"
cp "$T/s.qem" "$T/-dash.qem"
(cd "$T" && "$QEM" info -- -dash.qem >/dev/null 2>&1) && ok || bad "'--' does not end the options"
(cd "$T" && "$QEM" info -dash.qem >/dev/null 2>&1; [ $? -eq 2 ]) && ok || bad "'-dash.qem' is not refused as an option"
absent "$T/x.npy"
absent "$T/x.qem"

# --- 10. messages --------------------------------------------------------------
expect 2 "a usage error is two lines" -- "$QEM" save --bogus "$T/s.npy" "$T/x.qem"
if [ "$(wc -l <"$T/err")" -eq 2 ]; then ok; else bad "usage error printed $(wc -l <"$T/err") lines"; fi
contains "$T/err" "Run 'qem save --help'"
expect 0 "PNG label" -- "$QEM" mean "$T/s.qem" -o "$T/m.png"
contains "$T/err" "8-bit PNG"
expect 0 "TIFF label" -- "$QEM" mean "$T/s.qem" -o "$T/m.tif"
contains "$T/err" "32-bit float TIFF"
expect 0 "PNG in JSON" -- "$QEM" virtual "$T/s.qem" --detector bf -o "$T/v.png" --json
contains "$T/out" '"file_dtype": "uint8"'
expect 1 "a missing calibration file" -- "$QEM" save "$T/s.npy" "$T/x.qem" --calibration "$T/none.json"
contains "$T/err" "cannot read the calibration file '$T/none.json': No such file or directory"
printf '{"quantities": {"a\\u0000b": 1}}' >"$T/nul.json"
expect 1 "a NUL in a calibration file" -- "$QEM" save "$T/s.npy" "$T/x.qem" --calibration "$T/nul.json"
lacks "$T/err" "JSON_ALLOW_NUL"
contains "$T/err" "NUL"
head -c 4096 /dev/urandom >"$T/random.h5"
expect 1 "a random file named .h5" -- "$QEM" info "$T/random.h5"
contains "$T/err" "neither a .qem file nor a Lossless Pack Format v1 file"
lacks "$T/err" "not a complete QEM file"
"$PY" -c "import numpy, sys; numpy.save(sys.argv[1], numpy.zeros((1, 1, 2, 2), '>i4')); numpy.save(sys.argv[2], numpy.zeros((1, 1, 2, 2), bool))" "$T/be.npy" "$T/bool.npy"
expect 1 ">i4 data" -- "$QEM" save "$T/be.npy" "$T/x.qem"
contains "$T/err" "dtype >i4"
lacks "$T/err" "newbyteorder"
expect 1 "bool data" -- "$QEM" save "$T/bool.npy" "$T/x.qem"
contains "$T/err" "booleans"
expect 1 "a 3D stack without a scan shape" -- "$QEM" pack inspect "$T/stack.npy"
contains "$T/err" "--scan-shape"
absent "$T/x.qem"

# --- issue 27: shapes refused up front, companions, HDF5 names, .hdr depth ---
# A 128-byte .npy of shape (0, 1, 3000000, 3000000): every entry point refuses
# the empty axis at once (each used to hash a 36 TB implicit mask first).
"$PY" -c "
import sys
d = b\"{'descr': '|u1', 'fortran_order': False, 'shape': (0, 1, 3000000, 3000000), }\"
h = d + b' ' * (128 - 10 - len(d) - 1) + b'\n'
open(sys.argv[1], 'wb').write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h)
" "$T/empty.npy" || bad "empty.npy"
# at_once DESCRIPTION -- COMMAND...: exit 1 within 20 s, naming the empty axis.
at_once() {
    what=$1; shift 2
    timeout -k 2 20 "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -eq 1 ] && grep -q "empty dimension (shape 0 x 1 x 3000000 x 3000000)" "$T/err"; then ok; else
        bad "$what: exit $got (124: it hung), wanted 1 naming the empty dimension"; cat "$T/err" >&2
    fi
}
at_once "inspect" -- "$QEM" inspect "$T/empty.npy"
at_once "save" -- "$QEM" save "$T/empty.npy" "$T/x.qem"
at_once "pack inspect" -- "$QEM" pack inspect "$T/empty.npy"
at_once "pack plan" -- "$QEM" pack plan "$T/empty.npy"
at_once "pack produce" -- "$QEM" pack produce "$T/empty.npy" "$T/x.h5"
absent "$T/x.qem"
absent "$T/x.h5"
# A Merlin .hdr that is a symlink out of the .mib's folder is refused; the
# file it points to is never read into the output or the .qem.
MIB=$QEM_SHARED_DIR/fixtures/detectors/mib/Single_9_Frame_CounterDepth_12_Rows_256
mkdir "$T/acq"
cp "$MIB.mib" "$T/acq/a.mib"
printf 'Secret Key:\tdo-not-copy\n' >"$T/secret.txt"
ln -s "$T/secret.txt" "$T/acq/a.hdr"
expect 1 "inspect with a .hdr leading out" -- "$QEM" inspect --json "$T/acq/a.mib" --scan-shape 1,9
contains_text "$T/err" "has the .hdr 'a.hdr', which resolves to '$T/secret.txt', outside the .mib's folder"
lacks "$T/out" "do-not-copy"
expect 1 "save with a .hdr leading out" -- "$QEM" save "$T/acq/a.mib" "$T/x.qem" --scan-shape 1,9
contains_text "$T/err" "has the .hdr 'a.hdr', which resolves to '$T/secret.txt', outside the .mib's folder"
absent "$T/x.qem"
# ... inside the folder it is followed.
rm "$T/acq/a.hdr"
cp "$MIB.hdr" "$T/acq/real.hdr"
ln -s real.hdr "$T/acq/a.hdr"
expect 0 "inspect with a .hdr linked beside it" -- "$QEM" inspect --json "$T/acq/a.mib"
contains "$T/out" "Medipix 3RX"
# A .hdr counter depth of 99 is refused, as the frame headers' would be.
rm "$T/acq/a.hdr"
sed 's/^Counter Depth (number):.*/Counter Depth (number):\t99/' "$MIB.hdr" >"$T/acq/a.hdr"
expect 1 "a .hdr counter depth of 99" -- "$QEM" inspect "$T/acq/a.mib"
contains "$T/err" "states the counter depth '99'; Merlin counters are 1, 6, 12 or 24 bits deep"
# --dataset with repeated slashes, as h5py reads it.
"$PY" -c "import h5py, numpy, sys; h5py.File(sys.argv[1], 'w').create_dataset('g/d', data=numpy.arange(48, dtype='u2').reshape(2, 2, 3, 4))" "$T/g.h5" || bad "g.h5"
expect 0 "--dataset //g//d" -- "$QEM" inspect "$T/g.h5" --dataset //g//d
contains "$T/out" "(2, 2, 3, 4)"

finish
