/* Pack load benchmark: builds a uint16/LZ4 pack of the synthetic low-dose
 * set (one 4096-scan shard at a time), then times the bounded load on 1 and
 * 2 threads, phase by phase, beside the floor that mandatory hashing sets:
 * SHA-256 of the same decoded bytes alone, and of everything a load must
 * hash (the decoded bytes and each shard's descriptor widths). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/sha256.h"
#include "pack/encode.h"
#include "synth.h"

#define USER_BLOCK 65536u

/* Writes `path`: user block, then each shard's payload, lengths, widths. */
static int build_pack(const synth_params *data, uint64_t sps, const char *path,
                      uint64_t *decoded_total, uint8_t **decoded_all, uint64_t *widths_total)
{
    const uint64_t P = data->shape[2] * data->shape[3];
    const uint64_t scans = data->shape[0] * data->shape[1], shards = scans / sps;
    synth *g = synth_new(data);
    uint16_t *rows = malloc((size_t)(sps * P) * 2);
    pack_shard_record *rec = calloc((size_t)shards, sizeof *rec);
    pack_encoded_shard *enc = calloc((size_t)shards, sizeof *enc);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    qem_sha256 *raw = qem_sha256_new();
    qem_error e = {0};
    uint64_t at = USER_BLOCK;
    int ok = g && rows && rec && enc && fd >= 0 && raw;
    *decoded_total = 0;
    *widths_total = 0;
    for (uint64_t s = 0; ok && s < shards; s++) {
        for (uint64_t i = 0; i < sps; i++)
            synth_frame(g, s * sps + i, rows + i * P);
        qem_sha256_update(raw, rows, (size_t)(sps * P) * 2);
        ok = qem_pack_encode_v1_shard(rows, sps, P, &enc[s], &e) == QEM_OK;
        if (!ok)
            break;
        const void *parts[3] = {enc[s].compressed, enc[s].lengths, enc[s].widths};
        const uint64_t sizes[3] = {enc[s].compressed_bytes, enc[s].chunk_count,
                                   enc[s].width_count};
        uint64_t *offsets[3] = {&rec[s].payload_offset, &rec[s].lengths_offset,
                                &rec[s].widths_offset};
        for (int k = 0; k < 3 && ok; k++) {
            *offsets[k] = at;
            ok = pwrite(fd, parts[k], (size_t)sizes[k], (off_t)at) == (ssize_t)sizes[k];
            at += sizes[k];
        }
        rec[s].payload_bytes = enc[s].compressed_bytes;
        rec[s].lengths_bytes = enc[s].chunk_count;
        rec[s].widths_bytes = enc[s].width_count;
        rec[s].decoded_bytes = enc[s].decoded_bytes;
        rec[s].descriptor_count = (uint32_t)enc[s].width_count;
        rec[s].chunk_count = (uint32_t)enc[s].chunk_count;
        memcpy(rec[s].decoded_sha256, enc[s].decoded_sha256, 32);
        *decoded_total += enc[s].decoded_bytes;
        *widths_total += enc[s].width_count;
    }
    /* The decoded bitstreams, then the widths, kept for the hashing floors. */
    *decoded_all = ok ? malloc((size_t)(*decoded_total + *widths_total)) : NULL;
    uint64_t copied = 0;
    for (uint64_t s = 0; *decoded_all && s < shards; s++) {
        memcpy(*decoded_all + copied, enc[s].decoded, (size_t)enc[s].decoded_bytes);
        copied += enc[s].decoded_bytes;
    }
    for (uint64_t s = 0; *decoded_all && s < shards; s++) {
        memcpy(*decoded_all + copied, enc[s].widths, (size_t)enc[s].width_count);
        copied += enc[s].width_count;
    }
    if (ok) {
        pack_manifest_facts f = {0};
        f.profile = QEM_PACK_UINT16_LZ4;
        memcpy(f.shape, data->shape, sizeof f.shape);
        f.sps = sps;
        f.shard_count = shards;
        f.working_dtype = QEM_DTYPE_UINT16;
        qem_sha256_oneshot("qem-bench synthetic set", 23, f.identity);
        qem_sha256_final(raw, f.raw_logical_sha256);
        memcpy(f.working_sha256, f.raw_logical_sha256, 32); /* no exclusions */
        f.records = rec;
        f.encoded = enc;
        json_t *m = qem_pack_manifest_build(&f);
        char *text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
        uint64_t index_bytes = 0;
        uint8_t *index = qem_pack_index_build(QEM_PACK_UINT16_LZ4, data->shape, sps, NULL, 0,
                                              f.identity, rec, shards, &index_bytes);
        uint8_t *block = NULL;
        ok = text && index &&
             qem_pack_user_block(text, strlen(text), index, index_bytes, USER_BLOCK, &block, &e) ==
                 QEM_OK &&
             pwrite(fd, block, USER_BLOCK, 0) == USER_BLOCK;
        free(block);
        free(index);
        free(text);
        json_decref(m);
    }
    if (!ok)
        fprintf(stderr, "qem-bench: building the pack failed: %s\n", e.message);
    for (uint64_t s = 0; s < shards; s++)
        qem_pack_encoded_shard_free(&enc[s]);
    free(enc);
    free(rec);
    free(rows);
    qem_sha256_free(raw);
    synth_free(g);
    if (fd >= 0)
        close(fd);
    return ok;
}

