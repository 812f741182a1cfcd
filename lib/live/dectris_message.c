#include "live/dectris_message.h"

#include <inttypes.h>
#include <lz4.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"

#define STREAM_FAIL(...) qem_fail(error, QEM_E_STREAM, __VA_ARGS__)

/* A part as one JSON object; `what` names the message in the refusal. */
static qem_status parse_json(const qem_dectris_part *part, const char *what, json_t **out,
                             qem_error *error)
{
    json_error_t jerr;
    json_t *root = json_loadb(part->data, part->size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return STREAM_FAIL("%s: invalid JSON at line %d column %d: %s", what, jerr.line,
                           jerr.column, qem_json_error_reason(&jerr));
    if (!json_is_object(root)) {
        json_decref(root);
        return STREAM_FAIL("%s: the JSON part is not an object", what);
    }
    *out = root;
    return QEM_OK;
}

static int htype_is(const json_t *object, const char *want)
{
    return qem_json_string_is(json_object_get(object, "htype"), want);
}

static void frame_label(char *out, size_t size, uint64_t frame)
{
    snprintf(out, size, "frame %" PRIu64, frame);
}

qem_status qem_dectris_message_kind(const qem_dectris_part *first, uint64_t next_frame,
                                    qem_dectris_kind *kind, qem_error *error)
{
    char what[96];
    snprintf(what, sizeof what, "frame %" PRIu64 " (expected next)", next_frame);
    json_t *root = NULL;
    QEM_TRY(parse_json(first, what, &root, error));
    const json_t *htype = json_object_get(root, "htype");
    qem_status st = QEM_OK;
    if (htype_is(root, "dheader-1.0"))
        *kind = QEM_DECTRIS_HEADER;
    else if (htype_is(root, "dimage-1.0"))
        *kind = QEM_DECTRIS_IMAGE;
    else if (htype_is(root, "dseries_end-1.0"))
        *kind = QEM_DECTRIS_END;
    else if (json_is_string(htype))
        st = STREAM_FAIL("frame %" PRIu64 " (expected next): unknown message htype '%.64s'",
                         next_frame, json_string_value(htype));
    else
        st = STREAM_FAIL("frame %" PRIu64 " (expected next): the message has no htype string",
                         next_frame);
    json_decref(root);
    return st;
}

/* --- header ---------------------------------------------------------------------- */

/* A config value as a positive integer no larger than `max`; 0 if absent. */
static qem_status config_u64(const json_t *config, const char *key, uint64_t max, uint64_t *out,
                             qem_error *error)
{
    const json_t *v = json_object_get(config, key);
    *out = 0;
    if (!v)
        return QEM_OK;
    if (!qem_json_as_u64(v, out) || *out == 0 || *out > max)
        return STREAM_FAIL("the series header: config %s is not an integer from 1 to %" PRIu64,
                           key, max);
    return QEM_OK;
}

static qem_status dtype_of_name(const json_t *name, qem_dtype *out)
{
    if (qem_json_string_is(name, "uint8"))
        *out = QEM_DTYPE_UINT8;
    else if (qem_json_string_is(name, "uint16"))
        *out = QEM_DTYPE_UINT16;
    else if (qem_json_string_is(name, "uint32"))
        *out = QEM_DTYPE_UINT32;
    else
        return QEM_E_STREAM;
    return QEM_OK;
}

/* shape [x, y] (columns, rows), each side 1..QEM_DECTRIS_MAX_SIDE. */
static int parse_shape(const json_t *shape, uint64_t *columns, uint64_t *rows)
{
    if (!json_is_array(shape) || json_array_size(shape) != 2)
        return 0;
    if (!qem_json_as_u64(json_array_get(shape, 0), columns) ||
        !qem_json_as_u64(json_array_get(shape, 1), rows))
        return 0;
    return *columns && *rows && *columns <= QEM_DECTRIS_MAX_SIDE && *rows <= QEM_DECTRIS_MAX_SIDE;
}

static qem_status parse_config(const qem_dectris_part *part, qem_dectris_series *s,
                               qem_error *error)
{
    json_t *config = NULL;
    QEM_TRY(parse_json(part, "the series header's config", &config, error));
    json_object_set_new(s->facts, "config", config);
    uint64_t x = 0, y = 0, depth = 0, nimages = 0, ntrigger = 0;
    QEM_TRY(config_u64(config, "x_pixels_in_detector", QEM_DECTRIS_MAX_SIDE, &x, error));
    QEM_TRY(config_u64(config, "y_pixels_in_detector", QEM_DECTRIS_MAX_SIDE, &y, error));
    QEM_TRY(config_u64(config, "bit_depth_image", 32, &depth, error));
    QEM_TRY(config_u64(config, "nimages", UINT32_MAX, &nimages, error));
    QEM_TRY(config_u64(config, "ntrigger", UINT32_MAX, &ntrigger, error));
    if ((x == 0) != (y == 0))
        return STREAM_FAIL("the series header: the config states only one of "
                           "x_pixels_in_detector and y_pixels_in_detector");
    s->columns = x;
    s->rows = y;
    if (depth) {
        if (depth == 8)
            s->sample_type = QEM_DTYPE_UINT8;
        else if (depth == 16)
            s->sample_type = QEM_DTYPE_UINT16;
        else if (depth == 32)
            s->sample_type = QEM_DTYPE_UINT32;
        else
            return STREAM_FAIL("the series header: bit_depth_image %" PRIu64
                               " is not 8, 16 or 32", depth);
    }
    /* Both factors below 2^32: the product fits. */
    s->frames = nimages && ntrigger ? nimages * ntrigger : nimages;
    return QEM_OK;
}

/* An appendix's shape and type against its data's length. */
static qem_status appendix_extent(const json_t *meta, const char *htype, size_t data_size,
                                  uint64_t *columns, uint64_t *rows, qem_error *error)
{
    const json_t *shape = json_object_get(meta, "shape");
    const json_t *type = json_object_get(meta, "type");
    uint64_t elements = 1;
    if (!json_is_array(shape) || json_array_size(shape) == 0 || json_array_size(shape) > 4)
        return STREAM_FAIL("the series header: %s has no shape of 1 to 4 sides", htype);
    for (size_t k = 0; k < json_array_size(shape); k++) {
        uint64_t side = 0;
        if (!qem_json_as_u64(json_array_get(shape, k), &side) || side == 0 ||
            side > QEM_DECTRIS_MAX_SIDE || qem_mul_overflow_u64(elements, side, &elements))
            return STREAM_FAIL("the series header: %s's shape is not positive sides", htype);
    }
    uint64_t item = qem_json_string_is(type, "uint32") || qem_json_string_is(type, "float32") ? 4
                    : qem_json_string_is(type, "uint16")                                      ? 2
                    : qem_json_string_is(type, "uint8")                                       ? 1
                                                                                              : 0;
    if (!item)
        return STREAM_FAIL("the series header: %s's type is not uint8, uint16, uint32 or "
                           "float32", htype);
    if (elements * item != data_size)
        return STREAM_FAIL("the series header: %s states %" PRIu64 " bytes but its data has %zu",
                           htype, elements * item, data_size);
    *columns = json_array_size(shape) == 2 ? (uint64_t)json_integer_value(json_array_get(shape, 0))
                                           : 0;
    *rows = json_array_size(shape) == 2 ? (uint64_t)json_integer_value(json_array_get(shape, 1))
                                        : 0;
    return QEM_OK;
}

static qem_status parse_pixel_mask(const json_t *meta, const qem_dectris_part *data,
                                   qem_dectris_series *s, qem_error *error)
{
    uint64_t columns = 0, rows = 0;
    QEM_TRY(appendix_extent(meta, "dpixelmask-1.0", data->size, &columns, &rows, error));
    if (!qem_json_string_is(json_object_get(meta, "type"), "uint32") || !columns)
        return STREAM_FAIL("the series header: dpixelmask-1.0 is not a 2-D uint32 array");
    if (s->flagged)
        return STREAM_FAIL("the series header: dpixelmask-1.0 appears twice");
    if (s->columns && (columns != s->columns || rows != s->rows))
        return STREAM_FAIL("the series header: dpixelmask-1.0 is %" PRIu64 " x %" PRIu64
                           " but the detector is %" PRIu64 " x %" PRIu64,
                           columns, rows, s->columns, s->rows);
    s->columns = columns;
    s->rows = rows;
    const uint8_t *p = data->data;
    const uint64_t pixels = rows * columns;
    uint64_t flagged = 0;
    for (uint64_t i = 0; i < pixels; i++)
        flagged += (p[4 * i] | p[4 * i + 1] | p[4 * i + 2] | p[4 * i + 3]) != 0;
    s->flagged = malloc(flagged ? flagged * sizeof *s->flagged : 1);
    if (!s->flagged)
        return qem_fail(error, QEM_E_NO_MEMORY, "no memory for the pixel mask's %" PRIu64
                        " flagged pixels", flagged);
    for (uint64_t i = 0, n = 0; i < pixels; i++)
        if (p[4 * i] | p[4 * i + 1] | p[4 * i + 2] | p[4 * i + 3])
            s->flagged[n++] = (uint32_t)i;
    s->flagged_count = flagged;
    return QEM_OK;
}

static qem_status parse_appendices(const qem_dectris_part *parts, size_t count,
                                   qem_dectris_series *s, qem_error *error)
{
    json_t *seen = json_array();
    json_object_set_new(s->facts, "appendices", seen);
    if (count % 2)
        return STREAM_FAIL("the series header: an appendix has no data part (%zu parts after "
                           "the config)", count);
    for (size_t k = 0; k < count; k += 2) {
        json_t *meta = NULL;
        QEM_TRY(parse_json(&parts[k], "the series header's appendix", &meta, error));
        const json_t *htype = json_object_get(meta, "htype");
        qem_status st = QEM_OK;
        uint64_t columns = 0, rows = 0;
        if (!json_is_string(htype))
            st = STREAM_FAIL("the series header: appendix %zu has no htype string", k / 2);
        else if (htype_is(meta, "dpixelmask-1.0"))
            st = parse_pixel_mask(meta, &parts[k + 1], s, error);
        else if (htype_is(meta, "dflatfield-1.0") || htype_is(meta, "dcountrate_table-1.0"))
            st = appendix_extent(meta, json_string_value(htype), parts[k + 1].size, &columns,
                                 &rows, error);
        if (st == QEM_OK)
            json_array_append(seen, (json_t *)htype); /* unknown ones too: recorded, not read */
        json_decref(meta);
        QEM_TRY(st);
    }
    return QEM_OK;
}

qem_status qem_dectris_parse_header(const qem_dectris_part *parts, size_t count,
                                    qem_dectris_series *s, qem_error *error)
{
    if (count == 0 || count > QEM_DECTRIS_MAX_PARTS)
        return STREAM_FAIL("the series header has %zu parts (1 to %d)", count,
                           QEM_DECTRIS_MAX_PARTS);
    json_t *head = NULL;
    QEM_TRY(parse_json(&parts[0], "the series header", &head, error));
    s->facts = json_object();
    json_object_set_new(s->facts, "protocol", json_string(QEM_DECTRIS_PROTOCOL));
    const json_t *detail = json_object_get(head, "header_detail");
    qem_status st = QEM_OK;
    if (!htype_is(head, "dheader-1.0"))
        st = STREAM_FAIL("the series header is not htype dheader-1.0");
    else if (!qem_json_as_u64(json_object_get(head, "series"), &s->series))
        st = STREAM_FAIL("the series header has no non-negative integer series");
    else if (qem_json_string_is(detail, "none")) {
        if (count != 1)
            st = STREAM_FAIL("the series header (detail none) has %zu parts, not 1", count);
    } else if (qem_json_string_is(detail, "basic")) {
        if (count != 2)
            st = STREAM_FAIL("the series header (detail basic) has %zu parts, not 2", count);
    } else if (!qem_json_string_is(detail, "all"))
        st = STREAM_FAIL("the series header's header_detail is not all, basic or none");
    else if (count < 2)
        st = STREAM_FAIL("the series header (detail all) has no config part");
    if (st == QEM_OK) {
        json_object_set(s->facts, "header_detail", (json_t *)detail);
        json_object_set_new(s->facts, "series", json_integer((json_int_t)s->series));
    }
    json_decref(head);
    QEM_TRY(st);
    if (count >= 2)
        QEM_TRY(parse_config(&parts[1], s, error));
    if (count > 2)
        QEM_TRY(parse_appendices(parts + 2, count - 2, s, error));
    if (s->flagged && s->columns == 0)
        return STREAM_FAIL("the series header has a pixel mask but no detector shape");
    s->started = 1;
    s->next_frame = 0;
    return QEM_OK;
}

int qem_dectris_series_known(const qem_dectris_series *s)
{
    return s->started && s->rows && s->columns && s->sample_type != QEM_DTYPE_NONE;
}

void qem_dectris_series_header(const qem_dectris_series *s, live_header *h)
{
    memset(h, 0, sizeof *h);
    h->protocol = QEM_DECTRIS_PROTOCOL;
    h->detector[0] = s->rows;
    h->detector[1] = s->columns;
    h->sample_type = s->sample_type;
    h->frames = s->frames;
    h->flagged = s->flagged;
    h->flagged_count = s->flagged_count;
    h->facts = json_incref(s->facts);
}

void qem_dectris_series_free(qem_dectris_series *s)
{
    if (!s)
        return;
    free(s->flagged);
    json_decref(s->facts);
    memset(s, 0, sizeof *s);
}

/* --- images ---------------------------------------------------------------------- */

static int parse_encoding(const json_t *name, qem_dtype type, int *encoding)
{
    const unsigned bits = 8u * (unsigned)qem_dtype_size(type);
    if (qem_json_string_is(name, "<"))
        *encoding = QEM_DECTRIS_ENC_RAW;
    else if (qem_json_string_is(name, "lz4<"))
        *encoding = QEM_DECTRIS_ENC_LZ4;
    else if ((bits == 32 && qem_json_string_is(name, "bs32-lz4<")) ||
             (bits == 16 && qem_json_string_is(name, "bs16-lz4<")) ||
             (bits == 8 && qem_json_string_is(name, "bs8-lz4<")))
        *encoding = QEM_DECTRIS_ENC_BSLZ4;
    else
        return 0;
    return 1;
}

/* The image's JSON parts; `label` is "frame N" once N is read. */
static qem_status check_image_json(const json_t *head, const json_t *desc, const json_t *tail,
                                   const qem_dectris_part *blob, qem_dectris_series *s,
                                   qem_dectris_image *image, char *label, size_t label_size,
                                   qem_error *error)
{
    uint64_t series = 0, frame = 0;
    if (!htype_is(head, "dimage-1.0"))
        return STREAM_FAIL("%s: the image message is not htype dimage-1.0", label);
    if (!qem_json_as_u64(json_object_get(head, "frame"), &frame))
        return STREAM_FAIL("%s: the image message has no non-negative integer frame", label);
    frame_label(label, label_size, frame);
    if (!qem_json_as_u64(json_object_get(head, "series"), &series))
        return STREAM_FAIL("%s: the image message has no non-negative integer series", label);
    if (series != s->series)
        return STREAM_FAIL("%s: belongs to series %" PRIu64 ", not the header's series %" PRIu64,
                           label, series, s->series);
    if (frame != s->next_frame)
        return STREAM_FAIL("%s is %s (expected frame %" PRIu64 ")", label,
                           frame < s->next_frame ? "repeated" : "out of order", s->next_frame);
    if (!htype_is(desc, "dimage_d-1.0"))
        return STREAM_FAIL("%s: the second part is not htype dimage_d-1.0", label);
    if (!htype_is(tail, "dconfig-1.0"))
        return STREAM_FAIL("%s: the fourth part is not htype dconfig-1.0", label);
    uint64_t columns = 0, rows = 0, size = 0;
    qem_dtype type = QEM_DTYPE_NONE;
    if (!parse_shape(json_object_get(desc, "shape"), &columns, &rows))
        return STREAM_FAIL("%s: the image's shape is not [x, y] of 1 to %u each", label,
                           QEM_DECTRIS_MAX_SIDE);
    if (dtype_of_name(json_object_get(desc, "type"), &type) != QEM_OK)
        return STREAM_FAIL("%s: the image's type is not uint8, uint16 or uint32", label);
    if (s->columns && (columns != s->columns || rows != s->rows))
        return STREAM_FAIL("%s: the image's shape [%" PRIu64 ", %" PRIu64 "] is not the "
                           "detector's [%" PRIu64 ", %" PRIu64 "]",
                           label, columns, rows, s->columns, s->rows);
    if (s->sample_type != QEM_DTYPE_NONE && type != s->sample_type)
        return STREAM_FAIL("%s: the image's type %s is not the header's %u-bit samples", label,
                           json_string_value(json_object_get(desc, "type")),
                           8u * (unsigned)qem_dtype_size(s->sample_type));
    if (!parse_encoding(json_object_get(desc, "encoding"), type, &image->encoding))
        return STREAM_FAIL("%s: the image's encoding is not <, lz4< or bs%u-lz4<", label,
                           8u * (unsigned)qem_dtype_size(type));
    if (!qem_json_as_u64(json_object_get(desc, "size"), &size))
        return STREAM_FAIL("%s: the image has no non-negative integer size", label);
    if (size != blob->size)
        return STREAM_FAIL("%s: the image states %" PRIu64 " bytes but its data part has %zu",
                           label, size, blob->size);
    const json_t *hash = json_object_get(head, "hash");
    if (hash && !json_is_string(hash))
        return STREAM_FAIL("%s: the image's hash is not a string", label);
    s->columns = columns;
    s->rows = rows;
    s->sample_type = type;
    image->frame = frame;
    image->element_size = (unsigned)qem_dtype_size(type);
    image->frame_bytes = (size_t)(rows * columns * image->element_size);
    image->blob = blob->data;
    image->blob_size = blob->size;
    return QEM_OK;
}

qem_status qem_dectris_parse_image(const qem_dectris_part *parts, size_t count,
                                   qem_dectris_series *s, qem_dectris_image *image,
                                   qem_error *error)
{
    char label[64];
    snprintf(label, sizeof label, "frame %" PRIu64 " (expected next)", s->next_frame);
    if (!s->started)
        return STREAM_FAIL("%s: an image arrived before the series header", label);
    if (count != 4)
        return STREAM_FAIL("%s: the image message has %zu parts, not 4", label, count);
    json_t *head = NULL, *desc = NULL, *tail = NULL;
    qem_status st = parse_json(&parts[0], label, &head, error);
    if (st == QEM_OK)
        st = parse_json(&parts[1], label, &desc, error);
    if (st == QEM_OK)
        st = parse_json(&parts[3], label, &tail, error);
    if (st == QEM_OK)
        st = check_image_json(head, desc, tail, &parts[2], s, image, label, sizeof label, error);
    json_decref(head);
    json_decref(desc);
    json_decref(tail);
    if (st == QEM_OK)
        s->next_frame++;
    return st;
}

qem_status qem_dectris_parse_end(const qem_dectris_part *parts, size_t count,
                                 const qem_dectris_series *s, qem_error *error)
{
    if (!s->started)
        return STREAM_FAIL("the series end arrived before the series header");
    if (count != 1)
        return STREAM_FAIL("the series end after frame %" PRIu64 " has %zu parts, not 1",
                           s->next_frame, count);
    json_t *end = NULL;
    QEM_TRY(parse_json(&parts[0], "the series end", &end, error));
    uint64_t series = 0;
    qem_status st = QEM_OK;
    if (!htype_is(end, "dseries_end-1.0"))
        st = STREAM_FAIL("the series end is not htype dseries_end-1.0");
    else if (!qem_json_as_u64(json_object_get(end, "series"), &series) || series != s->series)
        st = STREAM_FAIL("the series end after frame %" PRIu64 " is not for series %" PRIu64,
                         s->next_frame, s->series);
    json_decref(end);
    return st;
}

/* --- decoders -------------------------------------------------------------------- */

/* The 8 x 8 bit matrix in `x` (row r = byte r, column c = bit c)
 * transposed (Hacker's Delight, transpose8). */
static inline uint64_t transpose8x8(uint64_t x)
{
    uint64_t t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    x ^= t ^ (t << 28);
    return x;
}

/* Byte b of the result: rows[b * row] (bit b of byte k of 8 elements). */
static inline uint64_t gather_rows(const uint8_t *rows, size_t row)
{
    uint64_t x = 0;
    for (unsigned b = 0; b < 8; b++)
        x |= (uint64_t)rows[b * row] << (8 * b);
    return transpose8x8(x); /* byte i: byte k of element i */
}

void qem_bitunshuffle(const uint8_t *in, uint8_t *out, size_t elements, unsigned element_size)
{
    const size_t row = elements / 8; /* bytes per bit row; rows 8k..8k+7 hold byte k */
#if defined(__SSE2__)
    /* Bytes k of 8 elements interleaved into whole samples: 16-byte stores
     * instead of one store per byte (twice as fast on 192 x 192 uint32). */
    if (element_size == 4 || element_size == 2) {
        for (size_t j = 0; j < row; j++) {
            const __m128i b0 = _mm_cvtsi64_si128((long long)gather_rows(in + j, row));
            const __m128i b1 = _mm_cvtsi64_si128((long long)gather_rows(in + 8 * row + j, row));
            const __m128i low = _mm_unpacklo_epi8(b0, b1); /* bytes 0, 1 of 8 samples */
            if (element_size == 2) {
                _mm_storeu_si128((__m128i *)(out + 16 * j), low);
                continue;
            }
            const __m128i b2 = _mm_cvtsi64_si128((long long)gather_rows(in + 16 * row + j, row));
            const __m128i b3 = _mm_cvtsi64_si128((long long)gather_rows(in + 24 * row + j, row));
            const __m128i high = _mm_unpacklo_epi8(b2, b3); /* bytes 2, 3 */
            _mm_storeu_si128((__m128i *)(out + 32 * j), _mm_unpacklo_epi16(low, high));
            _mm_storeu_si128((__m128i *)(out + 32 * j + 16), _mm_unpackhi_epi16(low, high));
        }
        return;
    }
#endif
    for (unsigned k = 0; k < element_size; k++)
        for (size_t j = 0; j < row; j++) {
            const uint64_t x = gather_rows(in + (size_t)8 * k * row + j, row);
            uint8_t *dst = out + 8 * j * element_size + k;
            for (unsigned i = 0; i < 8; i++)
                dst[i * element_size] = (uint8_t)(x >> (8 * i));
        }
}

static uint64_t get_be(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < bytes; k++)
        v = v << 8 | p[k];
    return v;
}

