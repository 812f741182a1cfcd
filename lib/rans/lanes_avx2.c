/* The AVX2 lane decoder: 8 streams a vector, two vectors (16 streams)
 * stepping together; table lookups and renormalisation bytes gathered
 * (on AMD, `avx2-loads`, by scalar loads: vpgatherdd is microcoded
 * there). Sparse rows find their symbols by compares instead of the
 * table, and each lane's next stream bytes wait in a 4-byte buffer,
 * loaded every second step (dense rows) or when some lane runs short
 * (sparse rows, which take a byte every few dozen samples). The only
 * branches on the data are for rare events (escapes, a short buffer):
 * one that goes either way at random costs more than any lookup. Every
 * rule is checked per lane; the caller has the scalar decoder redo any
 * lane that breaks one. */
#include "rans/lanes.h"

#ifdef QEM_HAVE_X86_SIMD

/* Independent 8-lane groups stepping together, to overlap their steps'
 * latencies; four spill registers and were no faster (doc/benchmarks.md). */
#define GROUPS_AVX2 2

__attribute__((target("avx2"), always_inline)) static inline __m256i
gather_avx2(const uint8_t *base, __m256i offset, const int by_loads)
{
    return by_loads ? gather_by_loads(base, offset)
                    : _mm256_i32gather_epi32((const int *)base, offset, 1);
}

/* A sparse row's table entry for `slot`, by compares (lanes.h). */
__attribute__((target("avx2"), always_inline)) static inline __m256i
entry_by_compares(__m256i slot, const __m256i *hv, const int head)
{
    __m256i e = hv[0];
    for (int k = 1; k < head; k++)
        e = _mm256_blendv_epi8(e, hv[k], _mm256_cmpgt_epi32(slot, hv[head + k - 1]));
    e = _mm256_add_epi32(e, _mm256_slli_epi32(slot, 11));
    const __m256i run = _mm256_add_epi32(_mm256_slli_epi32(slot, 21), hv[2 * head]);
    return _mm256_blendv_epi8(e, run, _mm256_cmpgt_epi32(slot, hv[2 * head - 1]));
}

/* Each 32-bit lane's bytes in reverse order: stream bytes, read little-
 * endian, become a big-endian buffer whose next byte is on top. */
__attribute__((target("avx2"), always_inline)) static inline __m256i swap_lane_bytes(__m256i w)
{
    return _mm256_shuffle_epi8(w, _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14,
                                                   13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8,
                                                   15, 14, 13, 12));
}

/* Each lane's buffer: the 4 stream bytes at pos, or at its end (with the
 * padding) for a lane that ran past it. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
load_buffers(const uint8_t *base, __m256i pos, __m256i end, const int by_loads)
{
    return swap_lane_bytes(gather_avx2(base, _mm256_min_epi32(pos, end), by_loads));
}

/* One rANS step of one 8-lane group, every rule checked per lane. The
 * renormalisation is branch-free: a state below LOW after the step needs
 * one byte, below 2^15 two (it is never below 2^13), so each lane takes
 * the top k bytes of its buffer, its stream's next bytes, which `refill`
 * first loads at pos. The bytes taken advance pos or, given `used`, are
 * counted there in bits. Returns the symbols; escapes_avx2 then handles
 * escapes. `head` (2..HEAD_MAX) picks entry_by_compares over the table. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
step_avx2(const int *slots, const uint8_t *base, __m256i *x, __m256i *pos, __m256i end,
          __m256i model, const int by_loads, const __m256i *hv, const int head, __m256i *buf,
          const int refill, __m256i *used)
{
    /* GCC turns a compare with a known constant into min and equal: two
     * instructions. Hidden behind an empty asm, the bounds stay one. */
    __m256i low = _mm256_set1_epi32((int32_t)QEM_RANS_LOW);
    __m256i low2 = _mm256_set1_epi32(1 << 15);
    __asm__("" : "+x"(low), "+x"(low2));
    const __m256i slot_mask = _mm256_set1_epi32((int32_t)(QEM_RANS_SCALE - 1));
    const __m256i m11 = _mm256_set1_epi32(2047), m10 = _mm256_set1_epi32(1023);
    const __m256i slot = _mm256_and_si256(*x, slot_mask);
    const __m256i e = head ? entry_by_compares(slot, hv, head)
                           : gather_avx2((const uint8_t *)slots,
                                         _mm256_slli_epi32(_mm256_add_epi32(model, slot), 2),
                                         by_loads);
    const __m256i sym = _mm256_srli_epi32(e, 21);
    *x = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_and_si256(e, m11), _mm256_srli_epi32(*x, QEM_RANS_SCALE_BITS)),
        _mm256_and_si256(_mm256_srli_epi32(e, 11), m10));
    /* A lane that runs past its end is caught at the end (its position
     * only grows, so it cannot come back to the end) and reads no further
     * than its end plus the padding meanwhile. */
    if (refill)
        *buf = load_buffers(base, *pos, end, by_loads);
    /* k = 0, 1 or 2 bytes (the compares give -1 where true). */
    const __m256i k = _mm256_sub_epi32(
        _mm256_setzero_si256(),
        _mm256_add_epi32(_mm256_cmpgt_epi32(low, *x), _mm256_cmpgt_epi32(low2, *x)));
    const __m256i bits = _mm256_slli_epi32(k, 3);
    const __m256i top = _mm256_srlv_epi32(*buf, _mm256_sub_epi32(_mm256_set1_epi32(32), bits));
    *buf = _mm256_sllv_epi32(*buf, bits);
    *x = _mm256_or_si256(_mm256_sllv_epi32(*x, bits), top);
    if (used)
        *used = _mm256_add_epi32(*used, bits);
    else
        *pos = _mm256_add_epi32(*pos, k);
    return sym;
}

