#!/bin/sh
# Every global symbol libqem defines starts with qem_ or QEM_, so linking
# it (statically above all) cannot clash with a user's own names. Allowed
# besides: OpenMP's named critical sections (.gomp_critical_user_qem_*,
# named after a qem_ section), AddressSanitizer's one-definition markers
# in a sanitizer build (__odr_asan.qem_*, named after a qem_ global) and
# what the linker defines in a shared library (_init, _fini, __bss_start,
# _edata, _end).
# usage: check_symbols.sh LIBRARY... (.a: its members' globals; .so*: its
# dynamic symbol table)
set -eu
[ $# -gt 0 ] || { echo "usage: check_symbols.sh LIBRARY..." >&2; exit 2; }
bad=0
for lib in "$@"; do
    [ -f "$lib" ] || { echo "symbols: $lib is not a file" >&2; exit 1; }
    case $lib in
        *.a) names=$(nm -g --defined-only "$lib") ;;
        *) names=$(nm -D --defined-only "$lib") ;;
    esac
    # nm prints "ADDRESS TYPE NAME" (member headers and blank lines have
    # other shapes); the name is the last field.
    names=$(printf '%s\n' "$names" | awk 'NF == 3 {print $3}' | sort -u)
    [ -n "$names" ] || { echo "symbols: $lib defines no global symbol" >&2; exit 1; }
    stray=$(printf '%s\n' "$names" | grep -v \
        -e '^qem_' -e '^QEM_' -e '^\.gomp_critical_user_qem_' -e '^__odr_asan\.qem_' \
        -e '^_init$' -e '^_fini$' -e '^__bss_start$' -e '^_edata$' -e '^_end$' || true)
    if [ -n "$stray" ]; then
        count=$(printf '%s\n' "$stray" | wc -l)
        echo "symbols: $lib defines $count global symbol(s) not starting with qem_ or QEM_:" >&2
        printf '  %s\n' $stray >&2
        bad=1
    fi
done
[ "$bad" -eq 0 ] || exit 1
echo "symbols: every global symbol of $* starts with qem_ or QEM_"
