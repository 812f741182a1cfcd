#!/bin/sh
# `qem record dectris://` against the project's replay simulator
# (tests/live/sim_dectris.py) serving the real Arina acquisition over
# loopback: the recorded body equals `qem save` of the master file byte for
# byte, whatever the header detail and image encoding; a malformed message
# is refused naming its frame; nobody sending is an I/O error.
# usage: test_record_dectris.sh QEM PYTHON
set -u
QEM=$1
PY=$2
name=cli_record_dectris
. "$(dirname "$0")/harness.sh"
SIM="$(dirname "$0")/../live/sim_dectris.py"
MASTER="$QEM_SHARED_DIR/fixtures/detectors/arina/test_00_master.h5"

# serve TAG SIM-ARGS...: starts the simulator; $PORT is its port.
serve() {
    tag=$1; shift
    rm -f "$T/$tag.port"
    "$PY" "$SIM" --master "$MASTER" "$@" --port-file "$T/$tag.port" >/dev/null \
        2>"$T/$tag.simerr" &
    SIMPID=$!
    for i in $(seq 1 200); do [ -s "$T/$tag.port" ] && break; sleep 0.05; done
    PORT=$(cat "$T/$tag.port")
}

# body_equal A.qem B.qem: the bodies (after the headers) are the same bytes.
body_equal() {
    if "$PY" - "$QEM" "$1" "$2" <<'PYEOF'
import json, subprocess, sys
def body(p):
    info = json.loads(subprocess.check_output([sys.argv[1], "info", p, "--json"]))
    d = open(p, "rb").read()
    return d[len(d) - info["body_bytes"]:]
sys.exit(0 if body(sys.argv[2]) == body(sys.argv[3]) else 1)
PYEOF
    then ok; else bad "the bodies of $1 and $2 differ"; fi
}

expect 0 "save" -- "$QEM" save "$MASTER" "$T/save.qem" --scan-shape 4,4 -q
for spec in all:bs32-lz4 basic:lz4 none:raw; do
    detail=${spec%%:*}; encoding=${spec#*:}
    serve "$detail" --detail "$detail" --encoding "$encoding"
    expect 0 "record $spec" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/$detail.qem" \
        --scan-shape 4,4
    wait "$SIMPID"
    body_equal "$T/$detail.qem" "$T/save.qem"
done

serve corrupt --corrupt lz4@5
expect 1 "corrupt frame" -- "$QEM" record "dectris://127.0.0.1:$PORT" "$T/corrupt.qem" \
    --scan-shape 4,4
kill "$SIMPID" 2>/dev/null; wait "$SIMPID" 2>/dev/null
contains_text "$T/err" "frame 5"

expect 1 "nobody sending" -- "$QEM" record "dectris://127.0.0.1:9" "$T/x.qem" \
    --connect-timeout 0.3
contains_text "$T/err" "nothing arrived from tcp://127.0.0.1:9"
absent "$T/x.qem"

finish
