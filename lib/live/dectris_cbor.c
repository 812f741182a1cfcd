#include "live/dectris_cbor.h"

#include <inttypes.h>
#include <lz4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "live/cbor_loader.h"

#define STREAM_FAIL(...) qem_fail(error, QEM_E_STREAM, __VA_ARGS__)

/* RFC 8949 self-described CBOR; RFC 8746 multi-dimensional (row-major) and
 * typed arrays; DECTRIS's compressed byte string. */
#define TAG_SELF_DESCRIBED 55799u
#define TAG_MULTI_DIM 40u
#define TAG_UINT8 64u
#define TAG_UINT16_LE 69u
#define TAG_UINT32_LE 70u
#define TAG_COMPRESSED 56500u

/* Keys of a message's map; facts converted this deep and this wide. */
#define MAX_MESSAGE_KEYS 1024u
#define FACT_DEPTH 4
#define FACT_WIDTH 64u

/* LZ4 expands a block at most 255 times: compressed data stating more
 * than this many bytes per byte cannot decode, and is refused before any
 * allocation (a small message cannot ask for a large buffer). */
#define MAX_EXPANSION 256u

typedef const cbor_item_t citem;

/* --- well-formedness, before libcbor allocates anything ----------------------- */

typedef struct level {
    uint64_t left; /* items still to come (definite length) */
    uint64_t seen; /* items seen (indefinite length) */
    int indefinite;
    int map; /* an indefinite map must break after whole pairs */
} level;

/* NULL when `p` is one well-formed CBOR data item of at most
 * QEM_DECTRIS2_MAX_ITEMS items nested at most QEM_DECTRIS2_MAX_DEPTH deep,
 * every length within the bytes left, no string of indefinite length;
 * otherwise why not. */
static const char *well_formed(const uint8_t *p, size_t n)
{
    level st[QEM_DECTRIS2_MAX_DEPTH + 1];
    size_t depth = 1, at = 0;
    uint64_t items = 0;
    st[0] = (level){.left = 1};
    while (depth) {
        level *l = &st[depth - 1];
        if (!l->indefinite && l->left == 0) {
            depth--;
            continue;
        }
        if (at >= n)
            return "it ends inside a data item";
        const uint8_t initial = p[at++];
        if (l->indefinite && initial == 0xff) {
            if (l->map && l->seen % 2)
                return "an indefinite-length map breaks after a key";
            depth--;
            continue;
        }
        const unsigned major = initial >> 5, info = initial & 31;
        if (l->indefinite)
            l->seen++;
        else
            l->left--;
        if (++items > QEM_DECTRIS2_MAX_ITEMS)
            return "it holds more than 65536 data items";
        uint64_t arg = info;
        if (info >= 24 && info <= 27) {
            const size_t k = (size_t)1 << (info - 24);
            if (n - at < k)
                return "it ends inside a data item";
            arg = 0;
            for (size_t b = 0; b < k; b++)
                arg = arg << 8 | p[at + b];
            at += k;
        } else if (info >= 28 && info <= 30) {
            return "it uses a reserved additional-information value";
        } else if (info == 31 && (major < 2 || major >= 6)) {
            return "a break or an indefinite length stands where none may";
        }
        level next = {0};
        int push = 0;
        switch (major) {
        case 2:
        case 3:
            /* libcbor keeps such a string's chunks apart; DECTRIS sends none. */
            if (info == 31)
                return "it holds an indefinite-length string";
            if (arg > n - at) {
                return "a string runs past the end";
            } else {
                at += (size_t)arg;
            }
            break;
        case 4:
        case 5:
            push = 1;
            if (info == 31) {
                next.indefinite = 1;
                next.map = major == 5;
            } else {
                /* Every item takes at least a byte. */
                if (arg > n - at || (major == 5 && 2 * arg > n - at))
                    return "an array or map is longer than the message";
                next.left = major == 5 ? 2 * arg : arg;
            }
            break;
        case 6:
            push = 1;
            next.left = 1;
            break;
        case 7:
            if (info == 24 && arg < 32)
                return "a simple value takes two bytes where one would do";
            break;
        default: break;
        }
        if (push) {
            if (depth == QEM_DECTRIS2_MAX_DEPTH + 1)
                return "it nests more than 32 deep";
            st[depth++] = next;
        }
    }
    return at == n ? NULL : "bytes follow the message's data item";
}

/* --- reading the tree ------------------------------------------------------------ */

