/* The AVX-512 encode path: a band of up to 256 lanes of a block read
 * straight from the scan rows (no transpose), each lane's histogram,
 * extremes and sum in one pass, the model chosen as
 * qem_count_stream_encode chooses it (lane_plan_make), then every try of
 * 32 lanes' group rANS-encoded as jobs, 16 a vector, up to four vectors
 * stepping together backwards through the samples. Division by the
 * symbol's frequency runs in double precision, where it is exact for
 * these operands; renormalisation bytes and escapes go to each job's own
 * buffer by masked scatters. Plain streams are written from the rows. */
#include "common/transpose.h"
#include "rans/encode_lanes.h"

#ifdef QEM_HAVE_ENCODE_AVX512
#include <immintrin.h>
#include <string.h>

#define PREFETCH_ROWS 16
#define TARGET_ENCODE "avx512f,avx512bw,avx512vl,avx512dq"

int qem_encode_avx512_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

/* floor(x / f) for x < 2^31, 1 <= f <= 1024: a correctly rounded double
 * quotient never reaches the next integer, since x / f lies at least
 * 1/f below it, far above double's error at these magnitudes. */
__attribute__((target(TARGET_ENCODE), always_inline)) static inline __m512i
divide_u32(__m512i x, __m512i f)
{
    const __m512d xl = _mm512_cvtepu32_pd(_mm512_castsi512_si256(x));
    const __m512d xh = _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(x, 1));
    const __m512d fl = _mm512_cvtepu32_pd(_mm512_castsi512_si256(f));
    const __m512d fh = _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(f, 1));
    const __m256i ql = _mm512_cvttpd_epu32(_mm512_div_pd(xl, fl));
    const __m256i qh = _mm512_cvttpd_epu32(_mm512_div_pd(xh, fh));
    return _mm512_inserti64x4(_mm512_castsi256_si512(ql), qh, 1);
}

/* The table rows of 16 lanes, for a lookup without gathers (which cost
 * Zen 4 about two cycles a count): each distinct row's first 32 entries
 * are permuted by symbol and kept where its lanes are; escapes take each
 * lane's own 33rd entry. Neighbouring pixels share rows: a vector holds
 * 1 to 6 distinct rows in the benchmark sets. */
typedef struct lane_rows {
    unsigned distinct;
    const uint32_t *row[16];
    __mmask16 lanes[16];
    uint32_t escape[16];
} lane_rows;

static void lane_rows_make(const qem_rans_tables *t, const uint8_t *models, lane_rows *r)
{
    r->distinct = 0;
    for (unsigned k = 0; k < 16; k++) {
        const uint32_t *row = t->encode[models[k]];
        unsigned d = 0;
        while (d < r->distinct && r->row[d] != row)
            d++;
        if (d == r->distinct) {
            r->row[d] = row;
            r->lanes[d] = 0;
            r->distinct++;
        }
        r->lanes[d] |= (__mmask16)(1u << k);
        r->escape[k] = row[QEM_RANS_ESCAPE];
    }
}

/* Each lane's entry (freq | start << 16) for its symbol. */
__attribute__((target(TARGET_ENCODE), always_inline)) static inline __m512i
lane_rows_lookup(const lane_rows *r, __m512i sym, __mmask16 escaped)
{
    __m512i e = _mm512_loadu_si512(r->escape);
    for (unsigned d = 0; d < r->distinct; d++) {
        const __m512i found = _mm512_permutex2var_epi32(_mm512_loadu_si512(r->row[d]), sym,
                                                        _mm512_loadu_si512(r->row[d] + 16));
        e = _mm512_mask_mov_epi32(e, r->lanes[d] & (__mmask16)~escaped, found);
    }
    return e;
}

/* One rANS step of 16 lanes for sample value v (qem_rans_encode's loop
 * body): the escape's raw bytes, renormalisation, then the state update. */
