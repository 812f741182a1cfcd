/* The pack producer: inspect -> plan -> produce. A source is authenticated
 * member by member, a plan predicts every bound before anything is
 * allocated, and production builds one shard at a time into an unnamed
 * HDF5 file that appears under its name only when it is complete, after
 * its receipt. Rules and formulas: doc/pack-producer.md. */
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/options.h"
#include "common/sha256.h"
#include "common/byteorder.h"
#include "common/threads.h"
#include "pack/encode.h"
#include "pack/h5write.h"
#include "pack/calibrated_copy.h"
#include "pack/pack_internal.h"
#include "pack/prepared_write.h"
#include "input/input.h"
#include "common/calibration_estimate.h"

#define RECEIPT_SCHEMA "quantem.gpu.lossless-pack-production/v1"
#define FORMAT_SCHEMA "quantem.gpu.lossless-pack-format/v1"
#define MAX_SHARD_SCANS 4096u
#define MAX_ROWS_BYTES (256ull << 20) /* uint16/LZ4: one shard of source rows */

struct qem_pack_inspection {
    qem_acquisition *acquisition;
    acquisition *source;
};

void qem_pack_plan_options_init(qem_pack_plan_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->profile = QEM_PACK_UINT16_LZ4;
}

void qem_pack_produce_options_init(qem_pack_produce_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

static double ms_since(const struct timespec *t0)
{
    return qem_pack_elapsed_ms(t0);
}

/* --- inspect -------------------------------------------------------------- */

qem_status qem_pack_inspect(const char *path, const qem_acquisition_options *options,
                            qem_pack_inspection **out, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_inspect: NULL argument");
    *out = NULL;
    qem_pack_inspection *in = calloc(1, sizeof *in);
    if (!in)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = qem_acquisition_open(path, options, &in->acquisition, error);
    if (st == QEM_OK) {
        in->source = qem_acquisition_input(in->acquisition);
        if (in->source->sample_type == QEM_DTYPE_FLOAT32)
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "'%s' holds float32 values; packs hold exact uint8/uint16 counts (save "
                          "float data as .qem, whose float codec keeps every bit)",
                          path);
    }
    if (st == QEM_OK)
        st = qem_acquisition_authenticate(in->acquisition, error);
    if (st != QEM_OK) {
        qem_pack_inspection_free(in);
        return st;
    }
    *out = in;
    return QEM_OK;
}

void qem_pack_inspection_free(qem_pack_inspection *in)
{
    if (!in)
        return;
    qem_acquisition_close(in->acquisition);
    free(in);
}

static json_t *members_json(const acquisition *s)
{
    json_t *list = json_array();
    for (size_t i = 0; i < s->member_count; i++) {
        const input_member *m = &s->members[i];
        json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:o}", "role",
                                              m->is_master ? "master" : "data", "path", m->path,
                                              "bytes", (json_int_t)m->bytes, "sha256",
                                              qem_pack_digest_json(m->sha256)));
    }
    return list;
}

static json_t *u32_list(const uint32_t *v, uint64_t n)
{
    json_t *list = json_array();
    for (uint64_t i = 0; i < n; i++)
        json_array_append_new(list, json_integer(v[i]));
    return list;
}

/* SHA-256 of an ordered list as little-endian u32 (empty list: of nothing). */
static void u32_list_digest(const uint32_t *v, uint64_t n, uint8_t digest[32])
{
    qem_sha256 *ctx = qem_sha256_new();
    for (uint64_t i = 0; ctx && i < n; i++) {
        uint8_t le[4] = {(uint8_t)v[i], (uint8_t)(v[i] >> 8), (uint8_t)(v[i] >> 16),
                         (uint8_t)(v[i] >> 24)};
        qem_sha256_update(ctx, le, 4);
    }
    if (ctx)
        qem_sha256_final(ctx, digest);
    qem_sha256_free(ctx);
}

char *qem_pack_inspection_json(const qem_pack_inspection *in, qem_error *error)
{
    qem_error_clear(error);
    if (!in) {
        qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_inspection_json: NULL inspection");
        return NULL;
    }
    const acquisition *s = in->source;
    uint8_t bad_digest[32];
    u32_list_digest(s->flagged, s->flagged_count, bad_digest);
    const uint64_t logical = s->shape[0] * s->shape[1] * s->shape[2] * s->shape[3] * 2;
    json_t *root = json_pack(
        "{s:s, s:o, s:[I,I,I,I], s:s, s:I, s:o, s:o, s:o, s:s, s:o, s:I}", "kind", s->family->name,
        "members", members_json(s), "shape", (json_int_t)s->shape[0], (json_int_t)s->shape[1],
        (json_int_t)s->shape[2], (json_int_t)s->shape[3], "dtype",
        qem_dtype_name(qem_input_stored_dtype(s)), "logical_bytes", (json_int_t)logical,
        "bad_pixels", u32_list(s->flagged, s->flagged_count), "bad_pixels_sha256",
        qem_pack_digest_json(bad_digest), "detector_mask_sha256",
        qem_pack_digest_json(s->detector_mask_sha256), "detector_mask_origin", s->mask_origin,
        "source_identity_sha256", qem_pack_digest_json(s->identity),
        "largest_compressed_chunk_bytes", (json_int_t)s->largest_compressed_chunk);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}

/* --- plan ----------------------------------------------------------------- */

/* The excluded pixels: the source's bad pixels and the caller's mask. */
static qem_status excluded_pixels(const acquisition *s, const uint8_t *extra, uint32_t **out,
                                  uint64_t *count, qem_error *error)
{
    const uint64_t P = s->shape[2] * s->shape[3];
    uint8_t *mark = calloc((size_t)P, 1);
    uint32_t *list = malloc((size_t)P * sizeof *list);
    if (!mark || !list) {
        free(mark);
        free(list);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    for (uint64_t i = 0; i < s->flagged_count; i++)
        mark[s->flagged[i]] = 1;
    for (uint64_t p = 0; extra && p < P; p++)
        mark[p] |= extra[p] != 0;
    uint64_t n = 0;
    for (uint64_t p = 0; p < P; p++)
        if (mark[p])
            list[n++] = (uint32_t)p;
    free(mark);
    if (n == P) {
        free(list);
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "every detector pixel would be excluded; nothing would remain to pack");
    }
    *out = list;
    *count = n;
    return QEM_OK;
}

/* Largest divisor of `scans` that is a multiple of `step`, at most `cap`. */
static uint64_t largest_divisor(uint64_t scans, uint64_t step, uint64_t cap)
{
    for (uint64_t d = cap / step * step; d >= step; d -= step)
        if (scans % d == 0)
            return d;
    return 0;
}

static uint64_t memory_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kb * 1024;
}

