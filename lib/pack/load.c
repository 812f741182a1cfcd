/* The bounded resident lifecycle: one shard at a time per thread, read
 * its stored ranges, check widths (uint16/LZ4) or compact headers
 * (uint8/bitpacked), decode the 128-byte LZ4 blocks, authenticate the
 * payload, keep only the compact payload and its tile widths. The source is
 * published only after every shard passed; nothing partial is ever kept. */
#include <lz4.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"
#include "common/fileio.h"
#include "common/options.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "pack/pack_internal.h"

void qem_pack_options_init(qem_pack_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

/* Staging buffers kept from shard to shard (payload, lengths):
 * fresh ones would be page-faulted and zeroed again for every shard. */
enum { SCRATCH_PAYLOAD, SCRATCH_LENGTHS, SCRATCH_KINDS };

typedef struct load_state {
    qem_pack *p;
    int threads;
    int stored_digests;
    pack_shard *staged; /* resident buffers, adopted only at the end */
    uint8_t *max_width;
    qem_pack_timings t;
    uint8_t *scratch[SCRATCH_KINDS];
    size_t scratch_size[SCRATCH_KINDS];
} load_state;

static uint8_t *scratch(load_state *L, int kind, uint64_t size)
{
    if (L->scratch_size[kind] < size) {
        free(L->scratch[kind]);
        L->scratch[kind] = qem_large_alloc((size_t)size);
        L->scratch_size[kind] = L->scratch[kind] ? (size_t)size : 0;
    }
    return L->scratch[kind];
}

static void scratch_free(load_state *L)
{
    for (int k = 0; k < SCRATCH_KINDS; k++) {
        free(L->scratch[k]);
        L->scratch[k] = NULL;
        L->scratch_size[k] = 0;
    }
}

static qem_status digest_check(const void *data, uint64_t size, const uint8_t want[32],
                               qem_status status, const char *what, uint64_t shard,
                               qem_error *error)
{
    uint8_t got[32];
    if (qem_sha256_oneshot(data, (size_t)size, got) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    if (memcmp(got, want, 32) != 0)
        return qem_fail(error, status, "pack shard %llu %s failed SHA-256; the file is damaged",
                        (unsigned long long)shard, what);
    return QEM_OK;
}

static qem_status read_range(const qem_pack *p, void *buf, uint64_t offset, uint64_t bytes,
                             qem_error *error)
{
    return qem_pread_full(p->fd, buf, (size_t)bytes, offset, QEM_E_PACK_RANGE, error);
}

/* LZ4 blocks are decoded in segments of PACK_SEGMENT_CHUNKS (32 KiB
 * decoded), each hashed right behind its decoding: on one thread while
 * still in cache, or, one shard at a time on several threads, by one
 * thread while the others decode the next segments. */
#define SEGMENT_CHUNKS PACK_SEGMENT_CHUNKS

/* Work that needs none of the decoded bytes (the uint16 layout) runs
 * on the hashing thread before it starts, while decoding gets ahead. Its
 * status goes to prepare_status/prepare_error for the caller to rank. */
typedef struct prepare_step {
    qem_status (*run)(load_state *L, uint64_t s, void *ctx, qem_error *error);
    void *ctx;
    uint64_t shard;
    qem_status status;
    qem_error error;
} prepare_step;

/* Blocks [first, end) of a shard; `at` is block first's offset in the
 * payload, each stored length byte being the block's size - 1. */
static void decode_blocks(const uint8_t *payload, const uint8_t *lengths, uint64_t at,
                          const pack_shard *r, uint32_t *words, uint64_t first, uint64_t end,
                          atomic_llong *bad)
{
    for (uint64_t c = first; c < end; c++) {
        const uint64_t start = c * PACK_CHUNK_BYTES;
        const int expect = (int)(r->decoded_bytes - start < PACK_CHUNK_BYTES
                                     ? r->decoded_bytes - start
                                     : PACK_CHUNK_BYTES);
        const int size = lengths[c] + 1;
        const int got = LZ4_decompress_safe((const char *)payload + at, (char *)words + start,
                                            size, expect);
        at += (uint64_t)size;
        if (got != expect) {
            long long seen = atomic_load(bad);
            while ((seen < 0 || (long long)c < seen) &&
                   !atomic_compare_exchange_weak(bad, &seen, (long long)c)) {
            }
        }
    }
}

static void hash_segment(qem_sha256 *ctx, const pack_shard *r, const uint32_t *words, uint64_t seg)
{
    const uint64_t start = seg * SEGMENT_CHUNKS * PACK_CHUNK_BYTES;
    const uint64_t end = (seg + 1) * SEGMENT_CHUNKS * PACK_CHUNK_BYTES;
    qem_sha256_update(ctx, (const uint8_t *)words + start,
                      (size_t)((end < r->decoded_bytes ? end : r->decoded_bytes) - start));
}

/* On one thread the payload can be read a piece at a time, just before
 * its blocks are decoded: the copy lands in cache and the decoder reads
 * it there, instead of a shard-sized copy written to memory and read back. */
static uint64_t piece_end(uint64_t seg, uint64_t segments)
{
    return seg + PACK_PIECE_SEGMENTS < segments ? seg + PACK_PIECE_SEGMENTS : segments;
}

/* `payload` holds the whole payload, or, with `pieces_from` (where the
 * payload starts in the file), room for its largest piece. */
static qem_status decode_and_hash(load_state *L, uint8_t *payload, const uint64_t *pieces_from,
                                  const uint8_t *lengths, const uint64_t *segment_at,
                                  const pack_shard *r, uint32_t *words, int64_t *bad_chunk,
                                  uint8_t digest[32], prepare_step *prep, qem_error *error)
{
    const uint64_t chunks = r->chunk_count;
    const uint64_t segments = (chunks + SEGMENT_CHUNKS - 1) / SEGMENT_CHUNKS;
    atomic_uchar *ready = calloc((size_t)(segments ? segments : 1), sizeof *ready);
    qem_sha256 *ctx = qem_sha256_new();
    if (!ready || !ctx) {
        free(ready);
        qem_sha256_free(ctx);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    atomic_ullong next = 0;
    atomic_llong bad = -1;
    double hashing = 0, decoding = 0;
    const int threads = L->threads;
    struct timespec t0;
    if (threads == 1) {
        /* Each segment is hashed right after it is decoded, while its
         * bytes are still in cache. */
        prep->status = prep->run(L, prep->shard, prep->ctx, &prep->error);
        uint64_t piece_at = 0;
        for (uint64_t seg = 0; seg < segments; seg++) {
            if (pieces_from && seg % PACK_PIECE_SEGMENTS == 0) {
                const uint64_t last = piece_end(seg, segments);
                qem_pack_now(&t0);
                piece_at = segment_at[seg];
                const qem_status st = read_range(L->p, payload, *pieces_from + piece_at,
                                                 segment_at[last] - piece_at, error);
                L->t.source_read += qem_pack_elapsed_ms(&t0);
                if (st != QEM_OK) {
                    qem_sha256_free(ctx);
                    free(ready);
                    return st;
                }
            }
            qem_pack_now(&t0);
            const uint64_t end = (seg + 1) * SEGMENT_CHUNKS;
            decode_blocks(payload, lengths, segment_at[seg] - piece_at, r, words,
                          seg * SEGMENT_CHUNKS, end < chunks ? end : chunks, &bad);
            decoding += qem_pack_elapsed_ms(&t0);
            qem_pack_now(&t0);
            hash_segment(ctx, r, words, seg);
            hashing += qem_pack_elapsed_ms(&t0);
        }
        L->t.payload_integrity += hashing;
        L->t.decode += decoding;
    } else {
        qem_pack_now(&t0);
#pragma omp parallel num_threads(qem_threads_resolve(threads))
        {
            int me = 0;
#ifdef _OPENMP
            me = omp_get_thread_num();
#endif
            if (me != 0) {
                for (;;) {
                    const uint64_t seg = atomic_fetch_add(&next, 1);
                    if (seg >= segments)
                        break;
                    const uint64_t end = (seg + 1) * SEGMENT_CHUNKS;
                    decode_blocks(payload, lengths, segment_at[seg], r, words, seg * SEGMENT_CHUNKS,
                                  end < chunks ? end : chunks, &bad);
                    atomic_store(&ready[seg], 1);
                }
            } else {
                /* The hasher: work that needs no decoded bytes, then the
                 * segments in order as they become ready. */
                prep->status = prep->run(L, prep->shard, prep->ctx, &prep->error);
                struct timespec h0;
                qem_pack_now(&h0);
                for (uint64_t seg = 0; seg < segments; seg++) {
                    while (!atomic_load(&ready[seg]))
                        sched_yield();
                    hash_segment(ctx, r, words, seg);
                }
                hashing = qem_pack_elapsed_ms(&h0);
            }
        }
        /* The phases overlap: decode is the wall time of both together. */
        L->t.payload_integrity += hashing;
        L->t.decode += qem_pack_elapsed_ms(&t0);
    }
    *bad_chunk = atomic_load(&bad);
    qem_status st = qem_sha256_final(ctx, digest) == 0
                        ? QEM_OK
                        : qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    qem_sha256_free(ctx);
    free(ready);
    return st;
}

/* uint16/LZ4 layout from the widths, with the width rules, then the
 * widths digest (always: the decoded digest does not cover how the bits
 * are read). Tile offsets are implicit, 4 words per unit of width: the
 * resident keeps the widths as stored and where each pixel starts, and
 * finds a tile by summing the widths before it. */
typedef struct v1_layout_job {
    const uint8_t *widths;
    pack_shard *out;
} v1_layout_job;

static qem_status v1_layout(load_state *L, uint64_t s, void *ctx, qem_error *error)
{
    const v1_layout_job *job = ctx;
    qem_pack *p = L->p;
    const pack_shard *r = &p->shards[s];
    struct timespec t0;
    qem_pack_now(&t0);
    uint64_t word = 0;
    for (uint64_t pixel = 0; pixel < p->pixels; pixel++) {
        uint8_t widest;
        job->out->pixel_words[pixel] = (uint32_t)word;
        word += 4 * pack_width_sum(job->widths + pixel * p->tiles, p->tiles, &widest);
        const unsigned wmax = widest;
        /* Rules per pixel, on its widest tile. */
        if (wmax > 16)
            return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                            "pack shard %llu requires %u bits per sample (detector pixel %llu), "
                            "beyond exact uint16 width 16",
                            (unsigned long long)s, wmax, (unsigned long long)pixel);
        if (wmax > 8 && p->working_dtype == QEM_DTYPE_UINT8 && !p->is_excluded[pixel])
            return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                            "pack shard %llu stores width %u at detector pixel %llu, which is "
                            "not excluded, under working_dtype uint8",
                            (unsigned long long)s, wmax, (unsigned long long)pixel);
        if (wmax > L->max_width[pixel])
            L->max_width[pixel] = (uint8_t)wmax;
        if (word >= PACK_MAX_WORDS)
            break;
    }
    if (word != r->decoded_bytes / 4)
        return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                        "pack shard %llu descriptors end at word %llu, not at the decoded size "
                        "(%llu words)",
                        (unsigned long long)s, (unsigned long long)word,
                        (unsigned long long)(r->decoded_bytes / 4));
    L->t.descriptor_preparation += qem_pack_elapsed_ms(&t0);
    if (!r->has_widths_sha256)
        return QEM_OK;
    qem_pack_now(&t0);
    qem_status st = digest_check(job->widths, r->widths_bytes, r->widths_sha256,
                                 QEM_E_PACK_DIGEST, "descriptor widths (descriptor_widths_sha256)",
                                 s, error);
    L->t.payload_integrity += qem_pack_elapsed_ms(&t0);
    return st;
}

