/* The count-stream encoder: every encode path (the scalar reference and
 * AVX-512 where the CPU has it) must write, for every lane of a band,
 * exactly the bytes, selector and sum the reference writes for the lane's
 * column, and the reference decoder must give the samples back. Layout:
 * element kind (uint8, uint16, float32 halves), u16 sample count, lane
 * count, first lane, value mapping, then the values (repeated to fill). */
#include <stdlib.h>
#include <string.h>

#include "rans/rans.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static qem_rans_tables *t;
    static qem_encode_workspace *ws;
    if (!t) {
        t = malloc(sizeof *t);
        qem_rans_tables_init(t);
        ws = qem_encode_workspace_new();
    }
    if (size < 8)
        return 0;
    const unsigned kind = data[0] % 3; /* 0: uint8, 1: uint16, 2: float32 halves */
    const uint32_t n = ((uint32_t)data[1] | (uint32_t)data[2] << 8) % QEM_STREAM_MAX_SAMPLES + 1;
    const unsigned count = 1u + data[3] % QEM_ENCODE_LANES;
    const size_t first = data[4] % 40;
    const unsigned mapping = data[5] % 4;
    const uint8_t *src = data + 6;
    const size_t nsrc = size - 6;
    /* Whole float32 pixels per row. */
    const size_t stride = (first + count + 2) / 2 * 2;
    const unsigned width = kind == 0 ? 1 : 2;
    uint8_t *rows = calloc((size_t)n * stride, width);
    uint16_t *column = malloc((size_t)count * n * sizeof *column);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        for (unsigned k = 0; k < count; k++) {
            const uint8_t b = src[at++ % nsrc];
            uint16_t v;
            switch (mapping) {
            case 0: v = kind == 0 ? b : (uint16_t)(b | src[at++ % nsrc] << 8); break; /* raw */
            case 1: v = (uint16_t)(b % (1 + data[5] / 4 % 40)); break; /* small counts */
            case 2: v = b > 240 ? (uint16_t)(b - 240) : 0; break;      /* sparse events */
            default: v = b < 200 ? (uint16_t)(b % 8) : (uint16_t)(b * 251u); break; /* escapes */
            }
            if (kind == 0)
                v &= 255;
            column[(size_t)k * n + i] = v;
            const size_t lane = first + k, e = (size_t)i * stride + lane;
            if (kind == 0) {
                rows[e] = (uint8_t)v;
            } else if (kind == 1) {
                memcpy(rows + 2 * e, &v, 2);
            } else {
                /* Lane 2p + h is half h of pixel p's uint32. */
                uint32_t pixel;
                memcpy(&pixel, rows + 4 * (e / 2), 4);
                pixel = e % 2 ? (pixel & 0xffffu) | (uint32_t)v << 16 : (pixel & 0xffff0000u) | v;
                memcpy(rows + 4 * (e / 2), &pixel, 4);
            }
        }
    }
    const qem_lane_source lanes = {rows, stride, width, kind == 2};
    static uint8_t bytes[2][QEM_ENCODE_LANES][2 * QEM_STREAM_MAX_SAMPLES];
    uint8_t *dst[2][QEM_ENCODE_LANES];
    uint32_t lengths[2][QEM_ENCODE_LANES], sums[2][QEM_ENCODE_LANES];
    uint8_t models[2][QEM_ENCODE_LANES];
    for (unsigned k = 0; k < QEM_ENCODE_LANES; k++)
        dst[0][k] = bytes[0][k], dst[1][k] = bytes[1][k];
    qem_count_streams_encode(t, QEM_ENCODE_SCALAR, &lanes, first, count, n, dst[0], lengths[0],
                             models[0], sums[0], ws);
    const int simd = qem_encode_path_supported(QEM_ENCODE_AVX512);
    if (simd)
        qem_count_streams_encode(t, QEM_ENCODE_AVX512, &lanes, first, count, n, dst[1],
                                 lengths[1], models[1], sums[1], ws);
    uint8_t one[2 * QEM_STREAM_MAX_SAMPLES], model, scratch[4 * QEM_STREAM_MAX_SAMPLES + 8];
    uint16_t back[QEM_STREAM_MAX_SAMPLES];
    for (unsigned k = 0; k < count; k++) {
        const uint16_t *want = column + (size_t)k * n;
        uint32_t sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += want[i];
        const size_t len = qem_count_stream_encode(t, want, n, one, &model, scratch);
        if (lengths[0][k] != len || models[0][k] != model || memcmp(bytes[0][k], one, len) ||
            sums[0][k] != sum)
            abort(); /* the scalar path is the reference encoder */
        if (simd && (lengths[1][k] != len || models[1][k] != model ||
                     memcmp(bytes[1][k], one, len) || sums[1][k] != sum))
            abort(); /* AVX-512 wrote other bytes */
        if (qem_count_stream_decode(t, model, one, len, n, 65535, back) != QEM_OK ||
            memcmp(back, want, n * sizeof *back))
            abort(); /* the stream does not decode to its samples */
    }
    free(column);
    free(rows);
    return 0;
}
