/* Selected-pixel reductions of .qem count streams (integer counts or
 * scaled codes), the products' fast path: only the streams of pixels with
 * a nonzero weight are decoded, and an 8x8 or 32x32 tile is taken from the
 * spatial sums when that leaves fewer streams to decode: c times the tile's
 * sum, with the tile's other valid pixels decoded at their weight minus c
 * (a tile mostly inside a mask costs only its outside pixels). The spatial index is trusted here as the counts are; `qem
 * verify` proves the two agree. */
#include <stdlib.h>
#include <string.h>

#include "common/bitpack.h"
#include "common/error.h"
#include "common/fileio.h"
#include "qem/column_cache.h"
#include "qem/packed_copy.h"
#include "qem/qem_internal.h"
#include "rans/rans.h"

#define PIXEL_GROUP 64

/* The plan of one call: per plane, the tiles taken whole and each pixel's
 * weight for decoding (0 where a tile covers it). */
typedef struct select_plan {
    unsigned planes;
    uint64_t *decode;      /* pixels whose stream must be decoded */
    uint64_t decode_count;
    int32_t *weight;       /* decode_count x planes */
    uint32_t *tile_field;  /* per plane: tiles taken whole */
    int32_t *tile_weight;
    uint64_t *tile_count;  /* planes */
    uint64_t tile_stride;  /* fields */
} select_plan;

static void plan_free(select_plan *sp)
{
    free(sp->decode);
    free(sp->weight);
    free(sp->tile_field);
    free(sp->tile_weight);
    free(sp->tile_count);
}

static int compare_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Considers the tile at (r0, c0) of side `size` for `residual` (one plane's
 * weights still to be applied): with c its most frequent nonzero residual
 * among valid pixels, taking the tile (c times its spatial sum) leaves
 * residual - c on its valid pixels. Taken only when that leaves fewer
 * pixels to decode: a tile mostly inside a mask costs only its outside
 * pixels, at weight -c. Returns c, or 0 when not worth it. `scratch`
 * holds size * size values. */
static int32_t tile_gain(const qem_file *f, int32_t *residual, uint64_t r0, uint64_t c0,
                         uint64_t size, int32_t *scratch)
{
    const qem_geometry *g = &f->geometry;
    uint64_t n = 0, nonzero = 0;
    for (uint64_t r = r0; r < r0 + size && r < g->rows; r++)
        for (uint64_t c = c0; c < c0 + size && c < g->columns; c++) {
            const uint64_t p = r * g->columns + c;
            if (!f->valid[p])
                continue;
            scratch[n++] = residual[p];
            nonzero += residual[p] != 0;
        }
    /* Taking leaves n - best >= n - nonzero pixels, which beats nonzero
     * only when most pixels are nonzero: a detector move's thin ring of
     * changed pixels never is, and needs no sort. */
    if (2 * nonzero <= n)
        return 0;
    qsort(scratch, (size_t)n, sizeof *scratch, compare_i32);
    int32_t mode = 0;
    uint64_t best = 0;
    for (uint64_t i = 0; i < n;) {
        uint64_t j = i;
        while (j < n && scratch[j] == scratch[i])
            j++;
        if (scratch[i] != 0 && j - i > best) {
            best = j - i;
            mode = scratch[i];
        }
        i = j;
    }
    /* After taking: valid pixels whose residual differs from the mode. */
    if (n - best >= nonzero)
        return 0;
    for (uint64_t r = r0; r < r0 + size && r < g->rows; r++)
        for (uint64_t c = c0; c < c0 + size && c < g->columns; c++) {
            const uint64_t p = r * g->columns + c;
            if (f->valid[p])
                residual[p] -= mode;
        }
    return mode;
}

