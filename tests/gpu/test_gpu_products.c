/* Products of packs on an NVIDIA GPU (qem_products_options.device =
 * QEM_DEVICE_CUDA) against the same products on the CPU, bit for bit:
 * weighted sums over random integer weight planes and scan ranges, pixel
 * sums, region sums and maxima, virtual images, the mean pattern and CoM,
 * on the upstream pack fixtures and on built packs of both profiles
 * (every width 0..16, exclusions, several shards). Without a usable device it says why and exits 77, which ctest
 * counts as skipped (label gpu). */
#include <stdlib.h>
#include <string.h>

#include "pack_build.h"
#include "test_util.h"

#define SKIPPED 77

static qem_products *open_products(qem_container *c, qem_device device, qem_error *e)
{
    qem_products_options o;
    qem_products_options_init(&o);
    o.device = device;
    qem_products *p = NULL;
    return qem_products_open(c, &o, &p, e) == QEM_OK ? p : NULL;
}

static int same_image(const qem_image *a, const qem_image *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->shape[0] != b->shape[0] ||
        a->shape[1] != b->shape[1] || a->shape[2] != b->shape[2])
        return 0;
    uint64_t n = qem_dtype_size(a->dtype) * a->shape[0] * a->shape[1];
    if (a->ndim == 3)
        n *= a->shape[2];
    return memcmp(a->data, b->data, (size_t)n) == 0;
}

/* Every product the device runs, on `path`, against the CPU. */
static void compare_file(const char *path, uint64_t seed)
{
    qem_error e = {0};
    qem_container *c = test_open_source(path, 0, 0);
    CHECK(c != NULL);
    if (!c)
        return;
    qem_products *cpu = open_products(c, QEM_DEVICE_CPU, &e);
    qem_products *gpu = open_products(c, QEM_DEVICE_CUDA, &e);
    CHECK(cpu && gpu);
    if (!gpu)
        fprintf(stderr, "%s: %s\n", path, e.message);
    qem_container_info info = {.struct_size = sizeof info};
    CHECK_OK(qem_container_get_info(c, &info, &e), &e);
    const uint64_t S = info.scans, P = info.pixels;
    int32_t *planes[5];
    int64_t *a = malloc((size_t)(S * 5) * sizeof *a), *b = malloc((size_t)(S * 5) * sizeof *b);
    uint64_t *sa = malloc((size_t)P * sizeof *sa), *sb = malloc((size_t)P * sizeof *sb);
    for (int k = 0; k < 5; k++)
        planes[k] = malloc((size_t)P * sizeof **planes);
    uint8_t *mask = malloc((size_t)P);
    if (!cpu || !gpu || !a || !b || !sa || !sb || !mask || !planes[4])
        goto done;
    uint64_t rng = seed;
    for (int round = 0; round < 6; round++) {
        /* Weights -1000..1000 with about a third zero (pixels skipped);
         * the first round a 0/1 mask, as virtual images pass. */
        const unsigned n = 1 + round % 5;
        for (unsigned k = 0; k < n; k++)
            for (uint64_t px = 0; px < P; px++) {
                const uint64_t r = test_rand(&rng);
                planes[k][px] = round == 0 ? (int32_t)(r % 2)
                                           : r % 3 == 0 ? 0 : (int32_t)(r % 2001) - 1000;
            }
        const uint64_t first = round < 2 ? 0 : test_rand(&rng) % S;
        const uint64_t count = round < 2 ? S : 1 + test_rand(&rng) % (S - first);
        const size_t bytes = (size_t)(count * n) * sizeof *a;
        memset(b, 0x5a, bytes);
        CHECK_OK(qem_products_weighted_sums(cpu, first, count, (const int32_t *const *)planes, n,
                                            a, bytes, &e), &e);
        CHECK_OK(qem_products_weighted_sums(gpu, first, count, (const int32_t *const *)planes, n,
                                            b, bytes, &e), &e);
        CHECK(memcmp(a, b, bytes) == 0);
        /* They add into the sums given: both start from the same values. */
        for (uint64_t px = 0; px < P; px++)
            sa[px] = sb[px] = px * 1000003u;
        CHECK_OK(qem_products_pixel_sums(cpu, first, count, sa, P * sizeof *sa, &e), &e);
        CHECK_OK(qem_products_pixel_sums(gpu, first, count, sb, P * sizeof *sb, &e), &e);
        CHECK(memcmp(sa, sb, (size_t)P * sizeof *sa) == 0);
    }
    for (uint64_t px = 0; px < P; px++)
        mask[px] = planes[0][px] != 0;
    qem_image ia, ib;
    CHECK_OK(qem_products_virtual(cpu, mask, &ia, &e), &e);
    CHECK_OK(qem_products_virtual(gpu, mask, &ib, &e), &e);
    CHECK(same_image(&ia, &ib));
    qem_image_free(&ia);
    qem_image_free(&ib);
    CHECK_OK(qem_products_mean(cpu, &ia, &e), &e);
    CHECK_OK(qem_products_mean(gpu, &ib, &e), &e);
    CHECK(same_image(&ia, &ib));
    qem_image_free(&ia);
    qem_image_free(&ib);
    CHECK_OK(qem_products_com(cpu, NULL, 1, &ia, &e), &e);
    CHECK_OK(qem_products_com(gpu, NULL, 1, &ib, &e), &e);
    CHECK(same_image(&ia, &ib));
    qem_image_free(&ia);
    qem_image_free(&ib);
    const qem_reduce reduces[2] = {QEM_REDUCE_SUM, QEM_REDUCE_MAX};
    for (int r = 0; r < 2; r++) {
        const uint64_t r1 = info.shape[0], c1 = info.shape[1] > 1 ? info.shape[1] - 1 : 1;
        CHECK_OK(qem_products_region(cpu, 0, r1, 0, c1, reduces[r], &ia, &e), &e);
        CHECK_OK(qem_products_region(gpu, 0, r1, 0, c1, reduces[r], &ib, &e), &e);
        CHECK(same_image(&ia, &ib));
        qem_image_free(&ia);
        qem_image_free(&ib);
    }
done:
    for (int k = 0; k < 5; k++)
        free(planes[k]);
    free(a);
    free(b);
    free(sa);
    free(sb);
    free(mask);
    qem_products_close(cpu);
    qem_products_close(gpu);
    qem_container_close(c);
}