static qem_status decode_bslz4(const qem_dectris_image *im, uint8_t *out, uint8_t *scratch,
                               size_t scratch_size, qem_error *error)
{
    const uint64_t frame = im->frame;
    const unsigned es = im->element_size;
    const uint8_t *p = im->blob, *end = im->blob + im->blob_size;
    if (im->blob_size < 12)
        return STREAM_FAIL("frame %" PRIu64 ": the bitshuffle data is shorter than its 12-byte "
                           "header", frame);
    const uint64_t total = get_be(p, 8), block_bytes = get_be(p + 8, 4);
    p += 12;
    if (total != im->frame_bytes)
        return STREAM_FAIL("frame %" PRIu64 ": the bitshuffle header states %" PRIu64
                           " bytes, not the image's %zu", frame, total, im->frame_bytes);
    if (block_bytes == 0 || block_bytes % (8u * es))
        return STREAM_FAIL("frame %" PRIu64 ": the bitshuffle block size %" PRIu64 " is not a "
                           "positive multiple of 8 samples", frame, block_bytes);
    const size_t elements = im->frame_bytes / es;
    const uint64_t full_block = block_bytes / es;
    size_t done = 0, block = 0;
    while (elements - done >= 8) {
        const size_t left = elements - done;
        block = left >= full_block ? (size_t)full_block : left / 8 * 8; /* last: partial */
        const size_t bytes = block * es;
        if (bytes > scratch_size)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the scratch buffer is too small");
        if (end - p < 4)
            return STREAM_FAIL("frame %" PRIu64 ": the bitshuffle data ends at sample %zu of "
                               "%zu", frame, done, elements);
        const uint64_t csize = get_be(p, 4);
        p += 4;
        if (csize > (uint64_t)(end - p) || csize > INT32_MAX)
            return STREAM_FAIL("frame %" PRIu64 ": a bitshuffle block of %" PRIu64 " bytes "
                               "runs past the data", frame, csize);
        const int got = LZ4_decompress_safe((const char *)p, (char *)scratch, (int)csize,
                                            (int)bytes);
        if (got < 0 || (size_t)got != bytes)
            return STREAM_FAIL("frame %" PRIu64 ": a bitshuffle LZ4 block does not decode to "
                               "its %zu bytes", frame, bytes);
        p += csize;
        qem_bitunshuffle(scratch, out + done * es, block, es);
        done += block;
    }
    const size_t rest = (elements - done) * es; /* fewer than 8 samples, stored as they are */
    if ((size_t)(end - p) != rest)
        return STREAM_FAIL("frame %" PRIu64 ": the bitshuffle data has %zu bytes after its "
                           "blocks, not %zu", frame, (size_t)(end - p), rest);
    memcpy(out + done * es, p, rest);
    return QEM_OK;
}

