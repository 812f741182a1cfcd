/* Detector sessions: one mask over one or more sources (a tilt series).
 * Setting a new mask after the first updates each image by the signed sums
 * of only the pixels whose membership changed (integer data), which equals
 * a full recomputation exactly; float data are recomputed. New images
 * replace the old ones only when every source succeeded. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/large_alloc.h"
#include "common/options.h"
#include "products/products.h"

/* A mask the session held before, with what it gave every source. */
typedef struct kept_mask {
    uint8_t *mask;
    uint64_t hash;
    int64_t **sums;    /* per source: scaled codes' exact sums; NULL entries
                          where the image holds them (counts) or none exist
                          (float data) */
    qem_image *images; /* per source */
    uint64_t bytes, tick;
} kept_mask;

/* The memory of the session's images: slots of one size cut from slabs
 * (qem_large_alloc) and reused once an image is dropped. Kept images taken
 * from malloc grew the heap under each move's temporaries, which were then
 * trimmed and faulted in again on every move; fresh pages cost about 3 ms
 * a MiB on the benchmark's virtual machine (doc/benchmarks.md). */
typedef struct image_slots {
    size_t bytes;             /* one slot */
    void **free;              /* slots handed back */
    size_t free_count, free_cap;
    void **slabs;
    size_t slab_count;
    unsigned char *next;      /* the newest slab's slots not yet handed out */
    size_t left;
} image_slots;

enum { SLOTS_PER_SLAB = 16 };

struct qem_detector_session {
    qem_products **sources;
    size_t count;
    uint8_t *mask;        /* current mask, pixels bytes; NULL before the first */
    uint64_t mask_hash;
    int64_t **sums;       /* scaled codes: exact per-scan sums per source (counts:
                             NULL, the integer image is the sums) */
    qem_image *images;    /* current images per source */
    qem_session_stats stats;
    /* Recent masks (qem_detector_session_keep), least recently used out. */
    kept_mask *kept;
    size_t kept_count;
    uint64_t kept_bytes, keep_limit, clock;
    image_slots *slots; /* one per image size */
    size_t slot_sizes;
};

static uint64_t image_bytes(const qem_image *im)
{
    return im->shape[0] * im->shape[1] * (im->ndim == 3 ? im->shape[2] : 1) *
           qem_dtype_size(im->dtype);
}

static image_slots *slots_of(qem_detector_session *s, size_t bytes)
{
    for (size_t k = 0; k < s->slot_sizes; k++)
        if (s->slots[k].bytes == bytes)
            return &s->slots[k];
    image_slots *grown = realloc(s->slots, (s->slot_sizes + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    s->slots = grown;
    image_slots *n = &s->slots[s->slot_sizes++];
    memset(n, 0, sizeof *n);
    n->bytes = bytes;
    return n;
}

static void *slot_take(qem_detector_session *s, size_t bytes)
{
    image_slots *k = slots_of(s, bytes);
    if (!k)
        return NULL;
    if (k->free_count)
        return k->free[--k->free_count];
    if (!k->left) {
        /* Whole 2 MiB pages once a slab reaches them: no page wasted. */
        enum { HUGE = 2u << 20 };
        size_t slab = SLOTS_PER_SLAB * bytes;
        if (slab >= HUGE)
            slab = (slab + HUGE - 1) / HUGE * HUGE;
        void **grown = realloc(k->slabs, (k->slab_count + 1) * sizeof *grown);
        if (!grown)
            return NULL;
        k->slabs = grown;
        if (!(k->next = qem_large_alloc(slab)))
            return NULL;
        k->slabs[k->slab_count++] = k->next;
        k->left = slab / bytes;
    }
    void *slot = k->next;
    k->next += bytes;
    k->left--;
    return slot;
}

/* A session image back to its slot list (its data came from slot_take). */
static void image_release(qem_detector_session *s, qem_image *im)
{
    if (!im->data)
        return;
    image_slots *k = slots_of(s, (size_t)image_bytes(im));
    if (k && k->free_count == k->free_cap) {
        const size_t cap = k->free_cap ? 2 * k->free_cap : SLOTS_PER_SLAB;
        void **grown = realloc(k->free, cap * sizeof *grown);
        if (grown) {
            k->free = grown;
            k->free_cap = cap;
        }
    }
    /* Without room to list it the slot stays unused until the session ends. */
    if (k && k->free_count < k->free_cap)
        k->free[k->free_count++] = im->data;
    memset(im, 0, sizeof *im);
}

/* A rows x cols image whose data is a slot (not zeroed). */
static qem_status image_take(qem_detector_session *s, qem_dtype dtype, uint64_t rows,
                             uint64_t cols, qem_image *image, qem_error *error)
{
    memset(image, 0, sizeof *image);
    image->dtype = dtype;
    image->ndim = 2;
    image->shape[0] = rows;
    image->shape[1] = cols;
    const uint64_t bytes = image_bytes(image);
    if (bytes > SIZE_MAX / SLOTS_PER_SLAB || !(image->data = slot_take(s, (size_t)bytes))) {
        memset(image, 0, sizeof *image);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte image",
                        (unsigned long long)bytes);
    }
    return QEM_OK;
}

static void kept_free(qem_detector_session *s, kept_mask *k)
{
    for (size_t i = 0; i < s->count; i++) {
        if (k->sums)
            free(k->sums[i]);
        if (k->images)
            image_release(s, &k->images[i]);
    }
    free(k->sums);
    free(k->images);
    free(k->mask);
    memset(k, 0, sizeof *k);
}

/* FNV-1a: a cheap first test before comparing whole masks. */
static uint64_t mask_hash(const uint8_t *mask, uint64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (mask[i] != 0)) * 0x100000001b3ull;
    return h;
}

