/* Decoding many count streams of one block at once. rANS streams run side
 * by side in SIMD lanes, one stream per lane (lanes_avx2.c, 8 a vector;
 * lanes_avx512.c, 16): states advance together, table lookups and
 * renormalisation bytes are gathered. Zero, constant, sparse-event and
 * raw streams, and any lane that breaks a rule, are decoded by the scalar
 * decoder, which names the rule, so all paths return the same status and
 * the same values. The path is chosen once per table set from the CPU
 * (QEM_RANS_PATH or the open option can force one); the scalar path is
 * the reference. */
#include <stdlib.h>
#include <string.h>

#include "common/transpose.h"
#include "rans/lanes.h"

const char *qem_rans_path_name(qem_rans_path path)
{
    switch (path) {
    case QEM_RANS_PATH_SCALAR: return "scalar";
    case QEM_RANS_PATH_AVX2: return "avx2";
    case QEM_RANS_PATH_AVX512: return "avx512";
    case QEM_RANS_PATH_AVX2_LOADS: return "avx2-loads";
    case QEM_RANS_PATH_AUTO: break;
    }
    return "auto";
}

int qem_rans_path_supported(qem_rans_path path)
{
    switch (path) {
    case QEM_RANS_PATH_SCALAR: return 1;
#ifdef QEM_HAVE_X86_SIMD
    case QEM_RANS_PATH_AVX2:
    case QEM_RANS_PATH_AVX2_LOADS: return __builtin_cpu_supports("avx2");
    case QEM_RANS_PATH_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vbmi2") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
#endif
    default: return 0;
    }
}

int qem_decode_path_supported(qem_decode_path path)
{
    return path == QEM_DECODE_AUTO || qem_rans_path_supported(path);
}

const char *qem_decode_path_name(qem_decode_path path)
{
    return qem_rans_path_name(path);
}

int qem_decode_path_from_name(const char *name, qem_decode_path *path)
{
    static const qem_decode_path all[] = {QEM_DECODE_AUTO, QEM_DECODE_SCALAR, QEM_DECODE_AVX2,
                                          QEM_DECODE_AVX512, QEM_DECODE_AVX2_LOADS};
    for (size_t k = 0; name && k < sizeof all / sizeof all[0]; k++)
        if (!strcmp(name, qem_rans_path_name(all[k]))) {
            *path = all[k];
            return 1;
        }
    return 0;
}

qem_rans_path qem_rans_path_resolve(qem_rans_path requested)
{
    if (requested == QEM_RANS_PATH_AUTO) {
        const char *env = getenv("QEM_RANS_PATH");
        if (env && *env && !qem_decode_path_from_name(env, &requested))
            requested = QEM_RANS_PATH_AUTO;
    }
    if (requested != QEM_RANS_PATH_AUTO)
        return qem_rans_path_supported(requested) ? requested : QEM_RANS_PATH_SCALAR;
#ifdef QEM_HAVE_X86_SIMD
    /* AVX-512 first: on Zen 4 it decodes sets B and H 15-25 % faster
     * than either AVX2 path (doc/benchmarks.md). */
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX512))
        return QEM_RANS_PATH_AVX512;
    /* Zen 1-3 issue one 8-lane gather per ~9.5 cycles; eight loads take ~6.5. */
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX2_LOADS) && __builtin_cpu_is("amd"))
        return QEM_RANS_PATH_AVX2_LOADS;
#endif
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX2))
        return QEM_RANS_PATH_AVX2;
    return QEM_RANS_PATH_SCALAR;
}





static inline uint16_t load_u16le(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* The reference decoder on one job, whatever its stride. Zero, constant
 * and sparse streams into a row tile are written in place, with the
 * reference's checks in the reference's order; the rest are decoded as a
 * column and spread. */
static qem_status decode_job_scalar(const qem_rans_tables *t, const qem_stream_job *j, uint32_t n,
                                    uint32_t max_value)
{
    const size_t stride = job_stride(j);
    if (stride == 1 && !j->out_zeroed)
        return qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value, j->out);
    uint16_t *out = j->out;
    switch (j->model) {
    case QEM_MODEL_ZERO:
        if (j->size != 0)
            return QEM_E_MODEL;
        for (uint32_t i = 0; !j->out_zeroed && i < n; i++)
            out[i * stride] = 0;
        return QEM_OK;
    case QEM_MODEL_CONSTANT: {
        if (j->size != 2)
            return QEM_E_MODEL;
        const uint16_t v = load_u16le(j->span);
        if (v > max_value)
            return QEM_E_VALUE_RANGE;
        for (uint32_t i = 0; i < n; i++)
            out[i * stride] = v;
        return QEM_OK;
    }
    case QEM_MODEL_SPARSE: {
        if (j->size % 2 != 0)
            return QEM_E_MODEL;
        for (uint32_t i = 0; !j->out_zeroed && i < n; i++)
            out[i * stride] = 0;
        long previous = -1;
        for (size_t k = 0; k < j->size / 2; k++) {
            const uint16_t e = load_u16le(j->span + 2 * k);
            const long at = e >> 7;
            if (at <= previous || at >= (long)n)
                return QEM_E_SPARSE;
            const uint32_t v = (uint32_t)(e & 127) + 1;
            if (v > max_value)
                return QEM_E_VALUE_RANGE;
            out[(size_t)at * stride] = (uint16_t)v;
            previous = at;
        }
        return QEM_OK;
    }
    default:
        break;
    }
    if (stride == 1)
        return qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value, j->out);
    uint16_t column[QEM_STREAM_MAX_SAMPLES];
    if (n > QEM_STREAM_MAX_SAMPLES)
        return QEM_E_MODEL; /* no count stream holds more than one block */
    const qem_status st = qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value, column);
    for (uint32_t i = 0; st == QEM_OK && i < n; i++)
        out[i * stride] = column[i];
    return st;
}

