/* Decoded pixel columns (column_cache.h): 16 shards, each a chained hash
 * table over a fixed array of entries with a doubly linked recency list
 * and its own mutex, so threads reducing different pixels rarely wait. */
#include "qem/column_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/large_alloc.h"

#define NONE UINT32_MAX
#define COLUMN_SAMPLES 512u
#define SHARDS 16u

typedef struct column_entry {
    uint64_t block; /* chunk << 32 | block in the chunk */
    uint64_t pixel;
    uint32_t next;          /* the bucket's chain */
    uint32_t newer, older;  /* the recency list */
    uint32_t bucket;
} column_entry;

typedef struct column_shard {
    pthread_mutex_t lock;
    uint32_t capacity, used;
    uint32_t *buckets;
    uint32_t bucket_mask;
    column_entry *entries;
    uint16_t *data; /* capacity x COLUMN_SAMPLES, touched as it fills */
    uint32_t newest, oldest;
    uint64_t hits, misses;
} column_shard;

struct qem_column_cache {
    column_shard shard[SHARDS];
    uint64_t capacity;
};

static uint64_t hash_of(uint64_t block, uint64_t pixel)
{
    uint64_t h = (block * 0x9e3779b97f4a7c15ull) ^ (pixel + 0x632be59bd9b4e019ull);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

void qem_column_cache_free(qem_column_cache *c)
{
    if (!c)
        return;
    for (unsigned s = 0; s < SHARDS; s++) {
        pthread_mutex_destroy(&c->shard[s].lock);
        free(c->shard[s].buckets);
        free(c->shard[s].entries);
        free(c->shard[s].data);
    }
    free(c);
}

qem_status qem_column_cache_new(uint64_t bytes, qem_column_cache **out, qem_error *error)
{
    *out = NULL;
    const uint64_t per = COLUMN_SAMPLES * sizeof(uint16_t) + sizeof(column_entry) + 2 * 4;
    uint64_t each = bytes / per / SHARDS;
    if (each > (1ull << 26))
        each = 1ull << 26;
    if (!each)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "a column cache of %llu bytes holds no column (it needs at least %llu)",
                        (unsigned long long)bytes, (unsigned long long)(per * SHARDS));
    uint32_t buckets = 1;
    while (buckets < 2 * each)
        buckets <<= 1;
    qem_column_cache *c = calloc(1, sizeof *c);
    if (!c)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a column cache");
    for (unsigned s = 0; s < SHARDS; s++)
        pthread_mutex_init(&c->shard[s].lock, NULL);
    int ok = 1;
    for (unsigned s = 0; ok && s < SHARDS; s++) {
        column_shard *h = &c->shard[s];
        h->buckets = malloc((size_t)buckets * sizeof *h->buckets);
        h->entries = qem_large_alloc((size_t)each * sizeof *h->entries);
        h->data = qem_large_alloc((size_t)each * COLUMN_SAMPLES * sizeof *h->data);
        ok = h->buckets && h->entries && h->data;
        if (ok)
            memset(h->buckets, 0xff, (size_t)buckets * sizeof *h->buckets);
        h->capacity = (uint32_t)each;
        h->bucket_mask = buckets - 1;
        h->newest = h->oldest = NONE;
    }
    if (!ok) {
        qem_column_cache_free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte column cache",
                        (unsigned long long)bytes);
    }
    c->capacity = each * SHARDS;
    *out = c;
    return QEM_OK;
}

uint64_t qem_column_cache_capacity(const qem_column_cache *c)
{
    return c ? c->capacity : 0;
}

static void unlink_recency(column_shard *h, uint32_t e)
{
    column_entry *x = &h->entries[e];
    if (x->newer != NONE)
        h->entries[x->newer].older = x->older;
    else
        h->newest = x->older;
    if (x->older != NONE)
        h->entries[x->older].newer = x->newer;
    else
        h->oldest = x->newer;
}

static void make_newest(column_shard *h, uint32_t e)
{
    column_entry *x = &h->entries[e];
    x->newer = NONE;
    x->older = h->newest;
    if (h->newest != NONE)
        h->entries[h->newest].newer = e;
    h->newest = e;
    if (h->oldest == NONE)
        h->oldest = e;
}

static uint32_t find(const column_shard *h, uint32_t bucket, uint64_t block, uint64_t pixel)
{
    for (uint32_t e = h->buckets[bucket]; e != NONE; e = h->entries[e].next)
        if (h->entries[e].block == block && h->entries[e].pixel == pixel)
            return e;
    return NONE;
}

const uint16_t *qem_column_cache_hold(qem_column_cache *c, uint64_t chunk, uint64_t block,
                                      uint64_t pixel, qem_column_hold *hold)
{
    const uint64_t key = chunk << 32 | block, hash = hash_of(key, pixel);
    column_shard *h = &c->shard[hash >> 60];
    pthread_mutex_lock(&h->lock);
    const uint32_t e = find(h, (uint32_t)hash & h->bucket_mask, key, pixel);
    if (e == NONE) {
        h->misses++;
        pthread_mutex_unlock(&h->lock);
        return NULL;
    }
    h->hits++;
    unlink_recency(h, e);
    make_newest(h, e);
    *hold = h;
    return h->data + (size_t)e * COLUMN_SAMPLES;
}

void qem_column_cache_release(qem_column_hold hold)
{
    pthread_mutex_unlock(&((column_shard *)hold)->lock);
}

void qem_column_cache_put(qem_column_cache *c, uint64_t chunk, uint64_t block,
                          const uint64_t *pixels, uint64_t count, uint32_t samples,
                          const uint16_t *columns)
{
    const uint64_t key = chunk << 32 | block;
    for (uint64_t j = 0; j < count; j++) {
        const uint64_t hash = hash_of(key, pixels[j]);
        column_shard *h = &c->shard[hash >> 60];
        const uint32_t bucket = (uint32_t)hash & h->bucket_mask;
        pthread_mutex_lock(&h->lock);
        if (find(h, bucket, key, pixels[j]) != NONE) {
            pthread_mutex_unlock(&h->lock); /* another thread kept it first */
            continue;
        }
        uint32_t e;
        if (h->used < h->capacity) {
            e = h->used++;
        } else {
            /* Replace the least recently used: out of its chain first. */
            e = h->oldest;
            unlink_recency(h, e);
            uint32_t *link = &h->buckets[h->entries[e].bucket];
            while (*link != e)
                link = &h->entries[*link].next;
            *link = h->entries[e].next;
        }
        column_entry *x = &h->entries[e];
        x->block = key;
        x->pixel = pixels[j];
        x->bucket = bucket;
        x->next = h->buckets[bucket];
        h->buckets[bucket] = e;
        make_newest(h, e);
        memcpy(h->data + (size_t)e * COLUMN_SAMPLES, columns + j * samples,
               (size_t)samples * sizeof *columns);
        pthread_mutex_unlock(&h->lock);
    }
}

void qem_column_cache_stats(qem_column_cache *c, uint64_t *hits, uint64_t *misses)
{
    *hits = *misses = 0;
    for (unsigned s = 0; c && s < SHARDS; s++) {
        pthread_mutex_lock(&c->shard[s].lock);
        *hits += c->shard[s].hits;
        *misses += c->shard[s].misses;
        pthread_mutex_unlock(&c->shard[s].lock);
    }
}
