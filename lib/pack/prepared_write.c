/* Writing the prepared extensions (pack notes 2.7) into a complete pack
 * before it is published: `qem pack produce` and `qem calibrate -o` both
 * end here. The values come from the pack itself (loaded, so every shard
 * digest is checked first), the datasets go into its HDF5 body under
 * /quantem_gpu/prepared, and the manifest gains the two members; the
 * reopen at the end applies every reader rule to what was written. */
#include "pack/prepared_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/error.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "pack/calibrated_copy.h"
#include "pack/encode.h"
#include "pack/h5write.h"
#include "pack/pack_internal.h"

static json_t *decimal_json(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
}

/* Why a file cannot carry the moments, or NULL. A uint16 pack without
 * its working identity gets one (working_logical_sha256). */
static const char *moments_refusal(const qem_pack *p)
{
    if (p->profile == QEM_PACK_UINT16_LZ4 && p->working_dtype != QEM_DTYPE_UINT16)
        return "its uint16 profile declares uint8 working data";
    if (p->working_dtype != QEM_DTYPE_UINT16 &&
        !json_is_string(json_object_get(p->manifest, "prepared_uint8_sha256")))
        return "its manifest has no working-value identity";
    if (!json_is_string(json_object_get(p->manifest, "detector_mask_sha256")))
        return "its manifest has no detector_mask_sha256";
    return NULL;
}

static const char *products_refusal(const qem_pack *p)
{
    if (!p->has_calibration)
        return "the file records no detector calibration";
    if (p->profile == QEM_PACK_UINT8_BITPACKED &&
        !json_is_string(json_object_get(p->manifest, "prepared_uint8_sha256")))
        return "its manifest has no working-value identity";
    if (!json_is_string(json_object_get(p->manifest, "detector_mask_sha256")))
        return "its manifest has no detector_mask_sha256";
    return NULL;
}

/* SHA-256 of every working value as little-endian u16 in C order,
 * excluded pixels 0 (pack notes 2.6: working_logical_sha256). */
static qem_status working_identity(qem_pack *p, uint8_t digest[32], qem_error *error)
{
    const uint64_t per = 256, row = 2 * p->pixels;
    uint8_t *buf = malloc((size_t)(per * row));
    qem_sha256 *ctx = qem_sha256_new();
    qem_status st = buf && ctx ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t s = 0; st == QEM_OK && s < p->scans; s += per) {
        const uint64_t n = p->scans - s < per ? p->scans - s : per;
        st = qem_pack_read_scans(p, s, n, QEM_VALUES_WORKING, buf, (size_t)(n * row), error);
        if (st == QEM_OK)
            qem_sha256_update(ctx, buf, (size_t)(n * row)); /* u16 read little-endian */
    }
    if (st == QEM_OK && qem_sha256_final(ctx, digest) != 0)
        st = qem_fail(error, QEM_E_IO, "SHA-256 is unavailable");
    qem_sha256_free(ctx);
    free(buf);
    return st;
}

static json_t *moments_member(const qem_pack *p, uint64_t offset, const uint8_t *words)
{
    const int u16 = p->working_dtype == QEM_DTYPE_UINT16;
    uint64_t total, row, col;
    qem_pack_prepared_bounds(p, &total, &row, &col);
    uint8_t sha[32];
    if (qem_sha256_oneshot(words, (size_t)(32 * p->scans), sha) != 0)
        return NULL;
    json_t *e = json_object(), *layout = json_array();
    static const char *const names[8] = {"total_lo",  "total_hi",  "row_lo",    "row_hi",
                                         "column_lo", "column_hi", "padding_0", "padding_1"};
    for (int i = 0; i < 8; i++)
        json_array_append_new(layout, json_string(names[i]));
    json_object_set_new(e, "schema", json_string(u16 ? PREPARED_DPC_SCHEMA_U16 : PREPARED_DPC_SCHEMA_U8));
    json_object_set_new(e, "source_identity_sha256", qem_pack_digest_json(p->identity));
    json_object_set(e, u16 ? "working_logical_sha256" : "working_uint8_sha256",
                    json_object_get(p->manifest,
                                    u16 ? "working_logical_sha256" : "prepared_uint8_sha256"));
    if (u16) {
        json_object_set_new(e, "working_dtype", json_string("uint16"));
        json_object_set_new(e, "maximum_value", json_integer(65535));
    }
    json_object_set(e, "detector_mask_sha256", json_object_get(p->manifest, "detector_mask_sha256"));
    json_object_set_new(e, "detector_selection", json_string("all-nonexcluded-v1"));
    json_object_set_new(e, "scan_count", json_integer((json_int_t)p->scans));
    json_object_set_new(e, "selected_detector_pixels",
                        json_integer((json_int_t)(p->pixels - p->excluded_count)));
    json_object_set_new(e, "detector_columns", json_integer((json_int_t)p->shape[3]));
    json_object_set_new(e, "dtype", json_string("little-endian-u32"));
    json_object_set_new(e, "word_order", json_string("little-endian-u32-pairs"));
    json_object_set_new(e, "words_per_scan", json_integer(8));
    json_object_set_new(e, "layout", layout);
    json_object_set_new(e, "file_offset", json_integer((json_int_t)offset));
    json_object_set_new(e, "file_bytes", json_integer((json_int_t)(32 * p->scans)));
    json_object_set_new(e, "sha256", qem_pack_digest_json(sha));
    json_object_set_new(e, "total_bound", decimal_json(total));
    json_object_set_new(e, "row_moment_bound", decimal_json(row));
    json_object_set_new(e, "column_moment_bound", decimal_json(col));
    json_object_set_new(e, "narrow_integer", json_boolean(total <= UINT32_MAX));
    json_object_set_new(e, "narrow_products", json_boolean((row > col ? row : col) <= UINT32_MAX));
    return e;
}