typedef struct load_run {
    double total, read, decode, integrity, descriptors;
} load_run;

static int time_load(const char *path, int threads, load_run *r)
{
    qem_error e = {0};
    qem_pack *p = NULL;
    qem_pack_options o;
    qem_pack_options_init(&o);
    o.threads = threads;
    const double t0 = now();
    if (qem_pack_open(path, NULL, &p, &e) != QEM_OK || qem_pack_load(p, &o, &e) != QEM_OK) {
        qem_pack_close(p);
        return die("pack load", &e);
    }
    r->total = now() - t0;
    qem_pack_timings t = {.struct_size = sizeof t};
    qem_pack_get_timings(p, &t, NULL);
    r->read = t.source_read / 1e3;
    r->decode = t.decode / 1e3;
    r->integrity = t.payload_integrity / 1e3;
    r->descriptors = t.descriptor_preparation / 1e3;
    qem_pack_close(p);
    return 0;
}

int bench_pack_load(const config *c, const char *dir, char *out, size_t size)
{
    static const synth_params set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 0.3, 20261129, 0.0};
    const uint64_t sps = 4096;
    char path[600];
    snprintf(path, sizeof path, "%s/set.h5", dir);
    fprintf(stderr, "building a uint16/LZ4 pack of 128x128x128x128 uint16 ...\n");
    uint64_t decoded = 0, widths = 0;
    uint8_t *all = NULL;
    if (!build_pack(&set, sps, path, &decoded, &all, &widths))
        return -1;
    const uint64_t bytes = file_size(path);
    /* A load takes about 10 ms, so a few runs are at the mercy of one
     * scheduler hiccup: take at least 10. */
    const int runs = c->runs > 10 ? c->runs : 10;
    /* The floors: hashing the decoded bytes alone, as loading must, and
     * also the widths, whose digest loading must check too. */
    double floor_t[MAX_RUNS], full_t[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        uint8_t d[32];
        double t0 = now();
        qem_sha256_oneshot(all, (size_t)decoded, d);
        floor_t[r] = now() - t0;
        t0 = now();
        qem_sha256_oneshot(all, (size_t)decoded, d);
        qem_sha256_oneshot(all + decoded, (size_t)widths, d);
        full_t[r] = now() - t0;
    }
    free(all);
    double floor_min, floor_med, full_min, full_med;
    summarise(floor_t, runs, &floor_min, &floor_med);
    summarise(full_t, runs, &full_min, &full_med);
    double total[2][MAX_RUNS], min[2], med[2];
    load_run last[2]; /* the phases of each thread count's fastest run */
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < runs; r++) {
            load_run run;
            if (time_load(path, c->threads[k], &run))
                return -1;
            total[k][r] = run.total;
            if (r == 0 || run.total < last[k].total)
                last[k] = run;
        }
        summarise(total[k], runs, &min[k], &med[k]);
    }
    unlink(path);
    const double gb = (double)decoded / 1e9;
    return snprintf(
        out, size,
        "### Pack load (Lossless Pack Format v1, uint16/LZ4)\n\n"
        "The integer set above as a pack: %llu shards of %llu scans, %.2f MB on disk, %.2f MB "
        "decoded resident (ratio %.1fx of uint16); %d runs. Load = open + every shard read, widths "
        "checked, 128-byte LZ4 blocks decoded, decoded SHA-256 verified; on 2 threads each "
        "thread loads whole shards, and the phases are summed over both threads; warm page "
        "cache, the loads repeated in one process.\n\n"
        "| measure | 1 thread | 2 threads |\n"
        "|---|---|---|\n"
        "| load, decoded GB/s (min / median) | %.3f / %.3f | %.3f / %.3f |\n"
        "| load time, ms (min; the phases below are that run's) | %.1f | %.1f |\n"
        "| of which source read, ms | %.1f | %.1f |\n"
        "| of which LZ4 decode, ms | %.1f | %.1f |\n"
        "| of which SHA-256 of decoded payloads and widths, ms | %.1f | %.1f |\n"
        "| of which descriptor preparation, ms | %.1f | %.1f |\n"
        "| SHA-256 floor: decoded bytes alone, ms (min / median) | %.1f / %.1f | |\n"
        "| load / floor (min) | %.2fx | %.2fx |\n"
        "| SHA-256 floor: decoded bytes and widths (all a load hashes), ms | %.1f / %.1f | |\n"
        "| load / that floor (min) | %.2fx | %.2fx |\n\n",
        (unsigned long long)((set.shape[0] * set.shape[1]) / sps), (unsigned long long)sps,
        (double)bytes / 1e6, (double)decoded / 1e6,
        (double)(set.shape[0] * set.shape[1] * set.shape[2] * set.shape[3] * 2) / (double)bytes,
        runs, gb / min[0], gb / med[0], gb / min[1], gb / med[1], min[0] * 1e3, min[1] * 1e3,
        last[0].read * 1e3, last[1].read * 1e3, last[0].decode * 1e3, last[1].decode * 1e3,
        last[0].integrity * 1e3, last[1].integrity * 1e3, last[0].descriptors * 1e3,
        last[1].descriptors * 1e3, floor_min * 1e3, floor_med * 1e3, min[0] / floor_min,
        min[1] / floor_min, full_min * 1e3, full_med * 1e3, min[0] / full_min, min[1] / full_min);
}
