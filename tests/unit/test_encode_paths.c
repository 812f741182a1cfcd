/* Every encode path writes the scalar reference's bytes, lane by lane:
 * the same selector, length and stream as qem_count_stream_encode on the
 * lane's column, and the same per-lane sums; each stream decodes, by the
 * reference decoder, to the lane's samples. Lanes of uint8, uint16 and
 * float32 halves, every kind of stream side by side (zero, constant,
 * sparse at its 128 and 2n-byte limits, rANS with and without escapes,
 * raw), bands of 1 to 256 lanes that start anywhere in a row, blocks of
 * 1 to 512 samples. And whole files: the upstream fixtures' arrays saved
 * on every path and 1 to 4 threads are one file, which verifies. */
#include "rans/rans.h"
#include "test_util.h"

#define MAX_LANES QEM_ENCODE_LANES
#define MAX_N QEM_STREAM_MAX_SAMPLES

/* Sample i of a lane of kind `kind` (its own seed `seed`). */
static uint16_t sample(unsigned kind, uint64_t *seed, uint32_t i, uint32_t n)
{
    const uint64_t r = test_rand(seed);
    switch (kind % 12) {
    case 0: return 0;
    case 1: return 9;                                             /* constant */
    case 2: return r % 61 == 0 ? (uint16_t)(1 + (r >> 8) % 128) : 0; /* sparse, values <= 128 */
    case 3: return r % 61 == 0 ? 129 : 0;                           /* sparse too large: rANS/raw */
    case 4: return (uint16_t)((r >> 8) % 3);                        /* low entropy */
    case 5: return (uint16_t)((r >> 8) % 12);                       /* medium */
    case 6: return (uint16_t)((r >> 8) % 40);                       /* escapes */
    case 7: return (uint16_t)(r >> 16);                             /* raw */
    case 8: return i == n - 1 ? 65535 : 0;                          /* one event at the end */
    case 9: return i % 2 ? 1 : 0;                                   /* half events: sparse = rANS? */
    case 10: return (uint16_t)(r % 100 < 2 ? 32 + (r >> 20) % 65504 : (r >> 8) % 6);
    default: return (uint16_t)(20 + (r >> 8) % 25);                 /* high dose */
    }
}

typedef struct outputs {
    uint8_t bytes[MAX_LANES][2 * MAX_N];
    uint32_t lengths[MAX_LANES], sums[MAX_LANES];
    uint8_t models[MAX_LANES];
} outputs;

static void run(const qem_rans_tables *t, qem_encode_path path, const qem_lane_source *src,
                size_t first, unsigned count, uint32_t n, outputs *o, qem_encode_workspace *ws)
{
    uint8_t *dst[MAX_LANES];
    for (unsigned k = 0; k < MAX_LANES; k++)
        dst[k] = o->bytes[k];
    memset(o->lengths, 0xa5, sizeof o->lengths);
    qem_count_streams_encode(t, path, src, first, count, n, dst, o->lengths, o->models, o->sums,
                             ws);
}

/* One band: rows of `width` bytes per element (float: uint32 holding two
 * lanes), lanes first .. first + count - 1 of each row. */
static void band(const qem_rans_tables *t, unsigned width, int float_halves, size_t first,
                 unsigned count, uint32_t n, uint64_t seed, int only_kind,
                 qem_encode_workspace *ws)
{
    const size_t lanes_per_row = first + count + 3 + (first + count + 3) % 2;
    const size_t bytes = (size_t)n * lanes_per_row * width;
    uint8_t *rows = calloc(bytes, 1);
    uint16_t(*column)[MAX_N] = malloc(sizeof *column * MAX_LANES);
    for (unsigned k = 0; k < count; k++) {
        uint64_t s = seed * 1000003u + k;
        const unsigned kind = only_kind >= 0 ? (unsigned)only_kind : (unsigned)(test_rand(&s) % 12);
        for (uint32_t i = 0; i < n; i++) {
            uint16_t v = sample(kind, &s, i, n);
            if (width == 1)
                v &= 255;
            column[k][i] = v;
            const size_t at = (size_t)i * lanes_per_row + first + k;
            if (width == 1) {
                rows[at] = (uint8_t)v;
            } else if (float_halves) {
                /* Lane 2p + h is half h of pixel p's uint32. */
                uint32_t *pixel = (uint32_t *)rows + at / 2;
                *pixel = at % 2 ? (*pixel & 0xffffu) | (uint32_t)v << 16
                                : (*pixel & 0xffff0000u) | v;
            } else {
                ((uint16_t *)rows)[at] = v;
            }
        }
    }
    const qem_lane_source src = {rows, lanes_per_row, width == 1 ? 1u : 2u, float_halves};
    static outputs want, got;
    run(t, QEM_ENCODE_SCALAR, &src, first, count, n, &want, ws);
    for (unsigned k = 0; k < count; k++) {
        uint32_t sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += column[k][i];
        CHECK_EQ_U64(want.sums[k], sum);
        /* The reference: the single-stream encoder on the column. */
        uint8_t one[2 * MAX_N], model = 0, scratch[4 * MAX_N + 8];
        const size_t len = qem_count_stream_encode(t, column[k], n, one, &model, scratch);
        CHECK_EQ_U64(want.lengths[k], len);
        CHECK_EQ_U64(want.models[k], model);
        CHECK(memcmp(want.bytes[k], one, len) == 0);
        uint16_t back[MAX_N];
        CHECK(qem_count_stream_decode(t, model, one, len, n, 65535, back) == QEM_OK);
        CHECK(memcmp(back, column[k], n * sizeof back[0]) == 0);
    }
    if (qem_encode_path_supported(QEM_ENCODE_AVX512)) {
        run(t, QEM_ENCODE_AVX512, &src, first, count, n, &got, ws);
        for (unsigned k = 0; k < count; k++) {
            CHECK_EQ_U64(got.lengths[k], want.lengths[k]);
            CHECK_EQ_U64(got.models[k], want.models[k]);
            CHECK_EQ_U64(got.sums[k], want.sums[k]);
            CHECK(memcmp(got.bytes[k], want.bytes[k], want.lengths[k]) == 0);
        }
    }
    free(column);
    free(rows);
}

