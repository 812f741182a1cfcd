/* Decoding many count streams of one block at once. rANS streams run side
 * by side in SIMD lanes (8 with AVX2, 16 with AVX-512), one stream per
 * lane: table lookups and renormalisation bytes are gathered, states
 * advance together. Every rule is checked per lane; a lane that breaks
 * any of them is decoded again by the scalar decoder, which names the
 * rule, so all paths return the same status and the same values. The path
 * is chosen once per table set from the CPU (QEM_RANS_PATH or the open
 * option can force one); the scalar path is the reference. */
#include <stdlib.h>
#include <string.h>

#include "rans/rans.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_HAVE_X86_SIMD 1
#endif

const char *qem_rans_path_name(qem_rans_path path)
{
    switch (path) {
    case QEM_RANS_PATH_SCALAR: return "scalar";
    case QEM_RANS_PATH_AVX2: return "avx2";
    case QEM_RANS_PATH_AVX512: return "avx512";
    case QEM_RANS_PATH_AUTO: break;
    }
    return "auto";
}

int qem_rans_path_supported(qem_rans_path path)
{
    switch (path) {
    case QEM_RANS_PATH_SCALAR: return 1;
#ifdef QEM_HAVE_X86_SIMD
    case QEM_RANS_PATH_AVX2: return __builtin_cpu_supports("avx2");
    case QEM_RANS_PATH_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
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

qem_rans_path qem_rans_path_resolve(qem_rans_path requested)
{
    if (requested == QEM_RANS_PATH_AUTO) {
        const char *env = getenv("QEM_RANS_PATH");
        if (env && !strcmp(env, "scalar"))
            requested = QEM_RANS_PATH_SCALAR;
        else if (env && !strcmp(env, "avx2"))
            requested = QEM_RANS_PATH_AVX2;
        else if (env && !strcmp(env, "avx512"))
            requested = QEM_RANS_PATH_AVX512;
    }
    if (requested != QEM_RANS_PATH_AUTO)
        return qem_rans_path_supported(requested) ? requested : QEM_RANS_PATH_SCALAR;
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX512))
        return QEM_RANS_PATH_AVX512;
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX2))
        return QEM_RANS_PATH_AVX2;
    return QEM_RANS_PATH_SCALAR;
}

static inline uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#ifdef QEM_HAVE_X86_SIMD

/* Each lane's initial state, next byte, end and table row; lanes past
 * `lanes` repeat the first stream (their results are ignored). */
static void lanes_setup(const uint8_t *base, const qem_stream_job *const *job, unsigned lanes,
                        unsigned width, int32_t *x, int32_t *pos, int32_t *end, int32_t *model)
{
    for (unsigned k = 0; k < width; k++) {
        const qem_stream_job *j = job[k < lanes ? k : 0];
        const int32_t off = (int32_t)(j->span - base);
        x[k] = (int32_t)load_u32le(j->span);
        pos[k] = off + 4;
        end[k] = off + (int32_t)j->size;
        model[k] = (int32_t)(j->model * QEM_RANS_SCALE);
    }
}

#define LANES_AVX2 8

/* Up to 8 rANS streams whose first 4 bytes and initial states are valid.
 * Offsets are relative to `base`; every span lies within `base` plus
 * QEM_SPAN_PADDING readable bytes. Returns a bit per lane that must be
 * decoded again (any rule broken). */
