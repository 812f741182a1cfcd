/* Round trips of generated data through the writer and the reader:
 * uint8/uint16, sparse and dense, values up to 65535, constant and zero
 * pixels, several 512-scan blocks and chunks, non-square detectors and
 * validity masks. Every file re-reads bit-exactly and passes verify. */
#include <math.h>

#include "test_util.h"
#include "qem/qem_internal.h" /* qem_file_export_npy */

static uint64_t seed = 2026;

typedef struct dataset {
    const char *name;
    qem_dtype dtype;
    uint64_t shape[4];
    uint32_t chunk_scans;
    int masked;
    int kind; /* 0 sparse, 1 dense high, 2 mixed pixels, 3 full range */
} dataset;

static uint32_t poisson(double lambda)
{
    double limit = exp(-lambda), prod = (double)(test_rand(&seed) >> 11) * 0x1.0p-53;
    uint32_t k = 0;
    while (prod > limit) {
        prod *= (double)(test_rand(&seed) >> 11) * 0x1.0p-53;
        k++;
    }
    return k;
}

static uint16_t sample(const dataset *d, uint64_t scan, uint64_t p, uint64_t P)
{
    uint64_t r = test_rand(&seed);
    uint32_t cap = d->dtype == QEM_DTYPE_UINT8 ? 255 : 65535;
    uint32_t v = 0;
    switch (d->kind) {
    case 0: v = poisson(0.05); break;
    case 1: v = 60000 + (uint32_t)(r % 5536); break;
    case 2:
        if (p % 7 == 0)
            v = 0; /* all-zero pixels */
        else if (p % 7 == 1)
            v = cap; /* constant at the dtype maximum */
        else if (p % 7 == 2)
            v = 13; /* constant */
        else if (p % 7 == 3)
            v = scan % 97 == 0 ? 1 + (uint32_t)(r % 128) : 0; /* sparse events */
        else if (p % 7 == 4)
            v = (uint32_t)(r % 40); /* escapes */
        else
            v = poisson(p < P / 2 ? 1.5 : 0.2);
        break;
    default: v = (uint32_t)(r % ((uint64_t)cap + 1)); break;
    }
    return (uint16_t)(v > cap ? cap : v);
}

