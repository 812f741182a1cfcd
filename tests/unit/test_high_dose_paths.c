/* High-dose data (20 counts per bright-field pixel, escapes, hot and dead
 * pixels) through every decode path this CPU has: a written file reads
 * back bit-exactly, verifies, and gives the dense sums, means and moments
 * on each path; the upstream fixtures decode identically on each path;
 * and streams decoded into tiles of scan rows (strided, zeroed outputs)
 * give the reference decoder's values, statuses and first failing stream,
 * damaged or not. */
#include <math.h>

#include "rans/rans.h"
#include "test_util.h"

static const qem_decode_path paths[] = {QEM_DECODE_SCALAR, QEM_DECODE_AVX2, QEM_DECODE_AVX512,
                                        QEM_DECODE_AVX2_LOADS};
static const char *const path_names[] = {"scalar", "avx2", "avx512", "avx2-loads"};

static uint32_t poisson(uint64_t *seed, double lambda)
{
    if (lambda > 30) {
        const double u1 = ((double)(test_rand(seed) >> 11) + 1) * 0x1.0p-53;
        const double u2 = (double)(test_rand(seed) >> 11) * 0x1.0p-53;
        const double v = floor(lambda + sqrt(lambda) * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
        return v < 0 ? 0 : (uint32_t)v;
    }
    double limit = exp(-lambda), prod = (double)(test_rand(seed) >> 11) * 0x1.0p-53;
    uint32_t k = 0;
    while (prod > limit) {
        prod *= (double)(test_rand(seed) >> 11) * 0x1.0p-53;
        k++;
    }
    return k;
}

/* A disk of dose `dose` drifting with the scan, weak background, a ring
 * at twice the dose (escapes), one hot and one dead pixel in 97. */
static void make_counts(uint16_t *data, uint64_t scans, uint64_t H, uint64_t W, double dose,
                        uint32_t cap, uint64_t seed)
{
    for (uint64_t s = 0; s < scans; s++)
        for (uint64_t y = 0; y < H; y++)
            for (uint64_t x = 0; x < W; x++) {
                const uint64_t p = y * W + x;
                const double cy = (double)H / 2 + 2 * sin((double)s * 0.05);
                const double cx = (double)W / 2 + 2 * cos((double)s * 0.07);
                const double d2 = ((double)y - cy) * ((double)y - cy) + ((double)x - cx) * ((double)x - cx);
                const double r = (double)H / 4;
                double lambda = dose * 0.01;
                if (d2 <= r * r)
                    lambda = dose;
                else if (d2 <= 1.4 * r * r)
                    lambda = 2 * dose;
                uint32_t v = poisson(&seed, lambda);
                if (p % 97 == 5)
                    v = 1000 + poisson(&seed, 50);
                else if (p % 97 == 7)
                    v = cap - (uint32_t)(s % 3); /* saturated: the top of the dtype */
                else if (p % 97 == 11)
                    v = 0;
                data[s * H * W + p] = (uint16_t)(v > cap ? cap : v);
            }
}

static qem_file *open_on(const char *path, qem_decode_path dp, qem_error *e)
{
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.threads = 2;
    qem_experimental_open_options xo;
    qem_experimental_open_options_init(&xo);
    xo.decode_path = dp;
    qem_file *f = NULL;
    CHECK_OK(qem_open_experimental(path, &oo, &xo, &f, e), e);
    return f;
}

/* Writes the data, then on every path: full read, windows, verify, and
 * the products that need every pixel against dense sums. */
static void file_round_trip(qem_dtype dtype, const uint64_t shape[4], double dose)
{
    qem_error e = {0};
    const uint64_t scans = shape[0] * shape[1], H = shape[2], W = shape[3], P = H * W;
    const uint32_t cap = dtype == QEM_DTYPE_UINT8 ? 255 : 65535;
    const size_t item = qem_dtype_size(dtype);
    uint16_t *counts = malloc((size_t)(scans * P) * sizeof *counts);
    uint8_t *data = malloc((size_t)(scans * P * item));
    make_counts(counts, scans, H, W, dose, cap, 4242 + item);
    for (uint64_t k = 0; k < scans * P; k++) {
        if (item == 1)
            data[k] = (uint8_t)counts[k];
        else
            ((uint16_t *)data)[k] = counts[k];
    }
    const char *path = test_path(item == 1 ? "high_u8.qem" : "high_u16.qem");
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(path, dtype, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, scans, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    /* Dense references: per-pixel sums, per-scan total and moments. */
    uint64_t *pixel_sum = calloc((size_t)P, sizeof *pixel_sum);
    int64_t *moments = calloc((size_t)(3 * scans), sizeof *moments);
    for (uint64_t s = 0; s < scans; s++)
        for (uint64_t p = 0; p < P; p++) {
            const uint16_t v = counts[s * P + p];
            pixel_sum[p] += v;
            moments[s] += v;
            moments[scans + s] += (int64_t)(p / W) * v;
            moments[2 * scans + s] += (int64_t)(p % W) * v;
        }

    uint8_t *back = malloc((size_t)(scans * P * item));
    int tried = 0;
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        if (!qem_decode_path_supported(paths[k])) {
            fprintf(stderr, "unit_high_dose_paths: path %s not on this CPU\n", path_names[k]);
            continue;
        }
        tried++;
        qem_file *f = open_on(path, paths[k], &e);
        if (!f)
            continue;
        memset(back, 0xa5, (size_t)(scans * P * item));
        CHECK_OK(qem_read_scans(f, 0, scans, back, (size_t)(scans * P * item), &e), &e);
        if (memcmp(back, data, (size_t)(scans * P * item)) != 0)
            fprintf(stderr, "path %s: decoded counts differ\n", path_names[k]);
        CHECK(memcmp(back, data, (size_t)(scans * P * item)) == 0);
        /* Windows starting and ending inside blocks. */
        const uint64_t windows[][2] = {{1, 3}, {500, 30}, {511, 2}, {scans - 7, 7}};
        for (size_t q = 0; q < 4; q++) {
            const uint64_t first = windows[q][0], count = windows[q][1];
            CHECK_OK(qem_read_scans(f, first, count, back, (size_t)(count * P * item), &e), &e);
            CHECK(memcmp(back, data + first * P * item, (size_t)(count * P * item)) == 0);
        }
        qem_verify_report report = {.struct_size = sizeof report};
        CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
        CHECK_EQ_U64(report.samples_decoded, scans * P);
        qem_close(f);

        /* Products go through the source: the path comes from the
         * environment there. */
        setenv("QEM_RANS_PATH", path_names[k], 1);
        qem_container *src = NULL;
        qem_products *pr = NULL;
        CHECK_OK(qem_container_open(path, NULL, &src, &e), &e);
        if (src)
            CHECK_OK(qem_products_open(src, NULL, &pr, &e), &e);
        if (pr) {
            uint64_t *sums = calloc((size_t)P, sizeof *sums);
            CHECK_OK(qem_products_pixel_sums(pr, 0, scans, sums, (size_t)P * sizeof *sums, &e), &e);
            CHECK(memcmp(sums, pixel_sum, (size_t)P * sizeof *sums) == 0);
            free(sums);
            qem_image mean;
            CHECK_OK(qem_products_mean(pr, &mean, &e), &e);
            int mean_ok = mean.data != NULL;
            for (uint64_t p = 0; mean_ok && p < P; p++)
                mean_ok = ((float *)mean.data)[p] == (float)((double)pixel_sum[p] / (double)scans);
            CHECK(mean_ok);
            qem_image_free(&mean);
            int32_t *wt = malloc((size_t)(3 * P) * sizeof *wt);
            for (uint64_t p = 0; p < P; p++) {
                wt[p] = 1;
                wt[P + p] = (int32_t)(p / W);
                wt[2 * P + p] = (int32_t)(p % W);
            }
            const int32_t *planes[3] = {wt, wt + P, wt + 2 * P};
            int64_t *got = calloc((size_t)(3 * scans), sizeof *got);
            CHECK_OK(qem_products_weighted_sums(pr, 0, scans, planes, 3, got, (size_t)(3 * scans) * sizeof *got, &e), &e);
            CHECK(memcmp(got, moments, (size_t)(3 * scans) * sizeof *got) == 0);
            /* Negative and large weights stay exact: beyond 16 bits, and
             * at the 16-bit path's bounds (+-32767) with saturated counts. */
            for (int large = 1; large >= 0; large--) {
                for (uint64_t p = 0; p < P; p++)
                    wt[p] = large ? (p % 3 == 0 ? -2000000000 : (int32_t)(p % 11) - 5)
                                  : (p % 3 == 0 ? -32767 : p % 3 == 1 ? 32767 : (int32_t)(p % 11) - 5);
                CHECK_OK(qem_products_weighted_sums(pr, 0, scans, planes, 1, got, (size_t)(3 * scans) * sizeof *got, &e), &e);
                int weighted_ok = 1;
                for (uint64_t s = 0; s < scans; s++) {
                    int64_t want = 0;
                    for (uint64_t p = 0; p < P; p++)
                        want += (int64_t)wt[p] * counts[s * P + p];
                    weighted_ok &= got[s] == want;
                }
                CHECK(weighted_ok);
            }
            qem_image com;
            CHECK_OK(qem_products_com(pr, NULL, 0, &com, &e), &e);
            int com_ok = com.data != NULL;
            for (uint64_t s = 0; com_ok && s < scans; s++)
                com_ok = ((float *)com.data)[2 * s] ==
                             (float)((double)moments[scans + s] / (double)moments[s]) &&
                         ((float *)com.data)[2 * s + 1] ==
                             (float)((double)moments[2 * scans + s] / (double)moments[s]);
            CHECK(com_ok);
            qem_image_free(&com);
            free(got);
            free(wt);
        }
        qem_products_close(pr);
        qem_container_close(src);
        unsetenv("QEM_RANS_PATH");
    }
    CHECK(tried >= 1);
    free(back);
    free(pixel_sum);
    free(moments);
    free(counts);
    free(data);
}

/* Every upstream integer fixture decodes to its .npy on every path. */
static void fixtures_on_every_path(void)
{
    static const char *const names[] = {"u16_dense_highdose", "u16_nonsquare_masked",
                                        "u8_sparse_lowdose"};
    qem_error e = {0};
    for (size_t n = 0; n < 3; n++) {
        char rel[128];
        snprintf(rel, sizeof rel, "qem/%s.npy", names[n]);
        qem_npy *npy = NULL;
        CHECK_OK(qem_npy_open(fixture_path(rel), &npy, &e), &e);
        if (!npy)
            continue;
        qem_npy_info ni = {.struct_size = sizeof ni};
        CHECK_OK(qem_npy_get_info(npy, &ni, &e), &e);
        const uint64_t elements = ni.elements;
        const size_t bytes = (size_t)(elements * qem_dtype_size(ni.dtype));
        uint8_t *want = malloc(bytes), *got = malloc(bytes);
        CHECK_OK(qem_npy_read(npy, 0, elements, want, bytes, &e), &e);
        qem_npy_close(npy);
        snprintf(rel, sizeof rel, "qem/%s.qem", names[n]);
        for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
            if (!qem_decode_path_supported(paths[k]))
                continue;
            qem_file *f = open_on(fixture_path(rel), paths[k], &e);
            if (!f)
                continue;
            qem_file_info info = {.struct_size = sizeof info};
            CHECK_OK(qem_get_info(f, &info, &e), &e);
            memset(got, 0x5a, bytes);
            CHECK_OK(qem_read_scans(f, 0, info.scans, got, bytes, &e), &e);
            if (memcmp(got, want, bytes) != 0)
                fprintf(stderr, "fixture %s differs on path %s\n", names[n], path_names[k]);
            CHECK(memcmp(got, want, bytes) == 0);
            qem_close(f);
        }
        free(want);
        free(got);
    }
}

