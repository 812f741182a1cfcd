/* The AVX-512 lane decoder: the AVX2 one's steps (lanes_avx2.c) on 16
 * streams a vector, two vectors (32 streams) stepping together. Masks
 * replace the compares' vectors, a leading-zero count gives the bytes a
 * state takes, one concatenating shift (vpshldvd) moves them in from the
 * buffer, and the samples go straight to their columns of a tile by
 * permutations and masked stores, around the streams between them. */
#include "rans/lanes.h"

#ifdef QEM_HAVE_X86_SIMD

/* Where the AVX-512 decoder stores each lane in a row of 64 columns: in
 * window w (columns 32w .. 32w + 31), column c takes word lane[w][c] of
 * the lanes' 32-bit values (2l: lane l's low word) where mask[w] has bit c. */
typedef struct lane_columns {
    uint16_t lane[2][32];
    uint32_t mask[2];
} lane_columns;

/* Lanes in columns 0 .. lanes-1 (a stage). */
static void lane_columns_in_order(lane_columns *c, unsigned lanes)
{
    memset(c, 0, sizeof *c);
    for (unsigned l = 0; l < lanes; l++) {
        c->lane[0][l] = (uint16_t)(2 * l);
        c->mask[0] |= 1u << l;
    }
}

/* 1, filling *c, if the jobs' outputs lie in one tile of scan rows, in
 * order, within 64 columns of the first (others between them, such as
 * zero streams, keep theirs); else 0. */
static int lane_columns_in_tile(const qem_stream_job *const *job, unsigned lanes,
                                lane_columns *c)
{
    const size_t stride = job_stride(job[0]);
    if (stride <= 1)
        return 0;
    memset(c, 0, sizeof *c);
    for (unsigned l = 0; l < lanes; l++) {
        const ptrdiff_t at = job[l]->out - job[0]->out;
        if (job_stride(job[l]) != stride || at < 0 || at >= 64 ||
            (l && job[l]->out <= job[l - 1]->out))
            return 0;
        c->lane[at / 32][at % 32] = (uint16_t)(2 * l);
        c->mask[at / 32] |= 1u << (at % 32);
    }
    return 1;
}

#define GROUPS_AVX512 2
#define TARGET_AVX512 "avx512f,avx512bw,avx512cd,avx512vbmi2,avx2,bmi2"

/* Sixteen 4-byte words at byte offsets from `base`, by scalar loads. */
__attribute__((target(TARGET_AVX512), always_inline)) static inline __m512i
gather_by_loads512(const uint8_t *base, __m512i offset)
{
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(gather_by_loads(base, _mm512_castsi512_si256(offset))),
        gather_by_loads(base, _mm512_extracti64x4_epi64(offset, 1)), 1);
}

/* Each 32-bit lane's bytes in reverse order (see swap_lane_bytes). */
__attribute__((target(TARGET_AVX512), always_inline)) static inline __m512i
swap_lane_bytes512(__m512i w)
{
    return _mm512_shuffle_epi8(
        w, _mm512_set4_epi32(0x0c0d0e0f, 0x08090a0b, 0x04050607, 0x00010203));
}

/* Each lane's buffer (see load_buffers). Scalar loads: on Zen 4 they
 * beat vpgatherdd here by 3-5 % of a set B or H decode, though not for
 * the table's entries (doc/benchmarks.md). */
__attribute__((target(TARGET_AVX512), always_inline)) static inline __m512i
load_buffers512(const uint8_t *base, __m512i pos, __m512i end)
{
    return swap_lane_bytes512(gather_by_loads512(base, _mm512_min_epi32(pos, end)));
}

/* A sparse row's table entry for `slot`, by compares (lanes.h). */
__attribute__((target(TARGET_AVX512), always_inline)) static inline __m512i
entry_by_compares512(__m512i slot, const __m512i *hv, const int head)
{
    __m512i e = hv[0];
#pragma GCC unroll 8
    for (int k = 1; k < head; k++)
        e = _mm512_mask_mov_epi32(e, _mm512_cmpgt_epi32_mask(slot, hv[head + k - 1]), hv[k]);
    e = _mm512_add_epi32(e, _mm512_slli_epi32(slot, 11));
    const __m512i run = _mm512_add_epi32(_mm512_slli_epi32(slot, 21), hv[2 * head]);
    return _mm512_mask_mov_epi32(e, _mm512_cmpgt_epi32_mask(slot, hv[2 * head - 1]), run);
}