static void roundtrip(const dataset *d, int threads, const char *suffix, uint8_t **file_out,
                      size_t *file_size)
{
    qem_error e = {0};
    const uint64_t scans = d->shape[0] * d->shape[1], P = d->shape[2] * d->shape[3];
    const size_t item = qem_dtype_size(d->dtype);
    uint8_t *data = malloc((size_t)(scans * P * item));
    uint64_t keep = seed;
    seed = 99; /* the same data for every thread count */
    for (uint64_t s = 0; s < scans; s++)
        for (uint64_t p = 0; p < P; p++) {
            uint16_t v = sample(d, s, p, P);
            if (item == 1)
                data[s * P + p] = (uint8_t)v;
            else
                ((uint16_t *)data)[s * P + p] = v;
        }
    seed = keep;
    uint8_t *valid = malloc((size_t)P);
    for (uint64_t p = 0; p < P; p++)
        valid[p] = d->masked ? (p % 5 != 2) : 1;

    char name[128];
    snprintf(name, sizeof name, "%s%s.qem", d->name, suffix);
    const char *path = test_path(name);
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = d->chunk_scans;
    so.threads = threads;
    so.valid = valid;
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(path, d->dtype, d->shape, &so, &w, &e), &e);
    /* Append in uneven pieces: chunking must not depend on them. */
    uint64_t done = 0;
    while (w && done < scans) {
        uint64_t n = 1 + test_rand(&seed) % (scans / 3 + 1);
        if (n > scans - done)
            n = scans - done;
        CHECK_OK(qem_writer_append(w, data + done * P * item, n, &e), &e);
        done += n;
    }
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    qem_file *f = NULL;
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.threads = threads;
    CHECK_OK(qem_open(path, &oo, &f, &e), &e);
    if (f) {
        qem_file_info info = {.struct_size = sizeof info};
        qem_get_info(f, &info, NULL);
        CHECK_EQ_U64(info.dtype, d->dtype);
        CHECK(memcmp(info.shape, d->shape, sizeof info.shape) == 0);
        uint64_t chunk = d->chunk_scans ? d->chunk_scans : 512;
        CHECK_EQ_U64(info.chunk_count, (scans + chunk - 1) / chunk);
        uint64_t valid_count = 0;
        for (uint64_t p = 0; p < P; p++)
            valid_count += valid[p];
        CHECK_EQ_U64(info.valid_pixels, valid_count);
        uint8_t *mask = malloc((size_t)P);
        CHECK_OK(qem_get_valid_mask(f, mask, (size_t)P, NULL), NULL);
        CHECK(memcmp(mask, valid, (size_t)P) == 0);
        free(mask);

        uint8_t *back = malloc((size_t)(scans * P * item));
        CHECK_OK(qem_read_scans(f, 0, scans, back, (size_t)(scans * P * item), &e), &e);
        if (memcmp(back, data, (size_t)(scans * P * item)) != 0)
            fprintf(stderr, "dataset %s: decoded counts differ\n", d->name);
        CHECK(memcmp(back, data, (size_t)(scans * P * item)) == 0);
        /* Windows that start and end anywhere, across blocks and chunks. */
        for (int k = 0; k < 20; k++) {
            uint64_t first = test_rand(&seed) % scans;
            uint64_t count = 1 + test_rand(&seed) % (scans - first);
            memset(back, 0xa5, (size_t)(count * P * item));
            CHECK_OK(qem_read_scans(f, first, count, back, (size_t)(count * P * item), &e), &e);
            CHECK(memcmp(back, data + first * P * item, (size_t)(count * P * item)) == 0);
        }
        CHECK_STATUS(qem_read_scans(f, scans - 1, 2, back, (size_t)(2 * P * item), &e),
                     QEM_E_INVALID_ARGUMENT, &e);
        /* A range past the end is an invalid argument; a buffer one byte
         * short, a buffer too small. */
        CHECK_STATUS(qem_read_scans(f, 0, 1, back, (size_t)(P * item) - 1, &e),
                     QEM_E_BUFFER_TOO_SMALL, &e);
        free(back);

        qem_verify_report report = {.struct_size = sizeof report};
        CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
        CHECK_EQ_U64(report.samples_decoded, scans * P);
        CHECK_EQ_U64(report.body_blocks_checked, 1);

        /* Export streams chunk by chunk into an identical .npy. */
        snprintf(name, sizeof name, "%s%s.npy", d->name, suffix);
        const char *npy_path = test_path(name);
        CHECK_OK(qem_file_export_npy(f, npy_path, NULL, &e), &e);
        qem_npy *npy = NULL;
        CHECK_OK(qem_npy_open(npy_path, &npy, &e), &e);
        if (npy) {
            uint8_t *exported = malloc((size_t)(scans * P * item));
            CHECK_OK(qem_npy_read(npy, 0, scans * P, exported, npy_read_size(npy, scans * P), &e), &e);
            CHECK(memcmp(exported, data, (size_t)(scans * P * item)) == 0);
            free(exported);
            qem_npy_close(npy);
        }
        qem_close(f);
    }
    *file_out = read_file(path, file_size);
    free(data);
    free(valid);
}

int main(void)
{
    const dataset sets[] = {
        {"u8_sparse", QEM_DTYPE_UINT8, {5, 7, 16, 16}, 0, 0, 0},
        {"u16_high", QEM_DTYPE_UINT16, {3, 4, 16, 16}, 0, 0, 1},
        {"u16_mixed", QEM_DTYPE_UINT16, {6, 9, 20, 24}, 0, 1, 2},
        {"u8_mixed", QEM_DTYPE_UINT8, {6, 9, 20, 24}, 0, 0, 2},
        {"u16_full_range", QEM_DTYPE_UINT16, {2, 5, 9, 11}, 0, 0, 3},
        {"u16_blocks", QEM_DTYPE_UINT16, {30, 40, 8, 8}, 1024, 1, 2}, /* 2 blocks per chunk */
        {"u8_blocks", QEM_DTYPE_UINT8, {30, 40, 8, 8}, 0, 0, 2},     /* 3 chunks of 512 */
        {"u16_small_chunks", QEM_DTYPE_UINT16, {5, 9, 7, 13}, 7, 1, 2},
        {"u16_one_pixel", QEM_DTYPE_UINT16, {4, 4, 1, 1}, 3, 0, 2},
        {"u16_edge_tiles", QEM_DTYPE_UINT16, {2, 3, 33, 40}, 0, 1, 2},
        {"u8_one_scan", QEM_DTYPE_UINT8, {1, 1, 12, 10}, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        uint8_t *one = NULL, *two = NULL;
        size_t n1 = 0, n2 = 0;
        roundtrip(&sets[i], 1, "_t1", &one, &n1);
        roundtrip(&sets[i], 2, "_t2", &two, &n2);
        /* The bytes written do not depend on the thread count. */
        CHECK(one && two && n1 == n2 && memcmp(one, two, n1) == 0);
        free(one);
        free(two);
    }
    return test_finish("unit_roundtrip");
}