/* A path asked for that is unknown, or that this CPU lacks, fails the
 * open with its own status, never a quiet fallback. */
static void path_refusals(void)
{
    const char *file = fixture_path("qem/u16_dense_highdose.qem");
    qem_open_options oo;
    qem_open_options_init(&oo);
    qem_experimental_open_options xo;
    qem_experimental_open_options_init(&xo);
    qem_error e = {0};
    qem_file *f = NULL;
    xo.decode_path = (qem_decode_path)99;
    CHECK_EQ_U64(qem_open_experimental(file, &oo, &xo, &f, &e), QEM_E_INVALID_ARGUMENT);
    CHECK(f == NULL);
    xo.decode_path = QEM_DECODE_AUTO;
    setenv("QEM_RANS_PATH", "avx2-load", 1);
    CHECK_EQ_U64(qem_open_experimental(file, &oo, &xo, &f, &e), QEM_E_INVALID_ARGUMENT);
    CHECK(strstr(e.message, "avx2-loads") != NULL); /* the message lists the names */
    unsetenv("QEM_RANS_PATH");
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        if (qem_decode_path_supported(paths[k]))
            continue;
        xo.decode_path = paths[k];
        CHECK_EQ_U64(qem_open_experimental(file, &oo, &xo, &f, &e), QEM_E_UNSUPPORTED);
        CHECK(strstr(e.message, path_names[k]) != NULL);
    }
    /* The path an open file reports is the one it was given. */
    xo.decode_path = QEM_DECODE_AVX2_LOADS;
    if (qem_decode_path_supported(QEM_DECODE_AVX2_LOADS)) {
        CHECK_OK(qem_open_experimental(file, &oo, &xo, &f, &e), &e);
        CHECK_EQ_U64(qem_file_decode_path(f), QEM_DECODE_AVX2_LOADS);
        qem_close(f);
    }
}

