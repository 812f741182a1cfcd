/* Reading the prepared extensions (pack notes 2.7). Every rule the
 * upstream loaders apply is applied here, at open, so a product never
 * uses a value that was not authenticated; the mask of each prepared
 * product must also be exactly the inclusive rule about the recorded
 * calibration, so "BF" always means what its geometry says. */
#include "pack/prepared.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/byteorder.h"
#include "common/error.h"
#include "common/json.h"
#include "common/sha256.h"
#include "pack/pack_internal.h"

const char *const qem_prepared_product_names[PREPARED_PRODUCT_COUNT] = {"bf", "abf", "adf"};

pack_products_names qem_pack_products_names(const qem_pack *p)
{
    if (p->profile == QEM_PACK_UINT16_LZ4)
        return (pack_products_names){PREPARED_PRODUCTS_KEY_U16, PREPARED_PRODUCTS_SCHEMA_U16,
                                     "working_logical_sha256", "working_logical_sha256"};
    return (pack_products_names){PREPARED_PRODUCTS_KEY, PREPARED_PRODUCTS_SCHEMA,
                                 "prepared_uint8_sha256", "working_uint8_sha256"};
}

#define PREP_FAIL(...) qem_fail(error, QEM_E_PACK_PREPARED, __VA_ARGS__)

void qem_pack_prepared_free(pack_prepared *prepared)
{
    free(prepared->moments);
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
        free(prepared->products[k].mask);
        free(prepared->products[k].values);
    }
    memset(prepared, 0, sizeof *prepared);
}

/* --- shared rules ------------------------------------------------------------ */

uint32_t qem_pack_prepared_max_value(const qem_pack *p)
{
    return p->working_dtype == QEM_DTYPE_UINT16 ? 65535u : 255u;
}

void qem_pack_prepared_bounds(const qem_pack *p, uint64_t *total, uint64_t *row, uint64_t *col)
{
    const uint64_t maxval = qem_pack_prepared_max_value(p);
    uint64_t rows = 0, cols = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        if (!p->is_excluded[px]) {
            rows += px / p->shape[3];
            cols += px % p->shape[3];
        }
    *total = (p->pixels - p->excluded_count) * maxval;
    *row = rows * maxval;
    *col = cols * maxval;
}

void qem_pack_prepared_geometry(unsigned k, double r, double *inner, double *outer)
{
    *inner = k == 0 ? 0.0 : k == 1 ? 0.5 * r : r;
    *outer = k == 2 ? 2.0 * r : r;
}

uint64_t qem_pack_prepared_mask(const qem_pack *p, double center_row, double center_col,
                                double inner, double outer, uint8_t *mask)
{
    uint64_t n = 0;
    for (uint64_t px = 0; px < p->pixels; px++) {
        const double d = hypot((double)(px / p->shape[3]) - center_row,
                               (double)(px % p->shape[3]) - center_col);
        mask[px] = (uint8_t)(!p->is_excluded[px] && inner <= d && d <= outer);
        n += mask[px];
    }
    return n;
}

/* --- the canonical calibration digest ----------------------------------------- */

