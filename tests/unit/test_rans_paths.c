/* Every decode path (scalar, AVX2, AVX-512 where the CPU has them) gives
 * the same values and the same status as the scalar decoder, stream by
 * stream: on rANS streams of every model with escapes, on the other
 * models mixed in, and on each kind of damage (truncated, wrong final
 * state, bad initial state, escape above the maximum, short span). */
#include "rans/rans.h"
#include "test_util.h"

#define N 512u
#define STREAMS 150u

static uint8_t buffer[STREAMS * (4 * N + 8) + QEM_SPAN_PADDING];

typedef struct stream {
    unsigned model;
    size_t offset, size;
} stream;

/* Builds STREAMS streams into `buffer`; `damage` picks what to break in
 * every seventh stream (0 = nothing). */
static void build(const qem_rans_tables *t, stream *s, uint64_t seed, int damage)
{
    static uint16_t values[N];
    static uint8_t scratch[4 * N + 8];
    size_t at = 0;
    for (unsigned k = 0; k < STREAMS; k++) {
        const unsigned kind = (unsigned)(test_rand(&seed) % 10);
        const unsigned model = (unsigned)(test_rand(&seed) % QEM_RANS_MODELS);
        for (unsigned i = 0; i < N; i++) {
            const uint64_t r = test_rand(&seed);
            /* Mostly small counts, some escapes (>= 32) up to 65535. */
            values[i] = (uint16_t)(r % 100 < 3 ? 32 + (r >> 20) % 65504 : (r >> 8) % (model % 8 + 2));
        }
        uint8_t *dst = buffer + at;
        if (kind == 0) { /* all zeros */
            s[k].model = QEM_MODEL_ZERO;
            s[k].size = 0;
        } else if (kind == 1) {
            s[k].model = QEM_MODEL_CONSTANT;
            dst[0] = 7;
            dst[1] = 1;
            s[k].size = 2;
        } else if (kind == 2) {
            s[k].model = QEM_MODEL_RAW;
            for (unsigned i = 0; i < N; i++) {
                dst[2 * i] = (uint8_t)values[i];
                dst[2 * i + 1] = (uint8_t)(values[i] >> 8);
            }
            s[k].size = 2 * N;
        } else {
            const uint8_t *code = NULL;
            s[k].size = qem_rans_encode(t, model, values, N, scratch, sizeof scratch, &code);
            memcpy(dst, code, s[k].size);
            s[k].model = model;
        }
        if (damage && k % 7 == 3 && s[k].model < QEM_RANS_MODELS) {
            switch (damage) {
            case 1: s[k].size -= 1; break;                       /* truncated */
            case 2: dst[s[k].size - 1] ^= 0x5a; break;           /* wrong final state */
            case 3: dst[3] = 0x80; break;                        /* state above HIGH */
            case 4: s[k].size = 3; break;                        /* short span */
            case 5: dst[s[k].size / 2] ^= 0xff; break;           /* damage in the middle */
            }
        }
        s[k].offset = at;
        at += s[k].size;
    }
    memset(buffer + at, 0, QEM_SPAN_PADDING);
}

/* Returns how many streams the scalar decoder refuses. */
static unsigned check_paths(const qem_rans_tables *t, const stream *s, uint32_t max_value)
{
    static uint16_t want[STREAMS][N], got[STREAMS][N];
    qem_status want_st[STREAMS];
    for (unsigned k = 0; k < STREAMS; k++)
        want_st[k] = qem_count_stream_decode(t, s[k].model, buffer + s[k].offset, s[k].size, N,
                                             max_value, want[k]);
    static const qem_rans_path paths[] = {QEM_RANS_PATH_SCALAR, QEM_RANS_PATH_AVX2,
                                          QEM_RANS_PATH_AVX512, QEM_RANS_PATH_AVX2_LOADS};
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!qem_rans_path_supported(paths[pi])) {
            fprintf(stderr, "path %s not on this CPU\n", qem_rans_path_name(paths[pi]));
            continue;
        }
        /* One stream per call gives each stream's own status ... */
        int wrong = 0;
        for (unsigned k = 0; k < STREAMS; k++) {
            qem_stream_job job = {s[k].model, buffer + s[k].offset, s[k].size, got[k], 1, 0};
            size_t failed;
            const qem_status st = qem_count_streams_decode(t, paths[pi], buffer, &job, 1, N,
                                                           max_value, &failed);
            wrong += st != want_st[k] || (st == QEM_OK && memcmp(got[k], want[k], sizeof want[k]));
        }
        CHECK_EQ_U64(wrong, 0);
        /* ... and all at once the first failure and every good stream. */
        qem_stream_job jobs[STREAMS];
        for (unsigned k = 0; k < STREAMS; k++)
            jobs[k] = (qem_stream_job){s[k].model, buffer + s[k].offset, s[k].size, got[k], 1, 0};
        size_t failed;
        const qem_status st = qem_count_streams_decode(t, paths[pi], buffer, jobs, STREAMS, N,
                                                       max_value, &failed);
        unsigned first_bad = STREAMS;
        for (unsigned k = 0; k < STREAMS && first_bad == STREAMS; k++)
            if (want_st[k] != QEM_OK)
                first_bad = k;
        CHECK_EQ_U64(failed, first_bad);
        CHECK_EQ_U64(st, first_bad < STREAMS ? want_st[first_bad] : QEM_OK);
        wrong = 0;
        for (unsigned k = 0; k < STREAMS; k++)
            wrong += want_st[k] == QEM_OK && memcmp(got[k], want[k], sizeof want[k]) != 0;
        CHECK_EQ_U64(wrong, 0);
    }
    unsigned refused = 0;
    for (unsigned k = 0; k < STREAMS; k++)
        refused += want_st[k] != QEM_OK;
    return refused;
}

