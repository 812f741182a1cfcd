/* Decoding many count streams of one block at once. rANS streams run side
 * by side in SIMD lanes (8 with AVX2, 16 with AVX-512), one stream per
 * lane: table lookups and renormalisation bytes are gathered, states
 * advance together. With AVX2, sparse rows find their symbols by compares
 * instead of the table, and each lane's next stream bytes wait in a
 * 4-byte buffer, loaded every second step (dense rows) or when some lane
 * runs short (sparse rows, which take a byte every few dozen samples).
 * The only branches on the data are for rare events (escapes, a short
 * buffer): one that goes either way at random costs more than any lookup.
 * Every rule is checked per lane; a lane that breaks any of them is
 * decoded again by the scalar decoder, which names the rule, so all paths
 * return the same status and the same values. The path is chosen once per
 * table set from the CPU (QEM_RANS_PATH or the open option can force one);
 * the scalar path is the reference. */
#include <stdlib.h>
#include <string.h>

#include "common/transpose.h"
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
    /* Not AVX-512: its decoder has neither the branch-free renormalisation
     * nor the sparse rows' compares, which made the AVX2 ones 1.7-2.3x
     * faster, and no machine here could run it to port them. */
#ifdef QEM_HAVE_X86_SIMD
    /* Zen 1-3 issue one 8-lane gather per ~9.5 cycles; eight loads take ~6.5. */
    if (qem_rans_path_supported(QEM_RANS_PATH_AVX2_LOADS) && __builtin_cpu_is("amd"))
        return QEM_RANS_PATH_AVX2_LOADS;
#endif
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
/* Independent 8-lane groups stepping together, to overlap their steps'
 * latencies; four spill registers and were no faster (doc/benchmarks.md). */
#define GROUPS_AVX2 2

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

__attribute__((target("avx2"), always_inline)) static inline __m256i
gather_avx2(const uint8_t *base, __m256i offset, const int by_loads)
{
    return by_loads ? gather_by_loads(base, offset)
                    : _mm256_i32gather_epi32((const int *)base, offset, 1);
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

/* The constants entry_by_compares needs for `lanes` lanes of table rows
 * model0[l] / QEM_RANS_SCALE, `head` head symbols. */
static void head_setup(const qem_rans_tables *t, const int32_t *model0, unsigned lanes,
                       unsigned head, uint32_t hv[][8])
{
    for (unsigned l = 0; l < lanes; l++) {
        const unsigned m = (unsigned)model0[l] / QEM_RANS_SCALE;
        const unsigned g = l / 8, k8 = l % 8;
        for (unsigned k = 0; k < head; k++)
            hv[g * (2 * head + 1) + k][k8] =
                (k << 21) + qem_rans_frequencies[m][k] - ((uint32_t)t->start[m][k] << 11);
        for (unsigned k = 1; k <= head; k++)
            hv[g * (2 * head + 1) + head + k - 1][k8] = (uint32_t)t->start[m][k] - 1u;
        hv[g * (2 * head + 1) + 2 * head][k8] = ((head - (uint32_t)t->start[m][head]) << 21) + 1u;
    }
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
        head_setup(t, model0, LANES_AVX2 * groups, (unsigned)head, (uint32_t(*)[8])hv);
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

/* The largest head among the lanes' rows (entry_by_compares), 0 if any
 * row needs the table. */
static int lanes_head(const qem_rans_tables *t, const qem_stream_job *const *job, unsigned lanes)
{
    unsigned head = 2;
    for (unsigned l = 0; l < lanes; l++)
        head = t->head[job[l]->model] > head ? t->head[job[l]->model] : head;
    return head <= HEAD_MAX ? (int)head : 0;
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

#define LANES_AVX512 16

__attribute__((target("avx512f,avx2"))) static unsigned
decode_lanes_avx512(const qem_rans_tables *t, const uint8_t *base,
                    const qem_stream_job *const *job, unsigned lanes, uint32_t n,
                    uint32_t max_value, uint16_t *stage)
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
        /* Values fit 16 bits: narrowed, as the AVX2 path stores them. */
        _mm256_storeu_si256((__m256i *)(stage + (size_t)i * LANES_AVX512),
                            _mm512_cvtepi32_epi16(value));
    }
    bad |= _mm512_cmpneq_epi32_mask(pos, end) | _mm512_cmpneq_epi32_mask(x, low);
    return (unsigned)bad & ((1u << lanes) - 1u);
}

#endif /* QEM_HAVE_X86_SIMD */

static inline size_t job_stride(const qem_stream_job *j)
{
    return j->stride ? j->stride : 1;
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

/* 1 if the jobs' outputs are neighbours in one tile of scan rows:
 * job l's sample i at job[0]->out + i * stride + l. */
static int lanes_side_by_side(const qem_stream_job *const *job, unsigned lanes)
{
    const size_t stride = job_stride(job[0]);
    int side_by_side = stride > 1;
    for (unsigned l = 1; side_by_side && l < lanes; l++)
        side_by_side = job[l]->out == job[0]->out + l && job_stride(job[l]) == stride;
    return side_by_side;
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
        width = LANES_AVX2 * GROUPS_AVX2;
    else if (path == QEM_RANS_PATH_AVX512)
        width = LANES_AVX512;
#endif
    /* The scalar path decodes rANS streams bound for a row tile as columns,
     * eight at a time, and transposes them in. */
    const int scalar_rows = width == 1;
    if (scalar_rows)
        width = 8;
    /* Lanes waiting for a SIMD group: rANS streams whose header is sound. */
    const qem_stream_job *group[32], *raw_group[8];
    unsigned grouped = 0, raw_grouped = 0;
    uint16_t stage[32 * QEM_STREAM_MAX_SAMPLES], columns[8 * QEM_STREAM_MAX_SAMPLES];
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
        unsigned redo = 0;
        unsigned stage_width = width;
        int staged = 1;
#ifdef QEM_HAVE_X86_SIMD
        if (path == QEM_RANS_PATH_AVX512) {
            redo = decode_lanes_avx512(t, base, group, grouped, n, max_value, stage);
        } else {
            stage_width = grouped > LANES_AVX2 ? 2 * LANES_AVX2 : LANES_AVX2;
            /* A full set of neighbouring lanes is written straight into
             * its tile: no stage to copy. */
            staged = !(grouped == width && lanes_side_by_side(group, grouped));
            uint16_t *to = staged ? stage : group[0]->out;
            const size_t pitch = staged ? stage_width : job_stride(group[0]);
            redo = path == QEM_RANS_PATH_AVX2_LOADS
                       ? decode_lanes_avx2_loads(t, base, group, grouped, n, max_value, to, pitch)
                       : decode_lanes_avx2(t, base, group, grouped, n, max_value, to, pitch);
        }
#endif
        if (staged)
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