__attribute__((target(TARGET_ENCODE), always_inline)) static inline void
encode_step(const lane_rows *rows, uint8_t *out, __m512i v, __m512i *x, __m512i *pos,
            const int escapes)
{
    const __m512i escape = _mm512_set1_epi32(QEM_RANS_ESCAPE);
    const __mmask16 esc = _mm512_cmpge_epu32_mask(v, escape);
    const __m512i e = lane_rows_lookup(rows, v, esc);
    if (escapes && esc) {
        /* The raw value as bytes pos-2, pos-1; the word's low half lands
         * below the cursor, where later bytes go. */
        *pos = _mm512_mask_sub_epi32(*pos, esc, *pos, _mm512_set1_epi32(2));
        _mm512_mask_i32scatter_epi32(out, esc, _mm512_sub_epi32(*pos, _mm512_set1_epi32(2)),
                                     _mm512_slli_epi32(v, 16), 1);
    }
    const __m512i f = _mm512_and_si512(e, _mm512_set1_epi32(0xffff));
    const __m512i bound = _mm512_slli_epi32(f, 21); /* (LOW >> SCALE_BITS << 8) * f */
    const __mmask16 m1 = _mm512_cmpge_epu32_mask(*x, bound);
    /* x's low byte at pos-1 and its next byte at pos-2 (kept only if a
     * second byte goes out). No branch: whether any lane renormalises is
     * a coin toss the predictor loses. */
    const __m512i x8 = _mm512_srli_epi32(*x, 8);
    const __m512i word = _mm512_or_si512(
        _mm512_slli_epi32(*x, 24), _mm512_slli_epi32(_mm512_and_si512(x8, _mm512_set1_epi32(255)), 16));
    _mm512_mask_i32scatter_epi32(out, m1, _mm512_sub_epi32(*pos, _mm512_set1_epi32(4)), word, 1);
    const __mmask16 m2 = m1 & _mm512_cmpge_epu32_mask(x8, bound);
    *pos = _mm512_mask_sub_epi32(*pos, m1, *pos, _mm512_set1_epi32(1));
    *pos = _mm512_mask_sub_epi32(*pos, m2, *pos, _mm512_set1_epi32(1));
    *x = _mm512_mask_mov_epi32(*x, m1, x8);
    *x = _mm512_mask_srli_epi32(*x, m2, *x, 8);
    const __m512i q = divide_u32(*x, f);
    const __m512i r = _mm512_sub_epi32(*x, _mm512_mullo_epi32(q, f));
    *x = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, QEM_RANS_SCALE_BITS), r),
                          _mm512_srli_epi32(e, 16));
}

/* The encodings one group asks for: job j encodes lane lane[j] with
 * table row model[j]. A lane whose plan tries two rows gives two jobs, so
 * that the second tries fill vectors instead of running in vectors of
 * their own at a fraction of their lanes. */
#define MAX_JOBS (2 * QEM_ENCODE_VECTOR_LANES)
typedef struct lane_jobs {
    unsigned count;
    int escapes; /* some job's lane holds a value of 32 or more */
    uint8_t lane[MAX_JOBS], model[MAX_JOBS];
} lane_jobs;

/* rANS-encodes the jobs in V (1 to 4, a constant so that the states stay
 * in registers) vectors of 16 stepping together; each step loads the
 * group's 32 lanes once and permutes them into the jobs' slots. Job j's
 * stream ends where ws->lane_out[j + 1] begins and starts at starts[j]
 * bytes into ws->lane_out. */
