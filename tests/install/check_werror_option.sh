#!/bin/sh
# A plain `cmake` build does not turn warnings into errors (a user's newer
# compiler may warn where ours does not, and must still build); make test
# and CI ask for it with -DQEM_WERROR=ON. Configures the source tree twice
# into scratch folders and reads the compile flags CMake generated.
# usage: check_werror_option.sh SOURCE_DIR
set -eu
SRC=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
flags() {
    cat "$1"/CMakeFiles/qem_core_objects.dir/flags.make
}
cmake -S "$SRC" -B "$T/plain" -DQEM_BUILD_TESTS=OFF -DQEM_BUILD_BENCH=OFF >/dev/null
if flags "$T/plain" | grep -q -- '-Werror'; then
    echo "werror: a plain cmake build compiles with -Werror" >&2
    exit 1
fi
cmake -S "$SRC" -B "$T/strict" -DQEM_BUILD_TESTS=OFF -DQEM_BUILD_BENCH=OFF -DQEM_WERROR=ON >/dev/null
flags "$T/strict" | grep -q -- '-Werror' ||
    { echo "werror: -DQEM_WERROR=ON does not add -Werror" >&2; exit 1; }
flags "$T/plain" | grep -q -- '-Wall' ||
    { echo "werror: a plain build lost -Wall" >&2; exit 1; }
echo "werror: plain build warns without failing; QEM_WERROR=ON makes warnings errors"