typedef struct text {
    char *s;
    size_t n, cap;
    int failed;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        while (cap < t->n + n + 1)
            cap *= 2;
        char *grown = realloc(t->s, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
}

/* A JSON string as Python's json.dumps writes it with ensure_ascii. */
static void put_string(text *t, const char *s, size_t n)
{
    put(t, "\"", 1);
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        char buf[16];
        if (c == '"' || c == '\\') {
            buf[0] = '\\';
            buf[1] = (char)c;
            put(t, buf, 2);
            i++;
            continue;
        }
        if (c >= 0x20 && c < 0x7f) { /* Python escapes DEL too */
            put(t, (const char *)&s[i], 1);
            i++;
            continue;
        }
        if (c < 0x20 || c == 0x7f) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                              : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (named)
                put(t, named, 2);
            else {
                snprintf(buf, sizeof buf, "\\u%04x", c);
                put(t, buf, 6);
            }
            i++;
            continue;
        }
        /* UTF-8 (jansson has validated it) to a code point. */
        const unsigned len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        uint32_t cp = c & (len == 4 ? 0x07 : len == 3 ? 0x0f : 0x1f);
        for (unsigned k = 1; k < len && i + k < n; k++)
            cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
        i += len;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            put(t, buf, 12);
        } else {
            snprintf(buf, sizeof buf, "\\u%04x", cp);
            put(t, buf, 6);
        }
    }
    put(t, "\"", 1);
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void put_canonical(text *t, const json_t *v)
{
    char buf[32];
    switch (json_typeof(v)) {
    case JSON_INTEGER:
    case JSON_REAL: {
        const double d = json_number_value(v);
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        snprintf(buf, sizeof buf, "\"f64be:%016llx\"", (unsigned long long)bits);
        put(t, buf, strlen(buf));
        return;
    }
    case JSON_STRING: put_string(t, json_string_value(v), json_string_length(v)); return;
    case JSON_TRUE: put(t, "true", 4); return;
    case JSON_FALSE: put(t, "false", 5); return;
    case JSON_NULL: put(t, "null", 4); return;
    case JSON_ARRAY:
        put(t, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(t, ",", 1);
            put_canonical(t, json_array_get(v, i));
        }
        put(t, "]", 1);
        return;
    case JSON_OBJECT: {
        const size_t n = json_object_size(v);
        const char **keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys) {
            t->failed = 1;
            return;
        }
        size_t k = 0;
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)v, key, value) keys[k++] = key;
        qsort(keys, n, sizeof *keys, key_cmp);
        put(t, "{", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                put(t, ",", 1);
            put_string(t, keys[i], strlen(keys[i]));
            put(t, ":", 1);
            put_canonical(t, json_object_get(v, keys[i]));
        }
        put(t, "}", 1);
        free(keys);
        return;
    }
    }
}

int qem_pack_calibration_digest(const json_t *value, uint8_t digest[32])
{
    text t = {0};
    put_canonical(&t, value);
    const int ok = !t.failed && qem_sha256_oneshot(t.s, t.n, digest) == 0;
    free(t.s);
    return ok;
}

/* --- manifest rules ------------------------------------------------------------- */

static int lower_hex(const json_t *v, uint8_t digest[32])
{
    return qem_json_is_lower_hex64(v) && qem_sha256_parse_hex(json_string_value(v), digest);
}

/* The manifest's own copy of a digest the extension must repeat. */
static qem_status same_digest(const json_t *m, const char *manifest_key, const json_t *ext,
                              const char *ext_key, const char *what, qem_error *error)
{
    uint8_t a[32], b[32];
    if (!lower_hex(json_object_get(m, manifest_key), a))
        return PREP_FAIL("%s needs the manifest's %s (64 lowercase hex digits)", what,
                         manifest_key);
    if (!lower_hex(json_object_get(ext, ext_key), b) || memcmp(a, b, 32) != 0)
        return PREP_FAIL("%s.%s must equal the manifest's %s", what, ext_key, manifest_key);
    return QEM_OK;
}

static int decimal_is(const json_t *v, uint64_t want)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)want);
    return qem_json_string_is(v, buf);
}

/* An in-file byte range the extension names: genuine integers. */
static qem_status file_range(const qem_pack *p, const json_t *ext, const char *off_key,
                             const char *bytes_key, uint64_t want_bytes, uint64_t *offset,
                             const char *what, qem_error *error)
{
    uint64_t bytes;
    if (!qem_json_as_u64(json_object_get(ext, off_key), offset) ||
        !qem_json_as_u64(json_object_get(ext, bytes_key), &bytes))
        return PREP_FAIL("%s.%s and %s must be non-negative integers", what, off_key, bytes_key);
    if (bytes != want_bytes)
        return PREP_FAIL("%s.%s is %llu; the shape needs %llu", what, bytes_key,
                         (unsigned long long)bytes, (unsigned long long)want_bytes);
    if (*offset > p->file_size || bytes > p->file_size - *offset)
        return PREP_FAIL("%s range [%llu, +%llu) is outside the %llu-byte file", what,
                         (unsigned long long)*offset, (unsigned long long)bytes,
                         (unsigned long long)p->file_size);
    return QEM_OK;
}

static const char *const layout_words[8] = {"total_lo",  "total_hi",  "row_lo",    "row_hi",
                                            "column_lo", "column_hi", "padding_0", "padding_1"};