/* The item a tag holds, borrowed from the tag (libcbor hands a reference). */
static citem *tagged(const qem_cbor *c, citem *tag)
{
    cbor_item_t *inner = c->tag_item(tag);
    cbor_item_t *drop = inner;
    c->decref(&drop); /* the tag still holds it */
    return inner;
}

static int is_tag(const qem_cbor *c, citem *it, uint64_t value)
{
    return it && c->type_of(it) == CBOR_TYPE_TAG && c->tag_value(it) == value;
}

static int is_text(const qem_cbor *c, citem *it)
{
    return it && c->type_of(it) == CBOR_TYPE_STRING && c->string_is_definite(it);
}

static int text_is(const qem_cbor *c, citem *it, const char *want)
{
    const size_t n = strlen(want);
    return is_text(c, it) && c->string_length(it) == n &&
           (n == 0 || !memcmp(c->string_handle(it), want, n));
}

/* A text string of at most `size - 1` bytes, no NUL, into `out`. */
static int text_copy(const qem_cbor *c, citem *it, char *out, size_t size)
{
    if (!is_text(c, it))
        return 0;
    const size_t n = c->string_length(it);
    if (n >= size || (n && memchr(c->string_handle(it), 0, n)))
        return 0;
    if (n)
        memcpy(out, c->string_handle(it), n);
    out[n] = 0;
    return 1;
}

static int get_u64(const qem_cbor *c, citem *it, uint64_t max, uint64_t *out)
{
    if (!it || c->type_of(it) != CBOR_TYPE_UINT)
        return 0;
    *out = c->get_int(it);
    return *out <= max;
}

/* Every key of `map` a text string, none twice, at most `max` keys. */
static qem_status check_keys(const qem_cbor *c, citem *map, size_t max, const char *what,
                             qem_error *error)
{
    const size_t n = c->map_size(map);
    const struct cbor_pair *pairs = c->map_handle(map);
    if (n > max)
        return STREAM_FAIL("%s: a map of %zu keys (at most %zu)", what, n, max);
    for (size_t i = 0; i < n; i++) {
        if (!is_text(c, pairs[i].key))
            return STREAM_FAIL("%s: a map key is not a text string", what);
        const size_t len = c->string_length(pairs[i].key);
        for (size_t j = 0; j < i; j++)
            if (c->string_length(pairs[j].key) == len &&
                (len == 0 ||
                 !memcmp(c->string_handle(pairs[j].key), c->string_handle(pairs[i].key), len)))
                return STREAM_FAIL("%s: the key '%.*s' appears twice", what,
                                   (int)(len > 64 ? 64 : len),
                                   (const char *)c->string_handle(pairs[i].key));
    }
    return QEM_OK;
}

/* The value of text key `key` in a checked map; NULL if absent. */
static citem *find(const qem_cbor *c, citem *map, const char *key)
{
    const size_t n = c->map_size(map);
    const struct cbor_pair *pairs = c->map_handle(map);
    for (size_t i = 0; i < n; i++)
        if (text_is(c, pairs[i].key, key))
            return pairs[i].value;
    return NULL;
}

/* --- loading ----------------------------------------------------------------------- */