/* An upstream fixture's array saved on 1 to 4 threads on every encode
 * path: the same file each time, which verifies and reads back as the
 * array. */
static void fixture_saves(const char *stem)
{
    char rel[128], name[160];
    snprintf(rel, sizeof rel, "qem/%s.npy", stem);
    const char *npy = fixture_path(rel);
    uint8_t *first = NULL;
    size_t first_size = 0;
    static const char *const paths[] = {"scalar", "avx512"};
    for (unsigned p = 0; p < 2; p++) {
        if (p == 1 && !qem_encode_path_supported(QEM_ENCODE_AVX512))
            break;
        setenv("QEM_ENCODE_PATH", paths[p], 1);
        for (int threads = 1; threads <= 4; threads++) {
            snprintf(name, sizeof name, "%s-%s-%d.qem", stem, paths[p], threads);
            const char *out = test_path(name);
            qem_save_options o;
            qem_save_options_init(&o);
            o.threads = threads;
            o.chunk_scans = 3; /* several chunks, and short blocks */
            qem_error e = {0};
            CHECK_OK(qem_save_file(npy, out, &o, &e), &e);
            size_t size = 0;
            uint8_t *bytes = read_file(out, &size);
            CHECK(bytes != NULL);
            if (!first) {
                first = bytes;
                first_size = size;
                qem_file *f = NULL;
                CHECK_OK(qem_open(out, NULL, &f, &e), &e);
                CHECK_OK(qem_verify(f, NULL, NULL, &e), &e);
                /* The values: the .npy's data (little-endian, C order). */
                size_t npy_size = 0;
                uint8_t *array = read_file(npy, &npy_size);
                const size_t data = array ? 10 + (size_t)(array[8] | array[9] << 8) : 0;
                qem_file_info info = {.struct_size = sizeof info};
                CHECK_OK(qem_get_info(f, &info, &e), &e);
                const uint64_t scans = info.shape[0] * info.shape[1];
                const size_t want = (size_t)qem_read_scans_bound(f, scans);
                uint8_t *back = malloc(want ? want : 1);
                CHECK_OK(qem_read_scans(f, 0, scans, back, want, &e), &e);
                CHECK(array && npy_size - data == want && memcmp(array + data, back, want) == 0);
                free(back);
                free(array);
                qem_close(f);
                continue;
            }
            CHECK(bytes && size == first_size && memcmp(bytes, first, size) == 0);
            free(bytes);
        }
    }
    unsetenv("QEM_ENCODE_PATH");
    free(first);
}

int main(void)
{
    static qem_rans_tables t;
    qem_rans_tables_init(&t);
    qem_encode_workspace *ws = qem_encode_workspace_new();
    CHECK(ws != NULL);
    if (!qem_encode_path_supported(QEM_ENCODE_AVX512))
        fprintf(stderr, "note: this CPU has no AVX-512: only the scalar path is checked\n");
    static const uint32_t ns[] = {1, 2, 7, 100, 511, 512};
    static const unsigned counts[] = {1, 5, 16, 17, 31, 32, 33, 100, 255, 256};
    static const size_t firsts[] = {0, 3, 32};
    uint64_t seed = 1;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof counts / sizeof counts[0]; b++)
            for (size_t c = 0; c < sizeof firsts / sizeof firsts[0]; c++) {
                band(&t, 2, 0, firsts[c], counts[b], ns[a], seed++, -1, ws);
                band(&t, 1, 0, firsts[c], counts[b], ns[a], seed++, -1, ws);
                band(&t, 4, 1, firsts[c], counts[b], ns[a], seed++, -1, ws);
                /* Every lane raw (noisy float halves): runs of eight raw
                 * lanes take the transposing path. */
                band(&t, 2, 0, firsts[c], counts[b], ns[a], seed++, 7, ws);
                band(&t, 4, 1, firsts[c], counts[b], ns[a], seed++, 7, ws);
            }
    static const char *const fixtures[] = {"u8_sparse_lowdose", "u16_dense_highdose",
                                           "u16_nonsquare_masked", "f32_special_bits"};
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        fixture_saves(fixtures[i]);
    /* A save asked for an unknown path is refused, and writes nothing. */
    {
        setenv("QEM_ENCODE_PATH", "avx9", 1);
        qem_error e = {0};
        const char *out = test_path("unknown-path.qem");
        CHECK_STATUS(qem_save_file(fixture_path("qem/u16_dense_highdose.npy"), out, NULL, &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        CHECK(strstr(e.message, "QEM_ENCODE_PATH is 'avx9'") != NULL);
        CHECK(!file_exists(out));
        unsetenv("QEM_ENCODE_PATH");
    }
    /* The path names, and what an unknown one gives. */
    qem_encode_path p = QEM_ENCODE_AUTO;
    CHECK(qem_encode_path_from_name("scalar", &p) && p == QEM_ENCODE_SCALAR);
    CHECK(qem_encode_path_from_name("avx512", &p) && p == QEM_ENCODE_AVX512);
    CHECK(!qem_encode_path_from_name("avx9", &p));
    CHECK(qem_encode_path_resolve(QEM_ENCODE_SCALAR) == QEM_ENCODE_SCALAR);
    qem_encode_workspace_free(ws);
    return test_finish("unit_encode_paths");
}