/* Drops the least recently used kept masks until they fit the limit. */
static void kept_trim(qem_detector_session *s)
{
    while (s->kept_count && s->kept_bytes > s->keep_limit) {
        size_t oldest = 0;
        for (size_t k = 1; k < s->kept_count; k++)
            if (s->kept[k].tick < s->kept[oldest].tick)
                oldest = k;
        s->kept_bytes -= s->kept[oldest].bytes;
        kept_free(s, &s->kept[oldest]);
        s->kept[oldest] = s->kept[--s->kept_count];
    }
}

/* Count images kept as uint16 when every value fits. Kept images are
 * memory the session has not used before until the limit recycles it, and
 * fresh pages cost about 2.3 ms a MiB on the benchmark's virtual machine:
 * a series of three 512 files took 18 ms a new 1-px move while keeping
 * uint32 images against 11 ms without (doc/benchmarks.md). The kept limit
 * then holds twice as many masks. */
static void narrow_kept(qem_detector_session *s, qem_image *images, int64_t *const *sums)
{
    for (size_t i = 0; i < s->count; i++) {
        qem_image *im = &images[i];
        if (sums[i] || im->dtype != QEM_DTYPE_UINT32 || im->ndim != 2)
            continue;
        const uint64_t n = im->shape[0] * im->shape[1];
        const uint32_t *wide = im->data;
        uint32_t any = 0;
        for (uint64_t k = 0; k < n; k++)
            any |= wide[k];
        qem_image narrow;
        if (any > 0xFFFFu ||
            image_take(s, QEM_DTYPE_UINT16, im->shape[0], im->shape[1], &narrow, NULL) != QEM_OK)
            continue;
        uint16_t *to = narrow.data;
        for (uint64_t k = 0; k < n; k++)
            to[k] = (uint16_t)wide[k];
        image_release(s, im);
        *im = narrow;
    }
}

/* Kept images back to the dtype a session's images have (a uint16 one is
 * a narrowed uint32); 0 when memory failed, each image still whole. */
static int widen_kept(qem_detector_session *s, qem_image *images)
{
    for (size_t i = 0; i < s->count; i++) {
        qem_image *im = &images[i];
        if (im->dtype != QEM_DTYPE_UINT16)
            continue;
        qem_image wide;
        if (image_take(s, QEM_DTYPE_UINT32, im->shape[0], im->shape[1], &wide, NULL) != QEM_OK)
            return 0;
        const uint64_t n = im->shape[0] * im->shape[1];
        const uint16_t *from = im->data;
        uint32_t *to = wide.data;
        for (uint64_t k = 0; k < n; k++)
            to[k] = from[k];
        image_release(s, im);
        *im = wide;
    }
    return 1;
}

