/* The SIMD lane decoders behind qem_count_streams_decode (rans_many.c):
 * a block's rANS streams side by side, one stream per lane, 8 lanes a
 * vector with AVX2 (lanes_avx2.c) and 16 with AVX-512 (lanes_avx512.c).
 * Here is what both share: each lane's set-up, the sparse rows' head
 * symbols, gathers by scalar loads, and the tile test. Internal to
 * lib/rans. */
#ifndef QEM_RANS_LANES_H
#define QEM_RANS_LANES_H

#include <stddef.h>
#include <string.h>

#include "rans/rans.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_HAVE_X86_SIMD 1
#endif

static inline uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline size_t job_stride(const qem_stream_job *j)
{
    return j->stride ? j->stride : 1;
}

/* 1 if the jobs' outputs are neighbours in one tile of scan rows:
 * job l's sample i at job[0]->out + i * stride + l. */
static inline int lanes_side_by_side(const qem_stream_job *const *job, unsigned lanes)
{
    const size_t stride = job_stride(job[0]);
    int side_by_side = stride > 1;
    for (unsigned l = 1; side_by_side && l < lanes; l++)
        side_by_side = job[l]->out == job[0]->out + l && job_stride(job[l]) == stride;
    return side_by_side;
}

#ifdef QEM_HAVE_X86_SIMD

#define LANES_AVX2 8
#define LANES_AVX512 16
/* The most streams one call of a lane decoder takes: two vectors' worth. */
#define LANES_MAX 32

/* Each lane's initial state, next byte, end and table row; lanes past
 * `lanes` repeat the first stream (their results are ignored). */
static inline void lanes_setup(const uint8_t *base, const qem_stream_job *const *job,
                               unsigned lanes, unsigned width, int32_t *x, int32_t *pos,
                               int32_t *end, int32_t *model)
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

/* Rows whose symbols from `head` on all have frequency 1 (the sparse
 * rows, models 0-44: 2 to 8 symbols before that run) need no table, whose
 * 8 loads a step cost more than these compares: a slot's symbol is
 * the last head symbol whose start it reaches, or, in the closing run,
 * head + slot - start[head] with frequency 1. The per-lane constants in
 * hv are, for each group: the table entries of symbols 0 .. head-1 less
 * slot << 11 (the head symbol's entry plus slot << 11 is the slot's), then
 * start - 1 of symbols 1 .. head, then the closing run's entry less
 * slot << 21 (its slot - start is 0). */
#define HEAD_MAX 8
#define HEAD_VECTORS (2 * HEAD_MAX + 1)

/* The largest head among the lanes' rows (entry_by_compares), 0 if any
 * row needs the table. */
static inline int lanes_head(const qem_rans_tables *t, const qem_stream_job *const *job,
                             unsigned lanes)
{
    unsigned head = 2;
    for (unsigned l = 0; l < lanes; l++)
        head = t->head[job[l]->model] > head ? t->head[job[l]->model] : head;
    return head <= HEAD_MAX ? (int)head : 0;
}

/* The constants entry_by_compares needs for `lanes` lanes of table rows
 * model0[l] / QEM_RANS_SCALE, `head` head symbols, in groups of `width`
 * lanes (8 for AVX2, 16 for AVX-512): vector v of group g is at
 * hv[(g * (2 * head + 1) + v) * width]. */
static inline void head_setup(const qem_rans_tables *t, const int32_t *model0, unsigned lanes,
                              unsigned head, unsigned width, uint32_t *hv)
{
    for (unsigned l = 0; l < lanes; l++) {
        const unsigned m = (unsigned)model0[l] / QEM_RANS_SCALE;
        uint32_t *g = hv + (l / width) * (2 * head + 1) * width + l % width;
        for (unsigned k = 0; k < head; k++)
            g[k * width] =
                (k << 21) + qem_rans_frequencies[m][k] - ((uint32_t)t->start[m][k] << 11);
        for (unsigned k = 1; k <= head; k++)
            g[(head + k - 1) * width] = (uint32_t)t->start[m][k] - 1u;
        g[2 * head * width] = ((head - (uint32_t)t->start[m][head]) << 21) + 1u;
    }
}

/* Eight 4-byte words at byte offsets from `base`, by scalar loads: on
 * Zen 1-3 vpgatherdd ymm issues one per ~9.5 cycles, these ~6.5. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
gather_by_loads(const uint8_t *base, __m256i offset)
{
    const __m128i lo = _mm256_castsi256_si128(offset), hi = _mm256_extracti128_si256(offset, 1);
    const uint64_t a = (uint64_t)_mm_cvtsi128_si64(lo), b = (uint64_t)_mm_extract_epi64(lo, 1);
    const uint64_t c = (uint64_t)_mm_cvtsi128_si64(hi), d = (uint64_t)_mm_extract_epi64(hi, 1);
    int32_t w[8];
    memcpy(&w[0], base + (uint32_t)a, 4);
    memcpy(&w[1], base + (a >> 32), 4);
    memcpy(&w[2], base + (uint32_t)b, 4);
    memcpy(&w[3], base + (b >> 32), 4);
    memcpy(&w[4], base + (uint32_t)c, 4);
    memcpy(&w[5], base + (c >> 32), 4);
    memcpy(&w[6], base + (uint32_t)d, 4);
    memcpy(&w[7], base + (d >> 32), 4);
    __m128i r0 = _mm_cvtsi32_si128(w[0]);
    r0 = _mm_insert_epi32(r0, w[1], 1);
    r0 = _mm_insert_epi32(r0, w[2], 2);
    r0 = _mm_insert_epi32(r0, w[3], 3);
    __m128i r1 = _mm_cvtsi32_si128(w[4]);
    r1 = _mm_insert_epi32(r1, w[5], 1);
    r1 = _mm_insert_epi32(r1, w[6], 2);
    r1 = _mm_insert_epi32(r1, w[7], 3);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(r0), r1, 1);
}

/* Decode `lanes` (1..16 for AVX2, 1..32 for AVX-512) rANS streams of
 * `n` samples whose first 4 bytes and initial states are valid; offsets
 * are relative to `base`, every span lies within `base` plus
 * QEM_SPAN_PADDING readable bytes. Lanes bound for one tile of scan rows
 * go straight into it (*stage_width = 0); others go to `stage` (sample i
 * of lane l at stage[i * *stage_width + l]) for the caller to copy out.
 * Returns a bit per lane that must be decoded again (a rule broken). */
uint32_t qem_lanes_decode_avx2(const qem_rans_tables *t, const uint8_t *base,
                               const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                               uint32_t max_value, int by_loads, uint16_t *stage,
                               unsigned *stage_width);
uint32_t qem_lanes_decode_avx512(const qem_rans_tables *t, const uint8_t *base,
                                 const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                                 uint32_t max_value, uint16_t *stage, unsigned *stage_width);

#endif /* QEM_HAVE_X86_SIMD */

#endif