/* Copies `lanes` lanes of a stage (sample i of lane l at
 * stage[i * width + l]) to their jobs' outputs. */
static void stage_copy_out(const uint16_t *stage, unsigned width, const qem_stream_job *const *job,
                           unsigned lanes, uint32_t n)
{
    if (lanes_side_by_side(job, lanes)) {
        /* A row of lanes per sample, straight into the tile. */
        const size_t stride = job_stride(job[0]);
        for (uint32_t i = 0; i < n; i++)
            memcpy(job[0]->out + i * stride, stage + (size_t)i * width, lanes * sizeof *stage);
        return;
    }
    unsigned l0 = 0;
#if defined(__SSE2__)
    /* Columns: eight lanes by eight samples at a time through registers. */
    for (; l0 + 8 <= lanes; l0 += 8) {
        int columns = 1;
        for (unsigned l = l0; l < l0 + 8; l++)
            columns &= job_stride(job[l]) == 1;
        if (!columns)
            break;
        uint32_t i0 = 0;
        for (; i0 + 8 <= n; i0 += 8) {
            __m128i c[8];
            qem_transpose8x8_u16(stage + (size_t)i0 * width + l0, width, c);
            for (unsigned l = 0; l < 8; l++)
                _mm_storeu_si128((__m128i *)(job[l0 + l]->out + i0), c[l]);
        }
        for (unsigned l = l0; l < l0 + 8; l++)
            for (uint32_t i = i0; i < n; i++)
                job[l]->out[i] = stage[(size_t)i * width + l];
    }
#endif
    for (unsigned l = l0; l < lanes; l++) {
        uint16_t *out = job[l]->out;
        const size_t s = job_stride(job[l]);
        for (uint32_t i = 0; i < n; i++)
            out[i * s] = stage[(size_t)i * width + l];
    }
}

/* Copies `lanes` decoded columns (lane l's samples at cols[l * n]) to
 * their jobs' strided outputs: eight side-by-side lanes through 8x8
 * transposes, others one value at a time. */
static void columns_copy_out(const uint16_t *cols, const qem_stream_job *const *job,
                             unsigned lanes, uint32_t n)
{
    const size_t stride = job_stride(job[0]);
    int side_by_side = lanes == 8;
    for (unsigned l = 1; side_by_side && l < lanes; l++)
        side_by_side = job[l]->out == job[0]->out + l && job_stride(job[l]) == stride;
    uint32_t i0 = 0;
#if defined(__SSE2__)
    for (; side_by_side && i0 + 8 <= n; i0 += 8) {
        __m128i r[8];
        qem_transpose8x8_u16(cols + i0, n, r);
        for (unsigned k = 0; k < 8; k++)
            _mm_storeu_si128((__m128i *)(job[0]->out + (size_t)(i0 + k) * stride), r[k]);
    }
#endif
    for (unsigned l = 0; l < lanes; l++) {
        const size_t s = job_stride(job[l]);
        for (uint32_t i = i0; i < n; i++)
            job[l]->out[i * s] = cols[(size_t)l * n + i];
    }
}

/* The reference decoder on up to eight jobs, each into its own column of
 * `cols`, then copied to the jobs' outputs; failures are recorded as
 * qem_count_streams_decode reports them (the lowest job index wins). */
static void decode_columns(const qem_rans_tables *t, const qem_stream_job *const *group,
                           unsigned count, uint32_t n, uint32_t max_value, uint16_t *cols,
                           const qem_stream_job *jobs, size_t *failed, qem_status *first)
{
    for (unsigned l = 0; l < count; l++) {
        const qem_stream_job *j = group[l];
        const qem_status st = qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value,
                                                      cols + (size_t)l * n);
        if (st != QEM_OK && (size_t)(j - jobs) < *failed) {
            *failed = (size_t)(j - jobs);
            *first = st;
        }
    }
    columns_copy_out(cols, group, count, n);
}