/* What a kept entry holds: its mask, then each source's sums and image. */
static uint64_t kept_entry_bytes(const qem_detector_session *s, int64_t *const *sums,
                                 const qem_image *images)
{
    uint64_t bytes = s->sources[0]->pixels;
    for (size_t i = 0; i < s->count; i++)
        bytes += (sums[i] ? s->sources[i]->scans * sizeof(int64_t) : 0) + image_bytes(&images[i]);
    return bytes;
}

/* The current mask and results become a kept entry (the session keeps
 * none of them current afterwards); dropped when they cannot be kept. */
static void keep_current(qem_detector_session *s)
{
    if (!s->mask)
        return;
    narrow_kept(s, s->images, s->sums);
    kept_mask k = {s->mask, s->mask_hash, s->sums, s->images,
                   kept_entry_bytes(s, s->sums, s->images), ++s->clock};
    s->mask = NULL;
    s->sums = calloc(s->count, sizeof *s->sums);
    s->images = calloc(s->count, sizeof *s->images);
    kept_mask *grown = s->keep_limit && k.bytes <= s->keep_limit && s->sums && s->images
                           ? realloc(s->kept, (s->kept_count + 1) * sizeof *s->kept)
                           : NULL;
    if (!grown) {
        kept_free(s, &k);
        return;
    }
    s->kept = grown;
    s->kept[s->kept_count++] = k;
    s->kept_bytes += k.bytes;
    kept_trim(s);
}

void qem_detector_session_free(qem_detector_session *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++) {
        if (s->sums)
            free(s->sums[i]);
        if (s->images)
            image_release(s, &s->images[i]);
    }
    free(s->sums);
    free(s->images);
    free(s->sources);
    free(s->mask);
    for (size_t k = 0; k < s->kept_count; k++)
        kept_free(s, &s->kept[k]);
    free(s->kept);
    for (size_t k = 0; k < s->slot_sizes; k++) {
        for (size_t j = 0; j < s->slots[k].slab_count; j++)
            free(s->slots[k].slabs[j]);
        free(s->slots[k].slabs);
        free(s->slots[k].free);
    }
    free(s->slots);
    free(s);
}

qem_status qem_detector_session_keep(qem_detector_session *s, uint64_t bytes, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_detector_session_keep: NULL");
    s->keep_limit = bytes;
    kept_trim(s);
    return QEM_OK;
}

/* A kept entry for `mask`, made current (the current one kept in its
 * place): 1, else 0. */
static int take_kept(qem_detector_session *s, const uint8_t *mask, uint64_t hash)
{
    const qem_products *p0 = s->sources[0];
    for (size_t k = 0; k < s->kept_count; k++) {
        kept_mask *e = &s->kept[k];
        if (e->hash != hash)
            continue;
        int same = 1;
        for (uint64_t px = 0; same && px < p0->pixels; px++)
            same = (e->mask[px] != 0) == (mask[px] != 0);
        if (!same || !widen_kept(s, e->images))
            continue;
        uint64_t changed = 0;
        for (uint64_t px = 0; px < p0->pixels; px++)
            changed += p0->valid[px] && (s->mask[px] != 0) != (mask[px] != 0);
        /* Swap: the entry becomes current, the current one the entry. */
        kept_mask was = {s->mask, s->mask_hash, s->sums, s->images, e->bytes, ++s->clock};
        s->mask = e->mask;
        s->mask_hash = e->hash;
        s->sums = e->sums;
        s->images = e->images;
        narrow_kept(s, was.images, was.sums);
        was.bytes = kept_entry_bytes(s, was.sums, was.images);
        s->kept_bytes += was.bytes - e->bytes;
        *e = was;
        kept_trim(s); /* the current results may weigh more than the entry's */
        s->stats.full_recomputation = 0;
        s->stats.pixels_changed = changed;
        s->stats.ffts = 0;
        s->stats.from_kept = 1;
        s->stats.from_recorded = 0;
        s->stats.from_cached = 0;
        s->stats.complement_sources = 0;
        return 1;
    }
    return 0;
}