/* Free bytes at the nearest existing folder of `dest`. */
static uint64_t disk_available(const char *dest)
{
    char *dir = qem_path_dirname(dest ? dest : ".");
    struct statvfs vs;
    while (dir && statvfs(dir, &vs) != 0) {
        char *up = qem_path_dirname(dir);
        if (!up || !strcmp(up, dir)) {
            free(up);
            free(dir);
            return 0;
        }
        free(dir);
        dir = up;
    }
    free(dir);
    return (uint64_t)vs.f_bavail * vs.f_frsize;
}

/* The mask identity's origin: the source's own mask, or the caller's
 * exclusions (see mask_identity). */
static const char *mask_origin_of(const acquisition *s, const uint8_t *extra)
{
    return extra ? "qem-excluded-pixels-u32-mask" : s->mask_origin;
}

static qem_status metadata_worst_case(const acquisition *s, qem_pack_profile profile,
                                      const uint32_t *excluded, uint64_t excluded_count,
                                      const char *mask_origin, uint64_t sps, uint64_t shards,
                                      uint64_t *bytes, qem_error *error);

static qem_status plan_make(const acquisition *s, const qem_pack_plan_options *o,
                            qem_pack_plan *plan, const uint32_t *excluded_list,
                            uint64_t excluded, qem_error *error)
{
    memset(plan, 0, sizeof *plan);
    /* Both profiles record source_dtype uint16: uint8 counts are packed
     * widened (the raw digest is of the uint16 LE array the pack
     * describes). The uint8 profile suits them best; the uint16 one takes
     * the scan counts it cannot (not a multiple of 32). */
    if (qem_input_stored_dtype(s) != QEM_DTYPE_UINT16 &&
        qem_input_stored_dtype(s) != QEM_DTYPE_UINT8)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the source holds %s values; packs hold counts",
                        qem_dtype_name(qem_input_stored_dtype(s)));
    const uint64_t scans = s->shape[0] * s->shape[1], P = s->shape[2] * s->shape[3];
    const uint64_t cap = scans < MAX_SHARD_SCANS ? scans : MAX_SHARD_SCANS;
    plan->profile = o->profile;
    plan->excluded_count = excluded;
    uint64_t sps = 0;
    if (o->profile == QEM_PACK_UINT8_BITPACKED) {
        sps = largest_divisor(scans, PACK_V3_TILE, cap);
        if (!sps)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "the uint8 profile needs a scan count that is a multiple of 32; "
                            "%llu is not (use the uint16/LZ4 profile)",
                            (unsigned long long)scans);
    } else if (o->profile == QEM_PACK_UINT16_LZ4) {
        /* Whole 128-scan tiles when possible, one shard of rows within
         * 256 MiB, and worst-case decoded words within 27-bit offsets. */
        for (uint64_t c = cap; c >= 1 && !sps; c--) {
            uint64_t d = largest_divisor(scans, PACK_V1_TILE, c);
            if (!d)
                d = largest_divisor(scans, 1, c);
            const uint64_t tiles = (d + PACK_V1_TILE - 1) / PACK_V1_TILE;
            if (d * P * 2 <= MAX_ROWS_BYTES && P * tiles * 64 < PACK_MAX_WORDS)
                sps = d;
            else
                c = d; /* try below this divisor */
        }
        if (!sps)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "a %llu-pixel detector is too large for the uint16/LZ4 profile's "
                            "27-bit descriptor offsets",
                            (unsigned long long)P);
    } else {
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown pack profile %d", o->profile);
    }
    const uint64_t shards = scans / sps, rows = sps * P * 2;
    plan->scans_per_shard = sps;
    plan->shard_count = shards;
    /* The user block must hold the manifest and index, which are written
     * only after every shard: decided here, from their largest form. */
    QEM_TRY(metadata_worst_case(s, o->profile, excluded_list, excluded,
                                mask_origin_of(s, o->exclude), sps, shards,
                                &plan->metadata_max_bytes, error));
    plan->user_block_bytes = PACK_USER_BLOCK;
    while (plan->user_block_bytes < plan->metadata_max_bytes &&
           plan->user_block_bytes < PACK_MAX_USER_BLOCK)
        plan->user_block_bytes *= 2;
    if (plan->metadata_max_bytes > plan->user_block_bytes)
        return qem_fail(error, QEM_E_LIMIT,
                        "%llu shards of %llu scans need up to %llu bytes of manifest and index, "
                        "more than the largest user block this producer writes (%u bytes); "
                        "nothing was written",
                        (unsigned long long)shards, (unsigned long long)sps,
                        (unsigned long long)plan->metadata_max_bytes, PACK_MAX_USER_BLOCK);
    uint64_t shard_resident, shard_stored, transient;
    if (o->profile == QEM_PACK_UINT16_LZ4) {
        const uint64_t tiles = (sps + PACK_V1_TILE - 1) / PACK_V1_TILE;
        const uint64_t decoded = P * tiles * 256; /* 128 scans x 16 bits */
        const uint64_t chunks = (decoded + PACK_CHUNK_BYTES - 1) / PACK_CHUNK_BYTES;
        const uint64_t compressed = chunks * 144; /* LZ4_compressBound(128) */
        shard_resident = decoded + P * tiles + 4 * P; /* words, widths, pixel starts */
        shard_stored = compressed + chunks + P * tiles;
        transient = rows + P * tiles + decoded + compressed + chunks;
    } else {
        const uint64_t T = sps / PACK_V3_TILE, H = (T + 31) / 32 + (T + 7) / 8;
        const uint64_t payload = (P - excluded) * sps; /* at most 8 bits a sample */
        shard_resident = payload + 4 * P * H;
        shard_stored = shard_resident;
        transient = rows + payload + 4 * P * H + P * T;
    }
    /* The read-ahead slot (the next shard's rows, from 2 threads), one
     * frame of hashing work, the source's largest stored chunk, and
     * libhdf5's chunk cache and metadata. */
    transient += rows + 2 * P + s->largest_compressed_chunk + (4ull << 20);
    uint64_t paths = 0;
    for (size_t i = 0; i < s->member_count; i++)
        paths += strlen(s->members[i].path);
    plan->resident_bytes = shards * shard_resident;
    plan->peak_transient_bytes = transient;
    /* The prepared extensions: moments, and three masks and images. */
    const uint64_t prepared = 32 * scans + 3 * (P + 4 * scans) + (1ull << 20);
    plan->output_max_bytes = plan->user_block_bytes + shards * shard_stored + (4ull << 20) +
                             shards * (64ull << 10) + prepared;
    plan->receipt_max_bytes = (1ull << 20) + shards * 1024 + s->member_count * 1024 + paths;
    plan->disk_need_bytes = plan->output_max_bytes + plan->receipt_max_bytes;
    plan->available_memory = o->available_memory ? o->available_memory : memory_available();
    plan->available_disk = o->available_disk ? o->available_disk : disk_available(o->destination);
    if (plan->peak_transient_bytes > plan->available_memory)
        return qem_fail(error, QEM_E_INSUFFICIENT_MEMORY,
                        "producing needs %llu bytes of memory at once; %llu are available",
                        (unsigned long long)plan->peak_transient_bytes,
                        (unsigned long long)plan->available_memory);
    if (plan->disk_need_bytes > plan->available_disk)
        return qem_fail(error, QEM_E_INSUFFICIENT_DISK,
                        "the pack and its receipt need up to %llu bytes at the destination; %llu "
                        "are available",
                        (unsigned long long)plan->disk_need_bytes,
                        (unsigned long long)plan->available_disk);
    return QEM_OK;
}