static json_t *products_member(const qem_pack *p, const pack_product_data d[PREPARED_PRODUCT_COUNT],
                               const uint64_t mask_at[PREPARED_PRODUCT_COUNT],
                               const uint64_t values_at[PREPARED_PRODUCT_COUNT])
{
    uint8_t cal[32];
    if (!qem_pack_calibration_digest(json_object_get(p->manifest, "detector_calibration"), cal))
        return NULL;
    json_t *e = json_object(), *list = json_array(), *order = json_array();
    const qem_detector_calibration *c = &p->calibration;
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
        uint8_t ms[32], vs[32];
        if (qem_sha256_oneshot(d[k].mask, (size_t)p->pixels, ms) != 0 ||
            qem_sha256_oneshot(d[k].values, (size_t)(4 * p->scans), vs) != 0) {
            json_decref(e);
            json_decref(list);
            json_decref(order);
            return NULL;
        }
        double inner, outer;
        qem_pack_prepared_geometry(k, c->bright_field_radius, &inner, &outer);
        json_t *r = json_object();
        json_object_set_new(r, "name", json_string(qem_prepared_product_names[k]));
        json_object_set_new(r, "center_px", json_pack("[ff]", c->center_row, c->center_column));
        json_object_set_new(r, "inner_radius_px", json_real(inner));
        json_object_set_new(r, "outer_radius_px", json_real(outer));
        json_object_set_new(r, "selected_detector_pixels", json_integer((json_int_t)d[k].selected));
        json_object_set_new(r, "mask_file_offset", json_integer((json_int_t)mask_at[k]));
        json_object_set_new(r, "mask_file_bytes", json_integer((json_int_t)p->pixels));
        json_object_set_new(r, "mask_sha256", qem_pack_digest_json(ms));
        json_object_set_new(r, "values_file_offset", json_integer((json_int_t)values_at[k]));
        json_object_set_new(r, "values_file_bytes", json_integer((json_int_t)(4 * p->scans)));
        json_object_set_new(r, "values_sha256", qem_pack_digest_json(vs));
        json_array_append_new(list, r);
        json_array_append_new(order, json_string(qem_prepared_product_names[k]));
    }
    const pack_products_names names = qem_pack_products_names(p);
    json_object_set_new(e, "schema", json_string(names.schema));
    json_object_set_new(e, "source_identity_sha256", qem_pack_digest_json(p->identity));
    json_object_set(e, names.member_working, json_object_get(p->manifest, names.manifest_working));
    json_object_set(e, "detector_mask_sha256", json_object_get(p->manifest, "detector_mask_sha256"));
    json_object_set_new(e, "detector_calibration_sha256", qem_pack_digest_json(cal));
    json_object_set_new(e, "detector_calibration_digest_encoding",
                        json_string(PREPARED_DIGEST_ENCODING));
    json_object_set_new(e, "scan_shape", json_pack("[II]", (json_int_t)p->shape[0],
                                                   (json_int_t)p->shape[1]));
    json_object_set_new(e, "detector_shape", json_pack("[II]", (json_int_t)p->shape[2],
                                                       (json_int_t)p->shape[3]));
    json_object_set_new(e, "product_dtype", json_string("little-endian-u32"));
    json_object_set_new(e, "mask_dtype", json_string("uint8-binary-row-major"));
    json_object_set_new(e, "mask_rule", json_string("quantem.gpu.detector-mask-inclusive/v1"));
    json_object_set_new(e, "product_order", order);
    json_object_set_new(e, "products", list);
    return e;
}

/* The manifest with `key` set to `value` (compact, sorted keys); every
 * other member keeps its bytes. */
