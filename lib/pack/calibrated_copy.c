/* A calibrated copy of a pack. The user block (prelude, manifest, index,
 * zero fill) is rebuilt; the HDF5 body after it is copied byte for byte, so
 * every absolute range in the index stays valid. The manifest is spliced
 * rather than re-serialised, so every other member keeps its exact bytes. */
#include "pack/calibrated_copy.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/sha256.h"
#include "pack/encode.h"
#include "pack/pack_internal.h"
#include "pack/prepared_write.h"

#define CALIBRATION_KEY "detector_calibration"
#define HDF5_SIGNATURE "\x89HDF\r\n\x1a\n"
/* Every producer uses 64 KiB; a far larger block is not a pack we know. */
#define MAX_USER_BLOCK (64ull << 20)

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* --- the calibration values ------------------------------------------------ */

#define BAD_VALUE(...) qem_fail(error, QEM_E_INVALID_ARGUMENT, "detector calibration: " __VA_ARGS__)

/* Checks that need no file: finite numbers and a method the reader keeps
 * whole (its record holds 127 bytes). */
static qem_status check_values(const pack_calibration_in *cal, qem_error *error)
{
    if (!isfinite(cal->center_row) || !isfinite(cal->center_col))
        return BAD_VALUE("the centre must be finite");
    if (!isfinite(cal->radius) || !(cal->radius > 0))
        return BAD_VALUE("the bright-field radius must be finite and positive");
    if (cal->has_dpc && !isfinite(cal->dpc_rotation_degrees))
        return BAD_VALUE("the DPC rotation must be finite");
    if (!cal->method || cal->method[strspn(cal->method, " \t\r\n")] == '\0')
        return BAD_VALUE("the method must be a non-blank string");
    if (strlen(cal->method) >= sizeof(((qem_detector_calibration *)0)->method))
        return BAD_VALUE("the method is longer than %zu bytes",
                         sizeof(((qem_detector_calibration *)0)->method) - 1);
    json_t *probe = json_string(cal->method);
    if (!probe)
        return BAD_VALUE("the method is not valid UTF-8");
    json_decref(probe);
    return QEM_OK;
}

/* The ranges the reader enforces, against this file's detector. */
static qem_status check_range(const qem_pack *p, const pack_calibration_in *cal,
                              qem_error *error)
{
    const double rows = (double)p->shape[2], cols = (double)p->shape[3];
    if (cal->center_row < 0 || cal->center_row >= rows || cal->center_col < 0 ||
        cal->center_col >= cols)
        return BAD_VALUE("centre (%g, %g) lies outside the %llux%llu detector", cal->center_row,
                         cal->center_col, (unsigned long long)p->shape[2],
                         (unsigned long long)p->shape[3]);
    if (cal->radius > hypot(rows, cols))
        return BAD_VALUE("radius %g px exceeds the detector diagonal", cal->radius);
    return QEM_OK;
}

/* The shortest decimal that reads back as exactly `v`, kept a JSON real
 * (as Python's repr writes it), whatever the locale's decimal point. */
static void format_real(double v, char buf[40])
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    for (char *c = buf; *c; c++)
        if (!((*c >= '0' && *c <= '9') || *c == '-' || *c == '+' || *c == 'e'))
            *c = '.';
    if (!strpbrk(buf, ".e"))
        strcat(buf, ".0");
}

/* `"detector_calibration":{...}` with sorted keys and no whitespace, the
 * layout every upstream producer writes. Caller frees. */