qem_status qem_pack_plan_make(const qem_pack_inspection *in, const qem_pack_plan_options *options,
                              qem_pack_plan *plan, qem_error *error)
{
    qem_error_clear(error);
    if (!in || !plan)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_plan_make: NULL argument");
    qem_pack_plan_options o;
    qem_pack_plan_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_pack_plan_options", error));
    QEM_TRY(qem_result_check(plan, "qem_pack_plan", error));
    uint32_t *excluded = NULL;
    uint64_t count = 0;
    QEM_TRY(excluded_pixels(in->source, o.exclude, &excluded, &count, error));
    qem_pack_plan made;
    const qem_status st = plan_make(in->source, &o, &made, excluded, count, error);
    free(excluded);
    QEM_TRY(st);
    return qem_result_deliver(plan, &made, sizeof made, "qem_pack_plan", error);
}

/* --- produce -------------------------------------------------------------- */

typedef struct production {
    acquisition *src;
    qem_pack_plan plan;
    qem_pack_profile profile;
    uint64_t P, sps, shards;
    int threads; /* resolved: at least 1 */
    uint32_t *excluded;
    uint64_t excluded_count;
    uint8_t *is_excluded;
    uint16_t *constants;     /* uint8 profile: raw value of each excluded pixel */
    pack_shard_record *records;
    pack_encoded_shard *kept; /* uint16: per-shard digests for the manifest */
    uint8_t (*range_sha)[32]; /* uint16: encoded_envelope_sha256 */
    uint8_t (*payload_sha)[32], (*header_sha)[32];
    unsigned *max_width;
    uint8_t raw_sha[32], working_sha[32], mask_sha[32];
    /* Each admitted pixel's working-value sum over every scan: the mean
     * pattern behind the detector calibration estimate recorded. */
    uint64_t *pixel_sums;
    uint8_t *moments; /* scans x 32 bytes: the prepared DPC moment words */
    const char *mask_origin;
    uint64_t accounted_peak, observed_resident;
    double t_auth, t_pack, t_write, t_final, t_prepared;
    pack_prepared_report prepared;
} production;

static void production_free(production *pr)
{
    free(pr->excluded);
    free(pr->is_excluded);
    free(pr->constants);
    free(pr->records);
    for (uint64_t s = 0; pr->kept && s < pr->shards; s++)
        qem_pack_encoded_shard_free(&pr->kept[s]);
    free(pr->kept);
    free(pr->range_sha);
    free(pr->payload_sha);
    free(pr->header_sha);
    free(pr->max_width);
    free(pr->pixel_sums);
    free(pr->moments);
}

/* Adds one shard's working values into the pixel sums: threads take bands
 * of pixels over every scan (32-bit partial sums: at most 65536 scans). */
static void add_pixel_sums(production *pr, const uint16_t *rows)
{
    enum { BAND = 2048 };
    const uint64_t P = pr->P, bands = (P + BAND - 1) / BAND;
#pragma omp parallel for schedule(static) num_threads(pr->threads)
    for (uint64_t b = 0; b < bands; b++) {
        const uint64_t p0 = b * BAND, p1 = p0 + BAND < P ? p0 + BAND : P;
        for (uint64_t s0 = 0; s0 < pr->sps; s0 += 65536) {
            const uint64_t s1 = pr->sps - s0 < 65536 ? pr->sps : s0 + 65536;
            uint32_t acc[BAND] = {0};
            for (uint64_t i = s0; i < s1; i++)
                for (uint64_t p = p0; p < p1; p++)
                    acc[p - p0] += rows[i * P + p];
            for (uint64_t p = p0; p < p1; p++)
                pr->pixel_sums[p] += pr->is_excluded[p] ? 0 : acc[p - p0];
        }
    }
}

/* The detector calibration estimate from the mean pattern of the working
 * values (exact total / scans, rounded once: what qem_products_mean gives
 * on the pack), as the manifest member; NULL where no bright-field disk
 * stands out (nothing is recorded then). */
static json_t *calibration_estimate(const production *pr)
{
    const uint64_t P = pr->P, scans = pr->src->shape[0] * pr->src->shape[1];
    float *mean = malloc((size_t)P * sizeof *mean);
    uint8_t *admitted = malloc((size_t)P);
    json_t *member = NULL;
    if (mean && admitted && scans) {
        for (uint64_t p = 0; p < P; p++) {
            admitted[p] = !pr->is_excluded[p];
            mean[p] = admitted[p] ? (float)((double)pr->pixel_sums[p] / (double)scans) : 0.0f;
        }
        product_calibration est;
        if (qem_product_calibration_estimate(mean, admitted, pr->src->shape[2], pr->src->shape[3],
                                             &est, NULL) == QEM_OK) {
            char hex[65];
            qem_sha256_hex(pr->src->identity, hex);
            member = json_pack("{s:s, s:s, s:[f,f], s:f, s:s}", "schema", PACK_CALIBRATION_SCHEMA,
                               "source_identity_sha256", hex, "detector_center_px", est.center_row,
                               est.center_col, "bright_field_radius_px", est.radius, "method",
                               PRODUCT_CALIBRATION_METHOD);
        }
    }
    free(mean);
    free(admitted);
    return member;
}

/* Raw and working digests of one shard's rows; the uint8 profile also
 * proves every excluded pixel constant. */
static qem_status digest_rows(production *pr, const uint16_t *rows, uint64_t first_scan,
                              qem_sha256 *raw, qem_sha256 *working, uint8_t *frame,
                              qem_error *error)
{
    const uint64_t P = pr->P;
    const int u8 = pr->profile == QEM_PACK_UINT8_BITPACKED;
    qem_sha256_update(raw, rows, (size_t)(pr->sps * P * 2)); /* little-endian host */
    if (!u8 && pr->excluded_count == 0)
        return QEM_OK; /* the working array is the raw one: same digest */
    for (uint64_t i = 0; i < pr->sps; i++) {
        const uint16_t *r = rows + i * P;
        for (uint64_t p = 0; p < P; p++) {
            const uint16_t v = pr->is_excluded[p] ? 0 : r[p];
            if (u8)
                frame[p] = (uint8_t)v;
            else
                memcpy(frame + 2 * p, &v, 2);
        }
        qem_sha256_update(working, frame, (size_t)(P * (u8 ? 1 : 2)));
        for (uint64_t k = 0; u8 && k < pr->excluded_count; k++) {
            const uint32_t p = pr->excluded[k];
            if (first_scan + i == 0)
                pr->constants[k] = r[p];
            else if (r[p] != pr->constants[k])
                return qem_fail(error, QEM_E_NONCONSTANT_EXCLUDED,
                                "excluded detector pixel %u holds %u at scan %llu but %u at scan "
                                "0; the uint8 profile records one raw value per excluded pixel, "
                                "so use the uint16/LZ4 profile, which keeps them all",
                                p, r[p], (unsigned long long)(first_scan + i), pr->constants[k]);
        }
    }
    return QEM_OK;
}