/* A block of rows of at least 4 MiB (512 scans of a 64 x 64 detector in
 * uint16, 64 x 128 in uint8) is written past the caches by streaming
 * stores where a pixel group's rows lie on 64-byte boundaries (a short
 * first group puts them there when the caller's buffer starts inside a
 * line), by ordinary copies elsewhere: every start gives the source's
 * counts on every path, writes nothing outside the buffer, and the
 * partial last block (1 MiB, cached copies) is right too. */
static void streamed_rows(qem_dtype dtype)
{
    qem_error e = {0};
    const size_t item = dtype == QEM_DTYPE_UINT8 ? 1 : 2;
    const uint64_t shape[4] = {16, 40, 64, 128 / item};
    const uint64_t scans = shape[0] * shape[1], P = shape[2] * shape[3];
    const size_t bytes = (size_t)(scans * P) * item;
    uint16_t *counts = malloc((size_t)(scans * P) * sizeof *counts);
    make_counts(counts, scans, shape[2], shape[3], 4.0, item == 1 ? 255 : 65535, 99);
    uint8_t *source = (uint8_t *)counts; /* uint8: narrowed in place */
    for (size_t k = 0; item == 1 && k < bytes; k++)
        source[k] = (uint8_t)counts[k];
    const char *path = test_path("streamed_rows.qem");
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(path, dtype, shape, NULL, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, source, scans, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    uint8_t *buffer = NULL;
    CHECK(posix_memalign((void **)&buffer, 64, bytes + 64) == 0);
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        if (!qem_decode_path_supported(paths[k]))
            continue;
        qem_file *f = open_on(path, paths[k], &e);
        if (!f)
            continue;
        /* Line-aligned; then starts 2..62 bytes into a line (a malloc
         * buffer is 16 past one), which move the pixel groups so their
         * rows start on lines; then an odd start, which cannot. */
        static const size_t shifts[] = {0, 2, 16, 32, 48, 62, 1};
        for (size_t s = 0; s < sizeof shifts / sizeof shifts[0]; s++) {
            const size_t shift = shifts[s];
            memset(buffer, 0x5a, bytes + 64);
            CHECK_OK(qem_read_scans(f, 0, scans, buffer + shift, bytes, &e), &e);
            CHECK(memcmp(buffer + shift, source, bytes) == 0);
            for (size_t b = 0; b < 64; b++) /* nothing written outside */
                CHECK(buffer[b < shift ? b : bytes + b] == 0x5a);
        }
        qem_close(f);
    }
    free(buffer);
    free(counts);
    remove(path);
}

