/* Encoding the count streams of a band of lanes of one block. The scalar
 * path gathers each lane's column and calls qem_count_stream_encode: it
 * is the reference. The AVX-512 path (encode_avx512.c) reads the lanes
 * straight from the scan rows, ranks the 64 table rows from histograms,
 * and rANS-encodes 32 lanes at a time side by side; it writes the same
 * bytes. */
#include <stdlib.h>
#include <string.h>

#include "rans/encode_lanes.h"

static const struct {
    qem_encode_path path;
    const char *name;
} path_names[] = {{QEM_ENCODE_AUTO, "auto"},
                  {QEM_ENCODE_SCALAR, "scalar"},
                  {QEM_ENCODE_AVX512, "avx512"}};

const char *qem_encode_path_name(qem_encode_path path)
{
    for (size_t k = 0; k < sizeof path_names / sizeof path_names[0]; k++)
        if (path_names[k].path == path)
            return path_names[k].name;
    return "auto";
}

int qem_encode_path_from_name(const char *name, qem_encode_path *path)
{
    for (size_t k = 0; name && k < sizeof path_names / sizeof path_names[0]; k++)
        if (!strcmp(name, path_names[k].name)) {
            *path = path_names[k].path;
            return 1;
        }
    return 0;
}

int qem_encode_path_supported(qem_encode_path path)
{
    switch (path) {
    case QEM_ENCODE_AUTO:
    case QEM_ENCODE_SCALAR: return 1;
#ifdef QEM_HAVE_ENCODE_AVX512
    case QEM_ENCODE_AVX512: return qem_encode_avx512_supported();
#endif
    default: return 0;
    }
}

qem_encode_path qem_encode_path_resolve(qem_encode_path requested)
{
    if (requested == QEM_ENCODE_AUTO) {
        const char *env = getenv("QEM_ENCODE_PATH");
        if (env && *env && !qem_encode_path_from_name(env, &requested))
            requested = QEM_ENCODE_AUTO;
    }
    if (requested != QEM_ENCODE_AUTO)
        return qem_encode_path_supported(requested) ? requested : QEM_ENCODE_SCALAR;
    return qem_encode_path_supported(QEM_ENCODE_AVX512) ? QEM_ENCODE_AVX512 : QEM_ENCODE_SCALAR;
}

qem_encode_workspace *qem_encode_workspace_new(void)
{
    return aligned_alloc(64, (sizeof(qem_encode_workspace) + 63) / 64 * 64);
}

void qem_encode_workspace_free(qem_encode_workspace *ws)
{
    free(ws);
}

/* Sample i of lane `lane`. */
static inline uint16_t lane_sample(const qem_lane_source *src, size_t lane, uint32_t i)
{
    if (src->width == 1)
        return ((const uint8_t *)src->rows)[(size_t)i * src->stride + lane];
    if (src->float_halves) {
        /* Lane 2p is the low half of pixel p's bits, lane 2p + 1 the high,
         * whatever the host's byte order. */
        uint32_t bits = ((const uint32_t *)src->rows)[(size_t)i * (src->stride / 2) + lane / 2];
        return (uint16_t)(lane & 1 ? bits >> 16 : bits & 0xffff);
    }
    return ((const uint16_t *)src->rows)[(size_t)i * src->stride + lane];
}

void qem_lane_write_plain(const qem_lane_source *src, size_t lane, uint32_t n,
                          const lane_plan *plan, uint8_t *dst)
{
    switch (plan->model) {
    case QEM_MODEL_CONSTANT: {
        const uint16_t v = lane_sample(src, lane, 0);
        dst[0] = (uint8_t)(v & 255);
        dst[1] = (uint8_t)(v >> 8);
        break;
    }
    case QEM_MODEL_RAW:
        for (uint32_t i = 0; i < n; i++) {
            const uint16_t v = lane_sample(src, lane, i);
            dst[2 * i] = (uint8_t)(v & 255);
            dst[2 * i + 1] = (uint8_t)(v >> 8);
        }
        break;
    case QEM_MODEL_SPARSE: {
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            const uint16_t v = lane_sample(src, lane, i);
            if (v) {
                const uint32_t e = (i << 7) | (uint32_t)(v - 1);
                dst[k++] = (uint8_t)(e & 255);
                dst[k++] = (uint8_t)(e >> 8);
            }
        }
        break;
    }
    default:
        break;
    }
}

void qem_count_streams_encode(const qem_rans_tables *t, qem_encode_path path,
                              const qem_lane_source *src, size_t first, unsigned count,
                              uint32_t n, uint8_t *const *dst, uint32_t *lengths,
                              uint8_t *models, uint32_t *sums, qem_encode_workspace *ws)
{
#ifdef QEM_HAVE_ENCODE_AVX512
    if (path == QEM_ENCODE_AVX512 && n <= QEM_STREAM_MAX_SAMPLES &&
        count <= QEM_ENCODE_LANES) {
        qem_count_streams_encode_avx512(t, src, first, count, n, dst, lengths, models, sums,
                                        ws);
        return;
    }
#else
    (void)path;
#endif
    for (unsigned k = 0; k < count; k++) {
        uint32_t sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            ws->column[i] = lane_sample(src, first + k, i);
            sum += ws->column[i];
        }
        if (sums)
            sums[k] = sum;
        lengths[k] = (uint32_t)qem_count_stream_encode(t, ws->column, n, dst[k], &models[k],
                                                       ws->scratch);
    }
}
