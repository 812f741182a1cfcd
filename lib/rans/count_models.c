#include <math.h>
#include <string.h>

#include "rans/rans.h"

static inline uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint16_t load_u16le(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static qem_status decode_rans(const uint32_t *lut, const uint8_t *span, size_t size, uint32_t n,
                              uint32_t max_value, uint16_t *out)
{
    if (size < 4)
        return QEM_E_MODEL;
    uint32_t x = load_u32le(span);
    if (x < QEM_RANS_LOW || x >= QEM_RANS_HIGH)
        return QEM_E_RANS_STATE;
    size_t pos = 4;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = lut[x & (QEM_RANS_SCALE - 1)];
        uint32_t sym = e >> 21;
        x = (e & 2047u) * (x >> QEM_RANS_SCALE_BITS) + ((e >> 11) & 1023u);
        while (x < QEM_RANS_LOW) {
            if (pos >= size)
                return QEM_E_RANS_TRUNCATED;
            x = (x << 8) | span[pos++];
        }
        uint32_t v = sym;
        if (sym == QEM_RANS_ESCAPE) {
            if (size - pos < 2)
                return QEM_E_RANS_TRUNCATED;
            v = load_u16le(span + pos);
            pos += 2;
            if (v > max_value)
                return QEM_E_VALUE_RANGE;
        }
        out[i] = (uint16_t)v;
    }
    if (pos != size || x != QEM_RANS_LOW)
        return QEM_E_RANS_FINAL;
    return QEM_OK;
}

qem_status qem_count_stream_decode(const qem_rans_tables *t, unsigned model, const uint8_t *span,
                                   size_t size, uint32_t n, uint32_t max_value, uint16_t *out)
{
    if (model < QEM_RANS_MODELS)
        return decode_rans(t->slot[model], span, size, n, max_value, out);
    switch (model) {
    case QEM_MODEL_ZERO:
        if (size != 0)
            return QEM_E_MODEL;
        memset(out, 0, (size_t)n * sizeof *out);
        return QEM_OK;
    case QEM_MODEL_CONSTANT: {
        if (size != 2)
            return QEM_E_MODEL;
        uint16_t v = load_u16le(span);
        if (v > max_value)
            return QEM_E_VALUE_RANGE;
        for (uint32_t i = 0; i < n; i++)
            out[i] = v;
        return QEM_OK;
    }
    case QEM_MODEL_RAW: {
        if (size != 2 * (size_t)n)
            return QEM_E_MODEL;
        uint32_t or_all = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(out, span, 2 * (size_t)n); /* the stored words are the values */
        for (uint32_t i = 0; max_value < 65535 && i < n; i++)
            or_all |= out[i];
#else
        for (uint32_t i = 0; i < n; i++) {
            out[i] = load_u16le(span + 2 * i);
            or_all |= out[i];
        }
#endif
        if (or_all > max_value) {
            for (uint32_t i = 0; i < n; i++)
                if (out[i] > max_value)
                    return QEM_E_VALUE_RANGE;
        }
        return QEM_OK;
    }
    case QEM_MODEL_SPARSE: {
        if (size % 2 != 0)
            return QEM_E_MODEL;
        memset(out, 0, (size_t)n * sizeof *out);
        size_t events = size / 2;
        long previous = -1;
        for (size_t k = 0; k < events; k++) {
            uint16_t e = load_u16le(span + 2 * k);
            long pos = e >> 7;
            if (pos <= previous || pos >= (long)n)
                return QEM_E_SPARSE;
            uint32_t v = (uint32_t)(e & 127) + 1;
            if (v > max_value)
                return QEM_E_VALUE_RANGE;
            out[pos] = (uint16_t)v;
            previous = pos;
        }
        return QEM_OK;
    }
    default:
        return QEM_E_MODEL;
    }
}

size_t qem_rans_encode(const qem_rans_tables *t, unsigned model, const uint16_t *values, uint32_t n,
                       uint8_t *scratch, size_t scratch_size, const uint8_t **stream)
{
    const uint16_t *freq = qem_rans_frequencies[model];
    const uint16_t *start = t->start[model];
    uint8_t *end = scratch + scratch_size;
    uint8_t *p = end;
    uint32_t x = QEM_RANS_LOW;
    for (uint32_t i = n; i-- > 0;) {
        uint32_t v = values[i];
        uint32_t sym = v < QEM_RANS_ESCAPE ? v : QEM_RANS_ESCAPE;
        if (sym == QEM_RANS_ESCAPE) {
            /* Escapes go out before renormalisation so that, reversed, the
             * decoder meets them after it has renormalised. */
            *--p = (uint8_t)(v >> 8);
            *--p = (uint8_t)(v & 255);
        }
        uint32_t f = freq[sym];
        uint32_t bound = (QEM_RANS_LOW >> QEM_RANS_SCALE_BITS << 8) * f;
        while (x >= bound) {
            *--p = (uint8_t)(x & 255);
            x >>= 8;
        }
        x = ((x / f) << QEM_RANS_SCALE_BITS) + (x % f) + start[sym];
    }
    p -= 4;
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
    *stream = p;
    return (size_t)(end - p);
}