static qem_status check_moments_manifest(qem_pack *p, const json_t *m, const json_t *e,
                                         qem_error *error)
{
    static const char what[] = PREPARED_DPC_KEY;
    if (!json_is_object(e))
        return PREP_FAIL("%s must be an object", what);
    const int u16 = p->working_dtype == QEM_DTYPE_UINT16;
    if (p->profile == QEM_PACK_UINT16_LZ4 && !u16)
        return PREP_FAIL("%s requires uint16 working data", what);
    if (!qem_json_string_is(json_object_get(e, "schema"),
                   u16 ? PREPARED_DPC_SCHEMA_U16 : PREPARED_DPC_SCHEMA_U8))
        return PREP_FAIL("%s.schema must be \"%s\" for %s working data", what,
                         u16 ? PREPARED_DPC_SCHEMA_U16 : PREPARED_DPC_SCHEMA_U8,
                         u16 ? "uint16" : "uint8");
    uint8_t d[32];
    if (!lower_hex(json_object_get(e, "source_identity_sha256"), d) ||
        memcmp(d, p->identity, 32) != 0)
        return PREP_FAIL("%s.source_identity_sha256 names another source", what);
    QEM_TRY(u16 ? same_digest(m, "working_logical_sha256", e, "working_logical_sha256", what, error)
                : same_digest(m, "prepared_uint8_sha256", e, "working_uint8_sha256", what, error));
    QEM_TRY(same_digest(m, "detector_mask_sha256", e, "detector_mask_sha256", what, error));
    if (u16 && (!qem_json_string_is(json_object_get(e, "working_dtype"), "uint16") ||
                !qem_json_u64_is(json_object_get(e, "maximum_value"), 65535)))
        return PREP_FAIL("%s must state working_dtype \"uint16\" and maximum_value 65535", what);
    if (!qem_json_string_is(json_object_get(e, "detector_selection"), "all-nonexcluded-v1"))
        return PREP_FAIL("%s.detector_selection must be \"all-nonexcluded-v1\"", what);
    if (!qem_json_u64_is(json_object_get(e, "scan_count"), p->scans) ||
        !qem_json_u64_is(json_object_get(e, "selected_detector_pixels"),
                    p->pixels - p->excluded_count) ||
        !qem_json_u64_is(json_object_get(e, "detector_columns"), p->shape[3]))
        return PREP_FAIL("%s scan_count, selected_detector_pixels or detector_columns disagree "
                         "with the file",
                         what);
    if (!qem_json_string_is(json_object_get(e, "dtype"), "little-endian-u32") ||
        !qem_json_string_is(json_object_get(e, "word_order"), "little-endian-u32-pairs") ||
        !qem_json_u64_is(json_object_get(e, "words_per_scan"), 8))
        return PREP_FAIL("%s must be little-endian u32 pairs, 8 words per scan", what);
    const json_t *layout = json_object_get(e, "layout");
    int layout_ok = json_is_array(layout) && json_array_size(layout) == 8;
    for (size_t i = 0; layout_ok && i < 8; i++)
        layout_ok = qem_json_string_is(json_array_get(layout, i), layout_words[i]);
    if (!layout_ok)
        return PREP_FAIL("%s.layout must be [total_lo, total_hi, row_lo, row_hi, column_lo, "
                         "column_hi, padding_0, padding_1]",
                         what);
    uint64_t total, row, col;
    qem_pack_prepared_bounds(p, &total, &row, &col);
    if (!decimal_is(json_object_get(e, "total_bound"), total) ||
        !decimal_is(json_object_get(e, "row_moment_bound"), row) ||
        !decimal_is(json_object_get(e, "column_moment_bound"), col))
        return PREP_FAIL("%s bounds must be the decimal strings %llu, %llu and %llu", what,
                         (unsigned long long)total, (unsigned long long)row,
                         (unsigned long long)col);
    const json_t *ni = json_object_get(e, "narrow_integer"), *np = json_object_get(e, "narrow_products");
    if (!json_is_boolean(ni) || json_is_true(ni) != (total <= UINT32_MAX) || !json_is_boolean(np) ||
        json_is_true(np) != ((row > col ? row : col) <= UINT32_MAX))
        return PREP_FAIL("%s narrow_integer and narrow_products must state whether the bounds "
                         "fit 32 bits",
                         what);
    QEM_TRY(file_range(p, e, "file_offset", "file_bytes", 32 * p->scans, &p->prepared.moments_offset,
                       what, error));
    if (p->prepared.moments_offset % 4)
        return PREP_FAIL("%s.file_offset must be a multiple of 4", what);
    if (!lower_hex(json_object_get(e, "sha256"), p->prepared.moments_sha256))
        return PREP_FAIL("%s.sha256 must be 64 lowercase hex digits", what);
    p->prepared.has_moments = 1;
    return QEM_OK;
}

