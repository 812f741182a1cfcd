#!/bin/sh
# Runs every fuzz target for SECONDS each from the fixtures' seeds plus the
# corpus kept in BUILD/corpus, and prints one line per target. Any crash,
# leak, timeout or out-of-memory fails the run (the input is saved in
# BUILD/findings). usage: run.sh BUILD SECONDS
set -u
BUILD=$1
SECONDS_EACH=$2
SHARED=${QEM_SHARED_DIR:-}
for candidate in "$SHARED" ../shared /work/shared; do
    if [ -n "$candidate" ] && [ -f "$candidate/fixtures/qem/INDEX.json" ]; then
        SHARED=$candidate
        break
    fi
done
rm -rf "$BUILD/seeds"
"$BUILD/tests/fuzz/fuzz_seeds" "$SHARED" "$BUILD/seeds" || exit 1
mkdir -p "$BUILD/findings"
failed=0
total=0
# The products' cache entries are read for this fixture (it records no sums).
export QEM_FUZZ_SUMS_FIXTURE="$SHARED/fixtures/qem/u16_nonsquare_masked.qem"
for t in qem_file qem_decode rans pack_file pack_parts npy roundtrip encoded_chunk mib empad raw \
         sums_cache k2is frms6 tvips seq blo mrc csr dm tia velox de_info encode dectris_message \
         dectris_cbor merlin_stream cli_args view_request; do
    mkdir -p "$BUILD/corpus/$t"
    log="$BUILD/findings/$t.log"
    # The argument parser explains every refusal on stderr: keep it quiet.
    quiet=0
    [ "$t" = cli_args ] && quiet=3
    "$BUILD/tests/fuzz/fuzz_$t" "$BUILD/corpus/$t" "$BUILD/seeds/$t" -close_fd_mask=$quiet \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -timeout=10 -print_final_stats=1 -artifact_prefix="$BUILD/findings/$t-" \
        >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    runs=${runs:-0}
    total=$((total + runs))
    if [ "$rc" -eq 0 ]; then
        echo "fuzz_$t: $runs executions in ${SECONDS_EACH}s, no finding"
    else
        echo "fuzz_$t: FINDING after $runs executions (exit $rc); see $log"
        grep -E "ERROR|SUMMARY" "$log" | head -3
        failed=1
    fi
done
echo "fuzzing: $total executions in all"
exit $failed