/* Where a lane's next byte is when `used` bits of its buffer, loaded at
 * pos, are taken. */
__attribute__((target("avx2"), always_inline)) static inline __m256i lane_at(__m256i pos,
                                                                             __m256i used)
{
    return _mm256_add_epi32(pos, _mm256_srli_epi32(used, 3));
}

/* Loads every lane's buffer at its next byte (see decode_groups_avx2). */
__attribute__((target("avx2"), always_inline)) static inline void
refill_avx2(const uint8_t *base, __m256i *pos, const __m256i *end, __m256i *buf, __m256i *used,
            const unsigned groups, const int by_loads)
{
    for (unsigned g = 0; g < groups; g++) {
        pos[g] = lane_at(pos[g], used[g]);
        used[g] = _mm256_setzero_si256();
        buf[g] = load_buffers(base, pos[g], end[g], by_loads);
    }
}

/* The escapes of one step of every group (symbols in v[g]): one test for
 * all groups, as escapes are rare. An escaping lane takes its raw value
 * and reloads its buffer. */
__attribute__((target("avx2"), always_inline)) static inline void
escapes_avx2(const uint8_t *base, __m256i *v, __m256i *pos, const __m256i *end, __m256i maxv,
             __m256i *bad, __m256i *buf, const unsigned groups, const int by_loads,
             __m256i *used)
{
    const __m256i escape = _mm256_set1_epi32(QEM_RANS_ESCAPE);
    __m256i esc[GROUPS_AVX2], any = _mm256_setzero_si256();
    for (unsigned g = 0; g < groups; g++) {
        esc[g] = _mm256_cmpeq_epi32(v[g], escape);
        any = _mm256_or_si256(any, esc[g]);
    }
    if (!_mm256_movemask_epi8(any))
        return;
    for (unsigned g = 0; g < groups; g++) {
        /* Loads read every lane, inside its span's padding; only escaping
         * lanes keep their word: two raw bytes, then the two that refill
         * their buffer (with `used`: 2 of its 4 bytes left, used 16). */
        const __m256i now = used ? lane_at(pos[g], used[g]) : pos[g];
        const __m256i at = _mm256_min_epi32(now, end[g]);
        const __m256i word =
            by_loads ? gather_by_loads(base, at)
                     : _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)base, at,
                                                   esc[g], 1);
        const __m256i raw = _mm256_and_si256(word, _mm256_set1_epi32(65535));
        bad[g] = _mm256_or_si256(bad[g], _mm256_and_si256(esc[g], _mm256_cmpgt_epi32(raw, maxv)));
        if (used) {
            pos[g] = _mm256_blendv_epi8(pos[g], now, esc[g]);
            used[g] = _mm256_blendv_epi8(used[g], _mm256_set1_epi32(16), esc[g]);
        } else {
            pos[g] = _mm256_add_epi32(pos[g], _mm256_and_si256(esc[g], _mm256_set1_epi32(2)));
        }
        buf[g] = _mm256_blendv_epi8(
            buf[g], _mm256_slli_epi32(swap_lane_bytes(word), 16), esc[g]);
        v[g] = _mm256_blendv_epi8(v[g], raw, esc[g]);
    }
}

/* One sample of each lane, narrowed to 16 bits, in lane order. */
__attribute__((target("avx2"), always_inline)) static inline void
store_samples(uint16_t *to, const __m256i *v, const unsigned groups)
{
    if (groups == 1) {
        const __m256i p = _mm256_packus_epi32(v[0], _mm256_permute2x128_si256(v[0], v[0], 1));
        _mm_storeu_si128((__m128i *)to, _mm256_castsi256_si128(p));
        return;
    }
    for (unsigned g = 0; g + 1 < groups; g += 2) {
        /* packus interleaves 128-bit halves; the permute restores lane order. */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v[g], v[g + 1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(to + 8 * g), p);
    }
}