__attribute__((target(TARGET_ENCODE), always_inline)) static inline void
encode_run(const qem_rans_tables *t, const qem_lane_source *src, size_t first, unsigned count,
           const lane_jobs *jobs, const unsigned V, const int E, uint32_t n,
           qem_encode_workspace *ws, uint32_t *starts)
{
    uint8_t *out = &ws->lane_out[0][0];
    __m512i x[4], pos[4], slot[4];
    lane_rows rows[4];
    for (unsigned h = 0; h < V; h++) {
        uint32_t end[16];
        uint16_t lane[32] = {0};
        uint8_t model[16];
        for (unsigned k = 0; k < 16; k++) {
            /* Slots past the last job repeat the vector's first job. */
            const unsigned j = 16 * h + k < jobs->count ? 16 * h + k : 16 * h;
            end[k] = (uint32_t)((16 * h + k + 1) * LANE_SCRATCH_BYTES);
            lane[k] = jobs->lane[j];
            model[k] = jobs->model[j];
        }
        pos[h] = _mm512_loadu_si512(end);
        slot[h] = _mm512_loadu_si512(lane);
        lane_rows_make(t, model, &rows[h]);
        x[h] = _mm512_set1_epi32((int)QEM_RANS_LOW);
    }
    const __mmask32 mask = count >= 32 ? 0xffffffffu : (__mmask32)((1u << count) - 1);
    const size_t width = src->width, step = src->stride * width;
    const uint8_t *samples = (const uint8_t *)src->rows + first * width;
    /* Named states, not x[h]: GCC keeps an indexed array in memory. */
    __m512i x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
    __m512i pos0 = pos[0], pos1 = pos[1], pos2 = pos[2], pos3 = pos[3];
    for (uint32_t i = n; i-- > 0;) {
        const uint8_t *at = samples + (size_t)i * step;
        const __m512i group = width == 1 ? _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, at))
                                         : _mm512_maskz_loadu_epi16(mask, at);
#define JOBS_STEP(h, xh, posh)                                                                     \
    encode_step(&rows[h], out,                                                                     \
                _mm512_cvtepu16_epi32(                                                             \
                    _mm512_castsi512_si256(_mm512_permutexvar_epi16(slot[h], group))),            \
                &xh, &posh, E)
        JOBS_STEP(0, x0, pos0);
        if (V >= 2)
            JOBS_STEP(1, x1, pos1);
        if (V >= 3)
            JOBS_STEP(2, x2, pos2);
        if (V >= 4)
            JOBS_STEP(3, x3, pos3);
#undef JOBS_STEP
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    pos[0] = pos0, pos[1] = pos1, pos[2] = pos2, pos[3] = pos3;
    for (unsigned h = 0; h < V; h++) {
        pos[h] = _mm512_sub_epi32(pos[h], _mm512_set1_epi32(4));
        _mm512_i32scatter_epi32(out, pos[h], x[h], 1);
        _mm512_storeu_si512(starts + 16 * h, pos[h]);
    }
}

/* Kept out of line (as are the statistics, the plan and the plain
 * streams) so that a profile names each stage. */
__attribute__((target(TARGET_ENCODE), noinline)) static void
encode_jobs(const qem_rans_tables *t, const qem_lane_source *src, size_t first, unsigned count,
            const lane_jobs *jobs, uint32_t n, qem_encode_workspace *ws, uint32_t *starts)
{
    const unsigned vectors = (jobs->count + 15) / 16;
#define JOBS_RUN(V)                                                                                \
    (jobs->escapes ? encode_run(t, src, first, count, jobs, V, 1, n, ws, starts)                  \
                   : encode_run(t, src, first, count, jobs, V, 0, n, ws, starts))
    switch (vectors) {
    case 1: JOBS_RUN(1); break;
    case 2: JOBS_RUN(2); break;
    case 3: JOBS_RUN(3); break;
    default: JOBS_RUN(4); break;
    }
#undef JOBS_RUN
}

/* Each lane's histogram of min(value, 32), largest and smallest value,
 * reading the band's piece of each row whole (one page per row instead
 * of one per row and 32 lanes). Only lanes holding a count are counted
 * one by one; zeros are what the other bins leave. */