__attribute__((target("avx2"))) static unsigned
decode_lanes_avx2(const qem_rans_tables *t, const uint8_t *base, const qem_stream_job *const *job,
                  unsigned lanes, uint32_t n, uint32_t max_value, uint32_t *stage)
{
    int32_t x0[LANES_AVX2], pos0[LANES_AVX2], end0[LANES_AVX2], model0[LANES_AVX2];
    lanes_setup(base, job, lanes, LANES_AVX2, x0, pos0, end0, model0);
    __m256i x = _mm256_loadu_si256((const __m256i *)x0);
    __m256i pos = _mm256_loadu_si256((const __m256i *)pos0);
    const __m256i end = _mm256_loadu_si256((const __m256i *)end0);
    const __m256i model = _mm256_loadu_si256((const __m256i *)model0);
    const __m256i low = _mm256_set1_epi32((int32_t)QEM_RANS_LOW);
    const __m256i slot_mask = _mm256_set1_epi32((int32_t)(QEM_RANS_SCALE - 1));
    const __m256i m11 = _mm256_set1_epi32(2047), m10 = _mm256_set1_epi32(1023);
    const __m256i escape = _mm256_set1_epi32(QEM_RANS_ESCAPE);
    const __m256i ff = _mm256_set1_epi32(255), ffff = _mm256_set1_epi32(65535);
    const __m256i maxv = _mm256_set1_epi32((int32_t)max_value);
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    const int *slots = (const int *)&t->slot[0][0];
    __m256i bad = _mm256_setzero_si256();
    for (uint32_t i = 0; i < n; i++) {
        const __m256i idx = _mm256_add_epi32(model, _mm256_and_si256(x, slot_mask));
        const __m256i e = _mm256_i32gather_epi32(slots, idx, 4);
        const __m256i sym = _mm256_srli_epi32(e, 21);
        x = _mm256_add_epi32(
            _mm256_mullo_epi32(_mm256_and_si256(e, m11), _mm256_srli_epi32(x, QEM_RANS_SCALE_BITS)),
            _mm256_and_si256(_mm256_srli_epi32(e, 11), m10));
        /* Renormalise: at most a few bytes per lane, lanes in step. */
        __m256i need = _mm256_cmpgt_epi32(low, x);
        while (!_mm256_testz_si256(need, need)) {
            bad = _mm256_or_si256(bad, _mm256_and_si256(need, _mm256_cmpgt_epi32(_mm256_add_epi32(pos, one), end)));
            /* A broken lane reads no further than its end (plus padding). */
            const __m256i at = _mm256_min_epi32(pos, end);
            const __m256i byte = _mm256_and_si256(
                _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)base, at, need, 1),
                ff);
            x = _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 8), byte), need);
            pos = _mm256_sub_epi32(pos, need); /* need is -1 where true */
            need = _mm256_cmpgt_epi32(low, x);
        }
        __m256i value = sym;
        const __m256i esc = _mm256_cmpeq_epi32(sym, escape);
        if (!_mm256_testz_si256(esc, esc)) {
            bad = _mm256_or_si256(bad, _mm256_and_si256(esc, _mm256_cmpgt_epi32(_mm256_add_epi32(pos, two), end)));
            const __m256i at = _mm256_min_epi32(pos, end);
            const __m256i raw = _mm256_and_si256(
                _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)base, at, esc, 1),
                ffff);
            bad = _mm256_or_si256(bad, _mm256_and_si256(esc, _mm256_cmpgt_epi32(raw, maxv)));
            value = _mm256_blendv_epi8(sym, raw, esc);
            pos = _mm256_add_epi32(pos, _mm256_and_si256(esc, two));
        }
        _mm256_storeu_si256((__m256i *)(stage + (size_t)i * LANES_AVX2), value);
    }
    /* Every byte used and the final state back at LOW. */
    bad = _mm256_or_si256(bad, _mm256_xor_si256(_mm256_cmpeq_epi32(pos, end), _mm256_set1_epi32(-1)));
    bad = _mm256_or_si256(bad, _mm256_xor_si256(_mm256_cmpeq_epi32(x, low), _mm256_set1_epi32(-1)));
    return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(bad)) & ((1u << lanes) - 1u);
}

#define LANES_AVX512 16

