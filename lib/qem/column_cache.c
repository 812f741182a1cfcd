/* Decoded pixel columns (column_cache.h): a chained hash table over a
 * fixed array of entries, with a doubly linked recency list; one mutex. */
#include "qem/column_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/large_alloc.h"

#define NONE UINT32_MAX
#define COLUMN_SAMPLES 512u

typedef struct column_entry {
    uint64_t block; /* chunk << 32 | block in the chunk */
    uint64_t pixel;
    uint32_t next;          /* the bucket's chain */
    uint32_t newer, older;  /* the recency list */
    uint32_t bucket;
} column_entry;

struct qem_column_cache {
    pthread_mutex_t lock;
    uint32_t capacity, used;
    uint32_t *buckets;
    uint32_t bucket_mask;
    column_entry *entries;
    uint16_t *data; /* capacity x COLUMN_SAMPLES, touched as it fills */
    uint32_t newest, oldest;
    uint64_t hits, misses;
};

qem_status qem_column_cache_new(uint64_t bytes, qem_column_cache **out, qem_error *error)
{
    *out = NULL;
    const uint64_t per = COLUMN_SAMPLES * sizeof(uint16_t) + sizeof(column_entry) + 2 * 4;
    uint64_t capacity = bytes / per;
    if (capacity > (1ull << 30))
        capacity = 1ull << 30;
    if (!capacity)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "a column cache of %llu bytes holds no column (one takes %llu)",
                        (unsigned long long)bytes, (unsigned long long)per);
    uint32_t buckets = 1;
    while (buckets < 2 * capacity)
        buckets <<= 1;
    qem_column_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->buckets = malloc((size_t)buckets * sizeof *c->buckets);
        c->entries = qem_large_alloc((size_t)capacity * sizeof *c->entries);
        c->data = qem_large_alloc((size_t)capacity * COLUMN_SAMPLES * sizeof *c->data);
    }
    if (!c || !c->buckets || !c->entries || !c->data) {
        if (c) {
            free(c->buckets);
            free(c->entries);
            free(c->data);
        }
        free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte column cache",
                        (unsigned long long)bytes);
    }
    memset(c->buckets, 0xff, (size_t)buckets * sizeof *c->buckets);
    pthread_mutex_init(&c->lock, NULL);
    c->capacity = (uint32_t)capacity;
    c->bucket_mask = buckets - 1;
    c->newest = c->oldest = NONE;
    *out = c;
    return QEM_OK;
}

void qem_column_cache_free(qem_column_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    free(c->entries);
    free(c->data);
    free(c);
}

uint64_t qem_column_cache_capacity(const qem_column_cache *c)
{
    return c ? c->capacity : 0;
}

static uint32_t bucket_of(const qem_column_cache *c, uint64_t block, uint64_t pixel)
{
    uint64_t h = (block * 0x9e3779b97f4a7c15ull) ^ (pixel + 0x632be59bd9b4e019ull);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h & c->bucket_mask;
}

static void unlink_recency(qem_column_cache *c, uint32_t e)
{
    column_entry *x = &c->entries[e];
    if (x->newer != NONE)
        c->entries[x->newer].older = x->older;
    else
        c->newest = x->older;
    if (x->older != NONE)
        c->entries[x->older].newer = x->newer;
    else
        c->oldest = x->newer;
}

static void make_newest(qem_column_cache *c, uint32_t e)
{
    column_entry *x = &c->entries[e];
    x->newer = NONE;
    x->older = c->newest;
    if (c->newest != NONE)
        c->entries[c->newest].newer = e;
    c->newest = e;
    if (c->oldest == NONE)
        c->oldest = e;
}

static uint32_t find(const qem_column_cache *c, uint64_t block, uint64_t pixel)
{
    for (uint32_t e = c->buckets[bucket_of(c, block, pixel)]; e != NONE; e = c->entries[e].next)
        if (c->entries[e].block == block && c->entries[e].pixel == pixel)
            return e;
    return NONE;
}

uint64_t qem_column_cache_take(qem_column_cache *c, uint64_t chunk, uint64_t block,
                               const uint64_t *pixels, uint64_t count, uint32_t samples,
                               uint16_t *out, uint8_t *hit)
{
    const uint64_t key = chunk << 32 | block;
    uint64_t hits = 0;
    pthread_mutex_lock(&c->lock);
    for (uint64_t j = 0; j < count; j++) {
        const uint32_t e = find(c, key, pixels[j]);
        hit[j] = e != NONE;
        if (e == NONE)
            continue;
        memcpy(out + j * samples, c->data + (size_t)e * COLUMN_SAMPLES,
               (size_t)samples * sizeof *out);
        unlink_recency(c, e);
        make_newest(c, e);
        hits++;
    }
    c->hits += hits;
    c->misses += count - hits;
    pthread_mutex_unlock(&c->lock);
    return hits;
}

void qem_column_cache_put(qem_column_cache *c, uint64_t chunk, uint64_t block,
                          const uint64_t *pixels, uint64_t count, uint32_t samples,
                          const uint16_t *columns)
{
    const uint64_t key = chunk << 32 | block;
    pthread_mutex_lock(&c->lock);
    for (uint64_t j = 0; j < count; j++) {
        if (find(c, key, pixels[j]) != NONE)
            continue; /* another thread kept it first */
        uint32_t e;
        if (c->used < c->capacity) {
            e = c->used++;
        } else {
            /* Replace the least recently used: out of its chain first. */
            e = c->oldest;
            unlink_recency(c, e);
            uint32_t *link = &c->buckets[c->entries[e].bucket];
            while (*link != e)
                link = &c->entries[*link].next;
            *link = c->entries[e].next;
        }
        column_entry *x = &c->entries[e];
        x->block = key;
        x->pixel = pixels[j];
        x->bucket = bucket_of(c, key, pixels[j]);
        x->next = c->buckets[x->bucket];
        c->buckets[x->bucket] = e;
        make_newest(c, e);
        memcpy(c->data + (size_t)e * COLUMN_SAMPLES, columns + j * samples,
               (size_t)samples * sizeof *columns);
    }
    pthread_mutex_unlock(&c->lock);
}

void qem_column_cache_stats(const qem_column_cache *c, uint64_t *hits, uint64_t *misses)
{
    if (!c) {
        *hits = *misses = 0;
        return;
    }
    pthread_mutex_lock((pthread_mutex_t *)&c->lock);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock((pthread_mutex_t *)&c->lock);
}