static qem_status write_shard(production *pr, pack_h5_writer *h5, uint64_t s,
                              pack_encoded_shard *enc, qem_error *error)
{
    pack_shard_record *r = &pr->records[s];
    uint64_t unused;
    if (pr->profile == QEM_PACK_UINT16_LZ4) {
        QEM_TRY(qem_pack_h5_append(h5, s, "payload_lz4", enc->compressed, enc->compressed_bytes, 1,
                                   &r->payload_offset, &r->payload_bytes, error));
        QEM_TRY(qem_pack_h5_append(h5, s, "payload_lengths_minus_one", enc->lengths,
                                   enc->chunk_count, 1, &r->lengths_offset, &r->lengths_bytes,
                                   error));
        QEM_TRY(qem_pack_h5_append(h5, s, "descriptor_widths_u8", enc->widths, enc->width_count, 1,
                                   &r->widths_offset, &r->widths_bytes, error));
        r->descriptor_count = (uint32_t)enc->width_count;
        r->chunk_count = (uint32_t)enc->chunk_count;
        qem_sha256_oneshot(enc->compressed, (size_t)enc->compressed_bytes, pr->payload_sha[s]);
        qem_sha256_oneshot(enc->widths, (size_t)enc->width_count, pr->header_sha[s]);
        pr->observed_resident += enc->decoded_bytes + 4 * enc->width_count;
    } else {
        QEM_TRY(qem_pack_h5_append(h5, s, "payload_u32", enc->decoded, enc->decoded_bytes / 4, 4,
                                   &r->payload_offset, &r->payload_bytes, error));
        QEM_TRY(qem_pack_h5_append(h5, s, "compact_headers_u32", enc->headers, enc->header_words, 4,
                                   &r->widths_offset, &r->widths_bytes, error));
        r->descriptor_count = (uint32_t)enc->header_words;
        /* The payload is the decoded stream, already digested. */
        memcpy(pr->payload_sha[s], enc->decoded_sha256, 32);
        qem_sha256_oneshot(enc->headers, (size_t)(4 * enc->header_words), pr->header_sha[s]);
        pr->observed_resident += enc->decoded_bytes + 4 * enc->header_words;
    }
    (void)unused;
    r->decoded_bytes = enc->decoded_bytes;
    memcpy(r->decoded_sha256, enc->decoded_sha256, 32);
    pr->max_width[s] = enc->maximum_width;
    return QEM_OK;
}

/* Each scan's exact DPC moments over the admitted pixels (the prepared
 * extension's words: u64 total, row and column moments, zero padding),
 * while the shard is in hand: no pass over the finished pack. */
static void add_moments(production *pr, const uint16_t *rows, uint64_t first)
{
    const uint64_t P = pr->P, cols = pr->src->shape[3], lines = pr->src->shape[2];
    const uint8_t *excluded = pr->is_excluded;
    /* Row by row: no division per sample; integer sums, so any order. */
#pragma omp parallel for schedule(static) num_threads(pr->threads)
    for (uint64_t i = 0; i < pr->sps; i++) {
        const uint16_t *v = rows + i * P;
        uint64_t t = 0, r = 0, c = 0;
        for (uint64_t y = 0; y < lines; y++) {
            uint64_t line = 0, weighted = 0;
            for (uint64_t x = 0; x < cols; x++) {
                const uint64_t k = y * cols + x, value = excluded[k] ? 0 : v[k];
                line += value;
                weighted += value * x;
            }
            t += line;
            r += line * y;
            c += weighted;
        }
        uint8_t *w = pr->moments + 32 * (first + i);
        qem_put_le64(w, t);
        qem_put_le64(w + 8, r);
        qem_put_le64(w + 16, c);
    }
}

/* The source digests of one shard on a thread of their own (from 2
 * threads), beside its encoding: they run in shard order, so the digests
 * are those of one thread. */
typedef struct digest_job {
    production *pr;
    const uint16_t *rows;
    uint64_t first_scan;
    qem_sha256 *raw, *working;
    uint8_t *frame;
    qem_status status;
    qem_error error;
} digest_job;

static void *digest_run(void *arg)
{
    digest_job *j = arg;
    j->status = digest_rows(j->pr, j->rows, j->first_scan, j->raw, j->working, j->frame,
                            &j->error);
    return NULL;
}

/* The next shard's rows read on a thread of their own (from 2 threads).
 * It is joined before any HDF5 call of the producer: libhdf5 is not
 * thread-safe, and the source may be HDF5. */
typedef struct read_job {
    acquisition *src;
    uint64_t first, count;
    uint16_t *rows;
    qem_status status;
    qem_error error;
} read_job;

static void *read_run(void *arg)
{
    read_job *j = arg;
    j->status = qem_input_read(j->src, j->first, j->count, QEM_DTYPE_UINT16, j->rows,
                               (size_t)(j->count * j->src->shape[2] * j->src->shape[3]) * 2,
                               &j->error);
    return NULL;
}

/* Shard after shard: read, digest, sum, encode, write. From 2 threads the
 * next shard's read and this one's digests run on threads of their own
 * beside the encoding; every output is made in shard order, so the bytes
 * are those of one thread. */
