/* Gatan Digital Micrograph DM3 and DM4 files: a header (version 3 or 4,
 * the root's length, the byte order of the data) and a tree of tags. A tag
 * is a group of tags or a data tag: "%%%%", a type description (simple,
 * string, array, struct, nested) and its values. The header and every
 * size and type field are big-endian; values follow the byte order flag.
 * DM4 widens sizes and counts to 64 bits and states each tag's length.
 * The images are ImageList's groups (ImageData: Data, DataType,
 * Dimensions fastest first, Calibrations); Thumbnails names the thumbnail.
 *
 * The tree is walked once, iteratively, at most DM_MAX_DEPTH groups deep;
 * array values are never read into memory: the image's Data is recorded
 * as an offset and a length, and reads pread windows of frames from it.
 * Only a bounded set of tags is read as values (the image's own, and the
 * facts). See doc/inputs.md, "dm". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/swap.h"

#define DM_MAX_DEPTH 64
#define DM_MAX_INFO 1024          /* entries of one tag's type description */
#define DM_MAX_TYPE_DEPTH 8       /* arrays of structs of arrays ... */
#define DM_MAX_IMAGES 256
#define DM_MAX_DIMS 4
#define DM_MAX_TAGS (1u << 24)
#define DM_NAME_KEEP 120          /* bytes of a tag name kept in its path */
#define DM_PATH_BYTES (DM_MAX_DEPTH * (2 * DM_NAME_KEEP + 1) + 64)
#define DM_MAX_FACTS 1024
#define DM_MAX_FACT_BYTES (256u << 10)
#define DM_MAX_TEXT 256           /* characters of a text value kept */
#define DM_MAX_ARRAY_FACT 16      /* a numeric array or struct kept as values */
#define DM_BUFFER 65536
#define DM_PROVENANCE "Gatan Digital Micrograph ImageData Calibrations"

enum { DM_GROUP = 20, DM_DATA = 21 };
enum { DM_STRUCT = 15, DM_STRING = 18, DM_ARRAY = 20 };

/* One image of ImageList, as far as the walk found it. */
typedef struct dm_image {
    int seen;
    int has_data, data_simple;
    uint64_t data_offset, data_bytes, data_count;
    uint64_t data_element; /* the Data array's element type */
    int has_type;
    int64_t data_type;
    uint64_t dims[DM_MAX_DIMS + 1];
    unsigned ndims;  /* highest Dimensions entry + 1 */
    int dims_bad;    /* an entry that is not a non-negative integer, or too many */
    double origin[DM_MAX_DIMS], scale[DM_MAX_DIMS];
    char units[DM_MAX_DIMS][64];
    uint8_t calibrated[DM_MAX_DIMS]; /* 1 origin, 2 scale, 4 units */
    json_t *name;
    int order_swapped; /* Meta Data "Data Order Swapped": -1 absent */
    char format[64];   /* Meta Data "Format" */
    json_t *tags;      /* the facts of ImageTags kept */
} dm_image;

typedef struct dm_parse {
    const char *path;
    int fd;
    uint64_t size;
    int version, little;
    uint64_t pos;
    uint8_t *buf;
    uint64_t buf_at;
    size_t buf_len;
    dm_image *images;
    size_t image_count;
    int64_t thumbs[DM_MAX_IMAGES];
    size_t thumb_count;
    size_t facts, fact_bytes;
    int facts_cut;
    uint64_t tags;
    /* A tag file's tags (qem_input_dm_tags): every data tag into `all`
     * (bounded as the facts are), the `named` ones into `named` always. */
    json_t *all, *named;
    const char *const *names;
    size_t name_count;
    char path_text[DM_PATH_BYTES];
} dm_parse;

typedef struct dm_state {
    int fd;
    uint64_t offset, frame_bytes;
    size_t item;
    int swap;
} dm_state;

/* --- reading the tree ---------------------------------------------------------- */

static qem_status cut_short(dm_parse *p, uint64_t n, const char *what, qem_error *error)
{
    return qem_fail(error, QEM_E_FILE_LENGTH,
                    "'%s' is a Gatan Digital Micrograph DM%d file cut short: %s at byte %llu "
                    "needs %llu bytes, but the file ends at %llu",
                    p->path, p->version, what, (unsigned long long)p->pos, (unsigned long long)n,
                    (unsigned long long)p->size);
}

static qem_status need(dm_parse *p, uint64_t n, const char *what, qem_error *error)
{
    if (p->pos > p->size || n > p->size - p->pos)
        return cut_short(p, n, what, error);
    return QEM_OK;
}

static qem_status get(dm_parse *p, void *out, size_t n, const char *what, qem_error *error)
{
    QEM_TRY(need(p, n, what, error));
    uint8_t *dst = out;
    while (n) {
        if (p->pos < p->buf_at || p->pos >= p->buf_at + p->buf_len) {
            const uint64_t left = p->size - p->pos;
            p->buf_len = left < DM_BUFFER ? (size_t)left : DM_BUFFER;
            p->buf_at = p->pos;
            QEM_TRY(qem_pread_full(p->fd, p->buf, p->buf_len, p->pos, QEM_E_CHANGED, error));
        }
        const size_t at = (size_t)(p->pos - p->buf_at);
        const size_t k = p->buf_len - at < n ? p->buf_len - at : n;
        memcpy(dst, p->buf + at, k);
        dst += k;
        n -= k;
        p->pos += k;
    }
    return QEM_OK;
}

static qem_status skip(dm_parse *p, uint64_t n, const char *what, qem_error *error)
{
    QEM_TRY(need(p, n, what, error));
    p->pos += n;
    return QEM_OK;
}

/* A big-endian unsigned integer of `width` bytes. */
static qem_status get_be(dm_parse *p, size_t width, uint64_t *v, const char *what,
                         qem_error *error)
{
    uint8_t b[8];
    QEM_TRY(get(p, b, width, what, error));
    *v = 0;
    for (size_t i = 0; i < width; i++)
        *v = (*v << 8) | b[i];
    return QEM_OK;
}