qem_status qem_detector_session_create(qem_products *const *products, size_t count,
                                       qem_detector_session **out, qem_error *error)
{
    qem_error_clear(error);
    if (!products || !count || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "a session needs at least one source");
    *out = NULL;
    for (size_t i = 0; i < count; i++) {
        if (!products[i])
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "source %zu is NULL", i);
        if (products[i]->det_rows != products[0]->det_rows ||
            products[i]->det_cols != products[0]->det_cols)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "source %zu has a %llu x %llu detector, source 0 %llu x %llu: one "
                            "mask cannot serve both",
                            i, (unsigned long long)products[i]->det_rows,
                            (unsigned long long)products[i]->det_cols,
                            (unsigned long long)products[0]->det_rows,
                            (unsigned long long)products[0]->det_cols);
        uint64_t id[2];
        products[i]->ops->file_id(products[i]->impl, id);
        for (size_t j = 0; j < i; j++) {
            uint64_t other[2];
            products[j]->ops->file_id(products[j]->impl, other);
            if (products[j] == products[i] || (id[0] == other[0] && id[1] == other[1]))
                return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                                "sources %zu and %zu are the same file; a series lists each "
                                "acquisition once",
                                j, i);
        }
    }
    qem_detector_session *s = calloc(1, sizeof *s);
    if (s) {
        s->sources = malloc(count * sizeof *s->sources);
        s->sums = calloc(count, sizeof *s->sums);
        s->images = calloc(count, sizeof *s->images);
    }
    if (!s || !s->sources || !s->sums || !s->images) {
        qem_detector_session_free(s);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    memcpy(s->sources, products, count * sizeof *s->sources);
    s->count = count;
    s->stats.sources = count;
    for (size_t i = 0; i < count; i++)
        s->stats.resident_bytes += products[i]->ops->resident_bytes(products[i]->impl);
    *out = s;
    return QEM_OK;
}

/* Source i's current exact sum at scan k: kept for scaled codes, else
 * its integer image. */
static inline int64_t current_sum(const qem_detector_session *s, size_t i, uint64_t k)
{
    const qem_image *im = &s->images[i];
    if (s->sums[i])
        return s->sums[i][k];
    return im->dtype == QEM_DTYPE_UINT32 ? (int64_t)((const uint32_t *)im->data)[k]
                                         : (int64_t)((const uint64_t *)im->data)[k];
}

/* The image of exact sums: uint32 when the bound allows, else uint64.
 * With `delta`, `sums` are signed changes to source i's current sums and
 * are added in the same pass (scaled codes keep the totals in `sums`).
 * One pass over the scans, on the source's threads: a series move does
 * this once a file over 262144 scans at 512 x 512. */
static qem_status image_from_sums(qem_detector_session *session, size_t i, int64_t *sums,
                                  int delta, uint64_t n_mask, qem_image *image, qem_error *error)
{
    const qem_products *p = session->sources[i];
    const int64_t n = (int64_t)p->scans;
    const int threads = n >= 65536 ? p->threads : 1;
    if (p->data == QEM_DATA_CODES) {
        QEM_TRY(image_take(session, QEM_DTYPE_FLOAT32, p->scan_rows, p->scan_cols, image, error));
        float *to = image->data;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n; k++) {
            if (delta)
                sums[k] += current_sum(session, i, (uint64_t)k);
            double scale, offset;
            p->ops->code_affine(p->impl, (uint64_t)k, &scale, &offset);
            to[k] = (float)(scale * (double)sums[k] + offset * (double)n_mask);
        }
        return QEM_OK;
    }
    const int wide = (double)n_mask * qem_prod_max_value(p) > 4294967295.0;
    QEM_TRY(image_take(session, wide ? QEM_DTYPE_UINT64 : QEM_DTYPE_UINT32, p->scan_rows,
                       p->scan_cols, image, error));
    const uint32_t *narrow_now =
        delta && session->images[i].dtype == QEM_DTYPE_UINT32 ? session->images[i].data : NULL;
    uint32_t *to = image->data;
    /* The common cases: loops the compiler vectorizes. */
    if (!wide && narrow_now) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n; k++)
            to[k] = (uint32_t)(sums[k] + (int64_t)narrow_now[k]);
        return QEM_OK;
    }
    if (!wide && !delta) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t k = 0; k < n; k++)
            to[k] = (uint32_t)sums[k];
        return QEM_OK;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t k = 0; k < n; k++) {
        const int64_t v = sums[k] + (delta ? current_sum(session, i, (uint64_t)k) : 0);
        if (wide)
            ((uint64_t *)image->data)[k] = (uint64_t)v;
        else
            ((uint32_t *)image->data)[k] = (uint32_t)v;
    }
    return QEM_OK;
}