static int number_is(const json_t *v, double want)
{
    return json_is_number(v) && json_number_value(v) == want;
}

static qem_status check_products_manifest(qem_pack *p, const json_t *m, const json_t *e,
                                          qem_error *error)
{
    const pack_products_names names = qem_pack_products_names(p);
    const char *what = names.key;
    if (!json_is_object(e))
        return PREP_FAIL("%s must be an object", what);
    if (!p->has_calibration)
        return PREP_FAIL("%s requires the manifest's detector_calibration", what);
    if (!qem_json_string_is(json_object_get(e, "schema"), names.schema))
        return PREP_FAIL("%s.schema must be \"%s\"", what, names.schema);
    uint8_t d[32], cal[32];
    if (!lower_hex(json_object_get(e, "source_identity_sha256"), d) ||
        memcmp(d, p->identity, 32) != 0)
        return PREP_FAIL("%s.source_identity_sha256 names another source", what);
    QEM_TRY(same_digest(m, names.manifest_working, e, names.member_working, what, error));
    QEM_TRY(same_digest(m, "detector_mask_sha256", e, "detector_mask_sha256", what, error));
    if (!qem_pack_calibration_digest(json_object_get(m, "detector_calibration"), cal))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (!lower_hex(json_object_get(e, "detector_calibration_sha256"), d) || memcmp(d, cal, 32))
        return PREP_FAIL("%s.detector_calibration_sha256 does not match the manifest's "
                         "detector_calibration: the products belong to another calibration",
                         what);
    if (!qem_json_string_is(json_object_get(e, "detector_calibration_digest_encoding"),
                   PREPARED_DIGEST_ENCODING))
        return PREP_FAIL("%s.detector_calibration_digest_encoding must be \"%s\"", what,
                         PREPARED_DIGEST_ENCODING);
    const json_t *ss = json_object_get(e, "scan_shape"), *ds = json_object_get(e, "detector_shape");
    if (!json_is_array(ss) || json_array_size(ss) != 2 || !json_is_array(ds) ||
        json_array_size(ds) != 2 || !qem_json_u64_is(json_array_get(ss, 0), p->shape[0]) ||
        !qem_json_u64_is(json_array_get(ss, 1), p->shape[1]) ||
        !qem_json_u64_is(json_array_get(ds, 0), p->shape[2]) ||
        !qem_json_u64_is(json_array_get(ds, 1), p->shape[3]))
        return PREP_FAIL("%s scan_shape and detector_shape disagree with the file", what);
    if (!qem_json_string_is(json_object_get(e, "product_dtype"), "little-endian-u32") ||
        !qem_json_string_is(json_object_get(e, "mask_dtype"), "uint8-binary-row-major") ||
        !qem_json_string_is(json_object_get(e, "mask_rule"), "quantem.gpu.detector-mask-inclusive/v1"))
        return PREP_FAIL("%s must use little-endian u32 values, uint8 binary row-major masks and "
                         "the inclusive mask rule",
                         what);
    const json_t *order = json_object_get(e, "product_order"), *list = json_object_get(e, "products");
    int order_ok = json_is_array(order) && json_array_size(order) == PREPARED_PRODUCT_COUNT;
    for (unsigned k = 0; order_ok && k < PREPARED_PRODUCT_COUNT; k++)
        order_ok = qem_json_string_is(json_array_get(order, k), qem_prepared_product_names[k]);
    if (!order_ok)
        return PREP_FAIL("%s.product_order must be [\"bf\", \"abf\", \"adf\"]", what);
    if (!json_is_array(list) || json_array_size(list) != PREPARED_PRODUCT_COUNT)
        return PREP_FAIL("%s.products must list three products", what);
    const qem_detector_calibration *c = &p->calibration;
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
        const json_t *r = json_array_get(list, k);
        pack_prepared_product *pp = &p->prepared.products[k];
        const char *name = qem_prepared_product_names[k];
        if (!json_is_object(r) || !qem_json_string_is(json_object_get(r, "name"), name))
            return PREP_FAIL("%s.products[%u] must be the \"%s\" object", what, k, name);
        qem_pack_prepared_geometry(k, c->bright_field_radius, &pp->inner, &pp->outer);
        const json_t *center = json_object_get(r, "center_px");
        if (!json_is_array(center) || json_array_size(center) != 2 ||
            !number_is(json_array_get(center, 0), c->center_row) ||
            !number_is(json_array_get(center, 1), c->center_column) ||
            !number_is(json_object_get(r, "inner_radius_px"), pp->inner) ||
            !number_is(json_object_get(r, "outer_radius_px"), pp->outer))
            return PREP_FAIL("%s %s geometry disagrees with the calibration (centre (%g, %g), "
                             "radii %g..%g px)",
                             what, name, c->center_row, c->center_column, pp->inner, pp->outer);
        if (!qem_json_as_u64(json_object_get(r, "selected_detector_pixels"), &pp->selected) ||
            pp->selected > p->pixels)
            return PREP_FAIL("%s %s.selected_detector_pixels must be an integer up to %llu", what,
                             name, (unsigned long long)p->pixels);
        char label[64];
        snprintf(label, sizeof label, "%s %s mask", what, name);
        QEM_TRY(file_range(p, r, "mask_file_offset", "mask_file_bytes", p->pixels,
                           &pp->mask_offset, label, error));
        snprintf(label, sizeof label, "%s %s values", what, name);
        QEM_TRY(file_range(p, r, "values_file_offset", "values_file_bytes", 4 * p->scans,
                           &pp->values_offset, label, error));
        if (!lower_hex(json_object_get(r, "mask_sha256"), pp->mask_sha256) ||
            !lower_hex(json_object_get(r, "values_sha256"), pp->values_sha256))
            return PREP_FAIL("%s %s mask_sha256 and values_sha256 must be 64 lowercase hex digits",
                             what, name);
    }
    p->prepared.has_products = 1;
    return QEM_OK;
}