/* A size or count: 32 bits in DM3, 64 in DM4. */
static qem_status get_len(dm_parse *p, uint64_t *v, const char *what, qem_error *error)
{
    return get_be(p, p->version == 4 ? 8 : 4, v, what, error);
}

static qem_status layout(dm_parse *p, qem_error *error, const char *what, const char *tag)
{
    return qem_fail(error, QEM_E_LAYOUT,
                    "'%s' is not a valid Gatan Digital Micrograph DM%d file: %s (tag '%s', byte "
                    "%llu)",
                    p->path, p->version, what, tag, (unsigned long long)p->pos);
}

/* Bytes of the simple types: 2 short, 3 long, 4 ushort, 5 ulong, 6 float,
 * 7 double, 8 bool, 9 char, 10 octet, 11 long long, 12 unsigned long long. */
static uint64_t simple_size(uint64_t t)
{
    static const uint8_t sizes[13] = {0, 0, 2, 4, 2, 4, 4, 8, 1, 1, 1, 8, 8};
    return t < 13 ? sizes[t] : 0;
}

/* The bytes of the value described by info[*i...]: consumes its entries.
 * 0 with *bad set when the description is malformed; sizes that overflow
 * are malformed. */
static uint64_t type_bytes(const uint64_t *info, size_t n, size_t *i, int depth, int *bad)
{
    if (*bad || *i >= n || depth > DM_MAX_TYPE_DEPTH) {
        *bad = 1;
        return 0;
    }
    const uint64_t t = info[(*i)++];
    if (simple_size(t))
        return simple_size(t);
    if (t == DM_STRING) { /* [18, length] */
        if (*i >= n)
            return *bad = 1, 0;
        return info[(*i)++];
    }
    if (t == DM_ARRAY) { /* [20, element..., count] */
        const uint64_t element = type_bytes(info, n, i, depth + 1, bad);
        if (*bad || *i >= n)
            return *bad = 1, 0;
        uint64_t total;
        if (qem_mul_overflow_u64(element, info[(*i)++], &total))
            return *bad = 1, 0;
        return total;
    }
    if (t == DM_STRUCT) { /* [15, name length, fields, (field name length, type...)...] */
        if (*i + 2 > n)
            return *bad = 1, 0;
        (*i)++;
        const uint64_t fields = info[(*i)++];
        if (fields > n)
            return *bad = 1, 0;
        uint64_t total = 0;
        for (uint64_t f = 0; f < fields && !*bad; f++) {
            if (*i >= n)
                return *bad = 1, 0;
            (*i)++;
            const uint64_t b = type_bytes(info, n, i, depth + 1, bad);
            if (qem_add_overflow_u64(total, b, &total))
                return *bad = 1, 0;
        }
        return total;
    }
    return *bad = 1, 0;
}

/* --- values -------------------------------------------------------------------- */

