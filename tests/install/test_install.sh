#!/bin/sh
# Installs the build into a fresh prefix, checks that its libraries define
# only prefixed global names, then builds the README's C
# example against it twice, through pkg-config and through
# find_package(qem) (shared and static), and runs each on a fixture,
# comparing with the total numpy computes from the fixture's array.
# usage: test_install.sh BUILD PYTHON (the fixtures: $QEM_SHARED_DIR, else
# ../shared beside the repository)
set -eu
BUILD=$1
PY=$2
SHARED=""
for candidate in "${QEM_SHARED_DIR:-}" "$(dirname "$0")/../../../shared" /work/shared; do
    if [ -n "$candidate" ] && [ -f "$candidate/fixtures/qem/INDEX.json" ]; then
        SHARED=$candidate
        break
    fi
done
[ -n "$SHARED" ] || { echo "install: the shared fixtures are not found; set QEM_SHARED_DIR" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/qem-install-XXXXXX")
trap 'rm -rf "$T"' EXIT
cmake --install "$BUILD" --prefix "$T/prefix" >/dev/null
for f in include/qem.h include/qem_experimental.h lib/libqem.a lib/libqem.so lib/pkgconfig/qem.pc \
         lib/cmake/qem/qemConfig.cmake bin/qem; do
    [ -e "$T/prefix/$f" ] || { echo "install: $f missing" >&2; exit 1; }
done
soname=$(readelf -d "$T/prefix/lib/libqem.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libqem.so.1" ] || { echo "install: SONAME is '$soname'" >&2; exit 1; }
# The installed command and libraries search only absolute folders.
sh "$ROOT/tests/install/check_runpaths.sh" --run "$T/prefix/bin/qem" "$T/prefix" >/dev/null
# Both installed libraries define only qem_/QEM_ global names.
sh "$ROOT/tests/install/check_symbols.sh" "$T/prefix/lib/libqem.a" "$T/prefix/lib/libqem.so" >/dev/null
# The example is the README's C block, exactly.
awk '/^```c$/ {on = 1; next} /^```$/ {on = 0} on' "$ROOT/README.md" >"$T/example.c"
grep -q 'int main' "$T/example.c" || { echo "install: no C example in README.md" >&2; exit 1; }
FIXTURE="$SHARED/fixtures/qem/u16_dense_highdose"
want=$("$PY" -c "import numpy, sys; a = numpy.load(sys.argv[1]); print('%d x %d x %d x %d %s, pattern (0, 0) holds %d counts' % (a.shape + (a.dtype.name, int(a[0, 0].sum()))))" "$FIXTURE.npy")
check() {
    got=$("$@" "$FIXTURE.qem")
    if [ "$got" != "$want" ]; then
        echo "install: $1 printed '$got', expected '$want'" >&2
        exit 1
    fi
}
# 1. pkg-config (the shared library; rpath so it runs from the prefix).
PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig"
export PKG_CONFIG_PATH
cc -std=c11 -Wall -Wextra -Werror -o "$T/example_pc" "$T/example.c" \
   $(pkg-config --cflags qem) $(pkg-config --libs qem) -Wl,-rpath,"$T/prefix/lib"
check "$T/example_pc"
# ... and statically.
cc -std=c11 -Wall -Wextra -Werror -o "$T/example_pc_static" "$T/example.c" \
   $(pkg-config --cflags qem) -Wl,-Bstatic -lqem -Wl,-Bdynamic \
   $(pkg-config --libs-only-L qem) $(pkg-config --static --libs qem | sed 's/-lqem//')
check "$T/example_pc_static"
# 2. find_package(qem).
mkdir -p "$T/consumer"
cp "$ROOT/tests/install/CMakeLists.txt" "$T/example.c" "$T/consumer/"
cmake -S "$T/consumer" -B "$T/consumer/build" -DCMAKE_PREFIX_PATH="$T/prefix" \
      -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$T/consumer/build" >/dev/null
check "$T/consumer/build/example"
check "$T/consumer/build/example_static"
echo "install: prefix, SONAME $soname, pkg-config (shared, static) and find_package (qem::qem, qem::qem_static) builds of the README example agree: $want"