unsigned qem_reference_rans_model_of_sum(uint64_t capped, uint32_t n)
{
    double mean = n ? (double)capped / (double)n : 0.0;
    if (mean < 0.002)
        mean = 0.002;
    /* rint: Python's round() rounds half to even, as rint does by default. */
    double m = rint(log(mean / 0.002) * 63.0 / log(16000.0));
    if (m < 0)
        m = 0;
    if (m > 63)
        m = 63;
    return (unsigned)m;
}

unsigned qem_reference_rans_model(const uint16_t *values, uint32_t n)
{
    uint64_t capped = 0;
    for (uint32_t i = 0; i < n; i++)
        capped += values[i] < 32 ? values[i] : 32;
    return qem_reference_rans_model_of_sum(capped, n);
}

/* Estimated rANS bits (in 1/65536 bit) of a histogram under `model`. */
static uint64_t estimate_bits(const qem_rans_tables *t, unsigned model, const uint8_t *symbols,
                              const uint32_t *counts, unsigned distinct)
{
    uint64_t bits = 0;
    for (unsigned k = 0; k < distinct; k++)
        bits += (uint64_t)counts[k] * t->cost[model][symbols[k]];
    return bits;
}

size_t qem_count_stream_encode(const qem_rans_tables *t, const uint16_t *values, uint32_t n,
                               uint8_t *dst, uint8_t *model_out, uint8_t *scratch)
{
    uint32_t hist[QEM_RANS_SYMBOLS] = {0};
    uint32_t nonzero = 0, vmax = 0;
    int all_equal = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v = values[i];
        hist[v < QEM_RANS_ESCAPE ? v : QEM_RANS_ESCAPE]++;
        nonzero += v != 0;
        vmax = v > vmax ? v : vmax;
        all_equal &= v == values[0];
    }
    if (all_equal) {
        if (values[0] == 0) {
            *model_out = QEM_MODEL_ZERO;
            return 0;
        }
        *model_out = QEM_MODEL_CONSTANT;
        dst[0] = (uint8_t)(values[0] & 255);
        dst[1] = (uint8_t)(values[0] >> 8);
        return 2;
    }

    /* Best non-rANS candidate: raw always fits; sparse when values <= 128. */
    size_t best = 2 * (size_t)n;
    unsigned best_model = QEM_MODEL_RAW;
    if (vmax <= 128 && n <= QEM_STREAM_MAX_SAMPLES && 2 * (size_t)nonzero <= best) {
        best = 2 * (size_t)nonzero;
        best_model = QEM_MODEL_SPARSE;
    }

    uint8_t symbols[QEM_RANS_SYMBOLS];
    uint32_t counts[QEM_RANS_SYMBOLS];
    unsigned distinct = 0;
    for (unsigned s = 0; s < QEM_RANS_SYMBOLS; s++) {
        if (hist[s]) {
            symbols[distinct] = (uint8_t)s;
            counts[distinct++] = hist[s];
        }
    }
    unsigned m_best = 0;
    uint64_t bits_best = UINT64_MAX;
    for (unsigned m = 0; m < QEM_RANS_MODELS; m++) {
        uint64_t b = estimate_bits(t, m, symbols, counts, distinct);
        if (b < bits_best) {
            bits_best = b;
            m_best = m;
        }
    }
    /* A rANS stream is never shorter than its ideal bits / 8 + ~3 bytes
     * (the final state carries at most 31 bits, the initial one holds 23),
     * so skip encoding when even that cannot beat the current best. An
     * accepted rANS stream is copied to dst at once, freeing the scratch. */
    const uint64_t byte_units = 8ull << 16;
    const size_t scratch_size = qem_stream_scratch_bound(n);
    if (bits_best / byte_units + 2 < best) {
        unsigned tried[2] = {m_best, qem_reference_rans_model(values, n)};
        unsigned attempts = 1;
        /* The reference's model can beat the estimate's favourite only when
         * their estimates lie within a few bytes of each other. */
        if (tried[1] != tried[0] &&
            estimate_bits(t, tried[1], symbols, counts, distinct) < bits_best + 3 * byte_units)
            attempts = 2;
        for (unsigned a = 0; a < attempts; a++) {
            const uint8_t *stream = NULL;
            size_t len = qem_rans_encode(t, tried[a], values, n, scratch, scratch_size, &stream);
            if (len < best) {
                best = len;
                best_model = tried[a];
                memcpy(dst, stream, len);
            }
        }
    }
    if (best_model == QEM_MODEL_RAW) {
        for (uint32_t i = 0; i < n; i++) {
            dst[2 * i] = (uint8_t)(values[i] & 255);
            dst[2 * i + 1] = (uint8_t)(values[i] >> 8);
        }
    } else if (best_model == QEM_MODEL_SPARSE) {
        size_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (values[i]) {
                uint32_t e = (i << 7) | (uint32_t)(values[i] - 1);
                dst[k++] = (uint8_t)(e & 255);
                dst[k++] = (uint8_t)(e >> 8);
            }
        }
    }
    *model_out = (uint8_t)best_model;
    return best;
}