qem_status qem_dectris2_load(const void *data, size_t size, uint64_t next_frame,
                             qem_dectris2_message *m, qem_error *error)
{
    memset(m, 0, sizeof *m);
    const qem_cbor *c;
    QEM_TRY(qem_cbor_get(&c, error));
    char what[96];
    snprintf(what, sizeof what, "frame %" PRIu64 " (expected next)", next_frame);
    const uint8_t *p = data;
    if (size < 3 || p[0] != 0xd9 || p[1] != 0xd9 || p[2] != 0xf7)
        return STREAM_FAIL("%s: the message is not self-described CBOR (tag 55799)", what);
    const char *why = well_formed(p, size);
    if (why)
        return STREAM_FAIL("%s: the message is not well-formed CBOR: %s", what, why);
    struct cbor_load_result result;
    memset(&result, 0, sizeof result);
    cbor_item_t *root = c->load(p, size, &result);
    if (!root || result.error.code != CBOR_ERR_NONE || result.read != size) {
        if (root)
            c->decref(&root);
        if (result.error.code == CBOR_ERR_MEMERROR)
            return qem_fail(error, QEM_E_NO_MEMORY, "%s: no memory to load a message of %zu "
                            "bytes", what, size);
        return STREAM_FAIL("%s: libcbor refused the message at byte %zu", what,
                           result.error.position);
    }
    m->root = root;
    citem *map = tagged(c, root); /* the prefix made root tag 55799 */
    qem_status st = QEM_OK;
    if (c->type_of(map) != CBOR_TYPE_MAP)
        st = STREAM_FAIL("%s: the message is not a CBOR map", what);
    else
        st = check_keys(c, map, MAX_MESSAGE_KEYS, what, error);
    citem *type = st == QEM_OK ? find(c, map, "type") : NULL;
    if (st != QEM_OK) {
        /* refused above */
    } else if (text_is(c, type, "start"))
        m->kind = QEM_DECTRIS2_START;
    else if (text_is(c, type, "image"))
        m->kind = QEM_DECTRIS2_IMAGE;
    else if (text_is(c, type, "end"))
        m->kind = QEM_DECTRIS2_END;
    else if (is_text(c, type))
        st = STREAM_FAIL("%s: unknown message type '%.*s'", what,
                         (int)(c->string_length(type) > 64 ? 64 : c->string_length(type)),
                         (const char *)c->string_handle(type));
    else
        st = STREAM_FAIL("%s: the message has no type text string", what);
    if (st != QEM_OK) {
        qem_dectris2_message_free(m);
        return st;
    }
    m->map = map;
    return QEM_OK;
}

void qem_dectris2_message_free(qem_dectris2_message *m)
{
    const qem_cbor *c;
    if (m && m->root && qem_cbor_get(&c, NULL) == QEM_OK) {
        cbor_item_t *root = m->root;
        c->decref(&root);
    }
    if (m)
        memset(m, 0, sizeof *m);
}

/* --- arrays ---------------------------------------------------------------------- */

/* An RFC 8746 [[rows, columns], typed array], its data still encoded. */
typedef struct typed {
    uint64_t rows, columns;
    qem_dtype type;
    unsigned element_size;
    int encoding; /* QEM_DECTRIS_ENC_RAW, _BSLZ4 or QEM_DECTRIS2_ENC_LZ4_HDF5 */
    const uint8_t *data;
    size_t size;
} typed;

static qem_status multidim(const qem_cbor *c, citem *it, const char *what, typed *t,
                           qem_error *error)
{
    memset(t, 0, sizeof *t);
    if (!is_tag(c, it, TAG_MULTI_DIM))
        return STREAM_FAIL("%s is not a multi-dimensional array (tag 40)", what);
    citem *pair = tagged(c, it);
    if (c->type_of(pair) != CBOR_TYPE_ARRAY || c->array_size(pair) != 2)
        return STREAM_FAIL("%s: tag 40 does not hold [dimensions, typed array]", what);
    cbor_item_t **two = c->array_handle(pair);
    citem *dims = two[0], *array = two[1];
    if (c->type_of(dims) != CBOR_TYPE_ARRAY || c->array_size(dims) != 2 ||
        !get_u64(c, c->array_handle(dims)[0], QEM_DECTRIS_MAX_SIDE, &t->rows) ||
        !get_u64(c, c->array_handle(dims)[1], QEM_DECTRIS_MAX_SIDE, &t->columns) || !t->rows ||
        !t->columns)
        return STREAM_FAIL("%s: the dimensions are not [rows, columns] of 1 to %u each", what,
                           QEM_DECTRIS_MAX_SIDE);
    if (c->type_of(array) != CBOR_TYPE_TAG)
        return STREAM_FAIL("%s holds no typed array", what);
    const uint64_t tag = c->tag_value(array);
    if (tag == TAG_UINT8)
        t->type = QEM_DTYPE_UINT8;
    else if (tag == TAG_UINT16_LE)
        t->type = QEM_DTYPE_UINT16;
    else if (tag == TAG_UINT32_LE)
        t->type = QEM_DTYPE_UINT32;
    else
        return STREAM_FAIL("%s: typed array tag %" PRIu64 " is not uint8 (64), little-endian "
                           "uint16 (69) or uint32 (70)", what, tag);
    t->element_size = (unsigned)qem_dtype_size(t->type);
    citem *content = tagged(c, array);
    if (c->type_of(content) == CBOR_TYPE_BYTESTRING && c->bytestring_is_definite(content)) {
        t->encoding = QEM_DECTRIS_ENC_RAW;
        t->data = c->bytestring_handle(content);
        t->size = c->bytestring_length(content);
        return QEM_OK;
    }
    if (!is_tag(c, content, TAG_COMPRESSED))
        return STREAM_FAIL("%s: the typed array holds neither a byte string nor a compressed "
                           "one (tag 56500)", what);
    citem *z = tagged(c, content);
    uint64_t element = 0;
    if (c->type_of(z) != CBOR_TYPE_ARRAY || c->array_size(z) != 3 ||
        !is_text(c, c->array_handle(z)[0]) ||
        !get_u64(c, c->array_handle(z)[1], UINT32_MAX, &element) ||
        c->type_of(c->array_handle(z)[2]) != CBOR_TYPE_BYTESTRING ||
        !c->bytestring_is_definite(c->array_handle(z)[2]))
        return STREAM_FAIL("%s: tag 56500 does not hold [algorithm, element size, byte string]",
                           what);
    citem *algorithm = c->array_handle(z)[0];
    if (text_is(c, algorithm, "bslz4")) {
        if (element != t->element_size)
            return STREAM_FAIL("%s: bslz4 of %" PRIu64 "-byte elements, not the array's %u",
                               what, element, t->element_size);
        t->encoding = QEM_DECTRIS_ENC_BSLZ4;
    } else if (text_is(c, algorithm, "lz4")) {
        t->encoding = QEM_DECTRIS2_ENC_LZ4_HDF5;
    } else {
        const size_t n = c->string_length(algorithm);
        return STREAM_FAIL("%s: unknown compression '%.*s'", what, (int)(n > 32 ? 32 : n),
                           (const char *)c->string_handle(algorithm));
    }
    t->data = c->bytestring_handle(c->array_handle(z)[2]);
    t->size = c->bytestring_length(c->array_handle(z)[2]);
    return QEM_OK;
}