static qem_status plan_make(const qem_file *f, const int32_t *const *w, unsigned planes,
                            int use_tiles, select_plan *sp, qem_error *error)
{
    const qem_geometry *g = &f->geometry;
    const uint64_t P = f->pixels, F = g->fields;
    memset(sp, 0, sizeof *sp);
    sp->planes = planes;
    sp->tile_stride = F;
    int32_t *residual = malloc((size_t)(P * planes) * sizeof *residual);
    int32_t *scratch = malloc(32 * 32 * sizeof *scratch);
    sp->tile_field = malloc((size_t)(F * planes) * sizeof *sp->tile_field);
    sp->tile_weight = malloc((size_t)(F * planes) * sizeof *sp->tile_weight);
    sp->tile_count = calloc(planes, sizeof *sp->tile_count);
    sp->decode = malloc((size_t)P * sizeof *sp->decode);
    sp->weight = malloc((size_t)(P * planes) * sizeof *sp->weight);
    if (!residual || !scratch || !sp->tile_field || !sp->tile_weight || !sp->tile_count ||
        !sp->decode || !sp->weight) {
        free(residual);
        free(scratch);
        plan_free(sp);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory planning a detector reduction");
    }
    /* Invalid pixels never count: their weight is zero from the start. */
    for (unsigned k = 0; k < planes; k++)
        for (uint64_t p = 0; p < P; p++)
            residual[(uint64_t)k * P + p] = f->valid[p] ? w[k][p] : 0;
    for (unsigned k = 0; use_tiles && k < planes; k++) {
        int32_t *res = residual + (uint64_t)k * P;
        /* 32x32 tiles first, then 8x8 tiles on what remains. */
        for (uint64_t t = 0; t < g->fields32; t++) {
            const uint64_t r0 = (t / g->tile32_columns) * 32, c0 = (t % g->tile32_columns) * 32;
            const int32_t c = tile_gain(f, res, r0, c0, 32, scratch);
            if (c) {
                sp->tile_field[k * F + sp->tile_count[k]] = (uint32_t)(g->fields8 + t);
                sp->tile_weight[k * F + sp->tile_count[k]++] = c;
            }
        }
        for (uint64_t t = 0; t < g->fields8; t++) {
            const uint64_t r0 = (t / g->tile8_columns) * 8, c0 = (t % g->tile8_columns) * 8;
            const int32_t c = tile_gain(f, res, r0, c0, 8, scratch);
            if (c) {
                sp->tile_field[k * F + sp->tile_count[k]] = (uint32_t)t;
                sp->tile_weight[k * F + sp->tile_count[k]++] = c;
            }
        }
    }
    for (uint64_t p = 0; p < P; p++) {
        int needed = 0;
        for (unsigned k = 0; k < planes; k++) {
            const int32_t d = residual[(uint64_t)k * P + p];
            sp->weight[sp->decode_count * planes + k] = d;
            needed |= d != 0;
        }
        if (needed)
            sp->decode[sp->decode_count++] = p;
    }
    free(residual);
    free(scratch);
    return QEM_OK;
}

/* A plan kept by the file (qem_file.last_plan) and shared by the calls
 * that use it: each holds a reference, as does the file. */
typedef struct select_cached_plan {
    select_plan plan;
    int32_t *weights; /* planes x pixels, as asked for */
    unsigned planes;
    int use_tiles;
    int refs; /* under plan_lock */
    /* Pixels whose decoded columns the file keeps (f->columns), pinned
     * for the plan's life, with their weights (hit_count x planes): read,
     * not decoded. The plan's decode list holds the others. */
    qem_column **hit;
    int32_t *hit_weight;
    uint64_t hit_count;
    /* Per decoded pixel, a column being filled or NULL: the calls that
     * continue the scans in order from 0 (a product's pieces) fill them,
     * and the call that reaches the last scan lists them. Under plan_lock:
     * fill_next (UINT64_MAX once given up) and fill_busy. */
    qem_column **fill;
    uint64_t fill_next;
    int fill_busy;
} select_cached_plan;

/* The plan's columns being filled, given up (their pins released). */
static void fill_drop(qem_file *f, qem_column **fill, uint64_t n)
{
    for (uint64_t j = 0; fill && j < n; j++)
        qem_column_release(&f->columns, fill[j]);
    free(fill);
}

static void plan_release(qem_file *f, select_cached_plan *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&f->plan_lock);
    const int last = --c->refs == 0;
    pthread_mutex_unlock(&f->plan_lock);
    if (last) {
        fill_drop(f, c->fill, c->plan.decode_count);
        for (uint64_t j = 0; j < c->hit_count; j++)
            qem_column_release(&f->columns, c->hit[j]);
        free(c->hit);
        free(c->hit_weight);
        plan_free(&c->plan);
        free(c->weights);
        free(c);
    }
}

/* Splits a new plan's decode list by the file's kept columns: kept ones
 * become hits, the others stay to be decoded, with a column to fill for
 * as many as the cache holds when `fill` (the call starts at scan 0, so
 * its pieces can cover every scan). Without memory for the lists the plan
 * simply decodes everything. */