/* One rANS step of one 16-lane group, as step_avx2. A state after the
 * step lies in [2^13, 2^31): 1-8 leading zeros take no byte, 9-16 one,
 * 17-18 two, so (lzcnt - 1) & 24 is the bits to take. */
__attribute__((target(TARGET_AVX512), always_inline)) static inline __m512i
step_avx512(const int *slots, const uint8_t *base, __m512i *x, __m512i *pos, __m512i end,
            __m512i model, const __m512i *hv, const int head, __m512i *buf, const int refill,
            __m512i *used)
{
    const __m512i slot = _mm512_and_si512(*x, _mm512_set1_epi32((int32_t)(QEM_RANS_SCALE - 1)));
    const __m512i e = head ? entry_by_compares512(slot, hv, head)
                           : _mm512_i32gather_epi32(_mm512_add_epi32(model, slot), slots, 4);
    const __m512i sym = _mm512_srli_epi32(e, 21);
    *x = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(e, _mm512_set1_epi32(2047)),
                                             _mm512_srli_epi32(*x, QEM_RANS_SCALE_BITS)),
                          _mm512_and_si512(_mm512_srli_epi32(e, 11), _mm512_set1_epi32(1023)));
    if (refill)
        *buf = load_buffers512(base, *pos, end);
    const __m512i bits = _mm512_and_si512(
        _mm512_add_epi32(_mm512_lzcnt_epi32(*x), _mm512_set1_epi32(-1)), _mm512_set1_epi32(24));
    *x = _mm512_shldv_epi32(*x, *buf, bits);
    *buf = _mm512_sllv_epi32(*buf, bits);
    if (used)
        *used = _mm512_add_epi32(*used, bits);
    else
        *pos = _mm512_add_epi32(*pos, _mm512_srli_epi32(bits, 3));
    return sym;
}

/* Escapes of one step of every group, as escapes_avx2. */
__attribute__((target(TARGET_AVX512), always_inline)) static inline void
escapes_avx512(const uint8_t *base, __m512i *v, __m512i *pos, const __m512i *end, __m512i maxv,
               __mmask16 *bad, __m512i *buf, const unsigned groups, __m512i *used)
{
    const __m512i escape = _mm512_set1_epi32(QEM_RANS_ESCAPE);
#pragma GCC unroll 2
    for (unsigned g = 0; g < groups; g++) {
        const __mmask16 esc = _mm512_cmpeq_epi32_mask(v[g], escape);
        if (!esc)
            continue;
        const __m512i now =
            used ? _mm512_add_epi32(pos[g], _mm512_srli_epi32(used[g], 3)) : pos[g];
        const __m512i word = _mm512_mask_i32gather_epi32(
            _mm512_setzero_si512(), esc, _mm512_min_epi32(now, end[g]), base, 1);
        const __m512i raw = _mm512_and_si512(word, _mm512_set1_epi32(65535));
        bad[g] |= _mm512_mask_cmpgt_epi32_mask(esc, raw, maxv);
        if (used) {
            pos[g] = _mm512_mask_mov_epi32(pos[g], esc, now);
            used[g] = _mm512_mask_mov_epi32(used[g], esc, _mm512_set1_epi32(16));
        } else {
            pos[g] = _mm512_mask_add_epi32(pos[g], esc, pos[g], _mm512_set1_epi32(2));
        }
        buf[g] =
            _mm512_mask_mov_epi32(buf[g], esc, _mm512_slli_epi32(swap_lane_bytes512(word), 16));
        v[g] = _mm512_mask_mov_epi32(v[g], esc, raw);
    }
}

/* One sample of each lane, narrowed to 16 bits, to its column of a row:
 * two windows of 32 columns, each a permutation of the lanes' low words
 * (word 2l is lane l's) stored under a mask. */
__attribute__((target(TARGET_AVX512), always_inline)) static inline void
store_samples512(uint16_t *to, const __m512i *v, const unsigned groups, const __m512i *idx,
                 const __mmask32 *mask)
{
    for (int w = 0; w < 2; w++) {
        if (w && !mask[1])
            break;
        const __m512i row = groups == 2 ? _mm512_permutex2var_epi16(v[0], idx[w], v[1])
                                        : _mm512_permutexvar_epi16(idx[w], v[0]);
        _mm512_mask_storeu_epi16(to + 32 * w, mask[w], row);
    }
}

