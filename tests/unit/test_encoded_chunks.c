/* Distributed saves: chunks encoded apart (qem_encode_scans) and written
 * in order (qem_writer_append_encoded) give the same bytes as appending
 * the scans, for every codec; every blob that is not the writer's next
 * intact chunk of the same save is refused with its own status, and the
 * writer is left as it was. */
#include <jansson.h>
#include <math.h>

#include "test_util.h"

static const uint64_t SHAPE[4] = {5, 7, 12, 10}; /* 35 scans */

static void fill(void *data, qem_dtype dtype, uint64_t n, uint64_t seed)
{
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t r = test_rand(&seed);
        if (dtype == QEM_DTYPE_UINT8)
            ((uint8_t *)data)[k] = (uint8_t)(r % 7 == 0 ? r >> 40 : r % 3);
        else if (dtype == QEM_DTYPE_UINT16)
            ((uint16_t *)data)[k] = (uint16_t)(r % 5 == 0 ? r >> 40 : r % 40);
        else
            ((float *)data)[k] = (float)((double)(r >> 11) / 9007199254740992.0 * 100.0 - 3.0);
    }
}

/* Writes `dest` serially, and `dest2` from encoded chunks; 1 if equal. */
static int same_bytes(qem_dtype dtype, const uint64_t shape[4], const qem_save_options *o,
                      const void *data, const char *dest, const char *dest2)
{
    qem_error e = {0};
    const uint64_t scans = shape[0] * shape[1], row = shape[2] * shape[3] * qem_dtype_size(dtype);
    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(dest, dtype, shape, o, &w, &e), &e);
    CHECK_OK(qem_writer_append(w, data, scans, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);

    size_t count = 0;
    CHECK_OK(qem_save_chunks(dtype, shape, o, NULL, 0, &count, &e), &e);
    uint64_t *first = calloc(count + 1, sizeof *first);
    CHECK_OK(qem_save_chunks(dtype, shape, o, first, count, &count, &e), &e);
    first[count] = scans;
    CHECK(count >= 2);
    CHECK_OK(qem_writer_create(dest2, dtype, shape, o, &w, &e), &e);
    for (size_t k = 0; k < count; k++) {
        void *blob = NULL;
        size_t size = 0;
        CHECK_OK(qem_encode_scans(dtype, shape, o, first[k], (const uint8_t *)data + first[k] * row,
                                  first[k + 1] - first[k], &blob, &size, &e),
                 &e);
        CHECK_OK(qem_writer_append_encoded(w, blob, size, &e), &e);
        qem_free(blob);
    }
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    free(first);
    size_t n1 = 0, n2 = 0;
    uint8_t *a = read_file(dest, &n1), *b = read_file(dest2, &n2);
    const int same = a && b && n1 == n2 && memcmp(a, b, n1) == 0;
    free(a);
    free(b);
    qem_file *f = NULL;
    CHECK_OK(qem_open(dest2, NULL, &f, &e), &e);
    CHECK_OK(qem_verify(f, NULL, NULL, &e), &e);
    qem_close(f);
    return same;
}

static void test_every_codec_same_bytes(void)
{
    const uint64_t scans = SHAPE[0] * SHAPE[1], pixels = SHAPE[2] * SHAPE[3];
    uint8_t valid[120];
    for (int p = 0; p < 120; p++)
        valid[p] = p % 17 != 3;
    const qem_dtype types[3] = {QEM_DTYPE_UINT16, QEM_DTYPE_UINT8, QEM_DTYPE_FLOAT32};
    for (int t = 0; t < 3; t++) {
        void *data = malloc((size_t)(scans * pixels * 4));
        fill(data, types[t], scans * pixels, 40 + (uint64_t)t);
        qem_save_options o;
        qem_save_options_init(&o);
        o.chunk_scans = 8; /* 5 chunks, the last partial */
        o.threads = 2;
        if (types[t] != QEM_DTYPE_FLOAT32)
            o.valid = valid;
        char a[64], b[64];
        snprintf(a, sizeof a, "serial%d.qem", t);
        snprintf(b, sizeof b, "encoded%d.qem", t);
        char pa[600];
        snprintf(pa, sizeof pa, "%s", test_path(a));
        CHECK(same_bytes(types[t], SHAPE, &o, data, pa, test_path(b)));
        free(data);
    }
}

/* The scaled codec: chunks never cross a region, as qem_save_chunks says. */
static void test_scaled_same_bytes(void)
{
    size_t n = 0;
    char *bytes = (char *)read_file(fixture_path("qem/scaled_u16_regions.qem"), &n);
    CHECK(bytes != NULL);
    if (!bytes)
        return;
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++)
        hlen |= (uint64_t)(uint8_t)bytes[8 + k] << (8 * k);
    json_t *h = json_loadb(bytes + 56, (size_t)hlen, 0, NULL);
    free(bytes);
    char *report = json_dumps(json_object_get(h, "intensity_calibration"), JSON_COMPACT);
    const uint64_t shape[4] = {2, 5, 8, 8};
    qem_npy *npy = NULL;
    qem_error e = {0};
    CHECK_OK(qem_npy_open(fixture_path("qem/scaled_u16_regions.codes.npy"), &npy, &e), &e);
    uint16_t *codes = malloc(10 * 64 * 2);
    CHECK_OK(qem_npy_read(npy, 0, 640, codes, 1280, &e), &e);
    qem_npy_close(npy);
    qem_save_options o;
    qem_save_options_init(&o);
    o.intensity_calibration_json = report;
    o.chunk_scans = 3;
    char pa[600];
    snprintf(pa, sizeof pa, "%s", test_path("scaled_serial.qem"));
    CHECK(same_bytes(QEM_DTYPE_UINT16, shape, &o, codes, pa, test_path("scaled_encoded.qem")));
    free(codes);
    free(report);
    json_decref(h);
}