static qem_status build_shards(production *pr, pack_h5_writer *h5,
                               const qem_pack_produce_options *o, qem_error *error)
{
    const uint64_t P = pr->P;
    const size_t rows_bytes = (size_t)(pr->sps * P) * 2;
    const int u8 = pr->profile == QEM_PACK_UINT8_BITPACKED;
    const int overlap = pr->threads > 1;
    uint16_t *rows = malloc(rows_bytes), *next = overlap ? malloc(rows_bytes) : NULL;
    uint8_t *frame = malloc((size_t)P * 2);
    qem_sha256 *raw = qem_sha256_new(), *working = qem_sha256_new();
    qem_status st = rows && frame && raw && working && (next || !overlap)
                        ? QEM_OK
                        : qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-scan shard",
                                   (unsigned long long)pr->sps);
    struct timespec t0;
    qem_pack_now(&t0);
    if (st == QEM_OK)
        st = qem_input_read(pr->src, 0, pr->sps, QEM_DTYPE_UINT16, rows, rows_bytes, error);
    pr->t_pack += ms_since(&t0);
    for (uint64_t s = 0; st == QEM_OK && s < pr->shards; s++) {
        qem_pack_now(&t0);
        pack_encoded_shard enc = {0};
        read_job rj = {pr->src, (s + 1) * pr->sps, pr->sps, next, QEM_OK, {0}};
        digest_job dj = {pr, rows, s * pr->sps, raw, working, frame, QEM_OK, {0}};
        pthread_t reader, digester;
        const int reading = overlap && s + 1 < pr->shards &&
                            pthread_create(&reader, NULL, read_run, &rj) == 0;
        const int digesting = overlap && pthread_create(&digester, NULL, digest_run, &dj) == 0;
        if (!digesting)
            digest_run(&dj);
        add_pixel_sums(pr, rows);
        add_moments(pr, rows, s * pr->sps);
        qem_error enc_error = {0};
        const qem_status enc_st =
            u8 ? qem_pack_encode_v3_shard_threads(rows, pr->sps, P, pr->is_excluded, s * pr->sps,
                                                  pr->threads, &enc, &enc_error)
               : qem_pack_encode_v1_shard_threads(rows, pr->sps, P, pr->threads, &enc,
                                                  &enc_error);
        if (digesting)
            pthread_join(digester, NULL);
        if (reading)
            pthread_join(reader, NULL);
        /* The first failure in the one-thread order: digests, then encoding. */
        if (dj.status != QEM_OK) {
            st = dj.status;
            if (error)
                *error = dj.error;
        } else if (enc_st != QEM_OK) {
            st = enc_st;
            if (error)
                *error = enc_error;
        }
        pr->t_pack += ms_since(&t0);
        if (st != QEM_OK) {
            qem_pack_encoded_shard_free(&enc);
            break;
        }
        /* Counted for every thread count (the receipt must not depend on
         * it): the read-ahead slot, held from 2 threads. */
        const uint64_t held = 2 * (uint64_t)rows_bytes + 2 * P + enc.width_count +
                              enc.decoded_bytes + enc.compressed_bytes + enc.chunk_count +
                              4 * enc.header_words;
        pr->accounted_peak = held > pr->accounted_peak ? held : pr->accounted_peak;
        qem_pack_now(&t0);
        st = write_shard(pr, h5, s, &enc, error);
        pr->t_write += ms_since(&t0);
        if (!u8 && st == QEM_OK) {
            /* The manifest's per-shard digests need the widths and blocks;
             * keep only those, not the decoded stream. */
            free(enc.decoded);
            enc.decoded = NULL;
            pr->kept[s] = enc;
        } else {
            qem_pack_encoded_shard_free(&enc);
        }
        if (st == QEM_OK && o->progress && o->progress(o->progress_user, s + 1, pr->shards))
            st = qem_fail(error, QEM_E_CANCELLED, "production cancelled; nothing was published");
        if (st != QEM_OK || s + 1 == pr->shards)
            break;
        qem_pack_now(&t0);
        if (reading) {
            st = rj.status;
            if (st != QEM_OK && error)
                *error = rj.error;
            uint16_t *filled = next;
            next = rows;
            rows = filled;
        } else {
            st = qem_input_read(pr->src, (s + 1) * pr->sps, pr->sps, QEM_DTYPE_UINT16, rows,
                                rows_bytes, error);
        }
        pr->t_pack += ms_since(&t0);
    }
    if (st == QEM_OK) {
        qem_sha256_final(raw, pr->raw_sha);
        if (!u8 && pr->excluded_count == 0)
            memcpy(pr->working_sha, pr->raw_sha, 32);
        else
            qem_sha256_final(working, pr->working_sha);
    }
    qem_sha256_free(raw);
    qem_sha256_free(working);
    free(rows);
    free(next);
    free(frame);
    return st;
}

/* SHA-256 of a byte range of the open output. */
static qem_status range_digest(int fd, uint64_t start, uint64_t end, uint8_t digest[32],
                               qem_error *error)
{
    enum { PIECE = 1 << 20 };
    uint8_t *buf = malloc(PIECE);
    qem_sha256 *ctx = qem_sha256_new();
    qem_status st = buf && ctx ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t at = start; st == QEM_OK && at < end; at += PIECE) {
        size_t n = end - at < PIECE ? (size_t)(end - at) : PIECE;
        st = qem_pread_full(fd, buf, n, at, QEM_E_IO, error);
        if (st == QEM_OK)
            qem_sha256_update(ctx, buf, n);
    }
    if (st == QEM_OK)
        qem_sha256_final(ctx, digest);
    qem_sha256_free(ctx);
    free(buf);
    return st;
}

static json_t *manifest(production *pr)
{
    pack_manifest_facts f = {0};
    f.profile = pr->profile;
    memcpy(f.shape, pr->src->shape, sizeof f.shape);
    f.sps = pr->sps;
    f.shard_count = pr->shards;
    f.excluded = pr->excluded;
    f.excluded_count = pr->excluded_count;
    f.working_dtype = pr->profile == QEM_PACK_UINT16_LZ4 ? QEM_DTYPE_UINT16 : QEM_DTYPE_UINT8;
    f.retained_policy = 1;
    f.raw_constants = pr->constants;
    memcpy(f.identity, pr->src->identity, 32);
    memcpy(f.raw_logical_sha256, pr->raw_sha, 32);
    memcpy(f.working_sha256, pr->working_sha, 32);
    memcpy(f.detector_mask_sha256, pr->mask_sha, 32);
    f.records = pr->records;
    f.encoded = pr->profile == QEM_PACK_UINT16_LZ4 ? pr->kept : NULL;
    json_t *calibration = pr->pixel_sums ? calibration_estimate(pr) : NULL;
    f.detector_calibration = calibration;
    json_t *m = qem_pack_manifest_build(&f);
    json_decref(calibration);
    if (!m)
        return NULL;
    json_t *shards = json_object_get(m, "shards");
    for (uint64_t s = 0; s < json_array_size(shards); s++)
        json_object_set_new(json_array_get(shards, s), "encoded_envelope_sha256",
                            qem_pack_digest_json(pr->range_sha[s]));
    json_object_set_new(m, "format_schema", json_string(FORMAT_SCHEMA));
    json_object_set_new(m, "encoding_profile",
                        json_string(pr->profile == QEM_PACK_UINT16_LZ4 ? "exact-uint16-lz4"
                                                                       : "exact-uint8-bitpacked"));
    json_object_set_new(m, "detector_mask_identity_origin", json_string(pr->mask_origin));
    json_object_set_new(m, "producer_receipt_schema", json_string(RECEIPT_SCHEMA));
    json_object_set_new(m, "producer_execution_backend", json_string("cpu-reference"));
    json_object_set_new(m, "producer_gpu_accelerated", json_false());
    return m;
}