/* uint16/LZ4: widths -> layout, then the LZ4 blocks, then the digest. */
static qem_status load_v1_shard(load_state *L, uint64_t s, qem_error *error)
{
    qem_pack *p = L->p;
    const pack_shard *r = &p->shards[s];
    pack_shard *out = &L->staged[s];
    struct timespec t0;
    qem_status st = QEM_OK;
    uint8_t *lengths = scratch(L, SCRATCH_LENGTHS, r->lengths_bytes);
    const uint64_t segments = (r->chunk_count + SEGMENT_CHUNKS - 1) / SEGMENT_CHUNKS;
    uint64_t *segment_at = malloc((size_t)(segments + 1) * sizeof *segment_at);
    /* The widths are read straight into the resident. */
    uint8_t *widths = out->tile_widths = malloc((size_t)r->widths_bytes);
    out->pixel_words = malloc((size_t)p->pixels * sizeof *out->pixel_words);
    out->words = pack_words_alloc(r->decoded_bytes);
    if (!lengths || !widths || !segment_at || !out->pixel_words || !out->words) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory loading pack shard %llu",
                      (unsigned long long)s);
        goto done;
    }
    qem_pack_now(&t0);
    st = read_range(p, lengths, r->lengths_offset, r->lengths_bytes, error);
    if (st == QEM_OK)
        st = read_range(p, widths, r->widths_offset, r->widths_bytes, error);
    L->t.source_read += qem_pack_elapsed_ms(&t0);
    if (st != QEM_OK)
        goto done;

    /* Each stored length byte is compressed size - 1; together they cover
     * the payload exactly. Decoding needs only where each segment starts. */
    uint64_t covered = 0;
    for (uint64_t c = 0; c < r->chunk_count; c++) {
        if (c % SEGMENT_CHUNKS == 0)
            segment_at[c / SEGMENT_CHUNKS] = covered;
        covered += lengths[c] + 1u;
    }
    segment_at[segments] = covered;

    /* The compressed digest only repeats what the decoded one proves, so
     * it is checked on request (qem verify), over the whole payload. */
    const int check_compressed = r->has_compressed_sha256 && L->stored_digests;
    const int in_pieces = L->threads == 1 && !check_compressed && covered == r->payload_bytes;
    uint64_t payload_held = r->payload_bytes;
    if (in_pieces) {
        payload_held = 0;
        for (uint64_t seg = 0; seg < segments; seg += PACK_PIECE_SEGMENTS) {
            const uint64_t last = piece_end(seg, segments);
            if (segment_at[last] - segment_at[seg] > payload_held)
                payload_held = segment_at[last] - segment_at[seg];
        }
    }
    const uint64_t transient = payload_held + r->lengths_bytes + r->widths_bytes +
                               (segments + 1) * 8 + r->decoded_bytes + 4ull * p->pixels;
    if (transient > L->t.peak_transient_bytes)
        L->t.peak_transient_bytes = transient;
    uint8_t *payload = scratch(L, SCRATCH_PAYLOAD, payload_held ? payload_held : 1);
    if (!payload) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory loading pack shard %llu",
                      (unsigned long long)s);
        goto done;
    }
    if (!in_pieces) {
        qem_pack_now(&t0);
        st = read_range(p, payload, r->payload_offset, r->payload_bytes, error);
        L->t.source_read += qem_pack_elapsed_ms(&t0);
        if (st != QEM_OK)
            goto done;
    }
    qem_pack_now(&t0);
    if (check_compressed)
        st = digest_check(payload, r->payload_bytes, r->compressed_sha256, QEM_E_PACK_DIGEST,
                          "compressed payload (payload_compressed_sha256)", s, error);
    L->t.payload_integrity += qem_pack_elapsed_ms(&t0);
    if (st != QEM_OK)
        goto done;
    const int lengths_cover = covered == r->payload_bytes;
    v1_layout_job job = {widths, out};
    prepare_step prep = {v1_layout, &job, s, QEM_OK, {0}};
    if (!lengths_cover) {
        /* A bad width is named before bad lengths. */
        st = v1_layout(L, s, &job, error);
        if (st != QEM_OK)
            goto done;
        st = qem_fail(error, QEM_E_PACK_LZ4,
                      "pack shard %llu chunk lengths cover %llu bytes, not the %llu-byte "
                      "compressed payload",
                      (unsigned long long)s, (unsigned long long)covered,
                      (unsigned long long)r->payload_bytes);
        goto done;
    }
    int64_t bad_chunk = -1;
    uint8_t digest[32];
    st = decode_and_hash(L, payload, in_pieces ? &r->payload_offset : NULL, lengths, segment_at,
                         r, out->words, &bad_chunk, digest, &prep, error);
    if (st != QEM_OK)
        goto done;
    if (prep.status != QEM_OK) {
        /* Width rules rank first: a bad width is named as such. */
        if (error)
            *error = prep.error;
        st = prep.status;
        goto done;
    }
    if (bad_chunk >= 0) {
        st = qem_fail(error, QEM_E_PACK_LZ4,
                      "pack shard %llu LZ4 block %lld does not decode to its exact size; the "
                      "file is damaged",
                      (unsigned long long)s, (long long)bad_chunk);
        goto done;
    }
    if (memcmp(digest, r->decoded_sha256, 32) != 0) {
        st = qem_fail(error, QEM_E_PACK_DIGEST,
                      "pack shard %llu decoded payload failed SHA-256; the file is damaged",
                      (unsigned long long)s);
        goto done;
    }
    L->t.decoded_digests_checked++;