__attribute__((target(TARGET_ENCODE), noinline)) static void
lane_statistics(const qem_lane_source *src, size_t first, unsigned count, uint32_t n,
                qem_encode_workspace *ws)
{
    const unsigned vectors = (count + 31) / 32;
    const size_t width = src->width, step = src->stride * width;
    const uint8_t *rows = (const uint8_t *)src->rows + first * width;
    const __m512i escape = _mm512_set1_epi16(QEM_RANS_ESCAPE);
    memset(ws->hist, 0, (size_t)count * sizeof ws->hist[0]);
    for (unsigned h = 0; h < vectors; h++) {
        _mm512_storeu_si512(ws->vmax + 32 * h, _mm512_setzero_si512());
        _mm512_storeu_si512(ws->vmin + 32 * h, _mm512_set1_epi16(-1));
        _mm512_storeu_si512(ws->sum + 32 * h, _mm512_setzero_si512());
        _mm512_storeu_si512(ws->sum + 32 * h + 16, _mm512_setzero_si512());
    }
    uint16_t sym[32];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = rows + (size_t)i * step;
        /* The band a row apart: no prefetcher follows that. */
        for (unsigned line = 0; line < vectors * 32 * width; line += 64)
            _mm_prefetch((const char *)(at + PREFETCH_ROWS * step + line), _MM_HINT_T0);
        for (unsigned h = 0; h < vectors; h++) {
            const unsigned here = count - 32 * h;
            const __mmask32 mask = here >= 32 ? 0xffffffffu : (__mmask32)((1u << here) - 1);
            const uint8_t *p = at + (size_t)32 * h * width;
            const __m512i v = width == 1 ? _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, p))
                                         : _mm512_maskz_loadu_epi16(mask, p);
            __m512i *hi = (__m512i *)(ws->vmax + 32 * h), *lo = (__m512i *)(ws->vmin + 32 * h);
            _mm512_storeu_si512(hi, _mm512_max_epu16(_mm512_loadu_si512(hi), v));
            _mm512_storeu_si512(lo, _mm512_min_epu16(_mm512_loadu_si512(lo), v));
            /* 512 samples of 16 bits stay below 2^25. */
            __m512i *sum = (__m512i *)(ws->sum + 32 * h);
            _mm512_storeu_si512(sum, _mm512_add_epi32(_mm512_loadu_si512(sum),
                                                      _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v))));
            _mm512_storeu_si512(sum + 1,
                                _mm512_add_epi32(_mm512_loadu_si512(sum + 1),
                                                 _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1))));
            uint32_t held = _mm512_test_epi16_mask(v, v);
            if (!held)
                continue;
            _mm512_storeu_si512(sym, _mm512_min_epu16(v, escape));
            uint16_t (*hist)[QEM_RANS_SYMBOLS + 3] = ws->hist + 32 * h;
            if (__builtin_popcount(held) > 12) {
                for (unsigned k = 0; k < 32; k++)
                    hist[k][sym[k]]++;
            } else {
                for (; held; held &= held - 1)
                    hist[__builtin_ctz(held)][sym[__builtin_ctz(held)]]++;
            }
        }
    }
    /* The dense loop counted zeros too; recount bin 0 from the others. */
    for (unsigned k = 0; k < count; k++) {
        uint32_t others = 0;
        for (unsigned b = 1; b < QEM_RANS_SYMBOLS; b++)
            others += ws->hist[k][b];
        ws->hist[k][0] = (uint16_t)(n - others);
    }
}

/* The sparse and raw lanes' streams, in one pass over the rows: events
 * only where a sparse lane holds a count. */