static void plan_columns(qem_file *f, select_cached_plan *c, int fill)
{
    select_plan *sp = &c->plan;
    const unsigned K = sp->planes;
    if (!f->columns.limit || !sp->decode_count)
        return;
    c->hit = malloc((size_t)sp->decode_count * sizeof *c->hit);
    c->hit_weight = malloc((size_t)(sp->decode_count * K) * sizeof *c->hit_weight);
    c->fill = calloc((size_t)sp->decode_count, sizeof *c->fill);
    if (!c->hit || !c->hit_weight || !c->fill) {
        free(c->hit);
        free(c->hit_weight);
        free(c->fill);
        c->hit = NULL;
        c->hit_weight = NULL;
        c->fill = NULL;
        return;
    }
    /* Hits first: pinned, they cannot make room for this plan's fills. */
    uint64_t kept = 0, filling = 0;
    for (uint64_t j = 0; j < sp->decode_count; j++) {
        const uint64_t p = sp->decode[j];
        qem_column *k = qem_column_take(&f->columns, p);
        if (k) {
            c->hit[c->hit_count] = k;
            memcpy(c->hit_weight + c->hit_count * K, sp->weight + j * K, K * sizeof *sp->weight);
            c->hit_count++;
            continue;
        }
        sp->decode[kept] = p;
        memmove(sp->weight + kept * K, sp->weight + j * K, K * sizeof *sp->weight);
        kept++;
    }
    sp->decode_count = kept;
    for (uint64_t j = 0; fill && j < kept; j++)
        filling += (c->fill[j] = qem_column_new(&f->columns, sp->decode[j])) != NULL;
    if (!filling) {
        free(c->fill);
        c->fill = NULL;
    }
}

/* A file found changed: its kept columns go, and so does its kept plan,
 * which pins some of them. */
static void columns_forget(qem_file *f)
{
    qem_column_cache_clear(&f->columns);
    pthread_mutex_lock(&f->plan_lock);
    select_cached_plan *old = f->last_plan;
    f->last_plan = NULL;
    pthread_mutex_unlock(&f->plan_lock);
    plan_release(f, old);
}

/* Whether this call fills the plan's columns: it must start where the
 * last filling call ended, and no other call be filling. */
static int fill_claim(qem_file *f, select_cached_plan *c, uint64_t first)
{
    pthread_mutex_lock(&f->plan_lock);
    const int mine = c->fill && !c->fill_busy && c->fill_next == first;
    if (mine)
        c->fill_busy = 1;
    pthread_mutex_unlock(&f->plan_lock);
    return mine;
}

/* After a filling call: the columns advance by its scans, are listed
 * when complete, or are given up when it failed. */
static void fill_end(qem_file *f, select_cached_plan *c, uint64_t count, int ok)
{
    qem_column **done = NULL;
    pthread_mutex_lock(&f->plan_lock);
    c->fill_busy = 0;
    c->fill_next = ok ? c->fill_next + count : UINT64_MAX;
    if (!ok || c->fill_next == f->scans) {
        done = c->fill;
        c->fill = NULL;
    }
    pthread_mutex_unlock(&f->plan_lock);
    if (!done)
        return;
    if (!ok) {
        fill_drop(f, done, c->plan.decode_count);
        return;
    }
    for (uint64_t j = 0; j < c->plan.decode_count; j++)
        if (done[j])
            qem_column_publish(&f->columns, done[j]);
    free(done);
}

void qem_select_plan_drop(qem_file *f)
{
    select_cached_plan *c = f->last_plan;
    f->last_plan = NULL;
    plan_release(f, c);
}

/* The plan for these weights: the file's kept one when its weights are
 * the same (a product's later pieces), else a new one, which the file
 * then keeps. Release it with plan_release. */
static qem_status plan_get(qem_file *f, const int32_t *const *w, unsigned planes, int use_tiles,
                           int from_start, select_cached_plan **out, qem_error *error)
{
    const uint64_t P = f->pixels;
    pthread_mutex_lock(&f->plan_lock);
    select_cached_plan *c = f->last_plan;
    int same = c && c->planes == planes && c->use_tiles == use_tiles;
    for (unsigned k = 0; same && k < planes; k++)
        same = memcmp(c->weights + (uint64_t)k * P, w[k], (size_t)P * sizeof *w[k]) == 0;
    if (same)
        c->refs++;
    pthread_mutex_unlock(&f->plan_lock);
    if (same) {
        *out = c;
        return QEM_OK;
    }
    c = calloc(1, sizeof *c);
    if (c)
        c->weights = malloc((size_t)(P * planes) * sizeof *c->weights);
    if (!c || !c->weights) {
        free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory planning a detector reduction");
    }
    for (unsigned k = 0; k < planes; k++)
        memcpy(c->weights + (uint64_t)k * P, w[k], (size_t)P * sizeof *w[k]);
    c->planes = planes;
    c->use_tiles = use_tiles;
    const qem_status st = plan_make(f, w, planes, use_tiles, &c->plan, error);
    if (st != QEM_OK) {
        free(c->weights);
        free(c);
        return st;
    }
    plan_columns(f, c, from_start);
    c->refs = 2; /* the caller's and the file's */
    pthread_mutex_lock(&f->plan_lock);
    select_cached_plan *old = f->last_plan;
    f->last_plan = c;
    pthread_mutex_unlock(&f->plan_lock);
    plan_release(f, old);
    *out = c;
    return QEM_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEM_SELECT_AVX2 1

/* dst[k][i - lo] += sum over j < m of w[k][j] * tile[i * m + j], i in
 * [lo, hi), for `planes` (1-4) planes in one pass over the tile: exact in
 * 64 bits, four pixels per step (the weights are int32, so the signed
 * 32 x 32 -> 64 multiply of each lane's low half is exact). */
__attribute__((target("avx2"), always_inline)) static inline void
dot_rows_planes(const uint16_t *tile, uint64_t m, uint32_t lo, uint32_t hi,
                const int64_t (*w)[PIXEL_GROUP], int64_t *const *dst, const unsigned planes)
{
    const uint64_t m4 = m / 4 * 4;
    for (uint32_t i = lo; i < hi; i++) {
        const uint16_t *row = tile + (size_t)i * m;
        __m256i acc[4];
        for (unsigned k = 0; k < planes; k++)
            acc[k] = _mm256_setzero_si256();
        for (uint64_t j = 0; j < m4; j += 4) {
            const __m256i v = _mm256_cvtepu16_epi64(_mm_loadl_epi64((const __m128i *)(row + j)));
            for (unsigned k = 0; k < planes; k++)
                acc[k] = _mm256_add_epi64(
                    acc[k], _mm256_mul_epi32(v, _mm256_loadu_si256((const __m256i *)(w[k] + j))));
        }
        for (unsigned k = 0; k < planes; k++) {
            const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(acc[k]),
                                            _mm256_extracti128_si256(acc[k], 1));
            int64_t sum = _mm_cvtsi128_si64(h) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(h, h));
            for (uint64_t j = m4; j < m; j++)
                sum += w[k][j] * row[j];
            dst[k][i - lo] += sum;
        }
    }
}

