# Shared by the `qem record` test scripts (sourced after harness.sh, with
# $PY, $QEM and $SIM set): starting a replay simulator, comparing bodies.

# serve TAG SIM-ARGS...: starts the simulator in the background ($SIMPID);
# $PORT is the port it listens on.
serve() {
    tag=$1; shift
    rm -f "$T/$tag.port"
    "$PY" "$SIM" "$@" --port-file "$T/$tag.port" >/dev/null 2>"$T/$tag.simerr" &
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