/* The decoded size of `t` against its data's: raw data must be exactly
 * the array; compressed data must be able to decode to it. */
static qem_status check_extent(const typed *t, const char *what, qem_error *error)
{
    const uint64_t bytes = t->rows * t->columns * t->element_size; /* sides <= 2^16 */
    if (t->encoding == QEM_DECTRIS_ENC_RAW && bytes != t->size)
        return STREAM_FAIL("%s: the data has %zu bytes, not %" PRIu64 " x %" PRIu64 " x %u",
                           what, t->size, t->rows, t->columns, t->element_size);
    if (t->encoding != QEM_DECTRIS_ENC_RAW && bytes / MAX_EXPANSION > t->size)
        return STREAM_FAIL("%s: %zu compressed bytes cannot decode to %" PRIu64 " bytes", what,
                           t->size, bytes);
    return QEM_OK;
}

static void image_of(const typed *t, uint64_t frame, qem_dectris_image *im)
{
    memset(im, 0, sizeof *im);
    im->frame = frame;
    im->encoding = t->encoding;
    im->element_size = t->element_size;
    im->blob = t->data;
    im->blob_size = t->size;
    im->frame_bytes = (size_t)(t->rows * t->columns * t->element_size);
}

/* --- facts ------------------------------------------------------------------------ */

/* A CBOR value as JSON: numbers, text, booleans, null, dates (tags 0 and
 * 1), and arrays and maps of those, FACT_DEPTH deep and FACT_WIDTH wide;
 * NULL for the rest (byte strings, typed arrays, other tags). */