/* Room left in the planned metadata for the detector_calibration member
 * a calibrated copy (qem calibrate -o) adds, and for the two prepared
 * extensions (about 1 KiB of moments, 3 KiB of products): both keep the
 * user block. */
#define CALIBRATION_ROOM (1024u + 4096u)

/* The prelude, manifest and index at their largest: the manifest this
 * producer writes, built from the plan with every per-shard offset, size
 * and count at its widest (digests are always 64 hex digits, raw constants
 * 65535), and the index, whose size the plan fixes; plus CALIBRATION_ROOM. */
static qem_status metadata_worst_case(const acquisition *s, qem_pack_profile profile,
                                      const uint32_t *excluded, uint64_t excluded_count,
                                      const char *mask_origin, uint64_t sps, uint64_t shards,
                                      uint64_t *bytes, qem_error *error)
{
    /* Past the largest user block on the index alone: no need to build the
     * manifest to know. */
    const uint64_t index_floor = PACK_PRELUDE_BYTES + 4 * excluded_count + 96 * shards;
    if (index_floor > PACK_MAX_USER_BLOCK) {
        *bytes = index_floor;
        return QEM_OK;
    }
    production pr = {0};
    pr.src = (acquisition *)s;
    pr.profile = profile;
    pr.sps = sps;
    pr.shards = shards;
    pr.excluded = (uint32_t *)excluded;
    pr.excluded_count = excluded_count;
    pr.mask_origin = mask_origin;
    pr.records = calloc((size_t)shards, sizeof *pr.records);
    pr.kept = calloc((size_t)shards, sizeof *pr.kept);
    pr.range_sha = calloc((size_t)shards, sizeof *pr.range_sha);
    pr.constants = calloc((size_t)excluded_count + 1, sizeof *pr.constants);
    char *text = NULL;
    uint8_t *index = NULL;
    uint64_t index_bytes = 0;
    if (pr.records && pr.kept && pr.range_sha && pr.constants) {
        for (uint64_t k = 0; k < excluded_count; k++)
            pr.constants[k] = UINT16_MAX;
        for (uint64_t k = 0; k < shards; k++) {
            pack_shard_record *r = &pr.records[k];
            r->payload_offset = r->payload_bytes = r->lengths_offset = r->lengths_bytes =
                r->widths_offset = r->widths_bytes = r->decoded_bytes = INT64_MAX;
            r->descriptor_count = r->chunk_count = UINT32_MAX;
            pr.kept[k].maximum_width = 16;
        }
        json_t *m = manifest(&pr);
        text = m ? json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(m);
        index = text ? qem_pack_index_build(profile, s->shape, sps, excluded, excluded_count,
                                            s->identity, pr.records, shards, &index_bytes)
                     : NULL;
    }
    const qem_status st = index ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        *bytes = ((PACK_PRELUDE_BYTES + strlen(text) + 7) & ~7ull) + index_bytes +
                 CALIBRATION_ROOM;
    free(index);
    free(text);
    free(pr.records);
    free(pr.kept);
    free(pr.range_sha);
    free(pr.constants);
    return st;
}

static json_t *receipt(production *pr, const char *dest, uint64_t output_bytes,
                       const uint8_t output_sha[32], double total_ms)
{
    const acquisition *s = pr->src;
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    uint8_t bad_sha[32];
    u32_list_digest(pr->excluded, pr->excluded_count, bad_sha);
    json_t *shards = json_array();
    for (uint64_t k = 0; k < pr->shards; k++) {
        const pack_shard_record *r = &pr->records[k];
        json_array_append_new(
            shards, json_pack("{s:I, s:I, s:I, s:I, s:o, s:I, s:o, s:I}", "ordinal",
                              (json_int_t)k, "firstScan", (json_int_t)(k * pr->sps), "scanCount",
                              (json_int_t)pr->sps, "payloadBytes", (json_int_t)r->payload_bytes,
                              "payloadSHA256", qem_pack_digest_json(pr->payload_sha[k]),
                              "headerBytes", (json_int_t)r->widths_bytes, "headerSHA256",
                              qem_pack_digest_json(pr->header_sha[k]), "maximumBitWidth",
                              (json_int_t)pr->max_width[k]));
    }
    json_t *constants = json_array();
    for (uint64_t k = 0; pr->constants && k < pr->excluded_count; k++)
        json_array_append_new(constants, json_integer(pr->constants[k]));
    const int u8 = pr->profile == QEM_PACK_UINT8_BITPACKED;
    json_t *r = json_object();
    json_object_set_new(r, "schema", json_string(RECEIPT_SCHEMA));
    json_object_set_new(r, "formatSchema", json_string(FORMAT_SCHEMA));
    json_object_set_new(r, "encodingProfile",
                        json_string(u8 ? "exact-uint8-bitpacked" : "exact-uint16-lz4"));
    json_object_set_new(r, "completedUTC", json_string(when));
    json_object_set_new(r, "destination", json_string(dest));
    json_object_set_new(r, "outputBytes", json_integer((json_int_t)output_bytes));
    json_object_set_new(r, "outputSHA256", qem_pack_digest_json(output_sha));
    json_object_set_new(r, "sourceMembers", members_json(s));
    json_object_set_new(r, "sourceIdentitySHA256", qem_pack_digest_json(s->identity));
    json_object_set_new(r, "sourceRawLogicalSHA256", qem_pack_digest_json(pr->raw_sha));
    json_object_set_new(r, "workingLogicalSHA256", qem_pack_digest_json(pr->working_sha));
    json_object_set_new(r, "sourceShape", json_pack("[I,I,I,I]", (json_int_t)s->shape[0],
                                                    (json_int_t)s->shape[1],
                                                    (json_int_t)s->shape[2],
                                                    (json_int_t)s->shape[3]));
    json_object_set_new(r, "sourceDtype", json_string("uint16"));
    /* The acquisition as read, and the proof that its counts fit uint16
     * (qem's addition; the pack's own source_dtype stays uint16). */
    json_t *acq = json_pack("{s:s, s:s, s:I}", "family", s->family->name, "sampleType",
                            qem_input_read_as_name(s), "flaggedPixels",
                            (json_int_t)s->flagged_count);
    if (s->sample_type == QEM_DTYPE_UINT32) {
        json_object_set_new(acq, "maximumAdmittedValue", json_integer(s->max_admitted));
        json_object_set_new(acq, "flaggedValuesStoredAs65535",
                            json_integer((json_int_t)s->flagged_clipped));
    }
    json_object_set_new(r, "sourceAcquisition", acq);
    json_object_set_new(r, "workingDtype", json_string(u8 ? "uint8" : "uint16"));
    json_object_set_new(r, "preparedIndexBytes", json_integer(0));
    json_object_set_new(r, "maximumCompressedBlockBytes",
                        json_integer((json_int_t)s->largest_compressed_chunk));
    json_object_set_new(r, "executionBackend", json_string("cpu-reference"));
    json_object_set_new(r, "gpuAccelerated", json_false());
    json_object_set_new(r, "scanTile", json_integer(u8 ? PACK_V3_TILE : PACK_V1_TILE));
    json_object_set_new(r, "scansPerShard", json_integer((json_int_t)pr->sps));
    json_object_set_new(r, "shardCount", json_integer((json_int_t)pr->shards));
    json_object_set_new(r, "scanBin", json_integer(1));
    json_object_set_new(r, "detectorBin", json_integer(1));
    json_object_set_new(r, "badPixelIndices", u32_list(pr->excluded, pr->excluded_count));
    json_object_set_new(r, "badPixelIdentitySHA256", qem_pack_digest_json(bad_sha));
    json_object_set_new(r, "detectorMaskIdentitySHA256", qem_pack_digest_json(pr->mask_sha));
    json_object_set_new(r, "detectorMaskIdentityOrigin", json_string(pr->mask_origin));
    json_object_set_new(r, "badPixelRawValues", constants);
    json_object_set_new(r, "predictedPackedResidentMaximumBytes",
                        json_integer((json_int_t)pr->plan.resident_bytes));
    json_object_set_new(r, "observedPackedResidentBytes",
                        json_integer((json_int_t)pr->observed_resident));
    json_object_set_new(r, "predictedPeakTransientBytes",
                        json_integer((json_int_t)pr->plan.peak_transient_bytes));
    json_object_set_new(r, "accountedPeakTransientBytes",
                        json_integer((json_int_t)pr->accounted_peak));
    json_object_set_new(r, "predictedOutputFileMaximumBytes",
                        json_integer((json_int_t)pr->plan.output_max_bytes));
    json_object_set_new(r, "predictedReceiptFileMaximumBytes",
                        json_integer((json_int_t)pr->plan.receipt_max_bytes));
    json_object_set_new(r, "predictedOutputDiskMaximumBytes",
                        json_integer((json_int_t)pr->plan.disk_need_bytes));
    json_object_set_new(
        r, "timing",
        json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "sourceAuthenticationMilliseconds",
                  pr->t_auth, "decodeAndPackingMilliseconds", pr->t_pack,
                  "containerWriteMilliseconds", pr->t_write, "preparedExtensionsMilliseconds",
                  pr->t_prepared, "stabilityAndOutputHashMilliseconds", pr->t_final,
                  "totalBeforeAtomicPublicationMilliseconds", total_ms));
    /* Which prepared extensions the pack carries, and why not. */
    json_object_set_new(
        r, "preparedExtensions",
        json_pack("{s:b, s:b, s:s, s:s}", "dpcMoments", pr->prepared.moments_written,
                  "detectorProducts", pr->prepared.products_written, "dpcMomentsSkipped",
                  pr->prepared.moments_skipped, "detectorProductsSkipped",
                  pr->prepared.products_skipped));
    json_object_set_new(r, "shards", shards);
    return r;
}