/* As decode_groups_avx2, with 16-lane groups; sample i of lane l goes to
 * row i (stage + i * pitch) at the column `columns` gives it. Two groups
 * hide most of a step's latency (one alone is 20-23 % slower); four spill
 * registers and were 5-12 % slower (doc/benchmarks.md). */
__attribute__((target(TARGET_AVX512), always_inline)) static inline unsigned
decode_groups_avx512(const qem_rans_tables *t, const uint8_t *base,
                     const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                     uint32_t max_value, uint16_t *stage, size_t pitch,
                     const lane_columns *columns, const unsigned groups, const int head)
{
    const __m512i idx[2] = {_mm512_loadu_si512(columns->lane[0]),
                            _mm512_loadu_si512(columns->lane[1])};
    const __mmask32 mask[2] = {columns->mask[0], columns->mask[1]};
    enum { W = LANES_AVX512 * GROUPS_AVX512 };
    int32_t x0[W], pos0[W], end0[W], model0[W];
    lanes_setup(base, job, lanes, LANES_AVX512 * groups, x0, pos0, end0, model0);
    __m512i hv[GROUPS_AVX512 * HEAD_VECTORS];
    if (head)
        head_setup(t, model0, LANES_AVX512 * groups, (unsigned)head, LANES_AVX512,
                   (uint32_t *)hv);
    __m512i x[GROUPS_AVX512], pos[GROUPS_AVX512], end[GROUPS_AVX512], model[GROUPS_AVX512],
        v[GROUPS_AVX512], buf[GROUPS_AVX512];
    __mmask16 bad[GROUPS_AVX512];
#pragma GCC unroll 2
    for (unsigned g = 0; g < groups; g++) {
        x[g] = _mm512_loadu_si512(x0 + 16 * g);
        pos[g] = _mm512_loadu_si512(pos0 + 16 * g);
        end[g] = _mm512_loadu_si512(end0 + 16 * g);
        model[g] = _mm512_loadu_si512(model0 + 16 * g);
        bad[g] = 0;
        buf[g] = _mm512_setzero_si512();
    }
    const __m512i maxv = _mm512_set1_epi32((int32_t)max_value);
    const __m512i escape = _mm512_set1_epi32(QEM_RANS_ESCAPE);
    const int *slots = (const int *)&t->slot[0][0];
    if (head) {
        /* Sparse rows: buffers loaded when some lane runs short. */
        __m512i used[GROUPS_AVX512];
#pragma GCC unroll 2
        for (unsigned g = 0; g < groups; g++) {
            used[g] = _mm512_setzero_si512();
            buf[g] = load_buffers512(base, pos[g], end[g]);
        }
        const __m512i full = _mm512_set1_epi32(16);
        for (uint32_t i = 0; i < n; i++) {
            __mmask16 rare = 0;
#pragma GCC unroll 2
            for (unsigned g = 0; g < groups; g++) {
                v[g] = step_avx512(slots, base, &x[g], &pos[g], end[g], model[g],
                                   hv + g * (2 * head + 1), head, &buf[g], 0, &used[g]);
                rare |= _mm512_cmpeq_epi32_mask(v[g], escape) |
                        _mm512_cmpgt_epi32_mask(used[g], full);
            }
            if (rare) {
                escapes_avx512(base, v, pos, end, maxv, bad, buf, groups, used);
                __mmask16 low = 0;
#pragma GCC unroll 2
                for (unsigned g = 0; g < groups; g++)
                    low |= _mm512_cmpgt_epi32_mask(used[g], full);
                if (low) {
#pragma GCC unroll 2
                    for (unsigned g = 0; g < groups; g++) {
                        pos[g] = _mm512_add_epi32(pos[g], _mm512_srli_epi32(used[g], 3));
                        used[g] = _mm512_setzero_si512();
                        buf[g] = load_buffers512(base, pos[g], end[g]);
                    }
                }
            }
            store_samples512(stage + (size_t)i * pitch, v, groups, idx, mask);
        }
#pragma GCC unroll 2
        for (unsigned g = 0; g < groups; g++)
            pos[g] = _mm512_add_epi32(pos[g], _mm512_srli_epi32(used[g], 3));
    } else {
        /* Dense rows: buffers loaded every second step. The two steps are
         * written out: as one loop of two, unrolled, GCC keeps the second
         * step's dead buffer shift and the decoder is 3 % slower. */
        for (uint32_t i = 0; i < n; i += 2) {
            __mmask16 esc = 0;
#pragma GCC unroll 2
            for (unsigned g = 0; g < groups; g++) {
                v[g] = step_avx512(slots, base, &x[g], &pos[g], end[g], model[g], hv, 0,
                                   &buf[g], 1, NULL);
                esc |= _mm512_cmpeq_epi32_mask(v[g], escape);
            }
            if (esc)
                escapes_avx512(base, v, pos, end, maxv, bad, buf, groups, NULL);
            store_samples512(stage + (size_t)i * pitch, v, groups, idx, mask);
            if (i + 1 == n)
                break;
            esc = 0;
#pragma GCC unroll 2
            for (unsigned g = 0; g < groups; g++) {
                v[g] = step_avx512(slots, base, &x[g], &pos[g], end[g], model[g], hv, 0,
                                   &buf[g], 0, NULL);
                esc |= _mm512_cmpeq_epi32_mask(v[g], escape);
            }
            if (esc)
                escapes_avx512(base, v, pos, end, maxv, bad, buf, groups, NULL);
            store_samples512(stage + (size_t)(i + 1) * pitch, v, groups, idx, mask);
        }
    }
    /* Every byte used and the final state back at LOW. */
    uint32_t redo = 0;
    const __m512i low = _mm512_set1_epi32((int32_t)QEM_RANS_LOW);
#pragma GCC unroll 2
    for (unsigned g = 0; g < groups; g++) {
        const __mmask16 ok =
            _mm512_cmpeq_epi32_mask(pos[g], end[g]) & _mm512_cmpeq_epi32_mask(x[g], low);
        redo |= (uint32_t)(uint16_t)(bad[g] | (__mmask16)~ok) << (16 * g);
    }
    return (unsigned)(redo & (uint32_t)((1ull << lanes) - 1u));
}

