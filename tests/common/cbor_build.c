/* See cbor_build.h. */
#include "cbor_build.h"

#include <lz4.h>
#include <stdlib.h>
#include <string.h>

void cbw_free(cbw *w)
{
    free(w->bytes);
    memset(w, 0, sizeof *w);
}

void cbw_raw(cbw *w, const void *data, size_t size)
{
    if (w->size + size > w->capacity) {
        const size_t want = (w->size + size) * 2 + 64;
        uint8_t *grown = realloc(w->bytes, want);
        if (!grown)
            abort();
        w->bytes = grown;
        w->capacity = want;
    }
    if (size)
        memcpy(w->bytes + w->size, data, size);
    w->size += size;
}

void cbw_head(cbw *w, unsigned major, uint64_t arg)
{
    uint8_t b[9];
    size_t n;
    if (arg < 24) {
        b[0] = (uint8_t)(major << 5 | arg);
        n = 1;
    } else {
        const unsigned bytes = arg <= 0xFF ? 1 : arg <= 0xFFFF ? 2 : arg <= 0xFFFFFFFFu ? 4 : 8;
        b[0] = (uint8_t)(major << 5 | (bytes == 1 ? 24 : bytes == 2 ? 25 : bytes == 4 ? 26 : 27));
        for (unsigned k = 0; k < bytes; k++)
            b[1 + k] = (uint8_t)(arg >> (8 * (bytes - 1 - k)));
        n = 1 + bytes;
    }
    cbw_raw(w, b, n);
}

void cbw_uint(cbw *w, uint64_t v) { cbw_head(w, 0, v); }
void cbw_array(cbw *w, uint64_t items) { cbw_head(w, 4, items); }
void cbw_map(cbw *w, uint64_t pairs) { cbw_head(w, 5, pairs); }
void cbw_tag(cbw *w, uint64_t tag) { cbw_head(w, 6, tag); }

void cbw_text(cbw *w, const char *text)
{
    cbw_head(w, 3, strlen(text));
    cbw_raw(w, text, strlen(text));
}

void cbw_bytes(cbw *w, const void *data, size_t size)
{
    cbw_head(w, 2, size);
    cbw_raw(w, data, size);
}

void cbw_double(cbw *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    uint8_t b[9] = {0xfb};
    for (unsigned k = 0; k < 8; k++)
        b[1 + k] = (uint8_t)(bits >> (56 - 8 * k));
    cbw_raw(w, b, 9);
}

void cbw_self_described(cbw *w)
{
    cbw_raw(w, "\xd9\xd9\xf7", 3);
}

static void put_be(uint8_t *p, uint64_t v, unsigned bytes)
{
    for (unsigned k = 0; k < bytes; k++)
        p[k] = (uint8_t)(v >> (8 * (bytes - 1 - k)));
}

/* Bitshuffle by its definition: bit b of byte k of element e goes to bit
 * row 8k + b, position e. */
static void shuffle(const uint8_t *in, uint8_t *out, size_t n, unsigned es)
{
    memset(out, 0, n * es);
    for (size_t e = 0; e < n; e++)
        for (unsigned k = 0; k < es; k++)
            for (unsigned b = 0; b < 8; b++)
                if (in[e * es + k] >> b & 1) {
                    const size_t bit = (8 * k + b) * n + e;
                    out[bit / 8] |= (uint8_t)(1u << (bit % 8));
                }
}

uint8_t *cbw_bslz4(const void *data, size_t elements, unsigned es, size_t block, size_t *size)
{
    const uint8_t *in = data;
    const size_t bytes = elements * es;
    uint8_t *out = malloc(12 + bytes * 2 + 64 * (elements / 8 + 1) + 64);
    uint8_t *tmp = malloc(block * es + 1);
    put_be(out, bytes, 8);
    put_be(out + 8, block * es, 4);
    size_t at = 12, done = 0;
    while (elements - done >= 8) {
        const size_t left = elements - done;
        const size_t n = left >= block ? block : left / 8 * 8;
        shuffle(in + done * es, tmp, n, es);
        const int c = LZ4_compress_default((const char *)tmp, (char *)out + at + 4, (int)(n * es),
                                           LZ4_compressBound((int)(n * es)));
        put_be(out + at, (uint64_t)c, 4);
        at += 4 + (size_t)c;
        done += n;
    }
    memcpy(out + at, in + done * es, (elements - done) * es);
    at += (elements - done) * es;
    free(tmp);
    *size = at;
    return out;
}