/* Mask identity: the source's own mask when the caller adds nothing; with
 * caller exclusions, the LE u32 mask of every excluded pixel (1) or not (0). */
static void mask_identity(production *pr, const uint8_t *extra)
{
    pr->mask_origin = mask_origin_of(pr->src, extra);
    if (!extra) {
        memcpy(pr->mask_sha, pr->src->detector_mask_sha256, 32);
        return;
    }
    qem_sha256 *ctx = qem_sha256_new();
    for (uint64_t p = 0; ctx && p < pr->P; p++) {
        const uint8_t le[4] = {pr->is_excluded[p], 0, 0, 0};
        qem_sha256_update(ctx, le, 4);
    }
    if (ctx)
        qem_sha256_final(ctx, pr->mask_sha);
    qem_sha256_free(ctx);
}

static qem_status prepare(production *pr, qem_pack_inspection *in, const qem_pack_plan_options *po,
                          qem_error *error)
{
    pr->src = in->source;
    pr->profile = po->profile;
    pr->P = pr->src->shape[2] * pr->src->shape[3];
    QEM_TRY(excluded_pixels(pr->src, po->exclude, &pr->excluded, &pr->excluded_count, error));
    QEM_TRY(plan_make(pr->src, po, &pr->plan, pr->excluded, pr->excluded_count, error));
    pr->sps = pr->plan.scans_per_shard;
    pr->shards = pr->plan.shard_count;
    pr->is_excluded = calloc((size_t)pr->P, 1);
    pr->records = calloc((size_t)pr->shards, sizeof *pr->records);
    pr->kept = calloc((size_t)pr->shards, sizeof *pr->kept);
    pr->range_sha = calloc((size_t)pr->shards, sizeof *pr->range_sha);
    pr->payload_sha = calloc((size_t)pr->shards, sizeof *pr->payload_sha);
    pr->header_sha = calloc((size_t)pr->shards, sizeof *pr->header_sha);
    pr->max_width = calloc((size_t)pr->shards, sizeof *pr->max_width);
    pr->pixel_sums = calloc((size_t)pr->P, sizeof *pr->pixel_sums);
    pr->moments = calloc((size_t)(pr->sps * pr->shards), 32);
    if (pr->profile == QEM_PACK_UINT8_BITPACKED)
        pr->constants = calloc((size_t)(pr->excluded_count + 1), sizeof *pr->constants);
    if (!pr->is_excluded || !pr->records || !pr->kept || !pr->range_sha || !pr->payload_sha ||
        !pr->header_sha || !pr->max_width || !pr->pixel_sums || !pr->moments ||
        (pr->profile == QEM_PACK_UINT8_BITPACKED && !pr->constants))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t k = 0; k < pr->excluded_count; k++)
        pr->is_excluded[pr->excluded[k]] = 1;
    mask_identity(pr, po->exclude);
    return QEM_OK;
}

static char *receipt_path(const char *dest)
{
    size_t n = strlen(dest) + sizeof ".receipt.json";
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.receipt.json", dest);
    return p;
}

/* Everything after the shards: the envelope digests, the user block, the
 * stability check, the output digest and the receipt, then publication. */