static char *calibration_member(const pack_calibration_in *cal, const uint8_t identity[32])
{
    char row[40], col[40], radius[40], rotation[40], hex[65], dpc[128] = "";
    format_real(cal->center_row, row);
    format_real(cal->center_col, col);
    format_real(cal->radius, radius);
    qem_sha256_hex(identity, hex);
    if (cal->has_dpc) {
        format_real(cal->dpc_rotation_degrees, rotation);
        snprintf(dpc, sizeof dpc,
                 "\"dpc_component_order_exchanged\":%s,\"dpc_rotation_degrees\":%s,",
                 cal->dpc_component_order_exchanged ? "true" : "false", rotation);
    }
    json_t *m = json_string(cal->method);
    char *method = m ? json_dumps(m, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(m);
    if (!method)
        return NULL;
    static const char format[] =
        "\"" CALIBRATION_KEY "\":{\"bright_field_radius_px\":%s,\"detector_center_px\":[%s,%s],"
        "%s\"method\":%s,\"schema\":\"" PACK_CALIBRATION_SCHEMA
        "\",\"source_identity_sha256\":\"%s\"}";
    int n = snprintf(NULL, 0, format, radius, row, col, dpc, method, hex);
    char *text = n < 0 ? NULL : malloc((size_t)n + 1);
    if (text)
        snprintf(text, (size_t)n + 1, format, radius, row, col, dpc, method, hex);
    free(method);
    return text;
}

/* --- splicing the manifest -------------------------------------------------- */

/* A scanner over text jansson has already accepted; each step returns the
 * position after what it skipped, or 0 when the text ends early. */
static size_t skip_space(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return 0;
}

static size_t skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return 0;
    if (s[i] == '"')
        return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            const char c = s[i];
            if (c == '"') {
                if (!(i = skip_string(s, n, i)))
                    return 0;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']')
                depth--;
            i++;
            if (depth == 0)
                return i;
        }
        return 0;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' &&
           s[i] != '\n' && s[i] != '\r')
        i++;
    return i;
}

/* One top-level member: its raw text between the separators around it
 * (whitespace included) and its decoded key. */
typedef struct member {
    size_t start, end;
    json_t *key;
} member;

static void free_members(member *m, size_t count)
{
    for (size_t i = 0; m && i < count; i++)
        json_decref(m[i].key);
    free(m);
}

/* Splits the manifest object into members; `open`/`close` are the braces. */
static int split_members(const char *s, size_t n, size_t *open, size_t *close, member **out,
                         size_t *count)
{
    size_t i = skip_space(s, n, 0), cap = 0;
    member *m = NULL;
    *count = 0;
    if (i >= n || s[i] != '{')
        return 0;
    *open = i;
    size_t start = ++i;
    i = skip_space(s, n, i);
    if (i < n && s[i] == '}') {
        *close = i;
        *out = m;
        return 1;
    }
    for (;;) {
        i = skip_space(s, n, i);
        const size_t key_at = i;
        if (i >= n || s[i] != '"' || !(i = skip_string(s, n, i)))
            break;
        json_t *key = json_loadb(s + key_at, i - key_at, JSON_DECODE_ANY, NULL);
        if (!json_is_string(key)) {
            json_decref(key);
            break;
        }
        if (*count == cap) {
            cap = cap ? 2 * cap : 32;
            member *grown = realloc(m, cap * sizeof *m);
            if (!grown) {
                json_decref(key);
                break;
            }
            m = grown;
        }
        m[*count].key = key;
        m[*count].start = start;
        ++*count;
        i = skip_space(s, n, i);
        if (i >= n || s[i] != ':')
            break;
        if (!(i = skip_value(s, n, skip_space(s, n, i + 1))))
            break;
        i = skip_space(s, n, i);
        m[*count - 1].end = i;
        if (i < n && s[i] == ',') {
            start = ++i;
            continue;
        }
        if (i < n && s[i] == '}') {
            *close = i;
            *out = m;
            return 1;
        }
        break;
    }
    free_members(m, *count);
    *count = 0;
    return 0;
}