/* Weights this small (CoM's coordinates on detectors up to 4096 wide,
 * masks) take the 16-bit path below. */
#define NARROW_WEIGHT 4095

/* One 64-pixel row against narrow weights, as four 64-bit partial sums
 * of (count - 2^15) x weight: each count less 2^15 is a signed word, so
 * `vpmaddwd` is exact, and the row's four 16-pixel steps add up in 32
 * bits (a lane takes 8 products of at most 4095 x 2^15: below 2^30). */
__attribute__((target("avx2"), always_inline)) static inline __m256i
row_lanes_narrow(const uint16_t *row, const __m256i *w16)
{
    const __m256i flip = _mm256_set1_epi16((short)0x8000);
    __m256i a = _mm256_setzero_si256();
    for (unsigned q = 0; q < PIXEL_GROUP / 16; q++)
        a = _mm256_add_epi32(
            a, _mm256_madd_epi16(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)row + q), flip),
                                 w16[q]));
    return _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(a)),
                            _mm256_cvtepi32_epi64(_mm256_extracti128_si256(a, 1)));
}

/* dot_rows_planes for a full group of 64 pixels whose weights all lie
 * within +-NARROW_WEIGHT, four scans at a time: their partial sums are
 * transposed and added into one vector of four totals, and `shift[k]`
 * (2^15 times the plane's weights) is added back. */
__attribute__((target("avx2"), always_inline)) static inline void
dot_rows_narrow(const uint16_t *tile, uint32_t lo, uint32_t hi, const int16_t (*w16)[PIXEL_GROUP],
                const int64_t *shift, int64_t *const *dst, const unsigned planes)
{
    enum { M = PIXEL_GROUP };
    uint32_t i = lo;
    for (unsigned k = 0; k < planes; k++) {
        __m256i w[M / 16];
        for (unsigned q = 0; q < M / 16; q++)
            w[q] = _mm256_loadu_si256((const __m256i *)(w16[k] + 16 * q));
        const __m256i back = _mm256_set1_epi64x(shift[k]);
        for (i = lo; i + 4 <= hi; i += 4) {
            const __m256i r0 = row_lanes_narrow(tile + (size_t)i * M, w);
            const __m256i r1 = row_lanes_narrow(tile + (size_t)(i + 1) * M, w);
            const __m256i r2 = row_lanes_narrow(tile + (size_t)(i + 2) * M, w);
            const __m256i r3 = row_lanes_narrow(tile + (size_t)(i + 3) * M, w);
            const __m256i s01 = _mm256_add_epi64(_mm256_unpacklo_epi64(r0, r1),
                                                 _mm256_unpackhi_epi64(r0, r1));
            const __m256i s23 = _mm256_add_epi64(_mm256_unpacklo_epi64(r2, r3),
                                                 _mm256_unpackhi_epi64(r2, r3));
            const __m256i sum = _mm256_add_epi64(
                _mm256_add_epi64(_mm256_permute2x128_si256(s01, s23, 0x20),
                                 _mm256_permute2x128_si256(s01, s23, 0x31)),
                back);
            __m256i *to = (__m256i *)(dst[k] + (i - lo));
            _mm256_storeu_si256(to, _mm256_add_epi64(_mm256_loadu_si256(to), sum));
        }
        for (uint32_t t = i; t < hi; t++) {
            const __m256i r = row_lanes_narrow(tile + (size_t)t * M, w);
            const __m128i h =
                _mm_add_epi64(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
            dst[k][t - lo] += _mm_cvtsi128_si64(h) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(h, h)) +
                              shift[k];
        }
    }
}

