# Shared by the CLI test scripts (sourced): a scratch folder $T, counters,
# and the checks. The script sets `name` before sourcing.
T=$(mktemp -d "${TMPDIR:-/tmp}/qem-cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
checks=0

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); echo "FAIL: $*" >&2; }

# expect STATUS DESCRIPTION -- COMMAND...: runs COMMAND (at most 60 s),
# checks its exit status; stdout in $T/out, stderr in $T/err.
expect() {
    want=$1; what=$2; shift 3
    timeout -k 5 60 "$@" >"$T/out" 2>"$T/err"
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got, wanted $want"; cat "$T/err" >&2; fi
}
contains() {
    if grep -q -- "$2" "$1"; then ok; else bad "$1 lacks '$2'"; cat "$1" >&2; fi
}
# contains_text FILE TEXT: TEXT as it is, no pattern.
contains_text() {
    if grep -qF -- "$2" "$1"; then ok; else bad "$1 lacks '$2'"; cat "$1" >&2; fi
}
lacks() {
    if grep -q -- "$2" "$1"; then bad "$1 holds '$2'"; cat "$1" >&2; else ok; fi
}
absent() {
    if [ -e "$1" ]; then bad "'$1' exists"; else ok; fi
}
finish() {
    echo "$name: $checks checks, $failures failed" >&2
    [ "$failures" -eq 0 ]
}