__attribute__((target(TARGET_ENCODE), noinline)) static void
write_plain_lanes(const qem_lane_source *src, size_t first, unsigned count, uint32_t n,
                  const lane_plan *plan, uint8_t *const *dst)
{
    uint32_t sparse = 0, raw = 0;
    for (unsigned k = 0; k < count; k++) {
        sparse |= (uint32_t)(plan[k].model == QEM_MODEL_SPARSE) << k;
        raw |= (uint32_t)(plan[k].model == QEM_MODEL_RAW) << k;
    }
    if (!sparse && !raw)
        return;
    const size_t width = src->width;
    /* Raw lanes eight side by side (the float codec's noisy halves): their
     * streams are the rows' columns, by 8x8 transposes of whole samples. */
    const uint32_t n8 = n / 8 * 8;
    for (unsigned k = 0; width == 2 && k + 8 <= count; k++) {
        if (((raw >> k) & 0xffu) != 0xffu)
            continue;
        const uint16_t *column = (const uint16_t *)src->rows + first + k;
        for (uint32_t i = 0; i < n8; i += 8) {
            __m128i c[8];
            qem_transpose8x8_u16(column + (size_t)i * src->stride, src->stride, c);
            for (unsigned l = 0; l < 8; l++)
                _mm_storeu_si128((__m128i *)(dst[k + l] + 2 * i), c[l]);
        }
        for (unsigned l = 0; l < 8; l++)
            for (uint32_t i = n8; i < n; i++) {
                const uint16_t v = column[(size_t)i * src->stride + l];
                dst[k + l][2 * i] = (uint8_t)(v & 255);
                dst[k + l][2 * i + 1] = (uint8_t)(v >> 8);
            }
        raw &= ~(0xffu << k);
        k += 7;
    }
    if (!sparse && !raw)
        return;
    const __mmask32 mask = count >= 32 ? 0xffffffffu : (__mmask32)((1u << count) - 1);
    const uint8_t *rows = (const uint8_t *)src->rows + first * width;
    uint32_t cursor[QEM_ENCODE_LANES] = {0};
    uint16_t value[32];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = rows + (size_t)i * src->stride * width;
        const __m512i v = width == 1 ? _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(mask, at))
                                     : _mm512_maskz_loadu_epi16(mask, at);
        uint32_t events = _mm512_test_epi16_mask(v, v) & sparse;
        if (!(events | raw))
            continue;
        _mm512_storeu_si512(value, v);
        for (; events; events &= events - 1) {
            const unsigned k = (unsigned)__builtin_ctz(events);
            const uint32_t e = (i << 7) | (uint32_t)(value[k] - 1);
            dst[k][cursor[k]++] = (uint8_t)(e & 255);
            dst[k][cursor[k]++] = (uint8_t)(e >> 8);
        }
        for (uint32_t r = raw; r; r &= r - 1) {
            const unsigned k = (unsigned)__builtin_ctz(r);
            dst[k][2 * i] = (uint8_t)(value[k] & 255);
            dst[k][2 * i + 1] = (uint8_t)(value[k] >> 8);
        }
    }
}

/* The choice qem_count_stream_encode makes before encoding, step for
 * step, from the lane's histogram of min(value, 32) and its extremes: the
 * 64 rows' estimated bits in four vectors, the first smallest taken. */
__attribute__((target(TARGET_ENCODE), noinline)) static void
lane_plan_make(const qem_rans_tables *t, const uint16_t *hist, uint32_t vmax, uint32_t vmin,
               uint32_t n, lane_plan *plan)
{
    plan->attempts = 0;
    if (vmax == vmin) {
        plan->model = vmax == 0 ? QEM_MODEL_ZERO : QEM_MODEL_CONSTANT;
        plan->bytes = vmax == 0 ? 0 : 2;
        return;
    }
    plan->bytes = 2 * n;
    plan->model = QEM_MODEL_RAW;
    const uint32_t nonzero = n - hist[0];
    if (vmax <= 128 && n <= QEM_STREAM_MAX_SAMPLES && 2 * nonzero <= plan->bytes) {
        plan->bytes = 2 * nonzero;
        plan->model = QEM_MODEL_SPARSE;
    }
    __m512i bits[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                       _mm512_setzero_si512()};
    uint64_t capped = 0;
    for (unsigned s = 0; s < QEM_RANS_SYMBOLS; s++) {
        if (!hist[s])
            continue;
        capped += (uint64_t)hist[s] * s;
        const __m512i c = _mm512_set1_epi32(hist[s]);
        for (unsigned q = 0; q < 4; q++)
            bits[q] = _mm512_add_epi32(
                bits[q], _mm512_mullo_epi32(c, _mm512_loadu_si512(t->cost_by_symbol[s] + 16 * q)));
    }
    const __m512i least = _mm512_min_epu32(_mm512_min_epu32(bits[0], bits[1]),
                                           _mm512_min_epu32(bits[2], bits[3]));
    const uint32_t best_bits = _mm512_reduce_min_epu32(least);
    const __m512i b = _mm512_set1_epi32((int)best_bits);
    const uint64_t at = (uint64_t)_mm512_cmpeq_epi32_mask(bits[0], b) |
                        (uint64_t)_mm512_cmpeq_epi32_mask(bits[1], b) << 16 |
                        (uint64_t)_mm512_cmpeq_epi32_mask(bits[2], b) << 32 |
                        (uint64_t)_mm512_cmpeq_epi32_mask(bits[3], b) << 48;
    const unsigned m_best = (unsigned)__builtin_ctzll(at);
    const uint64_t byte_units = 8ull << 16;
    if (best_bits / byte_units + 2 >= plan->bytes)
        return;
    plan->tried[0] = (uint8_t)m_best;
    plan->attempts = 1;
    const unsigned reference = n == QEM_STREAM_MAX_SAMPLES ? t->reference_model_512[capped]
                                                           : qem_reference_rans_model_of_sum(capped, n);
    uint32_t all[QEM_RANS_MODELS];
    for (unsigned q = 0; q < 4; q++)
        _mm512_storeu_si512(all + 16 * q, bits[q]);
    if (reference != m_best && all[reference] < (uint64_t)best_bits + 3 * byte_units) {
        plan->tried[1] = (uint8_t)reference;
        plan->attempts = 2;
    }
}