__attribute__((target("avx2"))) static void dot_rows_avx2(const uint16_t *tile, uint64_t m,
                                                          uint32_t lo, uint32_t hi,
                                                          const int64_t (*w)[PIXEL_GROUP],
                                                          int64_t *const *dst, unsigned planes)
{
    int16_t w16[4][PIXEL_GROUP];
    int64_t shift[4] = {0, 0, 0, 0};
    int narrow = m == PIXEL_GROUP;
    for (unsigned k = 0; narrow && k < planes; k++)
        for (uint64_t j = 0; j < m; j++) {
            narrow &= w[k][j] >= -NARROW_WEIGHT && w[k][j] <= NARROW_WEIGHT;
            w16[k][j] = (int16_t)w[k][j];
            shift[k] += 32768 * w[k][j];
        }
    if (narrow) {
        dot_rows_narrow(tile, lo, hi, (const int16_t(*)[PIXEL_GROUP])w16, shift, dst, planes);
        return;
    }
    switch (planes) {
    case 1: dot_rows_planes(tile, m, lo, hi, w, dst, 1); break;
    case 2: dot_rows_planes(tile, m, lo, hi, w, dst, 2); break;
    case 3: dot_rows_planes(tile, m, lo, hi, w, dst, 3); break;
    default: dot_rows_planes(tile, m, lo, hi, w, dst, 4); break;
    }
}
#endif

/* Whether the reductions take their AVX2 loops: as the file's decoding
 * does (not forced scalar), where the CPU has them. */
static int select_avx2(const qem_file *f)
{
    return f->rans_path != QEM_RANS_PATH_SCALAR && qem_rans_path_supported(QEM_RANS_PATH_AVX2);
}

/* One block: decoded streams and whole tiles, samples [lo, hi) into
 * out[k * count + at + (i - lo)]. */
static qem_status reduce_block(const qem_file *f, const qem_chunk_view *v, uint64_t block,
                               uint32_t lo, uint32_t hi, const select_plan *sp,
                               qem_column *const *fill, int64_t *out, uint64_t count, uint64_t at,
                               int threads, qem_error *error)
{
    const uint64_t scan0 = v->chunk->first + block * QEM_INTERVAL;
    const uint32_t n = qem_block_samples(v->chunk, block), span = hi - lo;
    const unsigned K = sp->planes;
    const uint64_t groups = (sp->decode_count + PIXEL_GROUP - 1) / PIXEL_GROUP;
#ifdef QEM_SELECT_AVX2
    const int use_avx2 = select_avx2(f);
#endif
    qem_status failed = QEM_OK;
    qem_error first_error = {0};
    uint64_t failed_at = UINT64_MAX;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        uint16_t *cols = malloc((size_t)PIXEL_GROUP * n * sizeof *cols);
        int64_t *local = calloc((size_t)span * K, sizeof *local);
        int64_t wk[4][PIXEL_GROUP];
        qem_error e = {0};
#pragma omp for schedule(dynamic, 1)
        for (uint64_t grp = 0; grp < groups; grp++) {
            if (!cols || !local)
                continue;
            const uint64_t first_j = grp * PIXEL_GROUP;
            const uint64_t end = first_j + PIXEL_GROUP < sp->decode_count ? first_j + PIXEL_GROUP
                                                                          : sp->decode_count;
            const uint64_t m = end - first_j;
            uint64_t bad_lane;
            qem_status st = qem_chunk_decode_rows(f, v, block, sp->decode + first_j, m, cols,
                                                  &bad_lane);
            if (st != QEM_OK) {
                /* The scalar decoder words the message for that stream. */
                st = qem_chunk_decode_stream(f, v, block, bad_lane, cols, &e);
#pragma omp critical(qem_select_error)
                if (first_j < failed_at) {
                    failed_at = first_j;
                    failed = st;
                    first_error = e;
                }
                continue;
            }
            if (fill)
                qem_columns_fill(fill + first_j, cols, m, lo, hi, scan0);
            /* Each scan's weighted sum over this group: a dot product of a
             * tile row with each plane's weights, up to four planes (the
             * CoM's three) in one pass over the tile. */
            for (unsigned k0 = 0; k0 < K; k0 += 4) {
                int64_t *dst[4];
                unsigned used = 0;
                for (unsigned k = k0; k < K && k < k0 + 4; k++) {
                    int nonzero = 0;
                    for (uint64_t j = 0; j < m; j++) {
                        wk[used][j] = sp->weight[(first_j + j) * K + k];
                        nonzero |= wk[used][j] != 0;
                    }
                    if (nonzero)
                        dst[used++] = local + (uint64_t)k * span;
                }
                if (!used)
                    continue;
#ifdef QEM_SELECT_AVX2
                if (use_avx2) {
                    dot_rows_avx2(cols, m, lo, hi, (const int64_t(*)[PIXEL_GROUP])wk, dst, used);
                    continue;
                }
#endif
                for (unsigned u = 0; u < used; u++)
                    for (uint32_t i = lo; i < hi; i++) {
                        const uint16_t *row = cols + (size_t)i * m;
                        int64_t acc = 0;
                        for (uint64_t j = 0; j < m; j++)
                            acc += wk[u][j] * row[j];
                        dst[u][i - lo] += acc;
                    }
            }
        }
#pragma omp critical(qem_select_merge)
        {
            if (!cols || !local) {
                if (failed == QEM_OK)
                    failed = QEM_E_NO_MEMORY;
            } else {
                for (unsigned k = 0; k < K; k++)
                    for (uint32_t i = 0; i < span; i++)
                        out[k * count + at + i] += local[(uint64_t)k * span + i];
            }
        }
        free(cols);
        free(local);
    }
    if (failed == QEM_E_NO_MEMORY && failed_at == UINT64_MAX)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory reducing a block");
    if (failed != QEM_OK) {
        if (error)
            *error = first_error;
        return failed;
    }
    /* Whole tiles from the spatial sums. */
    uint32_t *sums = NULL;
    for (unsigned k = 0; k < K; k++) {
        for (uint64_t t = 0; t < sp->tile_count[k]; t++) {
            if (!sums && !(sums = malloc((size_t)n * sizeof *sums)))
                return qem_fail(error, QEM_E_NO_MEMORY, "out of memory reducing a block");
            const uint64_t s = block * f->geometry.fields + sp->tile_field[k * sp->tile_stride + t];
            if (qem_view_spatial_unpack(v, s, n, sums) != QEM_OK) {
                free(sums);
                return qem_fail(error, QEM_E_SPATIAL,
                                "QEM spatial stream %llu lies outside its chunk's words (the "
                                "file changed since it was checked?)",
                                (unsigned long long)s);
            }
            const int64_t wt = sp->tile_weight[k * sp->tile_stride + t];
            for (uint32_t i = 0; i < span; i++)
                out[k * count + at + i] += wt * sums[lo + i];
        }
    }
    free(sums);
    return QEM_OK;
}