static void test_refusals(void)
{
    const uint64_t scans = SHAPE[0] * SHAPE[1], pixels = SHAPE[2] * SHAPE[3];
    uint16_t *data = malloc((size_t)(scans * pixels * 2));
    fill(data, QEM_DTYPE_UINT16, scans * pixels, 9);
    qem_save_options o;
    qem_save_options_init(&o);
    o.chunk_scans = 16;
    qem_error e = {0};
    void *c0 = NULL, *c1 = NULL, *other = NULL;
    size_t n0 = 0, n1 = 0, no = 0;
    CHECK_OK(qem_encode_scans(QEM_DTYPE_UINT16, SHAPE, &o, 0, data, 16, &c0, &n0, &e), &e);
    CHECK_OK(qem_encode_scans(QEM_DTYPE_UINT16, SHAPE, &o, 16, data + 16 * pixels, 16, &c1, &n1,
                              &e),
             &e);
    /* Not a chunk of this save. */
    void *x = NULL;
    size_t nx = 0;
    CHECK_STATUS(qem_encode_scans(QEM_DTYPE_UINT16, SHAPE, &o, 4, data, 16, &x, &nx, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK_STATUS(qem_encode_scans(QEM_DTYPE_UINT16, SHAPE, &o, 16, data, 15, &x, &nx, &e),
                 QEM_E_INVALID_ARGUMENT, &e);
    CHECK(x == NULL);
    /* Another validity mask. */
    uint8_t valid[120];
    memset(valid, 1, sizeof valid);
    valid[5] = 0;
    qem_save_options masked = o;
    masked.valid = valid;
    CHECK_OK(qem_encode_scans(QEM_DTYPE_UINT16, SHAPE, &masked, 0, data, 16, &other, &no, &e), &e);

    qem_writer *w = NULL;
    CHECK_OK(qem_writer_create(test_path("r.qem"), QEM_DTYPE_UINT16, SHAPE, &o, &w, &e), &e);
    CHECK_STATUS(qem_writer_append_encoded(w, c1, n1, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "next chunk is scans [0, +16)") != NULL);
    CHECK_STATUS(qem_writer_append_encoded(w, other, no, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "validity") != NULL);
    uint8_t *bad = malloc(n0);
    memcpy(bad, c0, n0);
    bad[200] ^= 1; /* a payload byte: the digest */
    CHECK_STATUS(qem_writer_append_encoded(w, bad, n0, &e), QEM_E_BODY_CHECKSUM, &e);
    memcpy(bad, c0, n0);
    CHECK_STATUS(qem_writer_append_encoded(w, bad, n0 - 8, &e), QEM_E_LAYOUT, &e);
    bad[0] = 'X';
    CHECK_STATUS(qem_writer_append_encoded(w, bad, n0, &e), QEM_E_LAYOUT, &e);
    memcpy(bad, c0, n0);
    bad[8] = 1; /* version 1: without pixel sums */
    CHECK_STATUS(qem_writer_append_encoded(w, bad, n0, &e), QEM_E_LAYOUT, &e);
    /* Unaligned bytes are accepted (copied first). */
    uint8_t *shifted = malloc(n0 + 1);
    memcpy(shifted + 1, c0, n0);
    CHECK_OK(qem_writer_append_encoded(w, shifted + 1, n0, &e), &e);
    /* After a partial window, encoded chunks wait for a chunk boundary. */
    CHECK_OK(qem_writer_append(w, data + 16 * pixels, 3, &e), &e);
    CHECK_STATUS(qem_writer_append_encoded(w, c1, n1, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK_OK(qem_writer_append(w, data + 19 * pixels, scans - 19, &e), &e);
    CHECK_OK(qem_writer_finish(w, &e), &e);
    qem_writer_free(w);
    /* The mixed file holds the data. */
    qem_file *f = NULL;
    CHECK_OK(qem_open(test_path("r.qem"), NULL, &f, &e), &e);
    uint16_t *back = malloc((size_t)(scans * pixels * 2));
    CHECK_OK(qem_read_scans(f, 0, scans, back, (size_t)(scans * pixels * 2), &e), &e);
    CHECK(memcmp(back, data, (size_t)(scans * pixels * 2)) == 0);
    qem_close(f);
    /* Another shape. */
    const uint64_t shape2[4] = {5, 7, 12, 11};
    CHECK_OK(qem_writer_create(test_path("s.qem"), QEM_DTYPE_UINT16, shape2, &o, &w, &e), &e);
    CHECK_STATUS(qem_writer_append_encoded(w, c0, n0, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "another save") != NULL);
    qem_writer_free(w);
    /* qem_save_chunks with too small an array says how many. */
    uint64_t firsts[1];
    size_t count = 0;
    CHECK_STATUS(qem_save_chunks(QEM_DTYPE_UINT16, SHAPE, &o, firsts, 1, &count, &e),
                 QEM_E_BUFFER_TOO_SMALL, &e);
    CHECK_EQ_U64(count, 3);
    free(back);
    free(shifted);
    free(bad);
    free(data);
    qem_free(c0);
    qem_free(c1);
    qem_free(other);
}

int main(void)
{
    test_every_codec_same_bytes();
    test_scaled_same_bytes();
    test_refusals();
    return test_finish("unit_encoded_chunks");
}
