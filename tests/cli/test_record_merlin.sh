#!/bin/sh
# `qem record merlin://` against the project's replay simulator
# (tests/live/sim_merlin.py) serving the real Merlin files over loopback:
# the recorded body equals `qem save` of the file byte for byte; full
# speed, a stalled writer (frames spill to disk), a slow replay, a stream
# cut short, an idle stream, Ctrl-C, and malformed messages refused by
# frame number with the frames before them published.
# usage: test_record_merlin.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_record_merlin
. "$(dirname "$0")/harness.sh"
SIM="$(dirname "$0")/../live/sim_merlin.py"
D="$QEM_SHARED_DIR/fixtures/detectors/mib"

. "$(dirname "$0")/record_harness.sh"

# live_fact FILE.qem KEY VALUE: source_metadata.live_acquisition[KEY] == VALUE (JSON).
live_fact() {
    if "$PY" - "$QEM" "$@" <<'PYEOF'
import json, subprocess, sys
info = json.loads(subprocess.check_output([sys.argv[1], "info", sys.argv[2], "--json"]))
live = info["scientific_metadata"]["source_metadata"]["live_acquisition"]
sys.exit(0 if live[sys.argv[3]] == json.loads(sys.argv[4]) else 1)
PYEOF
    then ok; else bad "$1: live_acquisition.$2 is not $3"; fi
}

# prefix_exact FILE.qem REF.npy K ROWS,COLS: the first K frames equal the
# reference's, the rest of the file's scans are zero, and the shape fits.
prefix_exact() {
    expect 0 "export $1" -- "$QEM" export "$1" "$1.npy"
    if "$PY" - "$1.npy" "$2" "$3" "$4" <<'PYEOF'
import sys, numpy as np
got = np.load(sys.argv[1]); ref = np.load(sys.argv[2]); k = int(sys.argv[3])
rows, cols = (int(v) for v in sys.argv[4].split(","))
ref = ref.reshape(-1, *ref.shape[-2:]); flat = got.reshape(-1, *got.shape[-2:])
ok = (got.shape[:2] == (rows, cols) and np.array_equal(flat[:k], ref[:k].astype(got.dtype))
      and not flat[k:].any())
sys.exit(0 if ok else 1)
PYEOF
    then ok; else bad "$1: the first $3 frames are not the reference's, or the rest not zero"; fi
}

