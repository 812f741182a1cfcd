/* A loaded pack behind the representation interface. */
#include <stdio.h>

#include "common/error.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "pack/pack_internal.h"
#include "common/representation.h"

static void describe(const void *impl, qem_container_info *info)
{
    const qem_pack *p = impl;
    info->kind = QEM_KIND_PACK;
    for (int i = 0; i < 4; i++)
        info->shape[i] = p->shape[i];
    info->scans = p->scans;
    info->pixels = p->pixels;
    info->working_dtype = p->working_dtype;
    info->raw_dtype = QEM_DTYPE_UINT16;
    info->has_raw = p->raw_access != QEM_RAW_MASK_APPLIED_ONLY;
    info->has_load_phase = 1;
    info->loaded = p->loaded;
}

static void load_options_of(const qem_container_options *o, qem_pack_options *lo)
{
    qem_pack_options_init(lo);
    lo->threads = o->threads;
    lo->expect_sha256 = o->expect_sha256;
    lo->progress = o->progress;
    lo->progress_user = o->progress_user;
}

static qem_status load_of(void *impl, const qem_container_options *options, qem_error *error)
{
    qem_pack_options lo;
    load_options_of(options, &lo);
    return qem_pack_load(impl, &lo, error);
}

/* A pack proves itself by loading: every descriptor or compact header,
 * every LZ4 block, every shard digest, the stored ones too. */
static qem_status verify_of(void *impl, const qem_container_options *options,
                            const qem_verify_options *verify, qem_verify_report *report,
                            qem_error *error)
{
    qem_pack *p = impl;
    if (p->loaded)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is already loaded; a pack is verified by its load: open it with "
                        "QEM_LOAD_LATER",
                        p->path);
    qem_pack_options lo;
    load_options_of(options, &lo);
    lo.threads = verify->threads;
    lo.progress = verify->progress;
    lo.progress_user = verify->progress_user;
    lo.check_stored_digests = 1;
    QEM_TRY(qem_pack_load(p, &lo, error));
    qem_pack_info pi = {.struct_size = sizeof pi};
    QEM_TRY(qem_pack_get_info(p, &pi, error));
    report->shards_loaded = pi.shard_count;
    report->digests_checked = pi.digests_checked;
    /* Prepared values were authenticated at open; here they must also be
     * what the data give. */
    QEM_TRY(qem_pack_prepared_verify(p, qem_threads_resolve(verify->threads), error));
    report->identity_needed = !options->expect_sha256 && pi.profile == QEM_PACK_UINT8_BITPACKED;
    snprintf(report->summary, sizeof report->summary,
             "%llu shards loaded, %llu payload digests verified%s%s",
             (unsigned long long)pi.shard_count, (unsigned long long)pi.digests_checked,
             pi.has_prepared_dpc_moments || pi.has_prepared_detector_products
                 ? ", prepared values equal to the data"
                 : "",
             report->identity_needed ? "; compact headers are not hashed by the index, only "
                                       "the whole-file identity qualifies the file"
                                     : "");
    return QEM_OK;
}

static qem_status time_first_access_of(void *impl, qem_error *error)
{
    return qem_pack_time_first_access(impl, error);
}

static qem_status read(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error)
{
    qem_error_clear(error);
    return qem_pack_read_scans_threads(
        impl, first, count, values == QEM_VALUES_RAW ? QEM_VALUES_RAW : QEM_VALUES_WORKING, out,
        out_size, threads, error);
}

/* One shard's scans at a time. */
static uint64_t window(const void *impl, uint64_t first)
{
    const qem_pack *p = impl;
    return p->sps - first % p->sps;
}

static void close_pack(void *impl)
{
    qem_pack_close(impl);
}

static qem_product_data data_of(const void *impl)
{
    (void)impl;
    return QEM_DATA_COUNTS;
}

static void valid_of(const void *impl, uint8_t *mask)
{
    const qem_pack *p = impl;
    for (uint64_t px = 0; px < p->pixels; px++)
        mask[px] = !p->is_excluded[px];
}

static qem_status weighted_sums(void *impl, uint64_t first, uint64_t count,
                                const int32_t *const *weights, unsigned planes, int use_tiles,
                                int64_t *out, int threads, qem_error *error)
{
    (void)use_tiles;
    return qem_pack_weighted_sums(impl, first, count, weights, planes, out, threads, error);
}

static qem_status pixel_sums(void *impl, uint64_t first, uint64_t count, uint64_t *sums,
                             uint32_t *max, int threads, qem_error *error)
{
    return qem_pack_pixel_sums(impl, first, count, sums, max, threads, error);
}

static void code_affine(const void *impl, uint64_t scan, double *scale, double *offset)
{
    (void)impl;
    (void)scan;
    *scale = 1.0;
    *offset = 0.0;
}

static int no_dark(const void *impl, float *plane)
{
    (void)impl;
    (void)plane;
    return 0;
}

static int detector_calibration_of(const void *impl, qem_detector_calibration *c)
{
    const qem_pack *p = impl;
    if (!p->has_calibration)
        return 0;
    *c = p->calibration;
    return 1;
}