uint8_t *cbw_lz4_hdf5(const void *data, size_t bytes, size_t block, size_t *size)
{
    const uint8_t *in = data;
    uint8_t *out = malloc(12 + bytes * 2 + 64 * (bytes / block + 1) + 64);
    put_be(out, bytes, 8);
    put_be(out + 8, block, 4);
    size_t at = 12;
    for (size_t done = 0; done < bytes;) {
        const size_t n = bytes - done < block ? bytes - done : block;
        int c = LZ4_compress_default((const char *)in + done, (char *)out + at + 4, (int)n,
                                     LZ4_compressBound((int)n));
        if ((size_t)c >= n) {
            memcpy(out + at + 4, in + done, n); /* stored as it is */
            c = (int)n;
        }
        put_be(out + at, (uint64_t)c, 4);
        at += 4 + (size_t)c;
        done += n;
    }
    *size = at;
    return out;
}

void cbw_multidim(cbw *w, uint64_t rows, uint64_t columns, uint64_t typed, const char *algorithm,
                  uint64_t element, const void *data, size_t size)
{
    cbw_tag(w, 40);
    cbw_array(w, 2);
    cbw_array(w, 2);
    cbw_uint(w, rows);
    cbw_uint(w, columns);
    cbw_tag(w, typed);
    if (algorithm) {
        cbw_tag(w, 56500);
        cbw_array(w, 3);
        cbw_text(w, algorithm);
        cbw_uint(w, element);
    }
    cbw_bytes(w, data, size);
}

void cbw_start(cbw *w, uint64_t series, uint64_t rows, uint64_t columns, const char *dtype,
               uint64_t images, const uint32_t *mask)
{
    cbw_self_described(w);
    cbw_map(w, mask ? 11 : 10);
    cbw_text(w, "type");
    cbw_text(w, "start");
    cbw_text(w, "series_id");
    cbw_uint(w, series);
    cbw_text(w, "series_unique_id");
    cbw_text(w, "u-1");
    cbw_text(w, "image_size_x");
    cbw_uint(w, columns);
    cbw_text(w, "image_size_y");
    cbw_uint(w, rows);
    cbw_text(w, "image_dtype");
    cbw_text(w, dtype);
    cbw_text(w, "number_of_images");
    cbw_uint(w, images);
    cbw_text(w, "channels");
    cbw_array(w, 1);
    cbw_text(w, "threshold_1");
    cbw_text(w, "count_time");
    cbw_double(w, 0.001);
    cbw_text(w, "arm_date");
    cbw_tag(w, 0);
    cbw_text(w, "2026-01-01T00:00:00Z");
    if (mask) {
        cbw_text(w, "pixel_mask");
        cbw_map(w, 1);
        cbw_text(w, "threshold_1");
        cbw_multidim(w, rows, columns, 70, NULL, 0, mask, rows * columns * 4);
    }
}

void cbw_image(cbw *w, uint64_t series, uint64_t image_id, uint64_t rows, uint64_t columns,
               unsigned element_size, const void *data)
{
    cbw_self_described(w);
    cbw_map(w, 5);
    cbw_text(w, "type");
    cbw_text(w, "image");
    cbw_text(w, "series_id");
    cbw_uint(w, series);
    cbw_text(w, "series_unique_id");
    cbw_text(w, "u-1");
    cbw_text(w, "image_id");
    cbw_uint(w, image_id);
    cbw_text(w, "data");
    cbw_map(w, 1);
    cbw_text(w, "threshold_1");
    cbw_multidim(w, rows, columns, element_size == 1 ? 64 : element_size == 2 ? 69 : 70, NULL, 0,
                 data, rows * columns * element_size);
}

void cbw_end(cbw *w, uint64_t series)
{
    cbw_self_described(w);
    cbw_map(w, 3);
    cbw_text(w, "type");
    cbw_text(w, "end");
    cbw_text(w, "series_id");
    cbw_uint(w, series);
    cbw_text(w, "series_unique_id");
    cbw_text(w, "u-1");
}