/* Sparse rows (the dark field of a medium-dose acquisition), which the
 * SIMD paths decode by comparing slots with a row's few head symbols
 * instead of a table: 16-lane batches of such rows side by side in a tile
 * of scan rows (written in place), one batch with a row that needs the
 * table among them, escapes (frequency 1 in these rows), an odd sample
 * count, and damaged streams. Each path gives the reference's values,
 * statuses and first failing stream, in the tile and as columns. */
static void sparse_rows(const qem_rans_tables *t)
{
    enum { S = 64 };
    static uint16_t values[S][N], want[S][N], tile[N * S], cols[S][N];
    static uint8_t scratch[4 * N + 8];
    static const qem_rans_path paths[] = {QEM_RANS_PATH_SCALAR, QEM_RANS_PATH_AVX2,
                                          QEM_RANS_PATH_AVX512, QEM_RANS_PATH_AVX2_LOADS};
    static const uint32_t samples[] = {N, 301};
    unsigned heads_seen[QEM_RANS_SYMBOLS + 1] = {0};
    for (size_t ni = 0; ni < sizeof samples / sizeof *samples; ni++) {
        const uint32_t n = samples[ni];
        for (int damage = 0; damage < 4; damage++) {
            uint64_t seed = 900 + (uint64_t)damage;
            size_t offset[S], size[S], at = 0;
            unsigned model[S];
            for (unsigned k = 0; k < S; k++) {
                /* Rows 0..45 have heads of 2 to 9 symbols; stream 50 takes
                 * row 60, whose escape is frequent: its batch needs the table. */
                model[k] = k == 50 ? 60 : (unsigned)(test_rand(&seed) % 46);
                heads_seen[t->head[model[k]]]++;
                for (unsigned i = 0; i < n; i++) {
                    const uint64_t r = test_rand(&seed);
                    values[k][i] = (uint16_t)(r % 200 == 0   ? 32 + (r >> 24) % 65504
                                              : r % 7 == 0   ? (r >> 8) % 4
                                                             : 0);
                }
                const uint8_t *code = NULL;
                size[k] = qem_rans_encode(t, model[k], values[k], n, scratch, sizeof scratch, &code);
                memcpy(buffer + at, code, size[k]);
                if (damage && k % 11 == 5)
                    test_damage_stream(buffer + at, &size[k], damage);
                offset[k] = at;
                at += size[k];
            }
            memset(buffer + at, 0, QEM_SPAN_PADDING);
            qem_status want_st[S];
            size_t first_bad = S;
            for (unsigned k = 0; k < S; k++) {
                want_st[k] = qem_count_stream_decode(t, model[k], buffer + offset[k], size[k], n,
                                                     65535, want[k]);
                if (want_st[k] != QEM_OK && first_bad == S)
                    first_bad = k;
            }
            CHECK(damage ? first_bad < S : first_bad == S);
            unsigned good = 0;
            for (unsigned k = 0; k < S; k++)
                good += want_st[k] == QEM_OK;
            for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
                if (!qem_rans_path_supported(paths[p]))
                    continue;
                for (int as_columns = 0; as_columns < 2; as_columns++) {
                    qem_stream_job jobs[S];
                    memset(tile, 0xee, sizeof tile);
                    memset(cols, 0xee, sizeof cols);
                    for (unsigned k = 0; k < S; k++)
                        jobs[k] = (qem_stream_job){model[k], buffer + offset[k], size[k],
                                                   as_columns ? cols[k] : tile + k,
                                                   as_columns ? 1 : S, 0};
                    size_t failed = 0, redone = 0;
                    const qem_status st = qem_count_streams_decode_counted(
                        t, paths[p], buffer, jobs, S, n, 65535, &failed, &redone);
                    /* SIMD lanes are decoded again only where a rule is
                     * broken: a SIMD mistake would hide behind the redo. */
                    CHECK_EQ_U64(redone, (paths[p] == QEM_RANS_PATH_SCALAR ? 0 : S - good));
                    CHECK_EQ_U64(failed, first_bad);
                    CHECK_EQ_U64(st, first_bad < S ? want_st[first_bad] : QEM_OK);
                    unsigned wrong = 0;
                    for (unsigned k = 0; k < S; k++)
                        for (unsigned i = 0; want_st[k] == QEM_OK && i < n; i++)
                            wrong += (as_columns ? cols[k][i] : tile[i * S + k]) != want[k][i];
                    CHECK_EQ_U64(wrong, 0);
                }
            }
        }
    }
    /* The rows drawn cover heads 2 to 9, and one row with no closing run. */
    for (unsigned h = 2; h <= 9; h++)
        CHECK(heads_seen[h] > 0);
    CHECK(heads_seen[QEM_RANS_SYMBOLS] > 0);
}