/* --- contents ------------------------------------------------------------------------ */

static qem_status read_checked(const qem_pack *p, uint64_t offset, uint64_t bytes,
                               const uint8_t want[32], void **out, const char *what,
                               qem_error *error)
{
    uint8_t *buf = malloc((size_t)(bytes ? bytes : 1));
    if (!buf)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    uint8_t got[32];
    qem_status st = qem_pread_full(p->fd, buf, (size_t)bytes, offset, QEM_E_CHANGED, error);
    if (st == QEM_OK && qem_sha256_oneshot(buf, (size_t)bytes, got) != 0)
        st = qem_fail(error, QEM_E_IO, "SHA-256 is unavailable (libcrypto could not be loaded)");
    if (st == QEM_OK && memcmp(got, want, 32) != 0)
        st = PREP_FAIL("%s bytes do not match their SHA-256; the prepared values are damaged "
                       "(recopy the file, or write a fresh prepared copy with qem calibrate -o)",
                       what);
    if (st != QEM_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return QEM_OK;
}

static qem_status load_moments(qem_pack *p, qem_error *error)
{
    pack_prepared *pr = &p->prepared;
    uint8_t *words = NULL;
    QEM_TRY(read_checked(p, pr->moments_offset, 32 * p->scans, pr->moments_sha256,
                         (void **)&words, PREPARED_DPC_KEY, error));
    pr->moments = malloc((size_t)(3 * p->scans) * sizeof *pr->moments);
    if (!pr->moments) {
        free(words);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    uint64_t tb, rb, cb;
    qem_pack_prepared_bounds(p, &tb, &rb, &cb);
    const uint64_t rows = p->shape[2], cols = p->shape[3];
    qem_status st = QEM_OK;
    for (uint64_t s = 0; s < p->scans && st == QEM_OK; s++) {
        const uint8_t *w = words + 32 * s;
        const uint64_t t = qem_get_le64(w), r = qem_get_le64(w + 8), c = qem_get_le64(w + 16);
        if (qem_get_le64(w + 24) != 0)
            st = PREP_FAIL("%s scan %llu has nonzero padding words", PREPARED_DPC_KEY,
                           (unsigned long long)s);
        else if (t > tb || r > rb || c > cb)
            st = PREP_FAIL("%s scan %llu exceeds the exact moment bounds", PREPARED_DPC_KEY,
                           (unsigned long long)s);
        else if ((unsigned __int128)t * (rows - 1) < r || (unsigned __int128)t * (cols - 1) < c)
            st = PREP_FAIL("%s scan %llu has moments no detector position can give",
                           PREPARED_DPC_KEY, (unsigned long long)s);
        pr->moments[3 * s] = t;
        pr->moments[3 * s + 1] = r;
        pr->moments[3 * s + 2] = c;
    }
    free(words);
    return st;
}

static qem_status load_product(qem_pack *p, unsigned k, qem_error *error)
{
    pack_prepared_product *pp = &p->prepared.products[k];
    const char *name = qem_prepared_product_names[k];
    char what[64];
    const char *key = qem_pack_products_names(p).key;
    snprintf(what, sizeof what, "%s %s mask", key, name);
    QEM_TRY(read_checked(p, pp->mask_offset, p->pixels, pp->mask_sha256, (void **)&pp->mask, what,
                         error));
    uint8_t *rule = malloc((size_t)p->pixels);
    if (!rule)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_pack_prepared_mask(p, p->calibration.center_row, p->calibration.center_column, pp->inner,
                           pp->outer, rule);
    /* A writer whose distance differs from hypot's in the last bit may
     * decide a pixel lying on a radius otherwise: only there may the
     * masks differ. */
    int same = 1;
    for (uint64_t px = 0; px < p->pixels && same; px++) {
        if (pp->mask[px] > 1 || (p->is_excluded[px] && pp->mask[px])) {
            same = 0;
            break;
        }
        if (rule[px] == pp->mask[px])
            continue;
        const double d = hypot((double)(px / p->shape[3]) - p->calibration.center_row,
                               (double)(px % p->shape[3]) - p->calibration.center_column);
        same = fabs(d - pp->inner) <= 1e-9 * fmax(1.0, pp->inner) ||
               fabs(d - pp->outer) <= 1e-9 * fmax(1.0, pp->outer);
    }
    free(rule);
    if (!same)
        return PREP_FAIL("%s is not the inclusive rule about the calibrated centre (radii %g..%g "
                         "px, excluded pixels clear)",
                         what, pp->inner, pp->outer);
    uint64_t ones = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        ones += pp->mask[px];
    if (ones != pp->selected)
        return PREP_FAIL("%s %s selects %llu pixels, not the %llu it states",
                         key, name, (unsigned long long)ones,
                         (unsigned long long)pp->selected);
    snprintf(what, sizeof what, "%s %s values", key, name);
    uint8_t *bytes = NULL;
    QEM_TRY(read_checked(p, pp->values_offset, 4 * p->scans, pp->values_sha256, (void **)&bytes,
                         what, error));
    pp->values = (uint32_t *)(void *)bytes;
    const uint64_t bound = pp->selected * qem_pack_prepared_max_value(p);
    for (uint64_t s = 0; s < p->scans; s++) {
        pp->values[s] = qem_get_le32(bytes + 4 * s);
        if (pp->values[s] > bound)
            return PREP_FAIL("%s scan %llu exceeds %llu, the most its pixels can sum to", what,
                             (unsigned long long)s, (unsigned long long)bound);
    }
    return QEM_OK;
}

qem_status qem_pack_prepared_check(qem_pack *p, uint64_t metadata_end, qem_error *error)
{
    const json_t *m = p->manifest;
    const json_t *dpc = json_object_get(m, PREPARED_DPC_KEY);
    const int u16 = p->profile == QEM_PACK_UINT16_LZ4;
    const json_t *products = json_object_get(m, qem_pack_products_names(p).key);
    /* Each profile's products under its own key only. */
    const char *other = u16 ? PREPARED_PRODUCTS_KEY : PREPARED_PRODUCTS_KEY_U16;
    const json_t *misplaced = json_object_get(m, other);
    if (misplaced && !json_is_null(misplaced))
        return PREP_FAIL("%s is defined for the %s profile only", other,
                         u16 ? "uint8 bit-packed" : "uint16/LZ4");
    if (dpc && !json_is_null(dpc))
        QEM_TRY(check_moments_manifest(p, m, dpc, error));
    if (products && !json_is_null(products))
        QEM_TRY(check_products_manifest(p, m, products, error));
    pack_prepared *pr = &p->prepared;
    pack_range extra[1 + 2 * PREPARED_PRODUCT_COUNT];
    size_t n = 0;
    if (pr->has_moments)
        extra[n++] = (pack_range){pr->moments_offset, pr->moments_offset + 32 * p->scans,
                                  "the prepared DPC moments"};
    for (unsigned k = 0; pr->has_products && k < PREPARED_PRODUCT_COUNT; k++) {
        const pack_prepared_product *pp = &pr->products[k];
        extra[n] = (pack_range){pp->mask_offset, pp->mask_offset + p->pixels, ""};
        snprintf(extra[n++].label, sizeof extra[0].label, "the prepared %s mask",
                 qem_prepared_product_names[k]);
        extra[n] = (pack_range){pp->values_offset, pp->values_offset + 4 * p->scans, ""};
        snprintf(extra[n++].label, sizeof extra[0].label, "the prepared %s values",
                 qem_prepared_product_names[k]);
    }
    if (n == 0)
        return QEM_OK;
    QEM_TRY(qem_pack_check_ranges(p, metadata_end, extra, n, error));
    if (pr->has_moments)
        QEM_TRY(load_moments(p, error));
    for (unsigned k = 0; pr->has_products && k < PREPARED_PRODUCT_COUNT; k++)
        QEM_TRY(load_product(p, k, error));
    return QEM_OK;
}

/* --- computing them from the data ------------------------------------------------- */

/* The moments of every scan as 8 little-endian u32 words each. */
qem_status qem_pack_prepared_moments(const qem_pack *p, int threads, uint8_t **words,
                                     qem_error *error)
{
    const uint64_t P = p->pixels, S = p->scans;
    int32_t *w = malloc((size_t)(3 * P) * sizeof *w);
    int64_t *sums = malloc((size_t)(3 * S) * sizeof *sums);
    *words = calloc((size_t)S, 32);
    qem_status st = w && sums && *words ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t px = 0; st == QEM_OK && px < P; px++) {
        w[px] = 1;
        w[P + px] = (int32_t)(px / p->shape[3]);
        w[2 * P + px] = (int32_t)(px % p->shape[3]);
    }
    const int32_t *planes[3] = {w, w + P, w + 2 * P};
    if (st == QEM_OK)
        st = qem_pack_weighted_sums(p, 0, S, planes, 3, sums, threads, error);
    for (uint64_t s = 0; st == QEM_OK && s < S; s++)
        for (int k = 0; k < 3; k++)
            qem_put_le64(*words + 32 * s + 8 * k, (uint64_t)sums[k * S + s]);
    free(w);
    free(sums);
    if (st != QEM_OK) {
        free(*words);
        *words = NULL;
    }
    return st;
}

qem_status qem_pack_prepared_products(const qem_pack *p, int threads,
                                      pack_product_data d[PREPARED_PRODUCT_COUNT], qem_error *error)
{
    const uint64_t P = p->pixels, S = p->scans;
    int32_t *w = malloc((size_t)(PREPARED_PRODUCT_COUNT * P) * sizeof *w);
    int64_t *sums = malloc((size_t)(PREPARED_PRODUCT_COUNT * S) * sizeof *sums);
    qem_status st = w && sums ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const int32_t *planes[PREPARED_PRODUCT_COUNT];
    for (unsigned k = 0; st == QEM_OK && k < PREPARED_PRODUCT_COUNT; k++) {
        d[k].mask = malloc((size_t)P);
        d[k].values = malloc((size_t)(4 * S));
        if (!d[k].mask || !d[k].values) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            break;
        }
        double inner, outer;
        qem_pack_prepared_geometry(k, p->calibration.bright_field_radius, &inner, &outer);
        d[k].selected = qem_pack_prepared_mask(p, p->calibration.center_row,
                                               p->calibration.center_column, inner, outer, d[k].mask);
        for (uint64_t px = 0; px < P; px++)
            w[k * P + px] = d[k].mask[px];
        planes[k] = w + k * P;
    }
    if (st == QEM_OK)
        st = qem_pack_weighted_sums(p, 0, S, planes, PREPARED_PRODUCT_COUNT, sums, threads, error);
    for (unsigned k = 0; st == QEM_OK && k < PREPARED_PRODUCT_COUNT; k++)
        for (uint64_t s = 0; st == QEM_OK && s < S; s++) {
            if ((uint64_t)sums[k * S + s] > UINT32_MAX)
                st = qem_fail(error, QEM_E_LIMIT, "a prepared %s value exceeds 32 bits",
                              qem_prepared_product_names[k]);
            else
                qem_put_le32(d[k].values + 4 * s, (uint32_t)sums[k * S + s]);
        }
    free(w);
    free(sums);
    return st;
}