#define DECODE_GROUPS512(groups, head)                                                            \
    return decode_groups_avx512(t, base, job, lanes, n, max_value, stage, pitch, columns, groups, \
                                head)
#define DECODE_HEADS512(groups)                                                                   \
    switch (lanes_head(t, job, lanes)) {                                                        \
    case 2: DECODE_GROUPS512(groups, 2);                                                        \
    case 3: DECODE_GROUPS512(groups, 3);                                                        \
    case 4: DECODE_GROUPS512(groups, 4);                                                        \
    case 5: DECODE_GROUPS512(groups, 5);                                                        \
    case 6: DECODE_GROUPS512(groups, 6);                                                        \
    case 7: DECODE_GROUPS512(groups, 7);                                                        \
    case 8: DECODE_GROUPS512(groups, 8);                                                        \
    default: DECODE_GROUPS512(groups, 0);                                                       \
    }

__attribute__((target(TARGET_AVX512))) static unsigned
decode_lanes_avx512(const qem_rans_tables *t, const uint8_t *base,
                    const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                    uint32_t max_value, uint16_t *stage, size_t pitch,
                    const lane_columns *columns)
{
    if (lanes > LANES_AVX512) {
        DECODE_HEADS512(2)
    }
    DECODE_HEADS512(1)
}

uint32_t qem_lanes_decode_avx512(const qem_rans_tables *t, const uint8_t *base,
                                 const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                                 uint32_t max_value, uint16_t *stage, unsigned *stage_width)
{
    lane_columns placed;
    const int direct = lane_columns_in_tile(job, lanes, &placed);
    *stage_width = direct ? 0 : lanes > LANES_AVX512 ? 2 * LANES_AVX512 : LANES_AVX512;
    if (!direct)
        lane_columns_in_order(&placed, lanes);
    return decode_lanes_avx512(t, base, job, lanes, n, max_value, direct ? job[0]->out : stage,
                               direct ? job_stride(job[0]) : *stage_width, &placed);
}

#endif /* QEM_HAVE_X86_SIMD */