done:
    free(segment_at);
    return st;
}

/* uint8/bitpacked: bases, checkpoints and nibble widths, then the digest
 * of the payload as stored. Nothing is expanded. */
static qem_status load_v3_shard(load_state *L, uint64_t s, qem_error *error)
{
    qem_pack *p = L->p;
    const pack_shard *r = &p->shards[s];
    pack_shard *out = &L->staged[s];
    struct timespec t0;
    out->words = pack_words_alloc(r->payload_bytes);
    out->headers = malloc((size_t)r->widths_bytes);
    const uint64_t transient = r->payload_bytes + r->widths_bytes;
    if (transient > L->t.peak_transient_bytes)
        L->t.peak_transient_bytes = transient;
    if (!out->words || !out->headers)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory loading pack shard %llu",
                        (unsigned long long)s);
    qem_pack_now(&t0);
    QEM_TRY(read_range(p, out->words, r->payload_offset, r->payload_bytes, error));
    QEM_TRY(read_range(p, out->headers, r->widths_offset, r->widths_bytes, error));
    L->t.source_read += qem_pack_elapsed_ms(&t0);

    qem_pack_now(&t0);
    const uint64_t C = p->checkpoints, W = p->width_words, H = C + W, T = p->tiles;
    const unsigned long long k = (unsigned long long)s;
    uint64_t running = 0;
    for (uint64_t px = 0; px < p->pixels; px++) {
        const uint32_t *h = out->headers + px * H;
        if (h[0] != running)
            return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                            "pack shard %llu: detector pixel %llu base %u should be %llu", k,
                            (unsigned long long)px, h[0], (unsigned long long)running);
        uint64_t total = 0;
        for (uint64_t t = 0; t < 8 * W; t++) {
            const unsigned w = (h[C + t / 8] >> (4 * (t % 8))) & 15u;
            if (t >= T) {
                if (w != 0)
                    return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                                    "pack shard %llu: detector pixel %llu has a nonzero unused "
                                    "width nibble",
                                    k, (unsigned long long)px);
                continue;
            }
            if (t > 0 && t % 32 == 0 && h[t / 32] != total)
                return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                                "pack shard %llu: detector pixel %llu checkpoint %llu is %u, the "
                                "widths give %llu",
                                k, (unsigned long long)px, (unsigned long long)(t / 32),
                                h[t / 32], (unsigned long long)total);
            if (w > 8)
                return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                                "pack shard %llu: detector pixel %llu tile %llu has width %u, "
                                "above 8",
                                k, (unsigned long long)px, (unsigned long long)t, w);
            if (w && p->is_excluded[px])
                return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                                "pack shard %llu retains payload widths for an authenticated "
                                "excluded detector pixel (%llu)",
                                k, (unsigned long long)px);
            if (w > L->max_width[px])
                L->max_width[px] = (uint8_t)w;
            total += w;
        }
        running += total;
    }
    if (running != r->payload_bytes / 4)
        return qem_fail(error, QEM_E_PACK_DESCRIPTOR,
                        "pack shard %llu compact headers end at word %llu, not at the payload's "
                        "%llu words",
                        k, (unsigned long long)running,
                        (unsigned long long)(r->payload_bytes / 4));
    L->t.header_validation += qem_pack_elapsed_ms(&t0);

    qem_pack_now(&t0);
    qem_status st = digest_check(out->words, r->payload_bytes, r->decoded_sha256,
                                 QEM_E_PACK_DIGEST, "direct payload", s, error);
    L->t.payload_integrity += qem_pack_elapsed_ms(&t0);
    if (st == QEM_OK)
        L->t.decoded_digests_checked++;
    return st;
}

