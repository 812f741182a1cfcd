/* The count-stream decoder alone, in cache: 64 streams of 512 Poisson
 * samples (one pixel group of one block) encoded as the writer encodes
 * them, decoded into a tile of scan rows on each path, by process CPU
 * time (a shared machine's other work does not count). Each repetition
 * takes the next of 16 different sets of streams: decoding one set again
 * and again lets the branch predictor learn its data, which hid what
 * data-dependent branches cost in real files. `qem-bench --kernel`: the
 * per-count cost of the rANS step itself, without chunk reads or the
 * caller's rows. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "rans/rans.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 20261201;
static double uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)((rng >> 11) + 1) * 0x1.0p-53;
}

static unsigned poisson(double lambda)
{
    const double limit = exp(-lambda);
    double prod = uniform();
    unsigned k = 0;
    while (prod > limit) {
        prod *= uniform();
        k++;
    }
    return k;
}

int bench_kernel(char *out, size_t size)
{
    enum { N = 512, S = 64, SETS = 16, REPS = 320 };
    static qem_rans_tables t;
    qem_rans_tables_init(&t);
    static uint16_t values[SETS][S][N], tile[N * S];
    static uint8_t buffer[SETS * S * 2 * N + QEM_SPAN_PADDING], scratch[4 * N + 8];
    /* Dose per stream: one value each, or (negative) a spread of doses
     * from 0.05 to 33 as a pixel group crossing a disk edge has. */
    static const double doses[] = {0.3, 4, 20, -1};
    static const qem_rans_path paths[] = {QEM_RANS_PATH_SCALAR, QEM_RANS_PATH_AVX2,
                                          QEM_RANS_PATH_AVX2_LOADS, QEM_RANS_PATH_AVX512};
    enum { PATHS = sizeof paths / sizeof paths[0] };
    int n = snprintf(out, size,
                     "Decoder alone (`qem-bench --kernel`): 64 streams x 512 samples in cache "
                     "into a tile of scan rows, %d different sets in turn, best of %d by process "
                     "CPU time, ns per count.\n\n"
                     "| counts per sample | stream bytes per count | rANS streams | scalar | "
                     "avx2 | avx2-loads | avx512 |\n|---|---|---|---|---|---|---|\n",
                     SETS, REPS);
    for (size_t d = 0; d < sizeof doses / sizeof *doses; d++) {
        static qem_stream_job jobs[SETS][S];
        size_t at = 0;
        unsigned rans = 0;
        for (unsigned set = 0; set < SETS; set++)
            for (unsigned k = 0; k < S; k++) {
                const double lambda =
                    doses[d] > 0 ? doses[d] : exp(-3.0 + (k * 37 % 64) / 64.0 * 6.5);
                for (unsigned i = 0; i < N; i++)
                    values[set][k][i] = (uint16_t)poisson(lambda);
                uint8_t model;
                const size_t len =
                    qem_count_stream_encode(&t, values[set][k], N, buffer + at, &model, scratch);
                jobs[set][k] = (qem_stream_job){model, buffer + at, len, tile + k, S, 1};
                at += len;
                rans += model < QEM_RANS_MODELS;
            }
        memset(buffer + at, 0, QEM_SPAN_PADDING);
        char cells[PATHS][32];
        for (size_t p = 0; p < PATHS; p++) {
            snprintf(cells[p], sizeof cells[p], "not on this CPU");
            if (!qem_rans_path_supported(paths[p]))
                continue;
            double best = 1e9;
            int ok = 1;
            for (int r = 0; r < REPS && ok; r++) {
                const unsigned set = (unsigned)r % SETS;
                memset(tile, 0, sizeof tile);
                size_t failed;
                const double c0 = cpu_now();
                ok = qem_count_streams_decode(&t, paths[p], buffer, jobs[set], S, N, 65535,
                                              &failed) == QEM_OK;
                const double c = cpu_now() - c0;
                best = c < best ? c : best;
                for (unsigned k = 0; ok && k < S; k++)
                    for (unsigned i = 0; i < N; i++)
                        ok &= tile[i * S + k] == values[set][k][i];
            }
            snprintf(cells[p], sizeof cells[p], ok ? "%.2f" : "wrong", best / (S * N) * 1e9);
        }
        char dose[32];
        snprintf(dose, sizeof dose, doses[d] > 0 ? "%.1f" : "0.05-33 (spread)", doses[d]);
        n += snprintf(out + n, size - (size_t)n, "| %s | %.2f | %u of %d | %s | %s | %s | %s |\n",
                      dose, (double)at / (SETS * S * N), rans / SETS, S, cells[0], cells[1],
                      cells[2], cells[3]);
    }
    n += snprintf(out + n, size - (size_t)n, "\n");
    return n;
}