static qem_status set_member(char **manifest, size_t *bytes, const char *key, const json_t *value,
                             qem_error *error)
{
    char *v = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII |
                                    JSON_REAL_PRECISION(17));
    json_t *k = json_string(key);
    char *ktext = k ? json_dumps(k, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(k);
    char *member = NULL;
    qem_status st = QEM_OK;
    if (v && ktext && (member = malloc(strlen(ktext) + strlen(v) + 2)))
        sprintf(member, "%s:%s", ktext, v);
    else
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    char *spliced = NULL;
    size_t spliced_bytes = 0;
    if (st == QEM_OK)
        st = qem_pack_manifest_splice(*manifest, *bytes, key, member, &spliced, &spliced_bytes,
                                      error);
    if (st == QEM_OK) {
        free(*manifest);
        *manifest = spliced;
        *bytes = spliced_bytes;
    }
    free(v);
    free(ktext);
    free(member);
    return st;
}

/* A pack whose body is not HDF5 (only a user block and ranges, as the
 * upstream test writers make them) takes the values as ranges appended
 * at its end, each 4-byte aligned. */
static qem_status append_ranges(int fd, pack_h5_dataset *items, size_t n, qem_error *error)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return qem_fail(error, QEM_E_IO, "cannot stat the pack being written");
    uint64_t at = (uint64_t)sb.st_size;
    static const uint8_t zeros[4] = {0};
    for (size_t i = 0; i < n; i++) {
        const uint64_t aligned = (at + 3) & ~3ull;
        QEM_TRY(qem_pwrite_full(fd, zeros, (size_t)(aligned - at), at, error));
        const uint64_t bytes = items[i].dims[0] * (items[i].rank == 2 ? items[i].dims[1] : 1) *
                               items[i].item_bytes;
        QEM_TRY(qem_pwrite_full(fd, items[i].data, (size_t)bytes, aligned, error));
        items[i].offset = aligned;
        at = aligned + bytes;
    }
    return QEM_OK;
}

static int is_hdf5(int fd, uint64_t user_block)
{
    uint8_t sig[8];
    qem_error ignored;
    return qem_pread_full(fd, sig, sizeof sig, user_block, QEM_E_IO, &ignored) == QEM_OK &&
           memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
}

static qem_status open_written(int fd, const char *label, qem_pack **out, qem_error *error)
{
    int copy = dup(fd);
    struct stat sb;
    if (copy < 0 || fstat(copy, &sb) != 0) {
        if (copy >= 0)
            close(copy);
        return qem_fail(error, QEM_E_IO, "cannot reopen the pack being written");
    }
    return qem_pack_open_descriptor(label, copy, &sb, out, error);
}