static void free_staged(pack_shard *staged, uint64_t n)
{
    for (uint64_t s = 0; staged && s < n; s++) {
        free(staged[s].words);
        free(staged[s].tile_widths);
        free(staged[s].pixel_words);
        free(staged[s].headers);
    }
    free(staged);
}

static qem_status load_shard(load_state *L, uint64_t s, qem_error *error)
{
    return L->p->profile == QEM_PACK_UINT16_LZ4 ? load_v1_shard(L, s, error)
                                                : load_v3_shard(L, s, error);
}

/* Whole shards per thread when there are enough of them: each shard's
 * digest is its own SHA-256 stream, so hashing runs in parallel too and
 * every segment is hashed while its decoded bytes are still in cache.
 * Otherwise one shard at a time, its blocks decoded by all but one thread
 * while that one hashes. Shards are claimed in order and the lowest failing
 * shard is reported, so the error does not depend on the thread count. */
static qem_status load_shards(load_state *L, const qem_pack_options *o, qem_error *error)
{
    const uint64_t shards = L->p->shard_count;
    const int threads = L->threads;
    const int whole_shards =
        threads > 1 && shards >= (uint64_t)threads &&
        (shards % (uint64_t)threads == 0 || shards >= 4 * (uint64_t)threads);
    if (!whole_shards) {
        for (uint64_t s = 0; s < shards; s++) {
            QEM_TRY(load_shard(L, s, error));
            if (o->progress && o->progress(o->progress_user, s + 1, shards))
                return qem_fail(error, QEM_E_CANCELLED, "loading cancelled; nothing was kept");
        }
        return QEM_OK;
    }
    load_state *worker = calloc((size_t)threads, sizeof *worker);
    qem_error *worker_error = calloc((size_t)threads, sizeof *worker_error);
    uint64_t *failed_at = malloc((size_t)threads * sizeof *failed_at);
    int ok = worker && worker_error && failed_at;
    for (int w = 0; ok && w < threads; w++) {
        worker[w] = *L;
        memset(worker[w].scratch, 0, sizeof worker[w].scratch);
        memset(worker[w].scratch_size, 0, sizeof worker[w].scratch_size);
        worker[w].threads = 1;
        worker[w].max_width = calloc((size_t)L->p->pixels, 1);
        failed_at[w] = UINT64_MAX;
        ok = worker[w].max_width != NULL;
    }
    if (!ok) {
        for (int w = 0; worker && w < threads; w++)
            free(worker[w].max_width);
        free(worker);
        free(worker_error);
        free(failed_at);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    atomic_ullong next = 0;
    atomic_int stop = 0;
    uint64_t done = 0;
    int cancelled = 0;
#pragma omp parallel num_threads(qem_threads_resolve(threads))
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        load_state *W = &worker[me];
        while (!atomic_load(&stop)) {
            const uint64_t s = atomic_fetch_add(&next, 1);
            if (s >= shards)
                break;
            if (load_shard(W, s, &worker_error[me]) != QEM_OK) {
                failed_at[me] = s;
                atomic_store(&stop, 1);
                break;
            }
            /* One call at a time, counting completed shards. */
#pragma omp critical(qem_pack_load_progress)
            {
                done++;
                if (!cancelled && o->progress && o->progress(o->progress_user, done, shards)) {
                    cancelled = 1;
                    atomic_store(&stop, 1);
                }
            }
        }
    }
    qem_status st = QEM_OK;
    uint64_t lowest = UINT64_MAX;
    for (int w = 0; w < threads; w++) {
        if (failed_at[w] < lowest) {
            lowest = failed_at[w];
            st = worker_error[w].status;
            if (error)
                *error = worker_error[w];
        }
        for (uint64_t px = 0; px < L->p->pixels; px++)
            if (worker[w].max_width[px] > L->max_width[px])
                L->max_width[px] = worker[w].max_width[px];
        free(worker[w].max_width);
        scratch_free(&worker[w]);
        const qem_pack_timings *t = &worker[w].t;
        /* Phases are summed over threads (CPU time); staging over the
         * shards in hand at once. */
        L->t.source_read += t->source_read;
        L->t.header_validation += t->header_validation;
        L->t.payload_integrity += t->payload_integrity;
        L->t.descriptor_preparation += t->descriptor_preparation;
        L->t.decode += t->decode;
        L->t.peak_transient_bytes += t->peak_transient_bytes;
        L->t.decoded_digests_checked += t->decoded_digests_checked;
    }
    free(worker);
    free(worker_error);
    free(failed_at);
    if (st == QEM_OK && cancelled)
        st = qem_fail(error, QEM_E_CANCELLED, "loading cancelled; nothing was kept");
    return st;
}