/* Little-endian samples into the host's order. */
static void to_native(uint8_t *p, size_t bytes, unsigned es)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i + es <= bytes; i += es)
        for (unsigned a = 0, b = es - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
#else
    (void)p;
    (void)bytes;
    (void)es;
#endif
}

qem_status qem_dectris_decode_image(const qem_dectris_image *im, void *out, size_t out_size,
                                    void *scratch, size_t scratch_size, qem_error *error)
{
    if (out_size != im->frame_bytes)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "frame %" PRIu64 ": the output holds %zu bytes, not the image's %zu",
                        im->frame, out_size, im->frame_bytes);
    switch (im->encoding) {
    case QEM_DECTRIS_ENC_RAW:
        if (im->blob_size != im->frame_bytes)
            return STREAM_FAIL("frame %" PRIu64 ": the raw image has %zu bytes, not %zu",
                               im->frame, im->blob_size, im->frame_bytes);
        memcpy(out, im->blob, im->frame_bytes);
        break;
    case QEM_DECTRIS_ENC_LZ4: {
        if (im->blob_size > INT32_MAX || im->frame_bytes > INT32_MAX)
            return STREAM_FAIL("frame %" PRIu64 ": the LZ4 image is too large", im->frame);
        const int got = LZ4_decompress_safe((const char *)im->blob, out, (int)im->blob_size,
                                            (int)im->frame_bytes);
        if (got < 0 || (size_t)got != im->frame_bytes)
            return STREAM_FAIL("frame %" PRIu64 ": the LZ4 image does not decode to its %zu "
                               "bytes", im->frame, im->frame_bytes);
        break;
    }
    case QEM_DECTRIS_ENC_BSLZ4:
        QEM_TRY(decode_bslz4(im, out, scratch, scratch_size, error));
        break;
    default:
        return STREAM_FAIL("frame %" PRIu64 ": unknown encoding", im->frame);
    }
    to_native(out, im->frame_bytes, im->element_size);
    return QEM_OK;
}