qem_status qem_pack_write_prepared(int fd, const char *label, uint64_t user_block, int threads,
                                   const uint8_t *moments, int products, pack_prepared_report *report,
                                   qem_error *error)
{
    memset(report, 0, sizeof *report);
    qem_pack *p = NULL;
    QEM_TRY(open_written(fd, label, &p, error));
    const char *no_moments = moments_refusal(p), *no_products = products_refusal(p);
    if (!no_products && !products)
        no_products = "memory cannot hold the loaded pack beside the production";
    /* Both are bound to a uint16 pack's working identity. */
    const int add_identity = (!no_moments || !no_products) &&
                             p->working_dtype == QEM_DTYPE_UINT16 &&
                             !json_object_get(p->manifest, "working_logical_sha256");
    /* Loaded (every shard digest checked) only when something needs the
     * data. */
    qem_status st = QEM_OK;
    if ((!no_moments && (!moments || add_identity)) || !no_products) {
        qem_pack_options o;
        qem_pack_options_init(&o);
        o.threads = threads;
        st = qem_pack_load(p, &o, error);
    }
    snprintf(report->moments_skipped, sizeof report->moments_skipped, "%s",
             no_moments ? no_moments : "");
    snprintf(report->products_skipped, sizeof report->products_skipped, "%s",
             no_products ? no_products : "");
    const int t = qem_threads_resolve(threads);
    uint8_t *words = NULL;
    pack_product_data d[PREPARED_PRODUCT_COUNT] = {{0}};
    pack_h5_dataset items[1 + 2 * PREPARED_PRODUCT_COUNT];
    size_t n = 0;
    char paths[2 * PREPARED_PRODUCT_COUNT][64];
    /* A uint16 pack without its working identity gets one first: the
     * moments are bound to it. */
    char *manifest = NULL;
    size_t manifest_bytes = (size_t)p->manifest_bytes;
    if (st == QEM_OK) {
        manifest = malloc(manifest_bytes + 1);
        if (!manifest)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        else
            memcpy(manifest, p->manifest_text, manifest_bytes);
    }
    if (st == QEM_OK && add_identity) {
        uint8_t digest[32];
        st = working_identity(p, digest, error);
        json_t *v = st == QEM_OK ? qem_pack_digest_json(digest) : NULL;
        if (v) {
            st = set_member(&manifest, &manifest_bytes, "working_logical_sha256", v, error);
            json_object_set(p->manifest, "working_logical_sha256", v);
        }
        json_decref(v);
    }
    if (st == QEM_OK && !no_moments) {
        if (moments && !add_identity) {
            words = malloc((size_t)(32 * p->scans));
            if (words)
                memcpy(words, moments, (size_t)(32 * p->scans));
            else
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        } else {
            st = qem_pack_prepared_moments(p, t, &words, error);
        }
        items[n++] = (pack_h5_dataset){p->working_dtype == QEM_DTYPE_UINT16 ? "dpc_moments_u32_v2"
                                                                            : "dpc_moments_u32_v1",
                                       words, 2, {p->scans, 8}, 4, 0};
    }
    if (st == QEM_OK && !no_products) {
        st = qem_pack_prepared_products(p, t, d, error);
        if (st == QEM_E_LIMIT) {
            /* uint16 sums of a wide ring may pass 32 bits: no products. */
            snprintf(report->products_skipped, sizeof report->products_skipped,
                     "a prepared value exceeds 32 bits");
            qem_error_clear(error);
            st = QEM_OK;
            for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
                free(d[k].mask);
                free(d[k].values);
                d[k].mask = NULL;
                d[k].values = NULL;
            }
        }
        for (unsigned k = 0; st == QEM_OK && d[0].values && k < PREPARED_PRODUCT_COUNT; k++) {
            snprintf(paths[2 * k], sizeof paths[0], "detector_products_v1/%s_mask_u8",
                     qem_prepared_product_names[k]);
            snprintf(paths[2 * k + 1], sizeof paths[0], "detector_products_v1/%s_values_u32",
                     qem_prepared_product_names[k]);
            items[n++] = (pack_h5_dataset){paths[2 * k], d[k].mask, 2,
                                           {p->shape[2], p->shape[3]}, 1, 0};
            items[n++] = (pack_h5_dataset){paths[2 * k + 1], d[k].values, 2,
                                           {p->shape[0], p->shape[1]}, 4, 0};
        }
    }
    if (st == QEM_OK && n)
        st = is_hdf5(fd, user_block) ? qem_pack_h5_prepared(fd, items, n, error)
                                     : append_ranges(fd, items, n, error);

    /* The manifest with both members, then the user block rebuilt. */
    uint8_t *index = NULL, *block = NULL;
    if (st == QEM_OK && words) {
        json_t *e = moments_member(p, items[0].offset, words);
        st = e ? set_member(&manifest, &manifest_bytes, PREPARED_DPC_KEY, e, error)
               : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        json_decref(e);
        report->moments_written = st == QEM_OK;
    }
    if (st == QEM_OK && d[0].values) {
        uint64_t mask_at[PREPARED_PRODUCT_COUNT], values_at[PREPARED_PRODUCT_COUNT];
        const size_t base = words ? 1 : 0;
        for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
            mask_at[k] = items[base + 2 * k].offset;
            values_at[k] = items[base + 2 * k + 1].offset;
        }
        json_t *e = products_member(p, d, mask_at, values_at);
        st = e ? set_member(&manifest, &manifest_bytes, qem_pack_products_names(p).key, e, error)
               : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        json_decref(e);
        report->products_written = st == QEM_OK;
    }
    if (st == QEM_OK && n) {
        uint8_t prelude[PACK_PRELUDE_BYTES];
        st = qem_pread_full(fd, prelude, sizeof prelude, 0, QEM_E_IO, error);
        const uint64_t index_at = qem_get_le32(prelude + 16), index_bytes = qem_get_le32(prelude + 20);
        if (st == QEM_OK && !(index = malloc((size_t)index_bytes)))
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        if (st == QEM_OK)
            st = qem_pread_full(fd, index, (size_t)index_bytes, index_at, QEM_E_IO, error);
        if (st == QEM_OK)
            st = qem_pack_user_block(manifest, manifest_bytes, index, index_bytes, user_block,
                                     &block, error);
        if (st == QEM_OK)
            st = qem_pwrite_full(fd, block, (size_t)user_block, 0, error);
    }
    free(manifest);
    free(index);
    free(block);
    free(words);
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
        free(d[k].mask);
        free(d[k].values);
    }
    qem_pack_close(p);
    if (st != QEM_OK || !n)
        return st;
    /* Every reader rule, applied to what was written. */
    QEM_TRY(open_written(fd, label, &p, error));
    const int whole = (!report->moments_written || p->prepared.has_moments) &&
                      (!report->products_written || p->prepared.has_products);
    qem_pack_close(p);
    return whole ? QEM_OK
                 : qem_fail(error, QEM_E_PACK_PREPARED, "the prepared values did not read back");
}