/* Streams of a high-dose block, encoded as the writer encodes them (every
 * model the encoder picks), decoded into a zeroed tile of scan rows on
 * each path: the reference's values, statuses and first failing stream. */
static void row_tiles(void)
{
    enum { N = 512, STREAMS = 96, WIDTH = STREAMS };
    static qem_rans_tables t;
    qem_rans_tables_init(&t);
    static uint16_t values[STREAMS][N], want[STREAMS][N], tile[N * WIDTH];
    static uint8_t buffer[STREAMS * 2 * N + QEM_SPAN_PADDING], scratch[4 * N + 8];
    uint64_t seed = 77;
    for (unsigned k = 0; k < STREAMS; k++) {
        const double lambda = k % 16 == 0 ? 0 : k % 16 == 1 ? 0.01 : k % 5 == 0 ? 45 : 20;
        for (unsigned i = 0; i < N; i++)
            values[k][i] = (uint16_t)(k % 16 == 2    ? 9
                                      : k % 23 == 3  ? 60000 + i
                                      : k / 8 == 5   ? test_rand(&seed) % 65536 /* eight raw, side by side */
                                                     : poisson(&seed, lambda));
    }
    size_t offset[STREAMS], size[STREAMS];
    uint8_t model[STREAMS];
    for (int damage = 0; damage < 4; damage++) {
        size_t at = 0;
        for (unsigned k = 0; k < STREAMS; k++) {
            size[k] = qem_count_stream_encode(&t, values[k], N, buffer + at, &model[k], scratch);
            offset[k] = at;
            /* Break a few rANS streams, each a different way. */
            if (damage && model[k] < QEM_RANS_MODELS && k % 13 == 7)
                test_damage_stream(buffer + at, &size[k], damage);
            if (damage == 3 && k == 45)
                size[k] -= 2; /* a raw stream one sample short */
            at += size[k];
        }
        for (unsigned k = 40; k < 48; k++)
            CHECK_EQ_U64(model[k], QEM_MODEL_RAW);
        memset(buffer + at, 0, QEM_SPAN_PADDING);
        qem_status want_st[STREAMS];
        size_t first_bad = STREAMS;
        for (unsigned k = 0; k < STREAMS; k++) {
            want_st[k] = qem_count_stream_decode(&t, model[k], buffer + offset[k], size[k], N, 65535,
                                                 want[k]);
            if (want_st[k] != QEM_OK && first_bad == STREAMS)
                first_bad = k;
        }
        CHECK(damage ? first_bad < STREAMS : first_bad == STREAMS);
        for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
            if (!qem_rans_path_supported(paths[p]))
                continue;
            qem_stream_job jobs[STREAMS];
            memset(tile, 0, sizeof tile);
            for (unsigned k = 0; k < STREAMS; k++)
                jobs[k] = (qem_stream_job){model[k], buffer + offset[k], size[k], tile + k, WIDTH, 1};
            size_t failed = 0, redone = 0;
            const qem_status st = qem_count_streams_decode_counted(
                &t, paths[p], buffer, jobs, STREAMS, N, 65535, &failed, &redone);
            CHECK_EQ_U64(failed, first_bad);
            CHECK_EQ_U64(st, first_bad < STREAMS ? want_st[first_bad] : QEM_OK);
            /* Sound streams are never handed back to the scalar decoder:
             * a SIMD mistake cannot hide behind its redo. */
            if (!damage)
                CHECK_EQ_U64(redone, 0);
            unsigned wrong = 0;
            for (unsigned k = 0; k < STREAMS; k++)
                for (unsigned i = 0; want_st[k] == QEM_OK && i < N; i++)
                    wrong += tile[i * WIDTH + k] != want[k][i];
            CHECK_EQ_U64(wrong, 0);
            /* Every second or third stream alone: outputs not side by side
             * (within 64 columns or spread wider), not zeroed (a tile full
             * of stale values); the columns between them keep theirs. */
            for (unsigned step = 2; step <= 3; step++) {
                memset(tile, 0xee, sizeof tile);
                unsigned m = 0;
                for (unsigned k = 0; k < STREAMS; k += step)
                    jobs[m++] = (qem_stream_job){model[k], buffer + offset[k], size[k], tile + k,
                                                 WIDTH, 0};
                size_t first_alone = m;
                for (unsigned k = 0; k < STREAMS && first_alone == m; k += step)
                    if (want_st[k] != QEM_OK)
                        first_alone = k / step;
                const qem_status st2 =
                    qem_count_streams_decode(&t, paths[p], buffer, jobs, m, N, 65535, &failed);
                CHECK_EQ_U64(failed, first_alone);
                CHECK_EQ_U64(st2, first_alone < m ? want_st[step * first_alone] : QEM_OK);
                wrong = 0;
                unsigned touched = 0;
                for (unsigned k = 0; k < STREAMS; k++)
                    for (unsigned i = 0; i < N; i++) {
                        if (k % step)
                            touched += tile[i * WIDTH + k] != 0xeeee;
                        else if (want_st[k] == QEM_OK)
                            wrong += tile[i * WIDTH + k] != want[k][i];
                    }
                CHECK_EQ_U64(wrong, 0);
                CHECK_EQ_U64(touched, 0);
            }
        }
    }
}

int main(void)
{
    const uint64_t u16_shape[4] = {24, 32, 44, 40}; /* 768 scans: a full and a partial block */
    file_round_trip(QEM_DTYPE_UINT16, u16_shape, 20.0);
    const uint64_t u8_shape[4] = {20, 30, 36, 36};
    file_round_trip(QEM_DTYPE_UINT8, u8_shape, 20.0);
    fixtures_on_every_path();
    row_tiles();
    streamed_rows(QEM_DTYPE_UINT16);
    streamed_rows(QEM_DTYPE_UINT8);
    path_refusals();
    return test_finish("unit_high_dose_paths");
}
