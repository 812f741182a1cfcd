#!/bin/sh
# `qem record dectris://` against the project's replay simulator
# (tests/live/sim_dectris.py) serving the real Arina acquisition over
# loopback: the recorded body equals `qem save` of the master file byte for
# byte, whatever the header detail and image encoding; synthetic counts
# with a pixel mask equal `qem save` of the frames served with the mask's
# validity, also when the writer stalls and frames spill to disk; a stream
# cut short is published exact and marked incomplete; a malformed message
# is refused naming its frame; nobody sending is an I/O error. Stream V2
# (dectris2://, tests/live/sim_dectris2.py): the same bodies, the same cut
# and refusals.
# usage: test_record_dectris.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_record_dectris
. "$(dirname "$0")/harness.sh"
SIM="$(dirname "$0")/../live/sim_dectris.py"
MASTER="$QEM_SHARED_DIR/fixtures/detectors/arina/test_00_master.h5"

. "$(dirname "$0")/record_harness.sh"

expect 0 "save" -- "$QEM" save "$MASTER" "$T/save.qem" --scan-shape 4,4 -q
for spec in all:bs32-lz4 basic:lz4 none:raw; do
    detail=${spec%%:*}; encoding=${spec#*:}
    serve "$detail" --master "$MASTER" --detail "$detail" --encoding "$encoding"
    expect 0 "record $spec" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/$detail.qem" \
        --scan-shape 4,4
    wait "$SIMPID"
    body_equal "$T/$detail.qem" "$T/save.qem"
done

serve corrupt --master "$MASTER" --corrupt lz4@5
expect 1 "corrupt frame" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/corrupt.qem" \
    --scan-shape 4,4
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "frame 5"

# Synthetic counts (the fixture's are all 0) with two flagged pixels: the
# body of `qem save` of the frames served, with the mask's validity.
serve syn --synthetic 4,6,32,24 --detail all --encoding bs32-lz4 \
    --expect-npy "$T/syn.npy" --expect-valid "$T/syn-valid.npy"
expect 0 "record synthetic" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/syn.qem" \
    --scan-shape 4,6
wait "$SIMPID"
expect 0 "save synthetic" -- "$QEM" save "$T/syn.npy" "$T/syn.save.qem" --scan-shape 4,6 \
    --valid "$T/syn-valid.npy" -q
body_equal "$T/syn.qem" "$T/syn.save.qem"

# The writer stalled, 1 MiB of queue: frames spill to disk, none lost.
serve stall --synthetic 8,8,192,192 --detail all --encoding bs32-lz4 \
    --expect-npy "$T/stall.npy" --expect-valid "$T/stall-valid.npy"
QEM_FAULT_RECORD_SLOW_MS=30 expect 0 "record stalled" -- "$QEM" record \
    "dectris://127.0.0.1:$PORT" "$T/stall.qem" --scan-shape 8,8 --queue-mb 1
wait "$SIMPID"
if grep -q ' 0 waited on disk' "$T/out"; then bad "no frame spilled"; cat "$T/out" >&2; else ok; fi
expect 0 "save stalled" -- "$QEM" save "$T/stall.npy" "$T/stall.save.qem" --scan-shape 8,8 \
    --valid "$T/stall-valid.npy" -q
body_equal "$T/stall.qem" "$T/stall.save.qem"

# Cut after 10 of 24 frames (no series end): 10 exact, the row completed
# with zeros, marked incomplete.
serve cut --synthetic 4,6,32,24 --detail all --encoding lz4 --stop-after 10 --linger-ms 2000
expect 1 "cut stream" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/cut.qem" \
    --scan-shape 4,6 --idle-timeout 1
wait "$SIMPID"
contains_text "$T/err" "after 10 of 24 frames"
expect 0 "export cut" -- "$QEM" export "$T/cut.qem" "$T/cut.npy"
if "$PY" - "$T/cut.npy" "$T/syn.npy" <<'PYEOF'
import sys, numpy as np
got = np.load(sys.argv[1]); ref = np.load(sys.argv[2])
flat = got.reshape(-1, *got.shape[-2:])
sys.exit(0 if got.shape[:2] == (2, 6) and np.array_equal(flat[:10], ref[:10])
         and not flat[10:].any() else 1)
PYEOF
then ok; else bad "the cut recording is not the first 10 frames and zeros"; fi

# A repeated frame number: refused naming it, the frames before published.
serve repeat --synthetic 4,6,32,24 --detail basic --encoding raw --corrupt repeat@3
expect 1 "repeated frame" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/repeat.qem" \
    --scan-shape 4,6
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "the 3 frames before it are published"

# Stream V2 (dectris2://, CBOR; tests/live/sim_dectris2.py): the same body
# as `qem save` of the master file, whatever the compression and detail.
SIM="$(dirname "$0")/../live/sim_dectris2.py"
for spec in all:bslz4 basic:lz4 minimal:none; do
    detail=${spec%%:*}; compression=${spec#*:}
    serve "v2$detail" --master "$MASTER" --detail "$detail" --compression "$compression"
    expect 0 "record v2 $spec" -- "$QEM" record "dectris2://127.0.0.1:$PORT" \
        "$T/v2$detail.qem" --scan-shape 4,4
    wait "$SIMPID"
    body_equal "$T/v2$detail.qem" "$T/save.qem"
done
contains_text "$T/v2all.qem" '"protocol":"dectris-stream-v2"'

# Synthetic counts, two channels (the second differs), the first channel's
# pixel mask: the body of `qem save` of the frames served, with its validity.
serve v2syn --synthetic 4,6,32,24 --detail all --compression bslz4 --channels 2 \
    --expect-npy "$T/v2syn.npy" --expect-valid "$T/v2syn-valid.npy"
expect 0 "record v2 synthetic" -- "$QEM" record "dectris2://127.0.0.1:$PORT" "$T/v2syn.qem" \
    --scan-shape 4,6
wait "$SIMPID"
expect 0 "save v2 synthetic" -- "$QEM" save "$T/v2syn.npy" "$T/v2syn.save.qem" \
    --scan-shape 4,6 --valid "$T/v2syn-valid.npy" -q
body_equal "$T/v2syn.qem" "$T/v2syn.save.qem"

# Cut after 10 of 24 frames (no end message): 10 exact, marked incomplete.
serve v2cut --synthetic 4,6,32,24 --compression lz4 --lz4-block 512 --stop-after 10 \
    --expect-npy "$T/v2cut-served.npy" --linger-ms 2000
expect 1 "v2 cut stream" -- "$QEM" record "dectris2://127.0.0.1:$PORT" "$T/v2cut.qem" \
    --scan-shape 4,6 --idle-timeout 1
wait "$SIMPID"
contains_text "$T/err" "after 10 of 24 frames"
expect 0 "export v2 cut" -- "$QEM" export "$T/v2cut.qem" "$T/v2cut.npy"
if "$PY" - "$T/v2cut.npy" "$T/v2cut-served.npy" <<'PYEOF'
import sys, numpy as np
got = np.load(sys.argv[1]); ref = np.load(sys.argv[2])
flat = got.reshape(-1, *got.shape[-2:])
sys.exit(0 if got.shape[:2] == (2, 6) and np.array_equal(flat[:10], ref[:10])
         and not flat[10:].any() else 1)
PYEOF
then ok; else bad "the cut V2 recording is not the first 10 frames and zeros"; fi

# A corrupt LZ4 block and a repeated image_id: refused naming the frame,
# the frames before published.
serve v2lz4 --master "$MASTER" --compression lz4 --corrupt lz4@5
expect 1 "v2 corrupt frame" -- "$QEM" record "dectris2://127.0.0.1:$PORT" "$T/v2lz4.qem" \
    --scan-shape 4,4
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "frame 5: an LZ4 block does not decode"
serve v2rep --synthetic 4,6,32,24 --compression none --corrupt repeat@3
expect 1 "v2 repeated frame" -- "$QEM" record "dectris2://127.0.0.1:$PORT" "$T/v2rep.qem" \
    --scan-shape 4,6
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "frame 2 is repeated (expected frame 3)"
contains_text "$T/err" "the 3 frames before it are published"

expect 1 "nobody sending" -- "$QEM" record "dectris://127.0.0.1:9" "$T/x.qem" \
    --connect-timeout 0.3
contains_text "$T/err" "nothing arrived from tcp://127.0.0.1:9"
absent "$T/x.qem"

finish