/* Up to 8 * groups rANS streams whose first 4 bytes and initial states
 * are valid, `groups` 8-lane groups stepping together. Offsets are
 * relative to `base`; every span lies within `base` plus QEM_SPAN_PADDING
 * readable bytes. Writes sample i of lane l to stage[i * pitch + l] for
 * all 8 * groups lanes (unused ones too) and returns a bit per lane that
 * must be decoded again (any rule broken). */
__attribute__((target("avx2"), always_inline)) static inline unsigned
decode_groups_avx2(const qem_rans_tables *t, const uint8_t *base, const qem_stream_job *const *job,
                   unsigned lanes, uint32_t n, uint32_t max_value, uint16_t *stage,
                   size_t pitch, const unsigned groups, const int by_loads, const int head)
{
    enum { W = LANES_AVX2 * GROUPS_AVX2 };
    int32_t x0[W], pos0[W], end0[W], model0[W];
    lanes_setup(base, job, lanes, LANES_AVX2 * groups, x0, pos0, end0, model0);
    __m256i hv[GROUPS_AVX2 * HEAD_VECTORS];
    if (head)
        head_setup(t, model0, LANES_AVX2 * groups, (unsigned)head, LANES_AVX2, (uint32_t *)hv);
    __m256i x[GROUPS_AVX2], pos[GROUPS_AVX2], end[GROUPS_AVX2], model[GROUPS_AVX2],
        bad[GROUPS_AVX2], v[GROUPS_AVX2];
#pragma GCC unroll 4
    for (unsigned g = 0; g < groups; g++) {
        x[g] = _mm256_loadu_si256((const __m256i *)(x0 + 8 * g));
        pos[g] = _mm256_loadu_si256((const __m256i *)(pos0 + 8 * g));
        end[g] = _mm256_loadu_si256((const __m256i *)(end0 + 8 * g));
        model[g] = _mm256_loadu_si256((const __m256i *)(model0 + 8 * g));
        bad[g] = _mm256_setzero_si256();
    }
    const __m256i maxv = _mm256_set1_epi32((int32_t)max_value);
    const int *slots = (const int *)&t->slot[0][0];
    /* Each lane's next stream bytes, at most 4 (an escape reloads its lane). */
    __m256i buf[GROUPS_AVX2] = {_mm256_setzero_si256()};
    if (head) {
        /* Sparse rows take a byte every few dozen samples: the buffers are
         * loaded only when some lane has fewer than the 2 bytes a step may
         * take, `used` counting the bits taken since each lane's buffer
         * was loaded at pos. */
        __m256i used[GROUPS_AVX2];
        for (unsigned g = 0; g < groups; g++) {
            used[g] = _mm256_setzero_si256();
            buf[g] = load_buffers(base, pos[g], end[g], by_loads);
        }
        const __m256i full = _mm256_set1_epi32(16);
        const __m256i escape = _mm256_set1_epi32(QEM_RANS_ESCAPE);
        for (uint32_t i = 0; i < n; i++) {
#pragma GCC unroll 4
            for (unsigned g = 0; g < groups; g++)
                v[g] = step_avx2(slots, base, &x[g], &pos[g], end[g], model[g], by_loads,
                                 hv + g * (2 * head + 1), head, &buf[g], 0, &used[g]);
            /* One test for this step's escapes and the next step's loads. */
            __m256i rare = _mm256_setzero_si256();
            for (unsigned g = 0; g < groups; g++)
                rare = _mm256_or_si256(rare, _mm256_or_si256(_mm256_cmpeq_epi32(v[g], escape),
                                                             _mm256_cmpgt_epi32(used[g], full)));
            if (_mm256_movemask_epi8(rare)) {
                escapes_avx2(base, v, pos, end, maxv, bad, buf, groups, by_loads, used);
                __m256i low = _mm256_setzero_si256();
                for (unsigned g = 0; g < groups; g++)
                    low = _mm256_or_si256(low, _mm256_cmpgt_epi32(used[g], full));
                if (_mm256_movemask_epi8(low))
                    refill_avx2(base, pos, end, buf, used, groups, by_loads);
            }
            store_samples(stage + (size_t)i * pitch, v, groups);
        }
        for (unsigned g = 0; g < groups; g++)
            pos[g] = lane_at(pos[g], used[g]);
    } else {
        /* Dense rows take a byte most steps: the buffers are loaded every
         * second step, as two steps take at most 4 bytes. */
        for (uint32_t i = 0; i < n; i += 2) {
#pragma GCC unroll 4
            for (unsigned g = 0; g < groups; g++)
                v[g] = step_avx2(slots, base, &x[g], &pos[g], end[g], model[g], by_loads,
                                 hv + g * (2 * head + 1), head, &buf[g], 1, NULL);
            escapes_avx2(base, v, pos, end, maxv, bad, buf, groups, by_loads, NULL);
            store_samples(stage + (size_t)i * pitch, v, groups);
            if (i + 1 == n)
                break;
#pragma GCC unroll 4
            for (unsigned g = 0; g < groups; g++)
                v[g] = step_avx2(slots, base, &x[g], &pos[g], end[g], model[g], by_loads,
                                 hv + g * (2 * head + 1), head, &buf[g], 0, NULL);
            escapes_avx2(base, v, pos, end, maxv, bad, buf, groups, by_loads, NULL);
            store_samples(stage + (size_t)(i + 1) * pitch, v, groups);
        }
    }
    /* Every byte used and the final state back at LOW. */
    uint64_t redo = 0;
    const __m256i low = _mm256_set1_epi32((int32_t)QEM_RANS_LOW);
    for (unsigned g = 0; g < groups; g++) {
        const __m256i ok = _mm256_and_si256(_mm256_cmpeq_epi32(pos[g], end[g]),
                                            _mm256_cmpeq_epi32(x[g], low));
        const __m256i b = _mm256_or_si256(bad[g], _mm256_xor_si256(ok, _mm256_set1_epi32(-1)));
        redo |= (uint64_t)(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(b)) << (8 * g);
    }
    return (unsigned)(redo & ((1ull << lanes) - 1u));
}