qem_status qem_count_streams_decode(const qem_rans_tables *t, qem_rans_path path,
                                    const uint8_t *base, const qem_stream_job *jobs, size_t count,
                                    uint32_t n, uint32_t max_value, size_t *failed)
{
    size_t redone;
    return qem_count_streams_decode_counted(t, path, base, jobs, count, n, max_value, failed,
                                            &redone);
}

qem_status qem_count_streams_decode_counted(const qem_rans_tables *t, qem_rans_path path,
                                            const uint8_t *base, const qem_stream_job *jobs,
                                            size_t count, uint32_t n, uint32_t max_value,
                                            size_t *failed, size_t *redone)
{
    *failed = count;
    *redone = 0;
    unsigned width = 1;
#ifdef QEM_HAVE_X86_SIMD
    if (path == QEM_RANS_PATH_AVX2 || path == QEM_RANS_PATH_AVX2_LOADS)
        width = 2 * LANES_AVX2;
    else if (path == QEM_RANS_PATH_AVX512)
        width = LANES_MAX;
#endif
    /* The scalar path decodes rANS streams bound for a row tile as columns,
     * eight at a time, and transposes them in. */
    const int scalar_rows = width == 1;
    if (scalar_rows)
        width = 8;
    /* Lanes waiting for a SIMD group: rANS streams whose header is sound. */
    const qem_stream_job *group[LANES_MAX], *raw_group[8];
    unsigned grouped = 0, raw_grouped = 0;
    uint16_t stage[LANES_MAX * QEM_STREAM_MAX_SAMPLES], columns[8 * QEM_STREAM_MAX_SAMPLES];
    qem_status first = QEM_OK;
    for (size_t k = 0; k <= count; k++) {
        const int flush = k == count;
        if (!flush) {
            const qem_stream_job *j = &jobs[k];
            const int simd =
                scalar_rows ? j->model < QEM_RANS_MODELS && job_stride(j) > 1 &&
                                  n <= QEM_STREAM_MAX_SAMPLES
                            : j->model < QEM_RANS_MODELS && j->size >= 4 &&
                                  n <= QEM_STREAM_MAX_SAMPLES && j->span >= base &&
                                  /* a broken lane's position may run up to 4
                                   * bytes a sample past its end: no overflow */
                                  (size_t)(j->span - base) + j->size <
                                      (size_t)INT32_MAX - 4 * QEM_STREAM_MAX_SAMPLES - 64 &&
                                  load_u32le(j->span) >= QEM_RANS_LOW &&
                                  load_u32le(j->span) < QEM_RANS_HIGH;
            if (!simd && j->model == QEM_MODEL_RAW && job_stride(j) > 1 &&
                n <= QEM_STREAM_MAX_SAMPLES) {
                /* Raw streams bound for a row tile (float lanes, hot
                 * pixels): eight columns at a time, transposed in. */
                raw_group[raw_grouped++] = j;
                if (raw_grouped == 8) {
                    decode_columns(t, raw_group, raw_grouped, n, max_value, columns, jobs, failed,
                                   &first);
                    raw_grouped = 0;
                }
                continue;
            }
            if (!simd) {
                const qem_status st = decode_job_scalar(t, j, n, max_value);
                if (st != QEM_OK && (size_t)(j - jobs) < *failed) {
                    *failed = (size_t)(j - jobs);
                    first = st;
                }
                continue;
            }
            group[grouped++] = j;
        } else if (raw_grouped) {
            decode_columns(t, raw_group, raw_grouped, n, max_value, columns, jobs, failed, &first);
            raw_grouped = 0;
        }
        if (grouped == 0 || (!flush && grouped < width))
            continue;
        if (scalar_rows) {
            decode_columns(t, group, grouped, n, max_value, stage, jobs, failed, &first);
            grouped = 0;
            continue;
        }
        uint32_t redo = 0;
        unsigned stage_width = 0;
#ifdef QEM_HAVE_X86_SIMD
        redo = path == QEM_RANS_PATH_AVX512
                   ? qem_lanes_decode_avx512(t, base, group, grouped, n, max_value, stage,
                                             &stage_width)
                   : qem_lanes_decode_avx2(t, base, group, grouped, n, max_value,
                                           path == QEM_RANS_PATH_AVX2_LOADS, stage, &stage_width);
#endif
        if (stage_width)
            stage_copy_out(stage, stage_width, group, grouped, n);
        for (unsigned l = 0; l < grouped; l++) {
            if (!(redo & (1u << l)))
                continue;
            /* The scalar decoder names the rule this lane broke. */
            const qem_stream_job *j = group[l];
            ++*redone;
            const qem_status st = decode_job_scalar(t, j, n, max_value);
            if (st != QEM_OK && (size_t)(j - jobs) < *failed) {
                *failed = (size_t)(j - jobs);
                first = st;
            }
        }
        grouped = 0;
    }
    return first;
}