/* Simple value `t` from `b` in the file's byte order. */
static json_t *simple_json(const dm_parse *p, uint64_t t, const uint8_t *b)
{
    const size_t n = (size_t)simple_size(t);
    uint64_t u = 0;
    for (size_t i = 0; i < n; i++)
        u |= (uint64_t)b[p->little ? i : n - 1 - i] << (8 * i);
    switch (t) {
    case 2:
        return json_integer((int16_t)u);
    case 3:
        return json_integer((int32_t)u);
    case 9:
        return json_integer((int8_t)u);
    case 11:
        return json_integer((json_int_t)(int64_t)u);
    case 6:
    case 7: {
        double d;
        if (t == 6) {
            float f;
            uint32_t w = (uint32_t)u;
            memcpy(&f, &w, 4);
            d = f;
        } else {
            memcpy(&d, &u, 8);
        }
        return isfinite(d) ? json_real(d) : json_string(isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
    }
    default:
        if (u > (uint64_t)INT64_MAX) {
            char text[32];
            snprintf(text, sizeof text, "%llu", (unsigned long long)u);
            return json_string(text);
        }
        return json_integer((json_int_t)u);
    }
}

/* UTF-16 code units (DM's text: arrays of ushort) as a JSON string; code
 * points below 0x20 and surrogates are '?'. */
static json_t *utf16_json(const dm_parse *p, const uint8_t *b, size_t units)
{
    char *text = malloc(units * 3 + 1);
    if (!text)
        return NULL;
    size_t n = 0;
    for (size_t k = 0; k < units; k++) {
        const unsigned c = p->little ? b[2 * k] | (unsigned)b[2 * k + 1] << 8
                                     : (unsigned)b[2 * k] << 8 | b[2 * k + 1];
        if (c < 0x20 || c == 0x7f || (c >= 0xd800 && c < 0xe000)) {
            text[n++] = '?';
        } else if (c < 0x80) {
            text[n++] = (char)c;
        } else if (c < 0x800) {
            text[n++] = (char)(0xc0 | c >> 6);
            text[n++] = (char)(0x80 | (c & 0x3f));
        } else {
            text[n++] = (char)(0xe0 | c >> 12);
            text[n++] = (char)(0x80 | ((c >> 6) & 0x3f));
            text[n++] = (char)(0x80 | (c & 0x3f));
        }
    }
    text[n] = '\0';
    json_t *out = json_string(text);
    free(text);
    return out;
}

static const char *type_name(uint64_t t)
{
    static const char *const names[] = {"?",     "?",     "int16",  "int32", "uint16",
                                        "uint32", "float32", "float64", "bool", "int8",
                                        "uint8",  "int64", "uint64"};
    return t < 13 ? names[t] : t == DM_STRUCT ? "struct" : t == DM_STRING ? "string"
                                                                           : "array";
}

/* The value of a data tag as JSON, read only when small: a number, text
 * (an array of ushort), a short numeric array or struct; anything else
 * described by its type and size. */
static json_t *value_json(dm_parse *p, const uint64_t *info, size_t n, uint64_t at,
                          uint64_t bytes, qem_error *error, qem_status *st)
{
    uint8_t b[DM_MAX_TEXT * 2];
    *st = QEM_OK;
    if (n == 1 && simple_size(info[0])) {
        if ((*st = qem_pread_full(p->fd, b, (size_t)bytes, at, QEM_E_CHANGED, error)) != QEM_OK)
            return NULL;
        return simple_json(p, info[0], b);
    }
    if (n == 3 && info[0] == DM_ARRAY && info[1] == 4) {
        const size_t units = info[2] < DM_MAX_TEXT ? (size_t)info[2] : DM_MAX_TEXT;
        if ((*st = qem_pread_full(p->fd, b, units * 2, at, QEM_E_CHANGED, error)) != QEM_OK)
            return NULL;
        return utf16_json(p, b, units);
    }
    /* A short array of one simple type, or a struct of simple fields. */
    uint64_t types[DM_MAX_ARRAY_FACT];
    size_t count = 0;
    if (n == 3 && info[0] == DM_ARRAY && simple_size(info[1]) && info[2] <= DM_MAX_ARRAY_FACT) {
        for (count = 0; count < info[2]; count++)
            types[count] = info[1];
    } else if (info[0] == DM_STRUCT && n >= 3 && info[2] <= DM_MAX_ARRAY_FACT &&
               n == 3 + 2 * info[2]) {
        for (count = 0; count < info[2]; count++)
            if (!simple_size(types[count] = info[4 + 2 * count]))
                break;
        if (count != info[2])
            count = 0;
    }
    if ((count || (n == 3 && info[0] == DM_ARRAY && info[2] == 0)) && bytes <= sizeof b) {
        if ((*st = qem_pread_full(p->fd, b, (size_t)bytes, at, QEM_E_CHANGED, error)) != QEM_OK)
            return NULL;
        json_t *arr = json_array();
        size_t off = 0;
        for (size_t k = 0; k < count; k++) {
            json_array_append_new(arr, simple_json(p, types[k], b + off));
            off += (size_t)simple_size(types[k]);
        }
        return arr;
    }
    return json_sprintf("(%s of %llu bytes, not read)", type_name(info[0]),
                        (unsigned long long)bytes);
}

/* --- what the walk keeps ---------------------------------------------------------- */

/* "TagGroup<k>" / "Data<k>" as k, else -1. */
static int64_t ordinal(const char *segment, const char *prefix)
{
    const size_t n = strlen(prefix);
    if (strncmp(segment, prefix, n) != 0 || !segment[n])
        return -1;
    int64_t v = 0;
    for (const char *c = segment + n; *c; c++) {
        if (*c < '0' || *c > '9' || v > 1000000)
            return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

/* Splits off the path's next segment (into `seg`, at most `size` bytes);
 * returns the rest or NULL at the end. */
static const char *next_segment(const char *path, char *seg, size_t size)
{
    const char *slash = strchr(path, '/');
    const size_t n = slash ? (size_t)(slash - path) : strlen(path);
    const size_t k = n < size - 1 ? n : size - 1;
    memcpy(seg, path, k);
    seg[k] = '\0';
    return slash ? slash + 1 : NULL;
}

static int as_count(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static void keep_fact(dm_parse *p, dm_image *im, const char *key, json_t *value)
{
    const char *text = json_string_value(value);
    const size_t bytes = strlen(key) + (text ? strlen(text) : 16);
    if (p->facts >= DM_MAX_FACTS || p->fact_bytes + bytes > DM_MAX_FACT_BYTES) {
        p->facts_cut = 1;
        json_decref(value);
        return;
    }
    if (!im->tags)
        im->tags = json_object();
    p->facts++;
    p->fact_bytes += bytes;
    json_object_set_new(im->tags, key, value);
}

/* A tag file's data tag: its value under its path in p->all while the
 * caps allow, and in p->named when it is one of p->names. */
static qem_status on_tag(dm_parse *p, const char *path, const uint64_t *info, size_t n,
                         uint64_t at, uint64_t bytes, qem_error *error)
{
    int is_named = 0;
    for (size_t k = 0; k < p->name_count && !is_named; k++)
        is_named = !strcmp(path, p->names[k]);
    const size_t key_bytes = strlen(path);
    const int fits = p->facts < DM_MAX_FACTS && p->fact_bytes + key_bytes <= DM_MAX_FACT_BYTES;
    if (!is_named && !fits) {
        p->facts_cut = 1;
        return QEM_OK;
    }
    qem_status st = QEM_OK;
    json_t *v = value_json(p, info, n, at, bytes, error, &st);
    if (st != QEM_OK || !v) {
        json_decref(v);
        return st != QEM_OK ? st : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    if (is_named)
        json_object_set(p->named, path, v);
    const char *text = json_string_value(v);
    const size_t value_bytes = text ? strlen(text) : 16;
    if (fits && p->fact_bytes + key_bytes + value_bytes <= DM_MAX_FACT_BYTES) {
        p->facts++;
        p->fact_bytes += key_bytes + value_bytes;
        json_object_set(p->all, path, v);
    } else {
        p->facts_cut = 1;
    }
    json_decref(v);
    return QEM_OK;
}

/* The data tag at `path` (its values at `at`, `bytes` long): the image's
 * own tags, the thumbnails and the facts. */
static qem_status on_data(dm_parse *p, const char *path, const uint64_t *info, size_t n,
                          uint64_t at, uint64_t bytes, qem_error *error)
{
    char seg[DM_NAME_KEEP * 2 + 1];
    qem_status st = QEM_OK;
    if (p->all)
        return on_tag(p, path, info, n, at, bytes, error);
    const char *rest = next_segment(path, seg, sizeof seg);
    if (!strcmp(seg, "Thumbnails") && rest) {
        rest = next_segment(rest, seg, sizeof seg);
        if (!rest || strcmp(rest, "ImageIndex") != 0)
            return QEM_OK;
        json_t *v = value_json(p, info, n, at, bytes, error, &st);
        if (json_is_integer(v) && p->thumb_count < DM_MAX_IMAGES)
            p->thumbs[p->thumb_count++] = json_integer_value(v);
        json_decref(v);
        return st;
    }
    if (strcmp(seg, "ImageList") != 0 || !rest)
        return QEM_OK;
    rest = next_segment(rest, seg, sizeof seg);
    const int64_t index = ordinal(seg, "TagGroup");
    if (index < 0 || !rest)
        return QEM_OK;
    if (index >= DM_MAX_IMAGES)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' holds more than %d images in its ImageList; qem reads Gatan Digital "
                        "Micrograph files of at most %d",
                        p->path, DM_MAX_IMAGES, DM_MAX_IMAGES);
    dm_image *im = &p->images[index];
    if (!im->seen) {
        im->seen = 1;
        im->order_swapped = -1;
    }
    if ((size_t)index + 1 > p->image_count)
        p->image_count = (size_t)index + 1;
    if (!strcmp(rest, "ImageData/Data")) {
        im->has_data = 1;
        im->data_offset = at;
        im->data_bytes = bytes;
        im->data_simple = n == 3 && info[0] == DM_ARRAY && simple_size(info[1]);
        im->data_element = n >= 2 ? info[1] : info[0];
        im->data_count = n == 3 ? info[2] : 0;
        return QEM_OK;
    }
    const int is_fact = !strncmp(rest, "ImageTags/Microscope Info/", 26) ||
                        !strncmp(rest, "ImageTags/Acquisition/", 22) ||
                        !strncmp(rest, "ImageTags/Meta Data/", 20);
    const int is_own = !strcmp(rest, "ImageData/DataType") || !strcmp(rest, "Name") ||
                       !strncmp(rest, "ImageData/Dimensions/", 21) ||
                       !strncmp(rest, "ImageData/Calibrations/Dimension/", 33);
    if (!is_fact && !is_own)
        return QEM_OK;
    json_t *v = value_json(p, info, n, at, bytes, error, &st);
    if (st != QEM_OK || !v) {
        json_decref(v);
        return st != QEM_OK ? st : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    if (!strcmp(rest, "ImageData/DataType")) {
        im->has_type = json_is_integer(v);
        im->data_type = json_integer_value(v);
    } else if (!strcmp(rest, "Name")) {
        json_decref(im->name);
        im->name = json_incref(v);
    } else if (!strncmp(rest, "ImageData/Dimensions/", 21)) {
        const int64_t k = ordinal(rest + 21, "Data");
        uint64_t d = 0;
        if (k < 0 || k >= DM_MAX_DIMS + 1 || !as_count(v, &d)) {
            im->dims_bad = 1;
        } else {
            im->dims[k] = d;
            if ((unsigned)k + 1 > im->ndims)
                im->ndims = (unsigned)k + 1;
        }
    } else if (!strncmp(rest, "ImageData/Calibrations/Dimension/", 33)) {
        const char *field = next_segment(rest + 33, seg, sizeof seg);
        const int64_t k = ordinal(seg, "TagGroup");
        if (k >= 0 && k < DM_MAX_DIMS && field) {
            if (!strcmp(field, "Origin") && json_is_number(v))
                im->origin[k] = json_number_value(v), im->calibrated[k] |= 1;
            else if (!strcmp(field, "Scale") && json_is_number(v))
                im->scale[k] = json_number_value(v), im->calibrated[k] |= 2;
            else if (!strcmp(field, "Units") && json_is_string(v)) {
                snprintf(im->units[k], sizeof im->units[k], "%s", json_string_value(v));
                im->calibrated[k] |= 4;
            }
        }
    } else {
        const char *key = rest + 10; /* after "ImageTags/" */
        if (!strcmp(key, "Meta Data/Data Order Swapped")) {
            const char *t = json_string_value(v);
            im->order_swapped = json_is_integer(v) ? json_integer_value(v) != 0
                                : t && (!strcmp(t, "0") || !strcmp(t, "1")) ? t[0] == '1'
                                                                            : 2;
        } else if (!strcmp(key, "Meta Data/Format") && json_is_string(v)) {
            snprintf(im->format, sizeof im->format, "%s", json_string_value(v));
        }
        keep_fact(p, im, key, json_incref(v));
    }
    json_decref(v);
    return QEM_OK;
}

/* A tag's name as a path segment: Latin-1 to UTF-8, controls and '/' as
 * '?', at most DM_NAME_KEEP bytes of it. */
static size_t segment_text(const uint8_t *name, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n && i < DM_NAME_KEEP; i++) {
        const uint8_t c = name[i];
        if (c >= 0xa0) {
            out[k++] = (char)(0xc0 | c >> 6);
            out[k++] = (char)(0x80 | (c & 0x3f));
        } else {
            out[k++] = c < 0x20 || c >= 0x7f || c == '/' ? '?' : (char)c;
        }
    }
    out[k] = '\0';
    return k;
}

typedef struct dm_level {
    uint64_t left;  /* tags still to read */
    uint64_t end;   /* DM4: the byte after the group, from its stated length; 0 unknown */
    size_t path_len;
    uint64_t unnamed_groups, unnamed_data;
} dm_level;

static qem_status walk(dm_parse *p, uint64_t root_tags, qem_error *error)
{
    dm_level levels[DM_MAX_DEPTH];
    uint64_t info[DM_MAX_INFO];
    int depth = 1;
    memset(&levels[0], 0, sizeof levels[0]);
    levels[0].left = root_tags;
    const size_t width = p->version == 4 ? 8 : 4;
    while (depth > 0) {
        dm_level *up = &levels[depth - 1];
        p->path_text[up->path_len] = '\0';
        if (up->left == 0) {
            if (up->end && p->pos != up->end)
                return layout(p, error, "a group's stated length disagrees with its tags",
                              p->path_text);
            depth--;
            continue;
        }
        up->left--;
        if (++p->tags > DM_MAX_TAGS)
            return qem_fail(error, QEM_E_LIMIT,
                            "'%s' holds more than %u tags; qem reads Gatan Digital Micrograph "
                            "files of at most that many",
                            p->path, DM_MAX_TAGS);
        uint64_t id, name_len, tag_len = 0;
        uint8_t name[DM_NAME_KEEP];
        QEM_TRY(get_be(p, 1, &id, "a tag", error));
        QEM_TRY(get_be(p, 2, &name_len, "a tag name", error));
        const size_t kept = name_len < DM_NAME_KEEP ? (size_t)name_len : DM_NAME_KEEP;
        QEM_TRY(get(p, name, kept, "a tag name", error));
        QEM_TRY(skip(p, name_len - kept, "a tag name", error));
        if (p->version == 4)
            QEM_TRY(get_be(p, 8, &tag_len, "a tag length", error));
        const uint64_t tag_start = p->pos;
        if (p->version == 4 && tag_len > p->size - p->pos)
            return cut_short(p, tag_len, "a tag", error);
        /* Its path: the parent's, '/', the name (or HyperSpy's name for
         * an unnamed tag: TagGroup<k>, Data<k>). */
        char segment[2 * DM_NAME_KEEP + 32];
        if (kept)
            segment_text(name, kept, segment);
        else if (id == DM_GROUP)
            snprintf(segment, sizeof segment, "TagGroup%llu",
                     (unsigned long long)up->unnamed_groups++);
        else
            snprintf(segment, sizeof segment, "Data%llu", (unsigned long long)up->unnamed_data++);
        const size_t at = up->path_len;
        const int slash = at > 0;
        const size_t path_len = at + (size_t)slash + strlen(segment);
        if (slash)
            p->path_text[at] = '/';
        memcpy(p->path_text + at + slash, segment, strlen(segment) + 1);
        if (id == DM_GROUP) {
            uint64_t flags, count;
            QEM_TRY(get_be(p, 2, &flags, "a group", error));
            QEM_TRY(get_len(p, &count, "a group", error));
            if (depth >= DM_MAX_DEPTH)
                return qem_fail(error, QEM_E_LIMIT,
                                "'%s' nests tag groups more than %d deep; a Gatan Digital "
                                "Micrograph file is shallower",
                                p->path, DM_MAX_DEPTH);
            dm_level *down = &levels[depth++];
            memset(down, 0, sizeof *down);
            down->left = count;
            down->end = p->version == 4 ? tag_start + tag_len : 0;
            down->path_len = path_len;
            continue;
        }
        if (id != DM_DATA)
            return layout(p, error, "a tag is neither a group (20) nor data (21)", p->path_text);
        uint8_t mark[4];
        uint64_t ninfo;
        QEM_TRY(get(p, mark, 4, "a data tag", error));
        if (memcmp(mark, "%%%%", 4) != 0)
            return layout(p, error, "a data tag lacks its '%%%%' mark", p->path_text);
        QEM_TRY(get_len(p, &ninfo, "a data tag's type", error));
        if (ninfo == 0 || ninfo > DM_MAX_INFO)
            return layout(p, error, "a data tag's type description is empty or too long",
                          p->path_text);
        for (uint64_t k = 0; k < ninfo; k++)
            QEM_TRY(get_be(p, width, &info[k], "a data tag's type", error));
        size_t used = 0;
        int bad = 0;
        const uint64_t bytes = type_bytes(info, (size_t)ninfo, &used, 0, &bad);
        if (bad || used != ninfo)
            return layout(p, error, "a data tag's type description is malformed", p->path_text);
        const uint64_t at_value = p->pos;
        QEM_TRY(need(p, bytes, "a data tag's values", error));
        QEM_TRY(on_data(p, p->path_text, info, (size_t)ninfo, at_value, bytes, error));
        p->pos = at_value + bytes;
        if (p->version == 4 && p->pos != tag_start + tag_len)
            return layout(p, error, "a data tag's stated length disagrees with its type",
                          p->path_text);
    }
    return QEM_OK;
}

/* --- the image ---------------------------------------------------------------------- */

/* ImageData's DataType: the sample type qem reads, or its name when refused. */
typedef struct dm_type {
    int64_t code;
    const char *name;
    size_t item;
    qem_dtype sample;
    input_values values;
} dm_type;

static const dm_type dm_types[] = {
    {1, "int16", 2, QEM_DTYPE_NONE, INPUT_VALUES_INT16},
    {2, "float32", 4, QEM_DTYPE_FLOAT32, INPUT_VALUES_AS_STORED},
    {3, "complex64", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {4, "obsolete type 4", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {5, "packed complex (FFT)", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {6, "uint8", 1, QEM_DTYPE_UINT8, INPUT_VALUES_AS_STORED},
    {7, "int32", 4, QEM_DTYPE_NONE, INPUT_VALUES_INT32},
    {8, "RGB", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {9, "int8", 1, QEM_DTYPE_NONE, INPUT_VALUES_INT8},
    {10, "uint16", 2, QEM_DTYPE_UINT16, INPUT_VALUES_AS_STORED},
    {11, "uint32", 4, QEM_DTYPE_UINT32, INPUT_VALUES_AS_STORED},
    {12, "float64", 8, QEM_DTYPE_NONE, INPUT_VALUES_FLOAT64},
    {13, "complex128", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {14, "bool", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {23, "RGBA", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {27, "packed complex64 (FFT)", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
    {28, "packed complex128 (FFT)", 0, QEM_DTYPE_NONE, INPUT_VALUES_AS_STORED},
};

static const dm_type *type_of(int64_t code)
{
    for (size_t k = 0; k < sizeof dm_types / sizeof dm_types[0]; k++)
        if (dm_types[k].code == code)
            return &dm_types[k];
    return NULL;
}

static int is_thumbnail(const dm_parse *p, size_t index)
{
    for (size_t k = 0; k < p->thumb_count; k++)
        if (p->thumbs[k] == (int64_t)index)
            return 1;
    return 0;
}

/* A calibration `unit` qem's calibration file accepts, with the factor
 * to it: lengths for the scan, reciprocal lengths and angles for the
 * detector. NULL if it is neither. */
static const char *accepted_unit(const char *unit, int scan, double *factor)
{
    static const struct {
        const char *dm, *qem;
        double factor;
        int scan;
    } known[] = {{"nm", "nm", 1, 1},          {"\xc2\xb5m", "nm", 1000, 1},
                 {"um", "nm", 1000, 1},       {"\xc3\x85", "angstrom", 1, 1},
                 {"m", "m", 1, 1},            {"1/nm", "1/nm", 1, 0},
                 {"1/\xc3\x85", "1/angstrom", 1, 0}, {"mrad", "mrad", 1, 0},
                 {"rad", "rad", 1, 0}};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (known[k].scan == scan && !strcmp(unit, known[k].dm)) {
            *factor = known[k].factor;
            return known[k].qem;
        }
    return NULL;
}

/* The pair of axes (row dimension, column dimension) as calibration
 * quantities when both state a positive scale in the same accepted unit. */
static void calibrate_pair(json_t *quantities, const dm_image *im, size_t image, unsigned row,
                           unsigned column, int scan)
{
    double factor_r, factor_c;
    if ((im->calibrated[row] & 6) != 6 || (im->calibrated[column] & 6) != 6)
        return;
    const char *ur = accepted_unit(im->units[row], scan, &factor_r);
    const char *uc = accepted_unit(im->units[column], scan, &factor_c);
    const double r = im->scale[row] * (ur ? factor_r : 0);
    const double c = im->scale[column] * (uc ? factor_c : 0);
    if (!ur || !uc || strcmp(ur, uc) != 0 || !(r > 0) || !(c > 0) || !isfinite(r) ||
        !isfinite(c))
        return;
    if (scan) {
        /* qem accepts scan steps of 1e-14 m to 1e-6 m. */
        const double to_m = !strcmp(ur, "nm") ? 1e-9 : !strcmp(ur, "angstrom") ? 1e-10 : 1;
        if (r * to_m < 1e-14 || r * to_m > 1e-6 || c * to_m < 1e-14 || c * to_m > 1e-6)
            return;
    }
    const unsigned dims[2] = {row, column};
    const double values[2] = {r, c};
    const char *keys[2] = {scan ? "scan_sampling_row" : "detector_sampling_row",
                           scan ? "scan_sampling_column" : "detector_sampling_column"};
    for (int k = 0; k < 2; k++) {
        char evidence[160];
        snprintf(evidence, sizeof evidence,
                 "ImageList/TagGroup%zu/ImageData/Calibrations/Dimension/TagGroup%u/Scale "
                 "(Units '%s')",
                 image, dims[k], im->units[dims[k]]);
        json_object_set_new(quantities, keys[k],
                            json_pack("{s:f, s:s, s:s, s:s}", "value", values[k], "unit", ur,
                                      "provenance", DM_PROVENANCE, "evidence", evidence));
    }
}

static json_t *image_facts(const dm_image *im)
{
    json_t *dims = json_array(), *cal = json_array();
    for (unsigned k = 0; k < im->ndims && k < DM_MAX_DIMS; k++) {
        json_array_append_new(dims, json_integer((json_int_t)im->dims[k]));
        json_t *c = json_object();
        if (im->calibrated[k] & 1)
            json_object_set_new(c, "origin", json_real(im->origin[k]));
        if (im->calibrated[k] & 2)
            json_object_set_new(c, "scale", json_real(im->scale[k]));
        if (im->calibrated[k] & 4)
            json_object_set_new(c, "units", json_string(im->units[k]));
        json_array_append_new(cal, c);
    }
    return json_pack("{s:o, s:o}", "dimensions", dims, "calibrations", cal);
}

static qem_status refuse(qem_error *error, qem_status st, const dm_parse *p, const char *what)
{
    return qem_fail(error, st, "'%s' is a Gatan Digital Micrograph DM%d file %s", p->path,
                    p->version, what);
}

static qem_status describe_image(acquisition *a, dm_parse *p, dm_state *s, const input_options *o,
                                 qem_error *error)
{
    /* The image: the largest (in Data bytes) of ImageList's images that
     * Thumbnails does not name, the last of equals. HyperSpy returns every
     * such image; LiberTEM takes the first of at least two dimensions. */
    size_t chosen = SIZE_MAX, candidates = 0;
    for (size_t i = 0; i < p->image_count; i++) {
        const dm_image *im = &p->images[i];
        if (!im->seen || !im->has_data || is_thumbnail(p, i))
            continue;
        candidates++;
        if (chosen == SIZE_MAX || im->data_bytes >= p->images[chosen].data_bytes)
            chosen = i;
    }
    if (chosen == SIZE_MAX)
        return refuse(error, QEM_E_UNSUPPORTED, p,
                      "with no image: its ImageList holds no image data besides thumbnails");
    dm_image *im = &p->images[chosen];
    char text[256];
    if (!im->has_type)
        return refuse(error, QEM_E_LAYOUT, p, "whose image states no DataType");
    const dm_type *t = type_of(im->data_type);
    if (!t || !t->item) {
        snprintf(text, sizeof text,
                 "of %s samples (DataType %lld); qem reads int8, uint8, int16, uint16, int32, "
                 "uint32, float32 and float64 images",
                 t ? t->name : "unknown", (long long)im->data_type);
        return refuse(error, QEM_E_UNSUPPORTED, p, text);
    }
    if (im->dims_bad || im->ndims == 0 || im->ndims > DM_MAX_DIMS) {
        if (im->ndims > DM_MAX_DIMS)
            return refuse(error, QEM_E_UNSUPPORTED, p,
                          "of more than 4 dimensions; qem reads 2D, 3D and 4D images");
        return refuse(error, QEM_E_LAYOUT, p,
                      "whose image Dimensions are missing, or not non-negative integers "
                      "numbered from 0");
    }
    for (unsigned k = 0; k < im->ndims; k++)
        if (im->dims[k] == 0)
            return refuse(error, QEM_E_LAYOUT, p, "whose image has an empty dimension");
    if (im->ndims == 1)
        return refuse(error, QEM_E_UNSUPPORTED, p,
                      "holding a spectrum (1 dimension); qem reads detector frames");
    if (!strcasecmp(im->format, "Spectrum image"))
        return refuse(error, QEM_E_UNSUPPORTED, p,
                      "holding a spectrum image (Meta Data Format 'Spectrum image'); qem reads "
                      "detector frames");
    if (!im->data_simple)
        return refuse(error, QEM_E_LAYOUT, p,
                      "whose image Data is not an array of one simple type");
    uint64_t values = 1, expected;
    for (unsigned k = 0; k < im->ndims; k++)
        if (qem_mul_overflow_u64(values, im->dims[k], &values))
            return refuse(error, QEM_E_LIMIT, p,
                          "whose image Dimensions multiply beyond 64 bits");
    if (qem_mul_overflow_u64(values, t->item, &expected))
        return refuse(error, QEM_E_LIMIT, p, "whose image Dimensions multiply beyond 64 bits");
    if (expected != im->data_bytes || simple_size(im->data_element) != t->item) {
        snprintf(text, sizeof text,
                 "whose image Data (%llu values of %llu bytes) does not hold the %llu %s "
                 "values its Dimensions state",
                 (unsigned long long)im->data_count,
                 (unsigned long long)simple_size(im->data_element), (unsigned long long)values,
                 t->name);
        return refuse(error, QEM_E_LAYOUT, p, text);
    }
    /* Layout: DM states dimensions fastest first. 2D (x, y) is one frame
     * of y rows; 3D (x, y, z) is z frames; 4D (x, y, u, v) is C order
     * (v, u, y, x) = (scan rows, scan columns, detector rows, detector
     * columns) only when Meta Data "Data Order Swapped" is 1; without it
     * a 4D image is GMS's older layout (the scan fastest), as LiberTEM
     * reads the tag. */
    if (im->order_swapped == 2)
        return refuse(error, QEM_E_LAYOUT, p,
                      "whose Meta Data 'Data Order Swapped' is neither 0 nor 1");
    if (im->ndims == 4 && im->order_swapped != 1)
        return refuse(error, QEM_E_UNSUPPORTED, p,
                      "holding a 4D image in the older Digital Micrograph layout (scan axes "
                      "fastest: Meta Data 'Data Order Swapped' is not 1); convert it to C "
                      "order first (LiberTEM's convert_dm4_transposed)");
    if (im->ndims < 4 && im->order_swapped == 0)
        return refuse(error, QEM_E_UNSUPPORTED, p,
                      "whose Meta Data 'Data Order Swapped' is 0 (a transposed layout); qem "
                      "reads the image in C order only");
    const uint64_t frames = im->ndims == 2 ? 1 : im->ndims == 3 ? im->dims[2]
                                                                : im->dims[2] * im->dims[3];
    const uint64_t file_scan[2] = {im->ndims == 4 ? im->dims[3] : 0,
                                   im->ndims == 4 ? im->dims[2] : 0};
    a->shape[2] = im->dims[1];
    a->shape[3] = im->dims[0];
    uint64_t scan[2] = {0, 0};
    QEM_TRY(qem_input_scan_shape(o, im->ndims == 4, file_scan,
                                 "the 4D image's Dimensions (scan: entries 3 and 2)", frames,
                                 p->path, scan, error));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->sample_type = t->sample;
    a->read_values = t->values;
    s->offset = im->data_offset;
    s->item = t->item;
    s->frame_bytes = a->shape[2] * a->shape[3] * t->item;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    s->swap = p->little && t->item > 1;
#else
    s->swap = !p->little && t->item > 1;
#endif

    /* Facts: the file, the image, its calibrations and the ImageTags kept. */
    qem_input_fact(a, "dm_version", json_integer(p->version));
    qem_input_fact(a, "byte_order", json_string(p->little ? "little-endian" : "big-endian"));
    qem_input_fact(a, "image", json_integer((json_int_t)chosen));
    qem_input_fact(a, "images", json_integer((json_int_t)candidates));
    json_t *thumbs = json_array();
    for (size_t k = 0; k < p->thumb_count; k++)
        json_array_append_new(thumbs, json_integer((json_int_t)p->thumbs[k]));
    qem_input_fact(a, "thumbnails", thumbs);
    qem_input_fact(a, "image_rule",
                   json_string("the largest ImageList image (in Data bytes) that Thumbnails "
                               "does not name; the last of equals"));
    qem_input_fact(a, "data_type", json_integer((json_int_t)im->data_type));
    qem_input_fact(a, "data_type_name", json_string(t->name));
    json_t *f = image_facts(im);
    qem_input_fact(a, "dimensions", json_incref(json_object_get(f, "dimensions")));
    qem_input_fact(a, "calibrations", json_incref(json_object_get(f, "calibrations")));
    json_decref(f);
    qem_input_fact(a, "dimension_order",
                   json_string(im->ndims == 4
                                   ? "DM order, fastest first: detector columns, detector rows, "
                                     "scan columns, scan rows"
                                   : im->ndims == 3 ? "DM order, fastest first: detector "
                                                      "columns, detector rows, frames"
                                                    : "DM order, fastest first: detector "
                                                      "columns, detector rows"));
    if (im->order_swapped >= 0)
        qem_input_fact(a, "data_order_swapped", json_integer(im->order_swapped));
    qem_input_fact(a, "data_offset", json_integer((json_int_t)im->data_offset));
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    if (im->name)
        qem_input_fact(a, "name", json_incref(im->name));
    if (im->tags)
        qem_input_fact(a, "image_tags", json_incref(im->tags));
    if (p->facts_cut)
        qem_input_fact(a, "_truncated",
                       json_sprintf("only the first ImageTags values are recorded (at most %d, "
                                    "%u bytes)",
                                    DM_MAX_FACTS, DM_MAX_FACT_BYTES));

    /* Calibration: the axes' scales where their units are certain. */
    json_t *quantities = json_object();
    if (im->ndims == 4)
        calibrate_pair(quantities, im, chosen, 3, 2, 1);
    calibrate_pair(quantities, im, chosen, 1, 0, 0);
    if (json_object_size(quantities))
        a->calibration = json_pack("{s:o}", "quantities", quantities);
    else
        json_decref(quantities);
    return qem_input_implicit_mask(a, error);
}

/* --- the family ------------------------------------------------------------------- */

static int dm_recognises(const uint8_t *head, size_t n)
{
    return n >= 4 && head[0] == 0 && head[1] == 0 && head[2] == 0 && (head[3] == 3 || head[3] == 4);
}

static void free_parse(dm_parse *p)
{
    for (size_t i = 0; p->images && i < DM_MAX_IMAGES; i++) {
        json_decref(p->images[i].name);
        json_decref(p->images[i].tags);
    }
    free(p->images);
    free(p->buf);
}

/* Sets up `p` for the file `path` (open as `fd`, `size` bytes). */
static qem_status parse_begin(dm_parse *p, const char *path, int fd, uint64_t size,
                              qem_error *error)
{
    memset(p, 0, sizeof *p);
    p->path = path;
    p->fd = fd;
    p->size = size;
    p->version = 3;
    p->buf = malloc(DM_BUFFER);
    p->images = calloc(DM_MAX_IMAGES, sizeof *p->images);
    return p->buf && p->images ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
}

/* The header and the whole tag tree. */
static qem_status parse_tree(dm_parse *p, qem_error *error)
{
    uint64_t version = 0, root_len = 0, little = 0, flags = 0, root_tags = 0;
    QEM_TRY(get_be(p, 4, &version, "the header", error));
    if (version != 3 && version != 4)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is no Gatan Digital Micrograph DM3 or DM4 file: its header states "
                        "version %llu",
                        p->path, (unsigned long long)version);
    p->version = (int)version;
    QEM_TRY(get_len(p, &root_len, "the header", error));
    QEM_TRY(get_be(p, 4, &little, "the header", error));
    const uint64_t header = p->pos;
    if (little > 1) {
        char text[96];
        snprintf(text, sizeof text, "whose byte order flag is %llu; it must be 0 or 1",
                 (unsigned long long)little);
        return refuse(error, QEM_E_LAYOUT, p, text);
    }
    if (root_len > p->size - header)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is a Gatan Digital Micrograph DM%d file cut short: its header "
                        "states %llu bytes of tags after byte %llu, but the file holds %llu bytes",
                        p->path, p->version, (unsigned long long)root_len,
                        (unsigned long long)header, (unsigned long long)p->size);
    p->little = little == 1;
    QEM_TRY(get_be(p, 2, &flags, "the root group", error));
    QEM_TRY(get_len(p, &root_tags, "the root group", error));
    return walk(p, root_tags, error);
}

static qem_status dm_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                              const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    dm_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    uint64_t size = 0;
    QEM_TRY(qem_input_open_master(a, path, "a Gatan Digital Micrograph file", o, &s->fd, &size,
                                  error));
    dm_parse p;
    qem_status st = parse_begin(&p, path, s->fd, size, error);
    if (st == QEM_OK)
        st = parse_tree(&p, error);
    if (st == QEM_OK)
        st = describe_image(a, &p, s, o, error);
    free_parse(&p);
    return st;
}

qem_status qem_input_dm_tags(int fd, uint64_t size, const char *path, const char *const *names,
                             size_t name_count, input_dm_tags *out, qem_error *error)
{
    memset(out, 0, sizeof *out);
    dm_parse p;
    qem_status st = parse_begin(&p, path, fd, size, error);
    p.all = json_object();
    p.named = json_object();
    p.names = names;
    p.name_count = name_count;
    if (st == QEM_OK && (!p.all || !p.named))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK)
        st = parse_tree(&p, error);
    if (st == QEM_OK) {
        out->tags = json_incref(p.all);
        out->named = json_incref(p.named);
        out->truncated = p.facts_cut;
        out->version = p.version;
        out->little_endian = p.little;
    }
    json_decref(p.all);
    json_decref(p.named);
    free_parse(&p);
    return st;
}

void qem_input_dm_tags_free(input_dm_tags *t)
{
    json_decref(t->tags);
    json_decref(t->named);
    memset(t, 0, sizeof *t);
}

static qem_status dm_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                          qem_error *error)
{
    dm_state *s = a->impl;
    const uint64_t at = s->offset + first * s->frame_bytes;
    const size_t bytes = (size_t)(count * s->frame_bytes);
    QEM_TRY(qem_pread_full(s->fd, out, bytes, at, QEM_E_CHANGED, error));
    qem_input_member_read(&a->members[0], s->fd, at, out, bytes);
    if (s->swap)
        input_swap(out, bytes / s->item, s->item);
    return QEM_OK;
}

static void dm_release(acquisition *a)
{
    dm_state *s = a->impl;
    if (s && s->fd >= 0)
        close(s->fd);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_dm = {"dm",    dm_recognises, dm_describe, dm_read,
                                          dm_release, 1,          NULL};