# 1. Every real file, recorded and saved: the same body; values as the reference.
# FILE:--scan-shape given:the shape recorded
for spec in 001_4x2_6bit:2,4:2,4 Single_9_Frame_CounterDepth_12_Rows_256::1,9 \
            Single_1_Frame_CounterDepth_24_Rows_256::1,1 \
            Single_1_Frame_CounterDepth_1_Rows_256::1,1; do
    f=${spec%%:*}; rest=${spec#*:}; given_shape=${rest%%:*}; scan=${rest#*:}
    shape_opt=""; [ -n "$given_shape" ] && shape_opt="--scan-shape $given_shape"
    serve "$f" "$D/$f.mib"
    expect 0 "$f record" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/$f.rec.qem" $shape_opt
    contains_text "$T/out" "frames"
    wait "$SIMPID"
    expect 0 "$f save" -- "$QEM" save "$D/$f.mib" "$T/$f.save.qem" $shape_opt -q
    body_equal "$T/$f.rec.qem" "$T/$f.save.qem"
    live_fact "$T/$f.rec.qem" complete true
    expect 0 "$f verify" -- "$QEM" verify "$T/$f.rec.qem"
    n=$("$PY" -c "import numpy as np,sys; a=np.load(sys.argv[1]); print(a.reshape(-1,*a.shape[-2:]).shape[0])" "$D/$f.file-order.npy")
    prefix_exact "$T/$f.rec.qem" "$D/$f.file-order.npy" "$n" "$scan"
done
# The header's frames per trigger gives the scan shape (no --scan-shape).
expect 0 "fpt file" -- "$PY" "$SIM" --synthetic 3,4,64,64 --save "$T/syn.mib"
serve fpt --synthetic 3,4,64,64
expect 0 "record by frames per trigger" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/fpt.qem"
wait "$SIMPID"
expect 0 "save by frames per trigger" -- "$QEM" save "$T/syn.mib" "$T/fpt.save.qem" -q
body_equal "$T/fpt.qem" "$T/fpt.save.qem"

# 2. Full speed, a longer stream (several chunks), and a stalled writer:
# 1 MiB of queue, then every frame spills to disk and comes back exact.
"$PY" "$SIM" "$D/001_4x2_6bit.mib" --repeat 160 --save "$T/long.mib"
expect 0 "save long" -- "$QEM" save "$T/long.mib" "$T/long.save.qem" --scan-shape 32,40 -q
serve long "$D/001_4x2_6bit.mib" --repeat 160
expect 0 "record at full speed" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/long.qem" \
    --scan-shape 32,40 --chunk-scans 512
wait "$SIMPID"
body_equal "$T/long.qem" "$T/long.save.qem"
serve stall "$D/001_4x2_6bit.mib" --repeat 160
QEM_FAULT_RECORD_SLOW_MS=30 expect 0 "record with the writer stalled" -- "$QEM" record \
    "merlin://127.0.0.1:$PORT" "$T/stall.qem" --scan-shape 32,40 --queue-mb 1
wait "$SIMPID"
if grep -q ' 0 waited on disk' "$T/out"; then bad "no frame spilled"; cat "$T/out" >&2; else ok; fi
body_equal "$T/stall.qem" "$T/long.save.qem"
live_fact "$T/stall.qem" complete true

# 3. A slow replay (30 frames/s): nothing lost.
serve slow "$D/001_4x2_6bit.mib" --fps 30
expect 0 "slow replay" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/slow.qem" --scan-shape 2,4
wait "$SIMPID"
body_equal "$T/slow.qem" "$T/001_4x2_6bit.save.qem"

# 4. A stream cut after 5 of 8 frames, and after 3 (less than a row): the
# frames received exact, the last row completed with zeros, marked incomplete.
for k in 5 3 4; do
    serve "cut$k" "$D/001_4x2_6bit.mib" --stop-after "$k"
    expect 1 "cut after $k" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/cut$k.qem" \
        --scan-shape 2,4
    wait "$SIMPID"
    contains_text "$T/err" "after $k of 8 frames"
    rows=$(( (k + 3) / 4 ))
    prefix_exact "$T/cut$k.qem" "$D/001_4x2_6bit.file-order.npy" "$k" "$rows,4"
    live_fact "$T/cut$k.qem" complete false
    live_fact "$T/cut$k.qem" ended '"the stream ended before the scan"'
    live_fact "$T/cut$k.qem" frames_received "$k"
    live_fact "$T/cut$k.qem" zero_filled_scans "$(( rows * 4 - k ))"
    expect 0 "cut $k verify" -- "$QEM" verify "$T/cut$k.qem"
done

# 5. A sender that stops sending but keeps the connection: --idle-timeout.
serve idle "$D/001_4x2_6bit.mib" --stop-after 6 --hold 20
expect 1 "idle stream" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/idle.qem" \
    --scan-shape 2,4 --idle-timeout 0.5
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
prefix_exact "$T/idle.qem" "$D/001_4x2_6bit.file-order.npy" 6 2,4
live_fact "$T/idle.qem" frames_received 6

# 6. Ctrl-C while recording: the frames received are published, exit 130.
serve intr "$D/001_4x2_6bit.mib" --repeat 40 --fps 40
"$QEM" record "merlin://127.0.0.1:$PORT" "$T/intr.qem" --scan-shape 8,40 >"$T/out" 2>"$T/err" &
RPID=$!
sleep 3
kill -INT "$RPID"
wait "$RPID"; rc=$?
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
if [ "$rc" -eq 130 ]; then ok; else bad "Ctrl-C: exit $rc, wanted 130"; cat "$T/err" >&2; fi
contains_text "$T/err" "interrupted after"
live_fact "$T/intr.qem" ended '"stopped before the scan ended"'

kept=$("$PY" - "$QEM" "$T/intr.qem" <<'PYEOF'
import json, subprocess, sys
info = json.loads(subprocess.check_output([sys.argv[1], "info", sys.argv[2], "--json"]))
print(info["scientific_metadata"]["source_metadata"]["live_acquisition"]["frames_received"])
PYEOF
)
if [ "${kept:-0}" -gt 0 ] && [ "${kept:-0}" -lt 320 ]; then ok; else bad "Ctrl-C kept $kept frames"; fi
"$PY" "$SIM" "$D/001_4x2_6bit.mib" --repeat 40 --save "$T/intr.mib"
expect 0 "intr reference" -- "$QEM" save "$T/intr.mib" "$T/intr.save.qem" --scan-shape 8,40 -q
expect 0 "intr reference export" -- "$QEM" export "$T/intr.save.qem" "$T/intr.ref.npy"
prefix_exact "$T/intr.qem" "$T/intr.ref.npy" "$kept" "$(( (kept + 39) / 40 )),40"

# 7. Malformed messages: refused naming the frame; the frames before it published.
for kind in size header repeat skip shape; do
    serve "bad$kind" "$D/001_4x2_6bit.mib" --corrupt "$kind@4"
    expect 1 "corrupt $kind" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/bad$kind.qem" \
        --scan-shape 2,4
    kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
    contains_text "$T/err" "frame 4"
    contains_text "$T/err" "the 3 frames before it are published"
    prefix_exact "$T/bad$kind.qem" "$D/001_4x2_6bit.file-order.npy" 3 1,4
    live_fact "$T/bad$kind.qem" complete false
done
serve badprefix "$D/001_4x2_6bit.mib" --prefix-corrupt
expect 1 "corrupt prefix" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/badprefix.qem" \
    --scan-shape 2,4
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "message 2"
absent "$T/badprefix.qem"

# uint32 counts narrowed exactly as a save does: a value above 65535 at an
# admitted pixel is refused naming it; the frames before it are published.
serve hot "$D/Single_1_Frame_CounterDepth_24_Rows_256.mib" --repeat 6 --hot 4
expect 1 "a count above 65535" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/hot.qem" \
    --scan-shape 2,3
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "scan position (1, 0), detector pixel (0, 1) holds 70000"
contains_text "$T/err" "the 3 frames before it are published"
live_fact "$T/hot.qem" frames_received 3

# 8. Refusals before any frame: RAW mode, a scan shape the header contradicts,
# a bad address, an existing output, nobody listening.
serve raw "$D/Single_1_Frame_CounterDepth_1_Rows_256RAW.mib"
expect 1 "RAW mode" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/raw.qem"
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "RAW mode"
absent "$T/raw.qem"
serve wrongshape "$D/001_4x2_6bit.mib"
expect 1 "wrong scan shape" -- "$QEM" record "merlin://127.0.0.1:$PORT" "$T/ws.qem" \
    --scan-shape 3,3
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "does not match the 8 frames"
serve contra "$D/Single_9_Frame_CounterDepth_12_Rows_256.mib"
expect 1 "scan shape against the header's" -- "$QEM" record "merlin://127.0.0.1:$PORT" \
    "$T/contra.qem" --scan-shape 3,3
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "contradicts the scan shape 1x9"
absent "$T/contra.qem"
absent "$T/ws.qem"
expect 1 "bad scheme" -- "$QEM" record "http://127.0.0.1:1" "$T/x.qem"
contains_text "$T/err" "merlin://HOST"
expect 1 "bad port" -- "$QEM" record "merlin://127.0.0.1:99999" "$T/x.qem"
expect 2 "not .qem" -- "$QEM" record "merlin://127.0.0.1" "$T/x.h5"
expect 1 "existing output" -- "$QEM" record "merlin://127.0.0.1" "$T/long.qem"
expect 1 "nobody listening" -- "$QEM" record "merlin://127.0.0.1:9" "$T/x.qem" \
    --connect-timeout 0.3
contains_text "$T/err" "cannot connect"
absent "$T/x.qem"

finish