/* Whether the file's recorded values answer `plane` (no decoding). */
static int recorded(qem_products *p, const int32_t *plane)
{
    int64_t none;
    return p->path != QEM_PATH_REFERENCE && p->ops->prepared_sums &&
           p->ops->prepared_sums(p->impl, 0, 0, &plane, 1, &none);
}

/* New sums and image of one source: from values the file records when it
 * has the whole mask's; else the cheapest exact way of three (upstream's
 * modes): the mask from scratch, signed deltas of the pixels that changed,
 * or the recorded totals less the pixels left out. `how` is 1 for the
 * recorded values, 2 for the complement, 3 for an image kept by an
 * earlier open, else 0. */
static qem_status update_one(qem_detector_session *s, size_t i, const uint8_t *mask,
                             int64_t **new_sums, qem_image *new_image, uint64_t *changed,
                             int *how, qem_error *error)
{
    *how = 0;
    qem_products *p = s->sources[i];
    *new_sums = NULL;
    memset(new_image, 0, sizeof *new_image);
    uint64_t n_mask = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        n_mask += mask[px] && p->valid[px];
    if (p->data == QEM_DATA_FLOAT) {
        qem_image made;
        QEM_TRY(qem_products_virtual(p, mask, &made, error));
        const uint64_t parts = made.ndim == 3 ? made.shape[2] : 1;
        const qem_status st =
            image_take(s, made.dtype, made.shape[0], made.shape[1] * parts, new_image, error);
        if (st == QEM_OK) {
            memcpy(new_image->data, made.data, (size_t)image_bytes(new_image));
            new_image->ndim = made.ndim; /* the same bytes, its own shape */
            memcpy(new_image->shape, made.shape, sizeof made.shape);
        }
        qem_image_free(&made);
        return st;
    }
    int32_t *w = malloc((size_t)(2 * p->pixels) * sizeof *w);
    int64_t *sums = malloc((size_t)p->scans * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int delta = s->mask != NULL;
    *changed = 0;
    int32_t *full = w + p->pixels;
    for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++) {
        const int32_t now = mask[px] && p->valid[px];
        const int32_t before = delta ? (s->mask[px] && p->valid[px]) : 0;
        w[px] = now - before;
        full[px] = now;
        *changed += w[px] != 0;
    }
    const int32_t *planes[1] = {w};
    uint64_t cost = delta ? *changed : n_mask;
    if (st == QEM_OK && recorded(p, full)) {
        *how = 1;
        planes[0] = full;
        delta = 0;
    } else if (st == QEM_OK && p->valid_count - n_mask < cost) {
        /* Totals minus the pixels left out, when fewer and recorded. */
        for (uint64_t px = 0; px < p->pixels; px++)
            full[px] = p->valid[px] != 0;
        if (recorded(p, full))
            *how = 2;
    }
    if (st == QEM_OK && *how == 2) {
        int64_t *totals = malloc((size_t)p->scans * sizeof *totals);
        const int32_t *all[1] = {full};
        st = totals ? qem_prod_weighted_sums(p, 0, p->scans, all, 1, totals, error)
                    : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        for (uint64_t px = 0; st == QEM_OK && px < p->pixels; px++)
            full[px] = p->valid[px] && !mask[px];
        planes[0] = full;
        if (st == QEM_OK)
            st = qem_prod_weighted_sums(p, 0, p->scans, planes, 1, sums, error);
        for (uint64_t k = 0; st == QEM_OK && k < p->scans; k++)
            sums[k] = totals[k] - sums[k];
        free(totals);
        delta = 0;
    } else if (st == QEM_OK) {
        st = qem_prod_weighted_sums(p, 0, p->scans, planes, 1, sums, error);
        if (st == QEM_OK && p->last_origin == QEM_ORIGIN_CACHED)
            *how = 3;
    }
    if (st == QEM_OK)
        st = image_from_sums(s, i, sums, delta, n_mask, new_image, error);
    free(w);
    if (st != QEM_OK || p->data != QEM_DATA_CODES) {
        /* Counts: the exact integer image is the sums, and a kept mask
         * costs its image alone (fresh memory for each move's results is
         * what a drag pays for until the kept limit recycles it). */
        free(sums);
        return st;
    }
    *new_sums = sums;
    return QEM_OK;
}