/* A pack of `profile` with every width 0..16 (uint8: 0..8), exclusions,
 * three shards of `sps` scans. */
static void built_pack(const char *name, qem_pack_profile profile, uint64_t sps, uint64_t seed)
{
    const uint64_t shape[4] = {4, 3 * sps / 4, 6, 7};
    const uint64_t S = shape[0] * shape[1], P = shape[2] * shape[3];
    uint16_t *data = malloc((size_t)(S * P) * sizeof *data);
    if (!data) {
        CHECK(0);
        return;
    }
    const unsigned top = profile == QEM_PACK_UINT16_LZ4 ? 16 : 8;
    uint64_t rng = seed;
    for (uint64_t s = 0; s < S; s++)
        for (uint64_t px = 0; px < P; px++) {
            /* Pixel px takes widths up to px % (top + 1) bits. */
            const unsigned bits = (unsigned)(px % (top + 1));
            const uint64_t r = test_rand(&rng);
            data[s * P + px] = bits ? (uint16_t)(r & ((1u << bits) - 1u)) : 0;
        }
    static const uint32_t excluded[3] = {3, 17, 40};
    pack_spec spec = {profile, {shape[0], shape[1], shape[2], shape[3]}, sps, data, excluded, 3,
                      profile == QEM_PACK_UINT16_LZ4, profile == QEM_PACK_UINT16_LZ4
                                                          ? QEM_DTYPE_UINT16
                                                          : QEM_DTYPE_UINT8,
                      0, 1};
    CHECK(pack_build(test_path(name), &spec, NULL));
    free(data);
    compare_file(test_path(name), seed);
}

int main(void)
{
    char name[256];
    qem_error e = {0};
    if (qem_device_probe(QEM_DEVICE_CUDA, name, sizeof name, &e) != QEM_OK) {
        printf("gpu_products: skipped: %s\n", e.message);
        return SKIPPED;
    }
    printf("gpu_products: on %s\n", name);
    compare_file(fixture_path("pack/v1_u16_4x32_16x16.h5"), 1);
    compare_file(fixture_path("pack/v1_u16_excluded_retained.h5"), 2);
    compare_file(fixture_path("pack/v3_upstream_test_writer_legacy_nonportable.h5"), 3);
    compare_file(fixture_path("pack/v3_upstream_test_writer_notes_v3.h5"), 7);
    built_pack("u16-wide-shards.h5", QEM_PACK_UINT16_LZ4, 256, 4);
    built_pack("u16-shards.h5", QEM_PACK_UINT16_LZ4, 128, 5);
    built_pack("u8-shards.h5", QEM_PACK_UINT8_BITPACKED, 64, 6);
    return test_finish("gpu_products");
}