qem_status qem_pack_manifest_splice(const char *s, size_t n, const char *key,
                                   const char *member_text, char **out, size_t *out_bytes,
                                   qem_error *error)
{
    size_t open = 0, close = 0, count = 0;
    member *m = NULL;
    if (!split_members(s, n, &open, &close, &m, &count))
        return qem_fail(error, QEM_E_PACK_MANIFEST,
                        "pack manifest could not be split into its members for rewriting");
    size_t at = count; /* where the new member goes */
    int replace = 0;
    for (size_t k = 0; k < count; k++) {
        int cmp = strcmp(json_string_value(m[k].key), key);
        if (cmp == 0) {
            at = k;
            replace = 1;
            break;
        }
        if (cmp > 0 && at == count)
            at = k;
    }
    const size_t add = member_text ? strlen(member_text) : 0;
    size_t total = n + add + 1;
    char *t = malloc(total + 1);
    if (!t) {
        free_members(m, count);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    size_t len = 0;
    int first = 1;
#define APPEND(p, k)                                                                               \
    do {                                                                                           \
        memcpy(t + len, (p), (k));                                                                 \
        len += (k);                                                                                \
    } while (0)
    APPEND(s, open + 1);
    for (size_t k = 0; k <= count; k++) {
        if (k == at) {
            if (member_text) {
                if (!first)
                    APPEND(",", 1);
                APPEND(member_text, add);
                first = 0;
            }
            if (replace)
                continue;
        }
        if (k == count)
            break;
        if (!first)
            APPEND(",", 1);
        APPEND(s + m[k].start, m[k].end - m[k].start);
        first = 0;
    }
    APPEND(s + close, n - close);
#undef APPEND
    free_members(m, count);
    t[len] = '\0';
    *out = t;
    *out_bytes = len;
    return QEM_OK;
}

/* --- the user block ----------------------------------------------------------- */

/* Where the HDF5 body starts: the superblock signature at the first power
 * of two >= 512 past the index (where libhdf5 looks), else, for files that
 * are only a block plus ranges, the first byte any shard range uses. */
static qem_status find_user_block(const qem_pack *p, uint64_t metadata_end, uint64_t *block,
                                  qem_error *error)
{
    uint64_t first_range = UINT64_MAX;
    for (uint64_t s = 0; s < p->shard_count; s++) {
        const pack_shard *r = &p->shards[s];
        if (r->payload_bytes && r->payload_offset < first_range)
            first_range = r->payload_offset;
        if (r->lengths_bytes && r->lengths_offset < first_range)
            first_range = r->lengths_offset;
        if (r->widths_bytes && r->widths_offset < first_range)
            first_range = r->widths_offset;
    }
    *block = first_range;
    for (uint64_t at = 512; at <= first_range && at + 8 <= p->file_size; at *= 2) {
        if (at < metadata_end)
            continue;
        uint8_t sig[8];
        QEM_TRY(qem_pread_full(p->fd, sig, sizeof sig, at, QEM_E_CHANGED, error));
        if (memcmp(sig, HDF5_SIGNATURE, 8) == 0) {
            *block = at;
            break;
        }
    }
    if (*block > MAX_USER_BLOCK)
        return qem_fail(error, QEM_E_LIMIT,
                        "the pack's user block of %llu bytes is larger than qem rewrites",
                        (unsigned long long)*block);
    return QEM_OK;
}

/* --- the copy ------------------------------------------------------------------ */

/* The opened file is unchanged since it was opened, and still the one at
 * `path`. */
static qem_status check_unchanged(const qem_pack *p, const char *path, qem_error *error)
{
    QEM_TRY(qem_file_stamp_check(p->fd, &p->stamp, path, "copied", error));
    struct stat named;
    if (stat(path, &named) != 0 || named.st_dev != p->stamp.dev || named.st_ino != p->stamp.ino)
        return qem_fail(error, QEM_E_CHANGED,
                        "'%s' was replaced while it was being copied; nothing was written", path);
    return QEM_OK;
}

/* The finished temporary reopens as a pack carrying exactly `cal`. */
static qem_status verify_written(const qem_publish *pub, const pack_calibration_in *cal,
                                 qem_error *error)
{
    char proc[64];
    const char *path = pub->temp_path;
    if (!path) {
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", pub->fd);
        path = proc;
    }
    qem_pack *q = NULL;
    QEM_TRY(qem_pack_open(path, NULL, &q, error));
    qem_detector_calibration got = {.struct_size = sizeof got};
    int same = qem_pack_get_detector_calibration(q, &got, NULL) == QEM_OK &&
               got.center_row == cal->center_row && got.center_column == cal->center_col &&
               got.bright_field_radius == cal->radius && got.has_dpc == !!cal->has_dpc &&
               strcmp(got.method, cal->method) == 0 &&
               (!cal->has_dpc || (got.dpc_rotation_degrees == cal->dpc_rotation_degrees &&
                                  got.dpc_component_order_exchanged ==
                                      !!cal->dpc_component_order_exchanged));
    qem_pack_close(q);
    if (!same)
        return qem_fail(error, QEM_E_PACK_CALIBRATION,
                        "the written detector calibration did not read back exactly");
    return QEM_OK;
}

qem_status qem_pack_write_calibrated_copy(const char *src, const char *dest,
                                          const pack_calibration_in *cal,
                                          pack_prepared_report *report, qem_error *error)
{
    qem_error_clear(error);
    pack_prepared_report ignored;
    if (!report)
        report = &ignored;
    if (!src || !dest || !cal)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_pack_write_calibrated_copy: NULL argument");
    QEM_TRY(check_values(cal, error));
    qem_pack *p = NULL;
    QEM_TRY(qem_pack_open(src, NULL, &p, error));

    qem_status st = QEM_OK;
    uint8_t *block = NULL, *rebuilt = NULL;
    char *member_text = NULL, *manifest = NULL;
    size_t manifest_bytes = 0;
    qem_publish pub = {.fd = -1};
    uint64_t index_at = 0, index_bytes = 0, user_block = 0;

    st = check_range(p, cal, error);
    if (st != QEM_OK)
        goto done;
    st = check_unchanged(p, src, error);
    if (st != QEM_OK)
        goto done;
    uint8_t prelude[PACK_PRELUDE_BYTES];
    st = qem_pread_full(p->fd, prelude, sizeof prelude, 0, QEM_E_CHANGED, error);
    if (st != QEM_OK)
        goto done;
    index_at = le32(prelude + 16);
    index_bytes = le32(prelude + 20);
    st = find_user_block(p, index_at + index_bytes, &user_block, error);
    if (st != QEM_OK)
        goto done;
    if (!(block = malloc((size_t)user_block))) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto done;
    }
    st = qem_pread_full(p->fd, block, (size_t)user_block, 0, QEM_E_CHANGED, error);
    if (st != QEM_OK)
        goto done;
    /* The block must still hold what qem_pack_open validated. */
    if (le32(block + 8) != p->manifest_bytes ||
        memcmp(block + PACK_PRELUDE_BYTES, p->manifest_text, (size_t)p->manifest_bytes) != 0 ||
        index_at + index_bytes > user_block) {
        st = qem_fail(error, QEM_E_CHANGED,
                      "'%s' changed while it was being copied; nothing was written", src);
        goto done;
    }
    /* Producers zero the rest of the block; anything else there would be
     * lost, so it is refused rather than dropped. */
    for (uint64_t i = PACK_PRELUDE_BYTES + p->manifest_bytes; i < user_block; i++) {
        if (i == index_at) {
            i += index_bytes - 1;
            continue;
        }
        if (block[i] != 0) {
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "'%s' holds unknown bytes in its user block at byte %llu; qem will not "
                          "discard them",
                          src, (unsigned long long)i);
            goto done;
        }
    }

    if (!(member_text = calibration_member(cal, p->identity))) {
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        goto done;
    }
    st = qem_pack_manifest_splice(p->manifest_text, (size_t)p->manifest_bytes, CALIBRATION_KEY,
                                  member_text, &manifest, &manifest_bytes, error);
    /* Products prepared about the old calibration go; new ones follow. */
    const char *products_key = qem_pack_products_names(p).key;
    if (st == QEM_OK && json_object_get(p->manifest, products_key)) {
        char *without = NULL;
        st = qem_pack_manifest_splice(manifest, manifest_bytes, products_key, NULL,
                                      &without, &manifest_bytes, error);
        free(manifest);
        manifest = without;
    }
    if (st != QEM_OK)
        goto done;
    json_t *check = NULL;
    st = qem_json_parse_object(manifest, manifest_bytes, QEM_E_PACK_MANIFEST, &check, error);
    json_decref(check);
    if (st != QEM_OK)
        goto done;
    /* Recomputes the manifest length, CRC-32 and the index position. */
    st = qem_pack_user_block(manifest, manifest_bytes, block + index_at, index_bytes, user_block,
                             &rebuilt, error);
    if (st != QEM_OK)
        goto done;

    st = qem_publish_begin(&pub, dest, error);
    if (st != QEM_OK)
        goto done;
    st = qem_write_full(pub.fd, rebuilt, (size_t)user_block, error);
    if (st != QEM_OK)
        goto done;
    qem_error copy_error;
    qem_error_clear(&copy_error);
    qem_status copied = qem_copy_range(p->fd, user_block, pub.fd, p->file_size - user_block,
                                       &copy_error);
    st = check_unchanged(p, src, error);
    if (st != QEM_OK)
        goto done;
    if (copied != QEM_OK) {
        st = qem_fail(error, copied, "%s", copy_error.message);
        goto done;
    }
    /* The prepared values for this calibration (before the check, which
     * reopens the file with every reader rule). */
    if (st == QEM_OK)
        st = qem_pack_write_prepared(pub.fd, dest, user_block, 0, NULL, 1, report, error);
    if (st == QEM_OK)
        st = verify_written(&pub, cal, error);
    if (st == QEM_OK)
        st = qem_publish_commit(&pub, error);

done:
    qem_publish_abort(&pub);
    free(block);
    free(rebuilt);
    free(member_text);
    free(manifest);
    qem_pack_close(p);
    return st;
}