static json_t *to_json(const qem_cbor *c, citem *it, int depth)
{
    switch (c->type_of(it)) {
    case CBOR_TYPE_UINT: {
        const uint64_t v = c->get_int(it);
        return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
    }
    case CBOR_TYPE_NEGINT: {
        const uint64_t v = c->get_int(it); /* the value is -1 - v */
        return v < INT64_MAX ? json_integer(-1 - (json_int_t)v) : NULL;
    }
    case CBOR_TYPE_STRING:
        return is_text(c, it) ? json_stringn((const char *)c->string_handle(it),
                                             c->string_length(it))
                              : NULL; /* not UTF-8: NULL too */
    case CBOR_TYPE_FLOAT_CTRL:
        if (!c->float_ctrl_is_ctrl(it)) {
            const double v = c->float_get_float(it);
            return isfinite(v) ? json_real(v) : NULL;
        }
        switch (c->ctrl_value(it)) {
        case CBOR_CTRL_TRUE: return json_true();
        case CBOR_CTRL_FALSE: return json_false();
        case CBOR_CTRL_NULL:
        case CBOR_CTRL_UNDEF: return json_null();
        default: return NULL;
        }
    case CBOR_TYPE_TAG:
        return c->tag_value(it) <= 1 ? to_json(c, tagged(c, it), depth) : NULL;
    case CBOR_TYPE_ARRAY: {
        const size_t n = c->array_size(it);
        if (depth >= FACT_DEPTH || n > FACT_WIDTH)
            return NULL;
        json_t *out = json_array();
        for (size_t i = 0; out && i < n; i++) {
            json_t *v = to_json(c, c->array_handle(it)[i], depth + 1);
            if (!v || json_array_append_new(out, v)) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    }
    case CBOR_TYPE_MAP: {
        const size_t n = c->map_size(it);
        if (depth >= FACT_DEPTH || n > FACT_WIDTH)
            return NULL;
        json_t *out = json_object();
        for (size_t i = 0; out && i < n; i++) {
            const struct cbor_pair *pair = &c->map_handle(it)[i];
            char key[QEM_DECTRIS2_MAX_NAME + 1];
            json_t *v = text_copy(c, pair->key, key, sizeof key)
                            ? to_json(c, pair->value, depth + 1)
                            : NULL;
            if (!v || json_object_set_new(out, key, v)) {
                json_decref(out);
                out = NULL;
            }
        }
        return out;
    }
    default: return NULL;
    }
}

/* The start message's fields as facts: "start" holds what converts,
 * "not_kept" names the rest (the pixel mask, flat field, tables). */
static void start_facts(const qem_cbor *c, citem *map, json_t *facts)
{
    json_t *kept = json_object(), *not_kept = json_array();
    const size_t n = c->map_size(map);
    const struct cbor_pair *pairs = c->map_handle(map);
    for (size_t i = 0; i < n; i++) {
        char key[128];
        if (!text_copy(c, pairs[i].key, key, sizeof key) || !strcmp(key, "type"))
            continue;
        json_t *v = to_json(c, pairs[i].value, 0);
        if (v)
            json_object_set_new(kept, key, v);
        else
            json_array_append_new(not_kept, json_string(key));
    }
    json_object_set_new(facts, "start", kept);
    json_object_set_new(facts, "not_kept", not_kept);
}

/* --- start ------------------------------------------------------------------------- */

static qem_status parse_mask(const qem_cbor *c, citem *masks, qem_dectris2_series *x,
                             qem_error *error)
{
    qem_dectris_series *s = &x->s;
    const char *what = "the start message's pixel_mask";
    if (c->type_of(masks) != CBOR_TYPE_MAP || c->map_size(masks) == 0)
        return STREAM_FAIL("%s is not a map of channels to arrays", what);
    QEM_TRY(check_keys(c, masks, QEM_DECTRIS2_MAX_CHANNELS, what, error));
    citem *mask = x->channel[0] ? find(c, masks, x->channel) : c->map_handle(masks)[0].value;
    if (!mask)
        return STREAM_FAIL("%s has no channel '%s'", what, x->channel);
    if (!x->channel[0] &&
        !text_copy(c, c->map_handle(masks)[0].key, x->channel, sizeof x->channel))
        return STREAM_FAIL("%s: the channel's name is longer than %u bytes", what,
                           QEM_DECTRIS2_MAX_NAME);
    typed t;
    QEM_TRY(multidim(c, mask, what, &t, error));
    if (t.type != QEM_DTYPE_UINT32)
        return STREAM_FAIL("%s is not uint32", what);
    if (s->columns && (t.rows != s->rows || t.columns != s->columns))
        return STREAM_FAIL("%s is %" PRIu64 " x %" PRIu64 " but the detector is %" PRIu64
                           " x %" PRIu64 " (rows x columns)",
                           what, t.rows, t.columns, s->rows, s->columns);
    QEM_TRY(check_extent(&t, what, error));
    qem_dectris_image im;
    image_of(&t, 0, &im);
    uint8_t *values = malloc(im.frame_bytes), *scratch = malloc(im.frame_bytes);
    qem_error inner = {0};
    qem_status st = values && scratch ? qem_dectris2_decode_image(&im, values, im.frame_bytes,
                                                                  scratch, im.frame_bytes, &inner)
                                      : QEM_E_NO_MEMORY;
    free(scratch);
    if (st != QEM_OK) {
        free(values);
        return st == QEM_E_NO_MEMORY ? qem_fail(error, st, "no memory for %s", what)
                                     : STREAM_FAIL("%s: %s", what, inner.message);
    }
    const uint64_t pixels = t.rows * t.columns;
    const uint32_t *v = (const uint32_t *)(const void *)values; /* native order now */
    uint64_t flagged = 0;
    for (uint64_t i = 0; i < pixels; i++)
        flagged += v[i] != 0;
    s->flagged = malloc(flagged ? flagged * sizeof *s->flagged : 1);
    if (!s->flagged) {
        free(values);
        return qem_fail(error, QEM_E_NO_MEMORY, "no memory for %s's %" PRIu64 " flagged "
                        "pixels", what, flagged);
    }
    for (uint64_t i = 0, k = 0; i < pixels; i++)
        if (v[i])
            s->flagged[k++] = (uint32_t)i;
    s->flagged_count = flagged;
    s->rows = t.rows;
    s->columns = t.columns;
    free(values);
    return QEM_OK;
}

qem_status qem_dectris2_parse_start(const qem_dectris2_message *m, qem_dectris2_series *x,
                                    qem_error *error)
{
    const qem_cbor *c;
    QEM_TRY(qem_cbor_get(&c, error));
    qem_dectris_series *s = &x->s;
    if (m->kind != QEM_DECTRIS2_START)
        return STREAM_FAIL("the start message is not of type start");
    citem *map = m->map;
    s->facts = json_object();
    json_object_set_new(s->facts, "protocol", json_string(QEM_DECTRIS2_PROTOCOL));
    if (!get_u64(c, find(c, map, "series_id"), INT64_MAX, &s->series))
        return STREAM_FAIL("the start message has no unsigned integer series_id");
    json_object_set_new(s->facts, "series_id", json_integer((json_int_t)s->series));
    citem *unique = find(c, map, "series_unique_id");
    if (unique && !text_copy(c, unique, x->unique_id, sizeof x->unique_id))
        return STREAM_FAIL("the start message's series_unique_id is not text of at most %u "
                           "bytes", QEM_DECTRIS2_MAX_NAME);
    citem *sx = find(c, map, "image_size_x"), *sy = find(c, map, "image_size_y");
    if (!sx != !sy)
        return STREAM_FAIL("the start message states only one of image_size_x and "
                           "image_size_y");
    if (sx && (!get_u64(c, sx, QEM_DECTRIS_MAX_SIDE, &s->columns) ||
               !get_u64(c, sy, QEM_DECTRIS_MAX_SIDE, &s->rows) || !s->columns || !s->rows))
        return STREAM_FAIL("the start message's image_size_x and image_size_y are not "
                           "integers from 1 to %u", QEM_DECTRIS_MAX_SIDE);
    citem *dtype = find(c, map, "image_dtype");
    if (dtype) {
        if (text_is(c, dtype, "uint8"))
            s->sample_type = QEM_DTYPE_UINT8;
        else if (text_is(c, dtype, "uint16"))
            s->sample_type = QEM_DTYPE_UINT16;
        else if (text_is(c, dtype, "uint32"))
            s->sample_type = QEM_DTYPE_UINT32;
        else
            return STREAM_FAIL("the start message's image_dtype is not uint8, uint16 or "
                               "uint32");
    }
    citem *images = find(c, map, "number_of_images");
    if (images && (!get_u64(c, images, (uint64_t)1 << 40, &s->frames) || !s->frames))
        return STREAM_FAIL("the start message's number_of_images is not an integer from 1 to "
                           "2^40");
    citem *channels = find(c, map, "channels");
    if (channels) {
        const size_t n = c->type_of(channels) == CBOR_TYPE_ARRAY ? c->array_size(channels) : 0;
        if (n == 0 || n > QEM_DECTRIS2_MAX_CHANNELS)
            return STREAM_FAIL("the start message's channels is not an array of 1 to %u "
                               "names", QEM_DECTRIS2_MAX_CHANNELS);
        for (size_t i = 0; i < n; i++) {
            char name[QEM_DECTRIS2_MAX_NAME + 1];
            if (!text_copy(c, c->array_handle(channels)[i], name, sizeof name) || !name[0])
                return STREAM_FAIL("the start message's channel %zu is not a name of 1 to %u "
                                   "bytes", i, QEM_DECTRIS2_MAX_NAME);
            if (i == 0)
                memcpy(x->channel, name, sizeof name);
        }
    }
    citem *masks = find(c, map, "pixel_mask");
    if (masks)
        QEM_TRY(parse_mask(c, masks, x, error));
    if (x->channel[0])
        json_object_set_new(s->facts, "channel", json_string(x->channel));
    start_facts(c, map, s->facts);
    s->started = 1;
    s->next_frame = 0;
    return QEM_OK;
}

/* --- images ------------------------------------------------------------------------ */

/* A field that must equal the start's: series_id, and series_unique_id
 * where both state one. */
static qem_status same_series(const qem_cbor *c, citem *map, const qem_dectris2_series *x,
                              const char *what, qem_error *error)
{
    uint64_t series = 0;
    if (!get_u64(c, find(c, map, "series_id"), UINT64_MAX, &series))
        return STREAM_FAIL("%s has no unsigned integer series_id", what);
    if (series != x->s.series)
        return STREAM_FAIL("%s belongs to series %" PRIu64 ", not the start's series %" PRIu64,
                           what, series, x->s.series);
    citem *unique = find(c, map, "series_unique_id");
    if (unique && !is_text(c, unique))
        return STREAM_FAIL("%s: series_unique_id is not text", what);
    if (unique && x->unique_id[0] && !text_is(c, unique, x->unique_id))
        return STREAM_FAIL("%s belongs to another series_unique_id than the start's '%s'", what,
                           x->unique_id);
    return QEM_OK;
}

qem_status qem_dectris2_parse_image(const qem_dectris2_message *m, qem_dectris2_series *x,
                                    qem_dectris_image *image, qem_error *error)
{
    const qem_cbor *c;
    QEM_TRY(qem_cbor_get(&c, error));
    qem_dectris_series *s = &x->s;
    char label[64];
    snprintf(label, sizeof label, "frame %" PRIu64 " (expected next)", s->next_frame);
    if (m->kind != QEM_DECTRIS2_IMAGE)
        return STREAM_FAIL("%s: the message is not of type image", label);
    if (!s->started)
        return STREAM_FAIL("%s: an image arrived before the start message", label);
    citem *map = m->map;
    uint64_t frame = 0;
    if (!get_u64(c, find(c, map, "image_id"), UINT64_MAX, &frame))
        return STREAM_FAIL("%s: the image has no unsigned integer image_id", label);
    snprintf(label, sizeof label, "frame %" PRIu64, frame);
    QEM_TRY(same_series(c, map, x, label, error));
    if (frame != s->next_frame)
        return STREAM_FAIL("%s is %s (expected frame %" PRIu64 ")", label,
                           frame < s->next_frame ? "repeated" : "out of order", s->next_frame);
    citem *data = find(c, map, "data");
    if (!data || c->type_of(data) != CBOR_TYPE_MAP || c->map_size(data) == 0)
        return STREAM_FAIL("%s: the image's data is not a map of channels to arrays", label);
    QEM_TRY(check_keys(c, data, QEM_DECTRIS2_MAX_CHANNELS, label, error));
    char channel[QEM_DECTRIS2_MAX_NAME + 1];
    memcpy(channel, x->channel, sizeof channel);
    if (!channel[0] && !text_copy(c, c->map_handle(data)[0].key, channel, sizeof channel))
        return STREAM_FAIL("%s: the first channel's name is longer than %u bytes", label,
                           QEM_DECTRIS2_MAX_NAME);
    citem *array = find(c, data, channel);
    if (!array)
        return STREAM_FAIL("%s: the image has no channel '%s'", label, channel);
    char what[160];
    snprintf(what, sizeof what, "%s: channel '%s'", label, channel);
    typed t;
    QEM_TRY(multidim(c, array, what, &t, error));
    if (s->columns && (t.rows != s->rows || t.columns != s->columns))
        return STREAM_FAIL("%s is %" PRIu64 " x %" PRIu64 ", not the detector's %" PRIu64
                           " x %" PRIu64 " (rows x columns)",
                           what, t.rows, t.columns, s->rows, s->columns);
    if (s->sample_type != QEM_DTYPE_NONE && t.type != s->sample_type)
        return STREAM_FAIL("%s holds %s samples, not the series' %s", what,
                           qem_dtype_name(t.type), qem_dtype_name(s->sample_type));
    QEM_TRY(check_extent(&t, what, error));
    s->rows = t.rows;
    s->columns = t.columns;
    s->sample_type = t.type;
    memcpy(x->channel, channel, sizeof channel);
    image_of(&t, frame, image);
    s->next_frame++;
    return QEM_OK;
}

/* --- decoding ------------------------------------------------------------------------ */

static uint64_t get_be(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < bytes; k++)
        v = v << 8 | p[k];
    return v;
}

