#!/bin/sh
# Every ELF file under the given folders (binaries, libqem.so, the Python
# extension) searches only absolute folders for its libraries: an empty or
# relative RPATH/RUNPATH entry resolves against the current directory, so a
# library planted in a dataset folder would run inside qem. With QEM, also
# runs that command from a folder holding planted, broken copies of its
# libraries: it must load the real ones.
# usage: check_runpaths.sh [--run QEM] FOLDER...
set -eu
QEM=""
if [ "${1:-}" = "--run" ]; then
    QEM=$2
    shift 2
fi
[ $# -gt 0 ] || { echo "usage: check_runpaths.sh [--run QEM] FOLDER..." >&2; exit 2; }
checked=0
bad=0
list=$(mktemp)
trap 'rm -f "$list"' EXIT
find "$@" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) ! -name '*.sh' ! -name '*.py' \
    -print >"$list"
while IFS= read -r f; do
    head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
    checked=$((checked + 1))
    paths=$(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
    [ -n "$paths" ] || continue
    # ":"-separated; an entry that is empty or does not start with / or
    # $ORIGIN is relative to wherever the program is run from.
    if printf '%s\n' "$paths" | tr ':' '\n' | grep -qv '^/\|^\$ORIGIN'; then
        echo "runpath: $f searches a relative or empty folder: [$paths]" >&2
        bad=$((bad + 1))
    elif printf '%s' "$paths" | grep -q '::\|^:\|:$'; then
        echo "runpath: $f searches the current directory (empty entry): [$paths]" >&2
        bad=$((bad + 1))
    fi
done <"$list"
[ "$checked" -gt 0 ] || { echo "runpath: no ELF file found under $*" >&2; exit 1; }
[ "$bad" -eq 0 ] || exit 1
if [ -n "$QEM" ]; then
    QEM=$(cd "$(dirname "$QEM")" && pwd)/$(basename "$QEM")
    plant=$(mktemp -d)
    trap 'rm -f "$list"; rm -rf "$plant"' EXIT
    # Broken copies of every library the command needs: loading any of them
    # fails loudly ("file too short").
    ldd "$QEM" | sed -n 's/^[[:space:]]*\([^ ]*\.so[^ ]*\) =>.*/\1/p' | while IFS= read -r lib; do
        : >"$plant/$lib"
    done
    [ -e "$plant/libexpat.so.1" ] || { echo "runpath: $QEM does not need libexpat.so.1?" >&2; exit 1; }
    if ! out=$(cd "$plant" && "$QEM" --version 2>&1); then
        echo "runpath: $QEM run from a folder of planted libraries failed: $out" >&2
        exit 1
    fi
fi
echo "runpath: $checked ELF files under $*, no relative or empty search folder${QEM:+; $QEM ignores libraries planted in the current directory}"