void qem_pack_await_load(qem_pack *p)
{
    p->load_awaited = 1;
}

qem_status qem_pack_ready(const qem_pack *p, qem_error *error)
{
    if (atomic_load(&p->loaded))
        return QEM_OK;
    if (!p->load_awaited)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the pack is not loaded; load it first (qem_container_load)");
    qem_pack *q = (qem_pack *)p; /* the wait's lock is not the pack's content */
    pthread_mutex_lock(&q->ready_lock);
    while (!q->load_finished)
        pthread_cond_wait(&q->ready_cond, &q->ready_lock);
    const qem_status st = q->load_status;
    const qem_error e = q->load_error;
    pthread_mutex_unlock(&q->ready_lock);
    if (st != QEM_OK && error)
        *error = e;
    return st;
}

static qem_status pack_load(qem_pack *p, const qem_pack_options *options, qem_error *error);

qem_status qem_pack_load(qem_pack *p, const qem_pack_options *options, qem_error *error)
{
    qem_error_clear(error);
    if (!p)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_load: NULL pack");
    qem_error own = {0};
    const qem_status st = pack_load(p, options, &own);
    if (p->load_awaited) {
        /* The first outcome stands: waiting readers take it. */
        pthread_mutex_lock(&p->ready_lock);
        if (!p->load_finished) {
            p->load_finished = 1;
            p->load_status = st;
            p->load_error = own;
            pthread_cond_broadcast(&p->ready_cond);
        }
        pthread_mutex_unlock(&p->ready_lock);
    }
    if (error && st != QEM_OK)
        *error = own;
    return st;
}