/* The HDF5 LZ4 filter's framing: 8-byte big-endian total bytes, 4-byte
 * big-endian block bytes, then per block a 4-byte big-endian size and the
 * block: LZ4, or stored as it is when that size is the block's. */
static qem_status decode_lz4_hdf5(const qem_dectris_image *im, uint8_t *out, qem_error *error)
{
    const uint64_t frame = im->frame;
    const uint8_t *p = im->blob, *end = im->blob + im->blob_size;
    if (im->blob_size < 12)
        return STREAM_FAIL("frame %" PRIu64 ": the LZ4 data is shorter than its 12-byte header",
                           frame);
    const uint64_t total = get_be(p, 8), block = get_be(p + 8, 4);
    p += 12;
    if (total != im->frame_bytes)
        return STREAM_FAIL("frame %" PRIu64 ": the LZ4 header states %" PRIu64 " bytes, not "
                           "the image's %zu", frame, total, im->frame_bytes);
    if (block == 0 || block > INT32_MAX)
        return STREAM_FAIL("frame %" PRIu64 ": the LZ4 block size %" PRIu64 " is not from 1 to "
                           "2^31 - 1", frame, block);
    size_t done = 0;
    while (done < im->frame_bytes) {
        const size_t want = im->frame_bytes - done < block ? im->frame_bytes - done
                                                           : (size_t)block;
        if (end - p < 4)
            return STREAM_FAIL("frame %" PRIu64 ": the LZ4 data ends at byte %zu of %zu", frame,
                               done, im->frame_bytes);
        const uint64_t size = get_be(p, 4);
        p += 4;
        if (size > (uint64_t)(end - p))
            return STREAM_FAIL("frame %" PRIu64 ": an LZ4 block of %" PRIu64 " bytes runs past "
                               "the data", frame, size);
        if (size == want) {
            memcpy(out + done, p, want);
        } else {
            const int got = LZ4_decompress_safe((const char *)p, (char *)out + done, (int)size,
                                                (int)want);
            if (got < 0 || (size_t)got != want)
                return STREAM_FAIL("frame %" PRIu64 ": an LZ4 block does not decode to its %zu "
                                   "bytes", frame, want);
        }
        p += size;
        done += want;
    }
    if (p != end)
        return STREAM_FAIL("frame %" PRIu64 ": the LZ4 data has %zu bytes after its blocks",
                           frame, (size_t)(end - p));
    return QEM_OK;
}