qem_status qem_detector_session_set_mask(qem_detector_session *s, const uint8_t *mask,
                                         qem_error *error)
{
    qem_error_clear(error);
    if (!s || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_detector_session_set_mask: NULL");
    const uint64_t P = s->sources[0]->pixels;
    const uint64_t hash = s->keep_limit ? mask_hash(mask, P) : 0;
    if (s->keep_limit && s->mask && take_kept(s, mask, hash))
        return QEM_OK;
    int64_t **sums = calloc(s->count, sizeof *sums);
    qem_image *images = calloc(s->count, sizeof *images);
    uint8_t *kept = malloc((size_t)P);
    qem_status st = sums && images && kept ? QEM_OK
                                           : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint64_t changed = 0, complements = 0;
    int all_recorded = 1, all_undecoded = 1, any_cached = 0;
    for (size_t i = 0; st == QEM_OK && i < s->count; i++) {
        int how = 0;
        st = update_one(s, i, mask, &sums[i], &images[i], &changed, &how, error);
        all_recorded &= how == 1;
        all_undecoded &= how == 1 || how == 3;
        any_cached |= how == 3;
        complements += how == 2;
    }
    if (st != QEM_OK) {
        /* Nothing changes: the old images stand. */
        for (size_t i = 0; sums && images && i < s->count; i++) {
            free(sums[i]);
            image_release(s, &images[i]);
        }
        free(sums);
        free(images);
        free(kept);
        return st;
    }
    int any_float = 0;
    for (size_t i = 0; i < s->count; i++)
        any_float |= s->sources[i]->data == QEM_DATA_FLOAT;
    s->stats.full_recomputation = (s->mask == NULL || any_float) && !all_undecoded;
    s->stats.pixels_changed = changed;
    s->stats.ffts = 0;
    s->stats.from_kept = 0;
    s->stats.from_recorded = all_recorded;
    s->stats.from_cached = all_undecoded && any_cached;
    s->stats.complement_sources = complements;
    if (s->keep_limit)
        keep_current(s); /* the old results stay for a move back */
    for (size_t i = 0; s->sums && s->images && i < s->count; i++) {
        free(s->sums[i]);
        image_release(s, &s->images[i]);
    }
    free(s->sums);
    free(s->images);
    s->sums = sums;
    s->images = images;
    memcpy(kept, mask, (size_t)P);
    free(s->mask);
    s->mask = kept;
    s->mask_hash = hash;
    return QEM_OK;
}

qem_status qem_detector_session_image_view(const qem_detector_session *s, size_t index,
                                           const qem_image **image, qem_error *error)
{
    qem_error_clear(error);
    if (image)
        *image = NULL;
    if (!s || !image || index >= s->count)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "no source %zu in this session", index);
    if (!s->mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "set a mask before asking for an image");
    *image = &s->images[index];
    return QEM_OK;
}

qem_status qem_detector_session_image(const qem_detector_session *s, size_t index,
                                      qem_image *image, qem_error *error)
{
    const qem_image *from = NULL;
    if (image)
        memset(image, 0, sizeof *image);
    QEM_TRY(qem_detector_session_image_view(s, index, image ? &from : NULL, error));
    const uint64_t n = from->shape[0] * from->shape[1] * (from->ndim == 3 ? from->shape[2] : 1);
    QEM_TRY(qem_prod_image_new(image, from->dtype, from->shape[0], from->shape[1],
                               from->ndim == 3 ? from->shape[2] : 1, error));
    memcpy(image->data, from->data, (size_t)(n * qem_dtype_size(from->dtype)));
    return QEM_OK;
}

qem_status qem_detector_session_stats(const qem_detector_session *s, qem_session_stats *stats,
                                      qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_detector_session_stats: NULL");
    return qem_result_deliver(stats, &s->stats, sizeof s->stats, "qem_session_stats", error);
}
