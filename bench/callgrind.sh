#!/bin/sh
# Instruction counts of the main paths under valgrind --tool=callgrind:
# unlike seconds, they repeat exactly on a shared machine, so two builds
# can be compared change by change. One thread, a small fixed set.
#
#   bench/callgrind.sh [BUILD_DIR] [OUT_DIR]
#
# Prints a markdown table (millions of instructions per command) and
# leaves callgrind.out.* in OUT_DIR for callgrind_annotate.
set -eu
build=${1:-build}
out=${2:-$(mktemp -d "${TMPDIR:-/tmp}/qem-callgrind-XXXXXX")}
qem="$build/qem"
synth="$build/bench/qem-synth"
for tool in "$qem" "$synth"; do
    [ -x "$tool" ] || { echo "callgrind.sh: $tool is missing; run make build" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is missing (scripts/install-deps)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/set.* "$out"/setb.* "$out"/seth.* "$out"/*.npy "$out"/*.receipt.json

# 32x32 scans of a 128x128 uint16 detector at dose 0.3, as set A's scans;
# the same at set B's dose (4) and set H's (20) for the dense decoders.
"$synth" "$out/set.npy" --shape 32,32,128,128 --dose 0.3 --seed 20261129 >/dev/null
"$synth" "$out/setb.npy" --shape 32,32,128,128 --dose 4 --seed 20261131 >/dev/null
"$synth" "$out/seth.npy" --shape 32,32,128,128 --dose 20 --seed 20261201 >/dev/null

count() { # NAME COMMAND...: run it under callgrind, print its row
    name=$1
    shift
    file="$out/callgrind.out.$name"
    valgrind --tool=callgrind --callgrind-out-file="$file" "$@" \
        >/dev/null 2>"$out/$name.log" || { cat "$out/$name.log" >&2; exit 1; }
    total=$(sed -n 's/^summary: *//p; s/^totals: *//p' "$file" | head -n 1 | cut -d' ' -f1)
    top=$(callgrind_annotate "$file" 2>/dev/null |
        awk '/^ *[0-9,]+ +\([ 0-9.]+%\) / && !/PROGRAM TOTALS/ {
                 line = $0; sub(/^ *[0-9,]+ +\([ 0-9.]+%\) +/, "", line)
                 split(line, part, " "); f = part[1]; sub(/^[^:]*:/, "", f)
                 if (f ~ /^0x/) { f = $NF; gsub(/[][]/, "", f); sub(/.*\//, "", f) }
                 print f }' |
        awk '!seen[$0]++' | head -n 3 | tr '\n' ' ')
    [ -n "${startup:-}" ] || startup=$total
    awk -v n="$name" -v t="$total" -v s="$startup" -v top="$top" \
        'BEGIN { printf "| %s | %.1f | %.1f | %s|\n", n, t / 1e6, (t - s) / 1e6, top }'
}

echo "| command (1 thread) | instructions, millions | less start-up | top functions |"
echo "|---|---|---|---|"
# Start-up alone (dynamic linking of libhdf5, FFTW and the rest): the
# small products below are mostly this.
count startup "$qem" help
count save "$qem" save "$out/set.npy" "$out/set.qem" --quiet --threads 1
count export "$qem" export "$out/set.qem" "$out/export.npy" --quiet --threads 1
count verify "$qem" verify "$out/set.qem" --quiet --threads 1
count virtual_bf "$qem" virtual "$out/set.qem" --detector bf --center 64,64 --radius 16.1 \
    -o "$out/bf.npy" --quiet --threads 1
count virtual_adf "$qem" virtual "$out/set.qem" --detector annulus --center 64,64 \
    --inner 16.1 --outer 42.7 -o "$out/adf.npy" --quiet --threads 1
"$qem" save "$out/setb.npy" "$out/setb.qem" --quiet
"$qem" save "$out/seth.npy" "$out/seth.qem" --quiet
count export_b "$qem" export "$out/setb.qem" "$out/export_b.npy" --quiet --threads 1
count mean_b "$qem" mean "$out/setb.qem" -o "$out/mean_b.npy" --quiet --threads 1
count verify_b "$qem" verify "$out/setb.qem" --quiet --threads 1
count com_b "$qem" com "$out/setb.qem" -o "$out/com_b.npy" --quiet --threads 1
count export_h "$qem" export "$out/seth.qem" "$out/export_h.npy" --quiet --threads 1
count produce "$qem" pack produce "$out/set.npy" "$out/set.h5" --quiet --threads 1
count pack_mean "$qem" mean "$out/set.h5" -o "$out/mean.npy" --quiet --threads 1