qem_status qem_dectris2_decode_image(const qem_dectris_image *im, void *out, size_t out_size,
                                     void *scratch, size_t scratch_size, qem_error *error)
{
    if (im->encoding != QEM_DECTRIS2_ENC_LZ4_HDF5)
        return qem_dectris_decode_image(im, out, out_size, scratch, scratch_size, error);
    if (out_size != im->frame_bytes)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "frame %" PRIu64 ": the output holds %zu bytes, not the image's %zu",
                        im->frame, out_size, im->frame_bytes);
    QEM_TRY(decode_lz4_hdf5(im, out, error));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t *p = out;
    const unsigned es = im->element_size;
    for (size_t i = 0; i + es <= im->frame_bytes; i += es)
        for (unsigned a = 0, b = es - 1; a < b; a++, b--) {
            const uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
#endif
    return QEM_OK;
}

/* --- end ---------------------------------------------------------------------------- */

qem_status qem_dectris2_parse_end(const qem_dectris2_message *m, const qem_dectris2_series *x,
                                  qem_error *error)
{
    const qem_cbor *c;
    QEM_TRY(qem_cbor_get(&c, error));
    char what[96];
    snprintf(what, sizeof what, "the series end after frame %" PRIu64, x->s.next_frame);
    if (m->kind != QEM_DECTRIS2_END)
        return STREAM_FAIL("%s is not of type end", what);
    if (!x->s.started)
        return STREAM_FAIL("the series end arrived before the start message");
    return same_series(c, m->map, x, what, error);
}

void qem_dectris2_series_header(const qem_dectris2_series *x, live_header *h)
{
    qem_dectris_series_header(&x->s, h);
    h->protocol = QEM_DECTRIS2_PROTOCOL;
}

void qem_dectris2_series_free(qem_dectris2_series *x)
{
    if (!x)
        return;
    qem_dectris_series_free(&x->s);
    memset(x, 0, sizeof *x);
}