/* One instance per group count, gather kind and head size: each is an
 * AVX2 function of its own with its constants folded in. */
#define DECODE_GROUPS(groups, by_loads, head)                                                     \
    return decode_groups_avx2(t, base, job, lanes, n, max_value, stage, pitch, groups, by_loads, \
                              head)
#define DECODE_HEADS(groups, by_loads)                                                            \
    switch (lanes_head(t, job, lanes)) {                                                        \
    case 2: DECODE_GROUPS(groups, by_loads, 2);                                                 \
    case 3: DECODE_GROUPS(groups, by_loads, 3);                                                 \
    case 4: DECODE_GROUPS(groups, by_loads, 4);                                                 \
    case 5: DECODE_GROUPS(groups, by_loads, 5);                                                 \
    case 6: DECODE_GROUPS(groups, by_loads, 6);                                                 \
    case 7: DECODE_GROUPS(groups, by_loads, 7);                                                 \
    case 8: DECODE_GROUPS(groups, by_loads, 8);                                                 \
    default: DECODE_GROUPS(groups, by_loads, 0);                                                \
    }

__attribute__((target("avx2"))) static unsigned
decode_lanes_avx2(const qem_rans_tables *t, const uint8_t *base, const qem_stream_job *const *job,
                  unsigned lanes, uint32_t n, uint32_t max_value, uint16_t *stage, size_t pitch)
{
    if (lanes > LANES_AVX2) {
        DECODE_HEADS(2, 0)
    }
    DECODE_HEADS(1, 0)
}

__attribute__((target("avx2"))) static unsigned
decode_lanes_avx2_loads(const qem_rans_tables *t, const uint8_t *base,
                        const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                        uint32_t max_value, uint16_t *stage, size_t pitch)
{
    if (lanes > LANES_AVX2) {
        DECODE_HEADS(2, 1)
    }
    DECODE_HEADS(1, 1)
}

uint32_t qem_lanes_decode_avx2(const qem_rans_tables *t, const uint8_t *base,
                               const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                               uint32_t max_value, int by_loads, uint16_t *stage,
                               unsigned *stage_width)
{
    enum { W = LANES_AVX2 * GROUPS_AVX2 };
    /* A full set of neighbouring lanes is written straight into its tile:
     * no stage to copy. */
    const int direct = lanes == W && lanes_side_by_side(job, lanes);
    const unsigned width = lanes > LANES_AVX2 ? W : LANES_AVX2;
    *stage_width = direct ? 0 : width;
    uint16_t *to = direct ? job[0]->out : stage;
    const size_t pitch = direct ? job_stride(job[0]) : width;
    return by_loads ? decode_lanes_avx2_loads(t, base, job, lanes, n, max_value, to, pitch)
                    : decode_lanes_avx2(t, base, job, lanes, n, max_value, to, pitch);
}

#endif /* QEM_HAVE_X86_SIMD */