qem_status qem_pack_prepared_verify(const qem_pack *p, int threads, qem_error *error)
{
    const pack_prepared *pr = &p->prepared;
    qem_status st = QEM_OK;
    if (pr->has_moments) {
        uint8_t *words = NULL;
        QEM_TRY(qem_pack_prepared_moments(p, threads, &words, error));
        for (uint64_t s = 0; s < p->scans && st == QEM_OK; s++)
            for (int k = 0; k < 3 && st == QEM_OK; k++)
                if (qem_get_le64(words + 32 * s + 8 * k) != pr->moments[3 * s + (uint64_t)k])
                    st = PREP_FAIL("%s scan %llu differs from the moments of the data",
                                   PREPARED_DPC_KEY, (unsigned long long)s);
        free(words);
    }
    if (st == QEM_OK && pr->has_products) {
        pack_product_data d[PREPARED_PRODUCT_COUNT] = {{0}};
        st = qem_pack_prepared_products(p, threads, d, error);
        for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++) {
            for (uint64_t s = 0; st == QEM_OK && s < p->scans; s++)
                if (qem_get_le32(d[k].values + 4 * s) != pr->products[k].values[s])
                    st = PREP_FAIL("%s %s scan %llu differs from the sum of the data",
                                   qem_pack_products_names(p).key, qem_prepared_product_names[k],
                                   (unsigned long long)s);
            free(d[k].mask);
            free(d[k].values);
        }
    }
    return st;
}