/* With a packed copy, a plan pays only where 8x8 or 32x32 tiles may be
 * taken whole from the spatial sums: a detector of many pixels (a new
 * detector's first image), never a move's thin ring of changed pixels. */
#define PLAN_WITH_COPY_PIXELS 1024u

static int many_pixels(const qem_file *f, const int32_t *const *w, unsigned planes)
{
    uint64_t n = 0;
    for (uint64_t p = 0; p < f->pixels && n < PLAN_WITH_COPY_PIXELS; p++) {
        int any = 0;
        for (unsigned k = 0; k < planes; k++)
            any |= w[k][p] != 0;
        n += any && f->valid[p];
    }
    return n >= PLAN_WITH_COPY_PIXELS;
}

/* Adds the plan's decode pixels at their plan weights, read from the copy. */
static qem_status packed_plan_sums(const qem_file *f, const qem_packed_copy *packed,
                                   const select_plan *sp, uint64_t first, uint64_t count,
                                   int64_t *out, int threads, qem_error *error)
{
    const unsigned K = sp->planes;
    int32_t *w = calloc((size_t)(f->pixels * K), sizeof *w);
    int64_t *sums = malloc((size_t)(count * K) * sizeof *sums);
    const int32_t **planes = malloc(K * sizeof *planes);
    qem_status st =
        w && sums && planes ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (unsigned k = 0; st == QEM_OK && k < K; k++) {
        planes[k] = w + (uint64_t)k * f->pixels;
        for (uint64_t j = 0; j < sp->decode_count; j++)
            w[(uint64_t)k * f->pixels + sp->decode[j]] = sp->weight[j * K + k];
    }
    if (st == QEM_OK)
        st = qem_packed_weighted_sums(f, packed, first, count, planes, K, sums, threads, error);
    for (uint64_t i = 0; st == QEM_OK && i < count * K; i++)
        out[i] += sums[i];
    free(w);
    free(sums);
    free(planes);
    return st;
}