/* Lanes first .. first + count - 1 (count <= 32), statistics taken. */
__attribute__((target(TARGET_ENCODE))) static void
encode_group(const qem_rans_tables *t, const qem_lane_source *src, size_t first, unsigned count,
             uint32_t n, uint8_t *const *dst, uint32_t *lengths, uint8_t *models,
             qem_encode_workspace *ws, size_t band_lane)
{
    lane_plan plan[QEM_ENCODE_VECTOR_LANES];
    for (unsigned k = 0; k < count; k++)
        lane_plan_make(t, ws->hist[band_lane + k], ws->vmax[band_lane + k],
                      ws->vmin[band_lane + k], n, &plan[k]);
    /* Every try of every lane as one list of jobs, vectors filled in
     * order; then each lane keeps its tries in the reference's order. */
    lane_jobs jobs = {0, 0, {0}, {0}};
    unsigned job_of[QEM_ENCODE_VECTOR_LANES][2];
    for (unsigned attempt = 0; attempt < 2; attempt++)
        for (unsigned k = 0; k < count; k++)
            if (plan[k].attempts > attempt) {
                job_of[k][attempt] = jobs.count;
                jobs.lane[jobs.count] = (uint8_t)k;
                jobs.model[jobs.count++] = plan[k].tried[attempt];
                jobs.escapes |= ws->vmax[band_lane + k] >= QEM_RANS_ESCAPE;
            }
    if (jobs.count) {
        uint32_t starts[MAX_JOBS];
        encode_jobs(t, src, first, count, &jobs, n, ws, starts);
        for (unsigned k = 0; k < count; k++)
            for (unsigned attempt = 0; attempt < plan[k].attempts; attempt++) {
                const unsigned j = job_of[k][attempt];
                const uint32_t len = (uint32_t)((j + 1) * LANE_SCRATCH_BYTES) - starts[j];
                if (len < plan[k].bytes) {
                    plan[k].bytes = len;
                    plan[k].model = jobs.model[j];
                    memcpy(dst[k], &ws->lane_out[0][0] + starts[j], len);
                }
            }
    }
    write_plain_lanes(src, first, count, n, plan, dst);
    for (unsigned k = 0; k < count; k++) {
        if (plan[k].model == QEM_MODEL_CONSTANT)
            qem_lane_write_plain(src, first + k, n, &plan[k], dst[k]);
        lengths[k] = plan[k].bytes;
        models[k] = plan[k].model;
    }
}

__attribute__((target(TARGET_ENCODE))) void
qem_count_streams_encode_avx512(const qem_rans_tables *t, const qem_lane_source *src,
                                size_t first, unsigned count, uint32_t n, uint8_t *const *dst,
                                uint32_t *lengths, uint8_t *models, uint32_t *sums,
                                qem_encode_workspace *ws)
{
    lane_statistics(src, first, count, n, ws);
    if (sums)
        memcpy(sums, ws->sum, (size_t)count * sizeof *sums);
    for (unsigned g = 0; g < count; g += QEM_ENCODE_VECTOR_LANES) {
        const unsigned here = count - g < QEM_ENCODE_VECTOR_LANES ? count - g
                                                                 : QEM_ENCODE_VECTOR_LANES;
        encode_group(t, src, first + g, here, n, dst + g, lengths + g, models + g, ws, g);
    }
}

#endif
