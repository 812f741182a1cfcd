/* The reading core links alone: this test is linked against the core layer
 * only (no libhdf5, libtiff, libpng or FFTW on its link line), and reads
 * every upstream .qem and pack fixture exactly. A reading path that
 * reached into the producer or the products would fail to link. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qem.h"

static int checks, failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                  \
        }                                                                                          \
    } while (0)

/* Every scan of `container` read through qem_container as `values` equals
 * `reference`. */
static void check_fixture(const char *dir, const char *container, const char *reference,
                          qem_values values)
{
    char path[1024], ref[1024];
    snprintf(path, sizeof path, "%s/%s", dir, container);
    snprintf(ref, sizeof ref, "%s/%s", dir, reference);
    qem_error e = {0};
    qem_container *s = NULL;
    qem_npy *n = NULL;
    CHECK(qem_container_open(path, NULL, &s, &e) == QEM_OK);
    CHECK(qem_npy_open(ref, &n, &e) == QEM_OK);
    if (!s || !n) {
        fprintf(stderr, "  %s: %s\n", container, e.message);
        qem_container_close(s);
        qem_npy_close(n);
        return;
    }
    qem_container_info info = {.struct_size = sizeof info};
    qem_npy_info ninfo = {.struct_size = sizeof ninfo};
    CHECK(qem_container_get_info(s, &info, &e) == QEM_OK);
    CHECK(qem_npy_get_info(n, &ninfo, &e) == QEM_OK);
    const size_t bytes = (size_t)qem_container_read_bound(s, values, info.scans);
    void *got = malloc(bytes), *want = malloc(bytes);
    CHECK(got && want && ninfo.elements * qem_dtype_size(ninfo.dtype) == bytes);
    if (got && want && ninfo.elements * qem_dtype_size(ninfo.dtype) == bytes) {
        CHECK(qem_container_read(s, 0, info.scans, values, got, bytes, &e) == QEM_OK);
        CHECK(qem_npy_read(n, 0, ninfo.elements, want, bytes, &e) == QEM_OK);
        CHECK(memcmp(got, want, bytes) == 0);
    }
    free(got);
    free(want);
    qem_npy_close(n);
    qem_container_close(s);
}

int main(void)
{
    const char *shared = getenv("QEM_SHARED_DIR");
    if (!shared) {
        fprintf(stderr, "unit_reader_core: QEM_SHARED_DIR is not set\n");
        return 1;
    }
    char qem[900], pack[900];
    snprintf(qem, sizeof qem, "%s/fixtures/qem", shared);
    snprintf(pack, sizeof pack, "%s/fixtures/pack", shared);
    check_fixture(qem, "u8_sparse_lowdose.qem", "u8_sparse_lowdose.npy", QEM_VALUES_WORKING);
    check_fixture(qem, "u16_dense_highdose.qem", "u16_dense_highdose.npy", QEM_VALUES_WORKING);
    check_fixture(qem, "u16_nonsquare_masked.qem", "u16_nonsquare_masked.npy",
                  QEM_VALUES_WORKING);
    check_fixture(qem, "f32_special_bits.qem", "f32_special_bits.npy", QEM_VALUES_WORKING);
    check_fixture(pack, "v1_u16_4x32_16x16.h5", "v1_u16_4x32_16x16.npy", QEM_VALUES_WORKING);
    check_fixture(pack, "v1_u16_excluded_retained.h5", "v1_u16_excluded_retained.npy",
                  QEM_VALUES_RAW);
    check_fixture(pack, "v3_upstream_test_writer_notes_v3.h5",
                  "v3_upstream_test_writer_notes_v3.npy", QEM_VALUES_RAW);
    fprintf(stderr, "unit_reader_core: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