static qem_status finish(production *pr, const char *dest, qem_publish *pack, qem_publish *rec,
                         const struct timespec *started, qem_error *error)
{
    struct timespec t0;
    qem_pack_now(&t0);
    for (uint64_t s = 0; pr->profile == QEM_PACK_UINT16_LZ4 && s < pr->shards; s++) {
        const pack_shard_record *r = &pr->records[s];
        uint64_t lo = r->payload_offset, hi = r->payload_offset + r->payload_bytes;
        lo = r->lengths_offset < lo ? r->lengths_offset : lo;
        lo = r->widths_offset < lo ? r->widths_offset : lo;
        hi = r->lengths_offset + r->lengths_bytes > hi ? r->lengths_offset + r->lengths_bytes : hi;
        hi = r->widths_offset + r->widths_bytes > hi ? r->widths_offset + r->widths_bytes : hi;
        QEM_TRY(range_digest(pack->fd, lo, hi, pr->range_sha[s], error));
    }
    json_t *m = manifest(pr);
    char *text = m ? json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(m);
    /* The kept blocks served the manifest; the prepared pass below loads
     * the pack, so they go first. */
    for (uint64_t s = 0; pr->kept && s < pr->shards; s++)
        qem_pack_encoded_shard_free(&pr->kept[s]);
    uint64_t index_bytes = 0;
    uint8_t *index =
        qem_pack_index_build(pr->profile, pr->src->shape, pr->sps, pr->excluded, pr->excluded_count,
                             pr->src->identity, pr->records, pr->shards, &index_bytes);
    uint8_t *block = NULL;
    const uint64_t user_block = pr->plan.user_block_bytes;
    qem_status st = text && index ? qem_pack_user_block(text, strlen(text), index, index_bytes,
                                                        user_block, &block, error)
                                  : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = qem_pwrite_full(pack->fd, block, (size_t)user_block, 0, error);
    free(block);
    free(index);
    free(text);
    pr->t_write += ms_since(&t0);
    QEM_TRY(st);

    /* The prepared extensions from the finished pack: DPC moments, and for
     * the uint8 profile BF/ABF/ADF about the calibration just recorded. */
    qem_pack_now(&t0);
    /* The products need the finished pack loaded: only when memory holds
     * it beside what production still has, else the receipt says so. */
    const int room = pr->plan.available_memory > pr->plan.resident_bytes + (256ull << 20);
    QEM_TRY(qem_pack_write_prepared(pack->fd, dest, user_block, pr->threads, pr->moments, room,
                                    &pr->prepared, error));
    pr->t_prepared = ms_since(&t0);

    /* The source must not have moved under us; the output must be within
     * its predicted bound; then its identity. */
    qem_pack_now(&t0);
    QEM_TRY(qem_input_check_unchanged(pr->src, error));
    struct stat sb;
    if (fstat(pack->fd, &sb) != 0)
        return qem_fail(error, QEM_E_IO, "cannot stat the pack being written");
    const uint64_t output_bytes = (uint64_t)sb.st_size;
    if (output_bytes > pr->plan.output_max_bytes)
        return qem_fail(error, QEM_E_LIMIT,
                        "the pack came to %llu bytes, above its predicted maximum %llu",
                        (unsigned long long)output_bytes,
                        (unsigned long long)pr->plan.output_max_bytes);
    uint8_t output_sha[32];
    QEM_TRY(range_digest(pack->fd, 0, output_bytes, output_sha, error));
    pr->t_final = ms_since(&t0);

    json_t *r = receipt(pr, dest, output_bytes, output_sha, ms_since(started));
    char *rtext = r ? json_dumps(r, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(r);
    if (!rtext)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const size_t rn = strlen(rtext);
    st = rn + 1 > pr->plan.receipt_max_bytes
             ? qem_fail(error, QEM_E_LIMIT, "the receipt exceeds its predicted maximum")
             : qem_write_full(rec->fd, rtext, rn, error);
    if (st == QEM_OK)
        st = qem_write_full(rec->fd, "\n", 1, error);
    free(rtext);
    QEM_TRY(st);

    /* Publication: the receipt first, the pack last (the commit marker),
     * as one commit: a receipt never stands without its pack. */
    return qem_publish_commit_pair(rec, pack, error);
}

static qem_status qem_pack_produce_body(qem_pack_inspection *in, const qem_pack_plan_options *plan_options,
                            const char *dest, const qem_pack_produce_options *options,
                            qem_error *error)
{
    qem_error_clear(error);
    if (!in || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_pack_produce: NULL argument");
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    QEM_TRY(qem_options_overlay(&po, sizeof po, plan_options, "qem_pack_plan_options", error));
    qem_pack_produce_options o;
    qem_pack_produce_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_pack_produce_options", error));
    QEM_TRY(qem_threads_check(o.threads, "qem_pack_produce_options.threads", error));
    if (!po.destination)
        po.destination = dest;
    struct timespec started, t0;
    qem_pack_now(&started);
    production pr = {0};
    qem_publish pack = {.fd = -1}, rec = {.fd = -1};
    pack_h5_writer *h5 = NULL;
    char *rpath = receipt_path(dest);
    pr.threads = qem_threads_resolve(o.threads);
    qem_status st = rpath ? prepare(&pr, in, &po, error)
                          : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* Both names are claimed (checked free) before any work. */
    if (st == QEM_OK)
        st = qem_publish_begin(&pack, dest, error);
    if (st == QEM_OK) {
        st = qem_publish_begin(&rec, rpath, error);
        if (st == QEM_E_EXISTS) {
            qem_error_clear(error); /* qem_fail keeps a first message */
            qem_fail(error, QEM_E_EXISTS,
                     "'%s' already exists (if '%s' does not, an earlier production was cut "
                     "off between its final two links, by a power loss, and left a receipt that "
                     "no pack commits: remove it and run again)",
                     rpath, dest);
        }
    }
    if (st == QEM_OK) {
        qem_pack_now(&t0);
        st = qem_input_reauthenticate(pr.src, o.hash_progress, o.hash_progress_user, error);
        pr.t_auth = ms_since(&t0);
    }
    if (st == QEM_OK) {
        char hex[65];
        qem_sha256_hex(pr.src->identity, hex);
        st = qem_pack_h5_create(pack.fd, pr.plan.user_block_bytes,
                                pr.profile == QEM_PACK_UINT16_LZ4 ? PACK_SCHEMA_V1 : PACK_SCHEMA_V3,
                                hex, pr.src->shape,
                                pr.profile == QEM_PACK_UINT16_LZ4 ? "uint16" : "uint8", &h5, error);
    }
    if (st == QEM_OK)
        st = build_shards(&pr, h5, &o, error);
    if (h5) {
        qem_status closed = qem_pack_h5_close(h5, error);
        st = st == QEM_OK ? closed : st;
    }
    if (st == QEM_OK)
        st = finish(&pr, dest, &pack, &rec, &started, error);
    qem_publish_abort(&pack);
    qem_publish_abort(&rec);
    production_free(&pr);
    free(rpath);
    return st;
}

qem_status qem_pack_produce(qem_pack_inspection *in, const qem_pack_plan_options *plan_options,
                            const char *dest, const qem_pack_produce_options *options,
                            qem_error *error)
{
    const qem_status st = qem_pack_produce_body(in, plan_options, dest, options, error);
    qem_error_name_destination(error, dest);
    return st;
}
