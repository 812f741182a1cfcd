/* The count-stream decoder: every path (scalar, AVX2, AVX-512 where the
 * CPU has them), one stream and a full batch of copies, as columns and
 * side by side in a zeroed tile of scan rows, must give the scalar
 * decoder's status and values. Layout: model byte, u16 sample
 * count, a byte choosing the maximum value, then the stream. */
#include <stdlib.h>
#include <string.h>

#include "rans/rans.h"

#define COPIES 35 /* more than a full SIMD batch (32 AVX-512 lanes), a partial last one */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static qem_rans_tables *t;
    if (!t) {
        t = malloc(sizeof *t);
        qem_rans_tables_init(t);
    }
    if (size < 4)
        return 0;
    const unsigned model = data[0];
    uint32_t n = ((uint32_t)data[1] | ((uint32_t)data[2] << 8)) % QEM_STREAM_MAX_SAMPLES + 1;
    const uint32_t max_value = data[3] & 1 ? 255u : 65535u;
    const uint8_t *span = data + 4;
    const size_t span_size = size - 4;
    /* The batch decoder reads past a span: give it its padding. */
    uint8_t *buf = calloc(span_size * COPIES + QEM_SPAN_PADDING, 1);
    static uint16_t want[QEM_STREAM_MAX_SAMPLES], got[COPIES][QEM_STREAM_MAX_SAMPLES];
    for (int c = 0; c < COPIES; c++)
        memcpy(buf + (size_t)c * span_size, span, span_size);
    const qem_status st = qem_count_stream_decode(t, model, buf, span_size, n, max_value, want);
    static const qem_rans_path paths[] = {QEM_RANS_PATH_SCALAR, QEM_RANS_PATH_AVX2,
                                          QEM_RANS_PATH_AVX512, QEM_RANS_PATH_AVX2_LOADS};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (!qem_rans_path_supported(paths[p]))
            continue;
        qem_stream_job jobs[COPIES];
        for (int c = 0; c < COPIES; c++)
            jobs[c] = (qem_stream_job){model, buf + (size_t)c * span_size, span_size, got[c], 1, 0};
        size_t failed;
        const qem_status bst =
            qem_count_streams_decode(t, paths[p], buf, jobs, COPIES, n, max_value, &failed);
        if (bst != st || (st != QEM_OK && failed != 0))
            abort();
        for (int c = 0; st == QEM_OK && c < COPIES; c++)
            if (memcmp(got[c], want, n * sizeof *want) != 0)
                abort();
        /* The same copies into a zeroed tile of scan rows, side by side. */
        static uint16_t tile[QEM_STREAM_MAX_SAMPLES * COPIES];
        memset(tile, 0, sizeof tile);
        for (int c = 0; c < COPIES; c++)
            jobs[c] = (qem_stream_job){model, buf + (size_t)c * span_size, span_size, tile + c,
                                       COPIES, 1};
        const qem_status rst =
            qem_count_streams_decode(t, paths[p], buf, jobs, COPIES, n, max_value, &failed);
        if (rst != st || (st != QEM_OK && failed != 0))
            abort();
        for (int c = 0; st == QEM_OK && c < COPIES; c++)
            for (uint32_t i = 0; i < n; i++)
                if (tile[(size_t)i * COPIES + c] != want[i])
                    abort();
    }
    free(buf);
    return 0;
}