qem_status qem_weighted_sums(qem_file *f, uint64_t first, uint64_t count,
                             const int32_t *const *weights, unsigned planes, int use_tiles,
                             int64_t *out, int threads, qem_error *error)
{
    if (f->codec == QEM_CODEC_FLOAT32)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "float32 data have no exact sums; use the compensated float path");
    if (first > f->scans || count > f->scans - first || !planes || !weights || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_weighted_sums: bad range or argument");
    /* Once built, the packed copy answers: unpacking instead of decoding,
     * beside the tiles a plan takes whole for a large detector. */
    const qem_packed_copy *packed = qem_packed_copy_of(f);
    const int tiles = use_tiles && f->codec == QEM_CODEC_INTEGER;
    if (packed && !(tiles && many_pixels(f, weights, planes)))
        return qem_packed_weighted_sums(f, packed, first, count, weights, planes, out,
                                        threads > 0 ? threads : f->threads, error);
    memset(out, 0, (size_t)(count * planes) * sizeof *out);
    if (!count)
        return QEM_OK;
    select_cached_plan *cached = NULL;
    QEM_TRY(plan_get(f, weights, planes, tiles, first == 0, &cached, error));
    const select_plan *sp = &cached->plan;
    /* With the copy, the chunks give only the tiles' spatial sums. */
    select_plan tiles_only = *sp;
    tiles_only.decode_count = 0;
    const select_plan *chunk_plan = packed ? &tiles_only : sp;
    int need_spatial = 0;
    for (unsigned k = 0; k < planes; k++)
        need_spatial |= sp->tile_count[k] != 0;
    threads = qem_threads_resolve(threads > 0 ? threads : f->threads);
    const uint64_t end = first + count, c0 = qem_chunk_index_of(f, first);
    uint64_t c_end = c0;
    while (c_end < f->chunk_count && f->chunks[c_end].first < end)
        c_end++;
    if (!sp->decode_count && !need_spatial && !cached->hit_count) {
        plan_release(f, cached);
        return QEM_OK; /* nothing selected: all sums are zero */
    }
    if (cached->hit_count && (!f->resident || f->resident_map)) {
        /* Kept columns are only as good as the file they came from. */
        const qem_status changed = qem_file_stamp_check(f->fd, &f->stamp, f->path, "read", error);
        if (changed != QEM_OK) {
            columns_forget(f);
            plan_release(f, cached);
            return changed;
        }
    }
    if (!chunk_plan->decode_count && !need_spatial)
        c_end = c0; /* every selected pixel is a kept column or in the copy */
    const int filling = !packed && fill_claim(f, cached, first);
    qem_column *const *fill = filling ? cached->fill : NULL;
    /* Whole chunks per thread when there are enough of them (each writes
     * its own scans of `out`); otherwise threads share each block. */
    const int per_chunk = threads > 1 && c_end - c0 >= (uint64_t)threads;
    qem_status st = QEM_OK;
    uint64_t failed_chunk = UINT64_MAX;
#pragma omp parallel for schedule(dynamic, 1) num_threads(qem_threads_resolve(per_chunk ? threads : 1))
    for (uint64_t ci = c0; ci < c_end; ci++) {
        qem_status cst;
#pragma omp atomic read
        cst = st;
        if (cst != QEM_OK && ci > failed_chunk)
            continue;
        const qem_chunk *c = &f->chunks[ci];
        qem_error e = {0};
        qem_chunk_view v;
        cst = qem_chunk_load(f, ci, need_spatial, &v, &e);
        for (uint64_t b = 0; cst == QEM_OK && b < c->blocks; b++) {
            const uint64_t b0 = c->first + b * QEM_INTERVAL;
            const uint64_t b1 = b0 + qem_block_samples(c, b);
            if (b1 <= first || b0 >= end)
                continue;
            const uint32_t lo = (uint32_t)((first > b0 ? first : b0) - b0);
            const uint32_t hi = (uint32_t)((end < b1 ? end : b1) - b0);
            cst = reduce_block(f, &v, b, lo, hi, chunk_plan, fill, out, count, b0 + lo - first,
                               per_chunk ? 1 : threads, &e);
        }
        qem_chunk_view_free(&v);
        /* With the copy, the body's pages go again once its spatial sums
         * are read: a mapped page brings its whole folio of the page cache
         * (payload too) into the process. */
        if (packed)
            qem_body_release(f, c->arrays[0].offset, c->arrays[5].offset + c->arrays[5].count);
        if (cst != QEM_OK) {
#pragma omp critical(qem_select_chunk_error)
            if (ci < failed_chunk) {
                failed_chunk = ci;
                st = cst;
                if (error)
                    *error = e;
            }
        }
    }
    if (st == QEM_OK && packed && sp->decode_count)
        st = packed_plan_sums(f, packed, sp, first, count, out, threads, error);
    if (st == QEM_OK && cached->hit_count)
        qem_columns_accumulate((const qem_column *const *)cached->hit, cached->hit_weight,
                               cached->hit_count, planes, first, count, out, select_avx2(f),
                               threads);
    if (filling)
        fill_end(f, cached, count, st == QEM_OK);
    if (st == QEM_E_CHANGED)
        columns_forget(f);
    plan_release(f, cached);
    return st;
}

