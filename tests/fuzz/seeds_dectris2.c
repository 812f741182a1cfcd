/* See seeds_dectris2.h. */
#include "seeds_dectris2.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cbor_build.h"

/* One message appended to the seed: its length (u32 LE), then it. */
static void add(cbw *seed, const cbw *message)
{
    const size_t n = message->size;
    const uint8_t length[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
                               (uint8_t)(n >> 24)};
    cbw_raw(seed, length, 4);
    cbw_raw(seed, message->bytes, n);
}

static void save(const char *out, const char *name, cbw *seed)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dectris_cbor", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/dectris_cbor/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(seed->bytes, 1, seed->size, f);
        fclose(f);
    }
    cbw_free(seed);
}

/* An image of channel "threshold_1" (and a second channel) compressed
 * with `algorithm` (NULL: raw). */
static void image(cbw *m, uint64_t id, uint64_t rows, uint64_t columns, unsigned es,
                  const uint8_t *values, const char *algorithm)
{
    const size_t elements = rows * columns, bytes = elements * es;
    size_t size = bytes;
    uint8_t *z = NULL;
    if (algorithm && !strcmp(algorithm, "bslz4"))
        z = cbw_bslz4(values, elements, es, 16, &size);
    else if (algorithm)
        z = cbw_lz4_hdf5(values, bytes, 32, &size);
    const uint64_t typed = es == 1 ? 64 : es == 2 ? 69 : 70;
    cbw_self_described(m);
    cbw_map(m, 5);
    cbw_text(m, "type");
    cbw_text(m, "image");
    cbw_text(m, "series_id");
    cbw_uint(m, 3);
    cbw_text(m, "image_id");
    cbw_uint(m, id);
    cbw_text(m, "real_time");
    cbw_array(m, 2);
    cbw_uint(m, 99);
    cbw_uint(m, 1000000);
    cbw_text(m, "data");
    cbw_map(m, 2);
    cbw_text(m, "threshold_1");
    cbw_multidim(m, rows, columns, typed, algorithm, es, z ? z : values, size);
    cbw_text(m, "threshold_2");
    cbw_multidim(m, rows, columns, typed, NULL, 0, values, bytes);
    free(z);
}

static void series(const char *out, const char *name, uint64_t rows, uint64_t columns,
                   unsigned es, const char *algorithm, int mask, int minimal)
{
    const size_t pixels = rows * columns;
    uint8_t *values = malloc(pixels * es);
    uint32_t *flags = calloc(pixels, 4);
    flags[0] = 1;
    flags[pixels - 1] = 8;
    cbw seed = {0}, m = {0};
    if (minimal) {
        cbw_self_described(&m);
        cbw_map(&m, 2);
        cbw_text(&m, "type");
        cbw_text(&m, "start");
        cbw_text(&m, "series_id");
        cbw_uint(&m, 3);
    } else {
        cbw_start(&m, 3, rows, columns, es == 1 ? "uint8" : es == 2 ? "uint16" : "uint32", 3,
                  mask ? flags : NULL);
    }
    /* cbw_start's series_unique_id is "u-1"; the images state none. */
    add(&seed, &m);
    cbw_free(&m);
    for (uint64_t f = 0; f < 3; f++) {
        for (size_t i = 0; i < pixels * es; i++)
            values[i] = (uint8_t)((i * 7 + f * 13) % 251 < 200 ? 0 : i + f);
        image(&m, f, rows, columns, es, values, algorithm);
        add(&seed, &m);
        cbw_free(&m);
    }
    cbw_end(&m, 3);
    add(&seed, &m);
    cbw_free(&m);
    save(out, name, &seed);
    free(values);
    free(flags);
}

void seeds_dectris2(const char *out)
{
    series(out, "u16_raw_mask", 3, 4, 2, NULL, 1, 0);
    series(out, "u16_bslz4", 5, 7, 2, "bslz4", 0, 0);
    series(out, "u32_lz4_mask", 6, 6, 4, "lz4", 1, 0);
    series(out, "u8_bslz4_mask", 4, 9, 1, "bslz4", 1, 0);
    series(out, "u32_minimal_bslz4", 4, 5, 4, "bslz4", 0, 1);

    /* A start whose pixel mask is itself compressed. */
    cbw seed = {0}, m = {0};
    uint32_t flags[20] = {0};
    flags[3] = 1;
    size_t size = 0;
    uint8_t *z = cbw_bslz4(flags, 20, 4, 16, &size);
    cbw_self_described(&m);
    cbw_map(&m, 4);
    cbw_text(&m, "type");
    cbw_text(&m, "start");
    cbw_text(&m, "series_id");
    cbw_uint(&m, 3);
    cbw_text(&m, "channels");
    cbw_array(&m, 1);
    cbw_text(&m, "threshold_1");
    cbw_text(&m, "pixel_mask");
    cbw_map(&m, 1);
    cbw_text(&m, "threshold_1");
    cbw_multidim(&m, 4, 5, 70, "bslz4", 4, z, size);
    add(&seed, &m);
    save(out, "start_mask_bslz4", &seed);
    cbw_free(&m);
    free(z);
}