int main(void)
{
    static qem_rans_tables t;
    qem_rans_tables_init(&t);
    static stream s[STREAMS];
    for (int damage = 0; damage <= 5; damage++) {
        build(&t, s, 100 + (uint64_t)damage, damage);
        const unsigned refused = check_paths(&t, s, 65535);
        /* Undamaged streams decode; each damage is refused somewhere. */
        CHECK(damage ? refused > 0 : refused == 0);
        /* Escapes above a uint8 file's maximum. */
        CHECK(check_paths(&t, s, 255) > 0);
    }
    sparse_rows(&t);
    /* The environment forces a path; an unsupported one falls back. */
    setenv("QEM_RANS_PATH", "scalar", 1);
    CHECK_EQ_U64(qem_rans_path_resolve(QEM_RANS_PATH_AUTO), QEM_RANS_PATH_SCALAR);
    unsetenv("QEM_RANS_PATH");
    CHECK(qem_rans_path_resolve(QEM_RANS_PATH_AUTO) != QEM_RANS_PATH_AUTO);
    CHECK(qem_decode_path_supported(QEM_DECODE_SCALAR));
    /* Every name round-trips; others are unknown. */
    static const qem_decode_path all[] = {QEM_DECODE_AUTO, QEM_DECODE_SCALAR, QEM_DECODE_AVX2,
                                          QEM_DECODE_AVX512, QEM_DECODE_AVX2_LOADS};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        qem_decode_path back = (qem_decode_path)99;
        CHECK(qem_decode_path_from_name(qem_decode_path_name(all[k]), &back));
        CHECK_EQ_U64(back, all[k]);
    }
    qem_decode_path unused;
    CHECK(!qem_decode_path_from_name("avx2-load", &unused));
    CHECK(!qem_decode_path_from_name("", &unused));
    CHECK(!qem_decode_path_from_name(NULL, &unused));
    setenv("QEM_RANS_PATH", "avx2-loads", 1);
    CHECK_EQ_U64(qem_rans_path_resolve(QEM_RANS_PATH_AUTO),
                 qem_rans_path_supported(QEM_RANS_PATH_AVX2_LOADS) ? QEM_RANS_PATH_AVX2_LOADS
                                                                   : QEM_RANS_PATH_SCALAR);
    unsetenv("QEM_RANS_PATH");
#if defined(__x86_64__) && defined(__GNUC__)
    /* AUTO: AVX-512 where the CPU has it, else AVX2, with gathers by
     * loads on AMD. */
    const qem_rans_path chosen = qem_rans_path_resolve(QEM_RANS_PATH_AUTO);
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX512))
        CHECK_EQ_U64(chosen, QEM_RANS_PATH_AVX512);
    else if (qem_rans_path_supported(QEM_RANS_PATH_AVX2))
        CHECK_EQ_U64(chosen, __builtin_cpu_is("amd") ? QEM_RANS_PATH_AVX2_LOADS
                                                     : QEM_RANS_PATH_AVX2);
#endif
    return test_finish("unit_rans_paths");
}