/* --- answering sums ------------------------------------------------------------------ */

enum { ANSWER_NONE = -1, ANSWER_TOTAL = 0, ANSWER_ROW = 1, ANSWER_COL = 2, ANSWER_PRODUCT = 3 };

/* Which prepared value plane `w` asks for, over admitted pixels. */
static int classify(const qem_pack *p, const int32_t *w)
{
    const pack_prepared *pr = &p->prepared;
    int total = pr->has_moments, row = pr->has_moments, col = pr->has_moments;
    int product[PREPARED_PRODUCT_COUNT];
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++)
        product[k] = pr->has_products;
    const uint64_t cols = p->shape[3];
    for (uint64_t px = 0; px < p->pixels; px++) {
        if (p->is_excluded[px])
            continue;
        const int32_t v = w[px];
        total &= v == 1;
        row &= v == (int32_t)(px / cols);
        col &= v == (int32_t)(px % cols);
        for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++)
            product[k] &= product[k] && v == (int32_t)pr->products[k].mask[px];
        if (!(total | row | col | product[0] | product[1] | product[2]))
            return ANSWER_NONE;
    }
    /* A plane that is both (a 1-row detector's column index) reads the same. */
    if (total)
        return ANSWER_TOTAL;
    if (row)
        return ANSWER_ROW;
    if (col)
        return ANSWER_COL;
    for (unsigned k = 0; k < PREPARED_PRODUCT_COUNT; k++)
        if (product[k])
            return ANSWER_PRODUCT + (int)k;
    return ANSWER_NONE;
}

int qem_pack_prepared_sums(const qem_pack *p, uint64_t first, uint64_t count,
                           const int32_t *const *weights, unsigned planes, int64_t *out)
{
    const pack_prepared *pr = &p->prepared;
    if ((!pr->has_moments && !pr->has_products) || planes > 8 || first > p->scans ||
        count > p->scans - first)
        return 0;
    int kind[8];
    for (unsigned k = 0; k < planes; k++)
        if ((kind[k] = classify(p, weights[k])) == ANSWER_NONE)
            return 0;
    for (unsigned k = 0; k < planes; k++)
        for (uint64_t i = 0; i < count; i++) {
            const uint64_t s = first + i;
            out[k * count + i] =
                kind[k] < ANSWER_PRODUCT
                    ? (int64_t)pr->moments[3 * s + (uint64_t)kind[k]]
                    : (int64_t)pr->products[kind[k] - ANSWER_PRODUCT].values[s];
        }
    return 1;
}