qem_status qem_pixel_sums(qem_file *f, uint64_t first, uint64_t count, uint64_t *sums,
                          uint32_t *max, int threads, qem_error *error)
{
    if (f->codec == QEM_CODEC_FLOAT32)
        return qem_fail(error, QEM_E_WRONG_CODEC, "float32 data have no exact pixel sums");
    if (first > f->scans || count > f->scans - first || !sums)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pixel_sums: bad range or argument");
    if (!count)
        return QEM_OK;
    threads = qem_threads_resolve(threads > 0 ? threads : f->threads);
    const uint64_t P = f->pixels, end = first + count;
    const uint64_t groups = (P + PIXEL_GROUP - 1) / PIXEL_GROUP;
    qem_status st = QEM_OK;
    for (uint64_t ci = qem_chunk_index_of(f, first); st == QEM_OK && ci < f->chunk_count; ci++) {
        const qem_chunk *c = &f->chunks[ci];
        if (c->first >= end)
            break;
        qem_chunk_view v;
        st = qem_chunk_load(f, ci, 0, &v, error);
        if (st != QEM_OK)
            break;
        for (uint64_t b = 0; st == QEM_OK && b < c->blocks; b++) {
            const uint64_t b0 = c->first + b * QEM_INTERVAL;
            const uint32_t n = qem_block_samples(c, b);
            if (b0 + n <= first || b0 >= end)
                continue;
            const uint32_t lo = (uint32_t)((first > b0 ? first : b0) - b0);
            const uint32_t hi = (uint32_t)((end < b0 + n ? end : b0 + n) - b0);
            uint64_t bad_lane = UINT64_MAX;
            qem_status bad = QEM_OK;
            /* Each pixel's samples are summed in the decoded tile: no scan rows. */
#pragma omp parallel num_threads(qem_threads_resolve(threads))
            {
                uint16_t *cols = malloc((size_t)PIXEL_GROUP * n * sizeof *cols);
#pragma omp for schedule(dynamic, 4)
                for (uint64_t g = 0; g < groups; g++) {
                    const uint64_t p0 = g * PIXEL_GROUP;
                    const uint64_t w = P - p0 < PIXEL_GROUP ? P - p0 : PIXEL_GROUP;
                    uint64_t failed, lanes[PIXEL_GROUP];
                    for (uint64_t j = 0; j < w; j++)
                        lanes[j] = p0 + j;
                    qem_status gst = cols ? qem_chunk_decode_rows(f, &v, b, lanes, w, cols, &failed)
                                          : QEM_E_NO_MEMORY;
                    if (gst != QEM_OK) {
#pragma omp critical(qem_pixel_sums_error)
                        if (bad == QEM_OK || (gst != QEM_E_NO_MEMORY && failed < bad_lane)) {
                            bad = gst;
                            bad_lane = gst == QEM_E_NO_MEMORY ? UINT64_MAX : failed;
                        }
                        continue;
                    }
                    /* Rows of the tile summed in 32 bits (512 x 65535 fits). */
                    uint32_t acc[PIXEL_GROUP] = {0};
                    for (uint32_t i = lo; i < hi && w == PIXEL_GROUP; i++) {
                        const uint16_t *row = cols + (size_t)i * PIXEL_GROUP;
                        for (uint64_t j = 0; j < PIXEL_GROUP; j++) /* vectorised */
                            acc[j] += row[j];
                    }
                    for (uint32_t i = lo; i < hi && w < PIXEL_GROUP; i++) {
                        const uint16_t *row = cols + (size_t)i * w;
                        for (uint64_t j = 0; j < w; j++)
                            acc[j] += row[j];
                    }
                    for (uint64_t j = 0; j < w; j++)
                        sums[p0 + j] += acc[j];
                    if (max) {
                        for (uint32_t i = lo; i < hi; i++) {
                            const uint16_t *row = cols + (size_t)i * w;
                            for (uint64_t j = 0; j < w; j++)
                                max[p0 + j] = row[j] > max[p0 + j] ? row[j] : max[p0 + j];
                        }
                    }
                }
                free(cols);
            }
            if (bad == QEM_E_NO_MEMORY && bad_lane == UINT64_MAX)
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory summing a block");
            else if (bad != QEM_OK) {
                uint16_t *one = malloc((size_t)n * sizeof *one);
                st = one ? qem_chunk_decode_stream(f, &v, b, bad_lane, one, error)
                         : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
                free(one);
                if (st == QEM_OK)
                    st = bad;
            }
        }
        qem_chunk_view_free(&v);
    }
    /* Invalid pixels never count. */
    for (uint64_t px = 0; st == QEM_OK && px < P; px++)
        if (!f->valid[px]) {
            sums[px] = 0;
            if (max)
                max[px] = 0;
        }
    return st;
}