__attribute__((target("avx512f,avx2"))) static unsigned
decode_lanes_avx512(const qem_rans_tables *t, const uint8_t *base,
                    const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                    uint32_t max_value, uint32_t *stage)
{
    int32_t x0[LANES_AVX512], pos0[LANES_AVX512], end0[LANES_AVX512], model0[LANES_AVX512];
    lanes_setup(base, job, lanes, LANES_AVX512, x0, pos0, end0, model0);
    __m512i x = _mm512_loadu_si512(x0);
    __m512i pos = _mm512_loadu_si512(pos0);
    const __m512i end = _mm512_loadu_si512(end0);
    const __m512i model = _mm512_loadu_si512(model0);
    const __m512i low = _mm512_set1_epi32((int32_t)QEM_RANS_LOW);
    const __m512i slot_mask = _mm512_set1_epi32((int32_t)(QEM_RANS_SCALE - 1));
    const __m512i m11 = _mm512_set1_epi32(2047), m10 = _mm512_set1_epi32(1023);
    const __m512i escape = _mm512_set1_epi32(QEM_RANS_ESCAPE);
    const __m512i ff = _mm512_set1_epi32(255), ffff = _mm512_set1_epi32(65535);
    const __m512i maxv = _mm512_set1_epi32((int32_t)max_value);
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
    const int *slots = (const int *)&t->slot[0][0];
    __mmask16 bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        const __m512i idx = _mm512_add_epi32(model, _mm512_and_si512(x, slot_mask));
        const __m512i e = _mm512_i32gather_epi32(idx, slots, 4);
        const __m512i sym = _mm512_srli_epi32(e, 21);
        x = _mm512_add_epi32(
            _mm512_mullo_epi32(_mm512_and_si512(e, m11), _mm512_srli_epi32(x, QEM_RANS_SCALE_BITS)),
            _mm512_and_si512(_mm512_srli_epi32(e, 11), m10));
        __mmask16 need = _mm512_cmplt_epu32_mask(x, low);
        while (need) {
            bad |= _mm512_mask_cmpgt_epi32_mask(need, _mm512_add_epi32(pos, one), end);
            const __m512i byte = _mm512_and_si512(
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), need,
                                            _mm512_min_epi32(pos, end), base, 1),
                ff);
            x = _mm512_mask_or_epi32(x, need, _mm512_slli_epi32(x, 8), byte);
            pos = _mm512_mask_add_epi32(pos, need, pos, one);
            need = _mm512_cmplt_epu32_mask(x, low);
        }
        __m512i value = sym;
        const __mmask16 esc = _mm512_cmpeq_epi32_mask(sym, escape);
        if (esc) {
            bad |= _mm512_mask_cmpgt_epi32_mask(esc, _mm512_add_epi32(pos, two), end);
            const __m512i raw = _mm512_and_si512(
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), esc,
                                            _mm512_min_epi32(pos, end), base, 1),
                ffff);
            bad |= _mm512_mask_cmpgt_epi32_mask(esc, raw, maxv);
            value = _mm512_mask_mov_epi32(sym, esc, raw);
            pos = _mm512_mask_add_epi32(pos, esc, pos, two);
        }
        _mm512_storeu_si512(stage + (size_t)i * LANES_AVX512, value);
    }
    bad |= _mm512_cmpneq_epi32_mask(pos, end) | _mm512_cmpneq_epi32_mask(x, low);
    return (unsigned)bad & ((1u << lanes) - 1u);
}

#endif /* QEM_HAVE_X86_SIMD */

qem_status qem_count_streams_decode(const qem_rans_tables *t, qem_rans_path path,
                                    const uint8_t *base, const qem_stream_job *jobs, size_t count,
                                    uint32_t n, uint32_t max_value, size_t *failed)
{
    *failed = count;
    unsigned width = 1;
#ifdef QEM_HAVE_X86_SIMD
    if (path == QEM_RANS_PATH_AVX2)
        width = LANES_AVX2;
    else if (path == QEM_RANS_PATH_AVX512)
        width = LANES_AVX512;
#endif
    /* Lanes waiting for a SIMD group: rANS streams whose header is sound. */
    const qem_stream_job *group[16];
    unsigned grouped = 0;
    uint32_t stage[16 * QEM_STREAM_MAX_SAMPLES];
    qem_status first = QEM_OK;
    for (size_t k = 0; k <= count; k++) {
        const int flush = k == count;
        if (!flush) {
            const qem_stream_job *j = &jobs[k];
            const int simd = width > 1 && j->model < QEM_RANS_MODELS && j->size >= 4 &&
                             n <= QEM_STREAM_MAX_SAMPLES && j->span >= base &&
                             (size_t)(j->span - base) + j->size < (size_t)INT32_MAX - 64 &&
                             load_u32le(j->span) >= QEM_RANS_LOW &&
                             load_u32le(j->span) < QEM_RANS_HIGH;
            if (!simd) {
                const qem_status st =
                    qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value, j->out);
                if (st != QEM_OK && (size_t)(j - jobs) < *failed) {
                    *failed = (size_t)(j - jobs);
                    first = st;
                }
                continue;
            }
            group[grouped++] = j;
        }
        if (grouped == 0 || (!flush && grouped < width))
            continue;
        unsigned redo = 0;
#ifdef QEM_HAVE_X86_SIMD
        redo = width == LANES_AVX512
                   ? decode_lanes_avx512(t, base, group, grouped, n, max_value, stage)
                   : decode_lanes_avx2(t, base, group, grouped, n, max_value, stage);
#endif
        for (unsigned l = 0; l < grouped; l++) {
            const qem_stream_job *j = group[l];
            if (redo & (1u << l)) {
                /* The scalar decoder names the rule this lane broke. */
                const qem_status st =
                    qem_count_stream_decode(t, j->model, j->span, j->size, n, max_value, j->out);
                if (st != QEM_OK && (size_t)(j - jobs) < *failed) {
                    *failed = (size_t)(j - jobs);
                    first = st;
                }
                continue;
            }
            for (uint32_t i = 0; i < n; i++)
                j->out[i] = (uint16_t)stage[(size_t)i * width + l];
        }
        grouped = 0;
    }
    return first;
}