static qem_status pack_load(qem_pack *p, const qem_pack_options *options, qem_error *error)
{
    qem_pack_options o;
    qem_pack_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_pack_options", error));
    QEM_TRY(qem_threads_check(o.threads, "qem_pack_options.threads", error));
    if (p->loaded)
        return QEM_OK;
    load_state L = {0};
    L.p = p;
    L.stored_digests = o.check_stored_digests;
    L.t = p->timings;
    L.threads = qem_threads_resolve(o.threads);
    L.t.source_read = L.t.header_validation = L.t.payload_integrity = 0;
    L.t.descriptor_preparation = L.t.decode = L.t.resident_copy = 0;
    L.t.peak_transient_bytes = 0;
    L.t.decoded_digests_checked = 0;
    qem_status st = QEM_OK;
    if (o.expect_sha256) {
        struct timespec t0;
        qem_pack_now(&t0);
        /* The load reports shards: "0 loaded" while the file is hashed. */
        qem_progress_before before = {o.progress, o.progress_user, p->shard_count};
        st = qem_file_digest_check(p->fd, p->file_size, o.expect_sha256, p->path,
                                   o.progress ? qem_progress_none_done_yet : NULL, &before,
                                   error);
        L.t.whole_file_integrity = qem_pack_elapsed_ms(&t0);
    }
    L.staged = calloc((size_t)p->shard_count, sizeof *L.staged);
    L.max_width = calloc((size_t)p->pixels, 1);
    if (st == QEM_OK && (!L.staged || !L.max_width))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = load_shards(&L, &o, error);
    scratch_free(&L);
    /* The file must be the one that was opened, unchanged. */
    if (st == QEM_OK)
        st = qem_file_stamp_check(p->fd, &p->stamp, p->path, "loaded", error);
    if (st != QEM_OK) {
        free_staged(L.staged, p->shard_count);
        free(L.max_width);
        return st;
    }
    /* Publish: every shard passed. */
    for (uint64_t s = 0; s < p->shard_count; s++) {
        p->shards[s].words = L.staged[s].words;
        p->shards[s].tile_widths = L.staged[s].tile_widths;
        p->shards[s].pixel_words = L.staged[s].pixel_words;
        p->shards[s].headers = L.staged[s].headers;
    }
    free(L.staged);
    p->max_width = L.max_width;
    L.t.resident_ready = qem_pack_elapsed_ms(&p->opened_at);
    p->timings = L.t;
    /* Last: a reader that sees it loaded sees everything above. */
    atomic_store(&p->loaded, 1);
    return QEM_OK;
}