/* Packs carry no microscope metadata. */
static int no_semiangle(const void *impl, double *mrad)
{
    (void)impl;
    (void)mrad;
    return 0;
}

static uint64_t resident_of(const void *impl)
{
    qem_pack_info info;
    qem_pack_fill_info(impl, &info);
    return info.resident_bytes;
}

/* A uint16 pack's working values follow from its manifest (shape,
 * exclusions) and each shard's decoded bitstream, named by the decoded
 * digest its index records. It is known before the load (so values kept
 * from an earlier open serve an awaited pack at once); the load checks
 * every shard against it, and a pack whose shards disagree fails every
 * read. A uint8 pack's digests leave its compact headers out: no cheap
 * identity. */
static int content_identity_of(const void *impl, uint8_t id[32])
{
    const qem_pack *p = impl;
    if (p->profile != QEM_PACK_UINT16_LZ4)
        return 0;
    qem_sha256 *ctx = qem_sha256_new();
    int ok = ctx && qem_sha256_update(ctx, "qem.pack-content/v1", 20) == 0 &&
             qem_sha256_update(ctx, p->manifest_text, (size_t)p->manifest_bytes) == 0;
    for (uint64_t k = 0; ok && k < p->shard_count; k++)
        ok = qem_sha256_update(ctx, p->shards[k].decoded_sha256, 32) == 0;
    ok = ok && qem_sha256_final(ctx, id) == 0;
    qem_sha256_free(ctx);
    return ok;
}

static int prepared_sums_of(const void *impl, uint64_t first, uint64_t count,
                            const int32_t *const *weights, unsigned planes, int64_t *out)
{
    return qem_pack_prepared_sums(impl, first, count, weights, planes, out);
}

static void file_id_of(const void *impl, uint64_t id[2])
{
    const qem_pack *p = impl;
    id[0] = (uint64_t)p->stamp.dev;
    id[1] = (uint64_t)p->stamp.ino;
}

static const char *header_json_of(const void *impl, size_t *length)
{
    return qem_pack_manifest_json(impl, length);
}

static char *summary_json_of(const void *impl, qem_error *error)
{
    return qem_pack_summary_json(impl, error);
}

static const char *raw_access_name(qem_raw_access access)
{
    switch (access) {
    case QEM_RAW_EXACT_NO_EXCLUSIONS: return "exact-no-exclusions";
    case QEM_RAW_RETAINED_PAYLOAD: return "retained-payload";
    case QEM_RAW_EXCLUSION_CONSTANTS: return "exclusion-constants";
    case QEM_RAW_MASK_APPLIED_ONLY: return "mask-applied-only";
    }
    return "";
}

/* The profile, sizes, exclusions, raw access, the source's identity and
 * each shard's [first, end) scans. */
static char *details_json_of(const void *impl, qem_error *error)
{
    const qem_pack *p = impl;
    qem_pack_info pi;
    qem_pack_fill_info(p, &pi);
    json_t *shards = json_array();
    for (uint64_t k = 0; shards && k < pi.shard_count; k++) {
        const uint64_t first = k * pi.scans_per_shard;
        const uint64_t end = first + pi.scans_per_shard < pi.scans ? first + pi.scans_per_shard
                                                                   : pi.scans;
        if (json_array_append_new(shards, json_pack("[I, I]", (json_int_t)first,
                                                    (json_int_t)end)) != 0) {
            json_decref(shards);
            shards = NULL;
        }
    }
    json_t *j =
        shards
            ? json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:o}", "profile",
                        pi.profile == QEM_PACK_UINT8_BITPACKED ? "exact-uint8-bitpacked"
                                                               : "exact-uint16-lz4",
                        "file_bytes", (json_int_t)pi.file_bytes, "logical_bytes",
                        (json_int_t)(pi.scans * pi.pixels * qem_dtype_size(pi.working_dtype)),
                        "resident_bytes", (json_int_t)pi.resident_bytes, "shard_count",
                        (json_int_t)pi.shard_count, "excluded_count",
                        (json_int_t)pi.excluded_count, "raw_access",
                        raw_access_name(pi.raw_access), "source_identity_sha256",
                        pi.source_identity_sha256, "chunks", shards)
            : NULL;
    return qem_json_take_text(j, error);
}

const qem_representation_ops qem_pack_representation = {
    .kind = QEM_KIND_PACK,
    .describe = describe,
    .read = read,
    .window = window,
    .export_npy = NULL,
    .close = close_pack,
    .load = load_of,
    .verify = verify_of,
    .time_first_access = time_first_access_of,
    .data = data_of,
    .valid = valid_of,
    .weighted_sums = weighted_sums,
    .pixel_sums = pixel_sums,
    .code_affine = code_affine,
    .dark = no_dark,
    .detector_calibration = detector_calibration_of,
    .semiangle_mrad = no_semiangle,
    .content_identity = content_identity_of,
    .prepared_sums = prepared_sums_of,
    .resident_bytes = resident_of,
    .file_id = file_id_of,
    .header_json = header_json_of,
    .summary_json = summary_json_of,
    .details_json = details_json_of,
};
