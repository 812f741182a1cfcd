#!/bin/sh
# Every command pays only for the libraries it uses: libqem.so and the qem
# command list none of libhdf5, libtiff, libpng, libmicrohttpd, FFTW, libzmq,
# libcbor (nor what they bring: curl, gnutls, Kerberos, LDAP...; the live
# DECTRIS receivers open libzmq and libcbor themselves), and the loader maps them
# only in the commands that use them, through the modules in qem-modules/
# (lib/common/module.h). LD_DEBUG=files names every object the loader
# maps, dlopen'ed ones included.
# usage: check_lazy_libraries.sh QEM LIBQEM SHARED_DIR
set -eu
QEM=$1
LIBQEM=$2
SHARED=$3
HEAVY='libhdf5|libtiff|libpng|libmicrohttpd|libfftw3|libzmq|libcbor|libcurl|libgnutls|libkrb5|libldap|libsz|libaec|libqem-hdf5|libqem-images|qem-view'
T=$(mktemp -d "${TMPDIR:-/tmp}/qem-lazy-XXXXXX")
trap 'rm -rf "$T"' EXIT
bad=0
for f in "$QEM" "$LIBQEM"; do
    if needed=$(readelf -d "$f" | grep NEEDED | grep -E "$HEAVY"); then
        echo "lazy: $f links a library only some commands use:" >&2
        printf '%s\n' "$needed" >&2
        bad=1
    fi
done
# What the loader mapped while running the command "$@" (its output apart).
mapped() {
    rm -f "$T"/ld.*
    LD_DEBUG=files LD_DEBUG_OUTPUT="$T/ld" "$@" >"$T/out" 2>"$T/err" ||
        { echo "lazy: '$*' failed: $(cat "$T/err")" >&2; exit 1; }
    cat "$T"/ld.* | sed -n 's/.*file=\([^ ]*\).*/\1/p' | sort -u
}
# check NAME PATTERN-THAT-MUST-BE-MAPPED ("" for none) PATTERN-THAT-MUST-NOT COMMAND...
check() {
    name=$1 want=$2 avoid=$3
    shift 3
    got=$(mapped "$@")
    if [ -n "$want" ] && ! printf '%s\n' "$got" | grep -Eq "$want"; then
        echo "lazy: $name did not load $want" >&2
        bad=1
    fi
    if wrong=$(printf '%s\n' "$got" | grep -E "$avoid"); then
        echo "lazy: $name loaded what it does not use:" $wrong >&2
        bad=1
    fi
}
FIX=$SHARED/fixtures/qem/u16_dense_highdose.qem
DET=$SHARED/fixtures/detectors
check "qem --version" "" "$HEAVY" "$QEM" --version
check "qem info" "" "$HEAVY" "$QEM" info "$FIX"
check "qem help view" "" "$HEAVY" "$QEM" help view
check "qem virtual -o .npy" "" "$HEAVY" "$QEM" virtual "$FIX" --detector bf -q -o "$T/v.npy"
check "qem virtual -o .png" "libpng" 'libhdf5|libmicrohttpd|libqem-hdf5' \
    "$QEM" virtual "$FIX" --detector bf -q -o "$T/v.png"
check "qem virtual -o .tif" "libtiff" 'libhdf5|libmicrohttpd|libqem-hdf5' \
    "$QEM" virtual "$FIX" --detector bf -q -o "$T/v.tif"
check "qem save .mib" "" "$HEAVY" "$QEM" save "$DET/mib/001_4x2_6bit.mib" "$T/m.qem" -q \
    --scan-shape 4,2
check "qem save (Arina HDF5)" "libqem-hdf5" 'libtiff|libpng|libmicrohttpd' \
    "$QEM" save "$DET/arina/test_00_master.h5" "$T/a.qem" -q --scan-shape 4,4
check "qem export" "" "$HEAVY" "$QEM" export "$T/a.qem" "$T/a.npy" -q
check "qem dpc" "libfftw3" 'libhdf5|libtiff|libpng|libmicrohttpd' \
    "$QEM" dpc "$FIX" -q -o "$T/d.npy"
# What the modules wrote is checked value by value by the CLI tests
# (tests/cli/); here only that each is its format.
head -c 8 "$T/v.png" | od -An -tx1 | grep -q '89 50 4e 47' ||
    { echo "lazy: v.png is not a PNG" >&2; bad=1; }
head -c 4 "$T/v.tif" | od -An -tx1 | grep -q '49 49 2a 00' ||
    { echo "lazy: v.tif is not a TIFF" >&2; bad=1; }
[ "$bad" -eq 0 ] || exit 1
echo "lazy: libqem.so and qem link no HDF5, image, HTTP, FFT, ZeroMQ or CBOR library; --version, info, .npy products and non-HDF5 saves map none; .png/.tif load the image module, HDF5 sources the HDF5 module, iDPC FFTW"
