/* Gatan Digital Micrograph DM3/DM4 files for the tests. The format facts
 * used, and where they come from:
 *
 * [G] Greg Jefferis, "Digital Micrograph 3 file format",
 *     http://wsr.imagej.net/ij/plugins/DM3Format.gj.html:
 *     the header is three big-endian 4-byte values (version 3, a length,
 *     the byte order of the tag data: 0 big-endian, 1 little-endian) then
 *     the root group; a group is "sorted" (1 byte), "open" (1 byte) and its
 *     tag count; a tag is 20 (group) or 21 (data), a 2-byte name length and
 *     the name; a data tag is "%%%%", the count n of its type entries, n
 *     type entries, then the values; type codes 2 short, 3 long, 4 ushort,
 *     5 ulong, 6 float, 7 double, 8 bool, 9 char, 10 octet, 15 struct,
 *     18 string, 20 array; an array of a simple type is [20, type, count].
 * [C] Chris Boothroyd, "Digital Micrograph file format", DM4 section,
 *     https://www3.ntu.edu.sg/home/cbb/info/dmformat/index.html: DM4 widens
 *     the header's length, the tag counts, the type entries and their
 *     count to 8 bytes, and every tag gains an 8-byte length (the bytes of
 *     the tag after that field) after its name; type codes 11 and 12 are
 *     8-byte integers.
 * [H] HyperSpy 1.7, hyperspy/io_plugins/digital_micrograph.py and
 *     tests/io/generate_dm_testing_files.py: ImageList's groups are the
 *     images (ImageData: Data, DataType, Dimensions fastest first,
 *     Calibrations/Dimension with Origin, Scale, Units), Thumbnails'
 *     ImageIndex names the thumbnail; DataType codes 1 int16, 2 float32,
 *     6 uint8, 7 int32, 9 int8, 10 uint16, 11 uint32, 12 float64, 14 bool,
 *     23 RGBA.
 * [L] LiberTEM, io/dataset/dm_single.py: ImageTags "Meta Data" "Data Order
 *     Swapped" 1 marks a 4D image stored in C order (scan slowest).
 * The root length written is the bytes of the tag tree, as the files of
 * HyperSpy's tests hold (their size minus 16 in DM3, 24 in DM4). */
#include "dm_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dmb_buf {
    uint8_t *p;
    size_t n, cap;
    int v4, little, fail;
} dmb_buf;

typedef struct dmb_group {
    size_t len_at, count_at;
    uint64_t count;
} dmb_group;

static void put(dmb_buf *b, const void *data, size_t n)
{
    if (b->fail)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *grown = realloc(b->p, cap);
        if (!grown) {
            b->fail = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void be_at(uint8_t *at, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        at[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

static void be(dmb_buf *b, uint64_t v, int width)
{
    uint8_t t[8];
    be_at(t, v, width);
    put(b, t, (size_t)width);
}

/* [G], [C]: counts and type entries are 4 bytes in DM3, 8 in DM4. */
static void len(dmb_buf *b, uint64_t v)
{
    be(b, v, b->v4 ? 8 : 4);
}

/* A value of `width` bytes (host order) in the file's byte order. */
static void value(dmb_buf *b, const void *host, size_t width)
{
    uint8_t t[8];
    memcpy(t, host, width);
    const int host_little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    if (host_little != b->little)
        for (size_t i = 0; i < width / 2; i++) {
            const uint8_t s = t[i];
            t[i] = t[width - 1 - i];
            t[width - 1 - i] = s;
        }
    put(b, t, width);
}

static void tag_head(dmb_buf *b, dmb_group *parent, int id, const char *name)
{
    parent->count++;
    be(b, (uint64_t)id, 1);
    be(b, strlen(name), 2);
    put(b, name, strlen(name));
}

/* [C]: DM4's tag length, patched once the tag is written. */
static size_t open_len(dmb_buf *b)
{
    const size_t at = b->n;
    if (b->v4)
        be(b, 0, 8);
    return at;
}

static void close_len(dmb_buf *b, size_t at, int64_t delta)
{
    if (b->v4 && !b->fail)
        be_at(b->p + at, (uint64_t)((int64_t)(b->n - at - 8) + delta), 8);
}

static void group_begin(dmb_buf *b, dmb_group *parent, const char *name, dmb_group *g)
{
    tag_head(b, parent, 20, name);
    g->len_at = open_len(b);
    be(b, 0, 2); /* not sorted, closed */
    g->count_at = b->n;
    len(b, 0);
    g->count = 0;
}

static void group_end(dmb_buf *b, dmb_group *g, int64_t delta)
{
    if (!b->fail)
        be_at(b->p + g->count_at, g->count, b->v4 ? 8 : 4);
    close_len(b, g->len_at, delta);
}

/* A data tag: [G] "%%%%", n, the type entries; the caller writes the
 * values, then close_data patches DM4's length (at the returned offset). */
static size_t data_tag(dmb_buf *b, dmb_group *parent, const char *name, const uint64_t *info,
                       size_t n, int mark_ok)
{
    tag_head(b, parent, 21, name);
    const size_t at = open_len(b);
    put(b, mark_ok ? "%%%%" : "%%%$", 4);
    len(b, n);
    for (size_t i = 0; i < n; i++)
        len(b, info[i]);
    return at;
}

static void close_data(dmb_buf *b, size_t len_at)
{
    close_len(b, len_at, 0);
}

static void data_long(dmb_buf *b, dmb_group *parent, const char *name, int32_t v, int mark_ok)
{
    const uint64_t info[1] = {3};
    const size_t at = data_tag(b, parent, name, info, 1, mark_ok);
    value(b, &v, 4);
    close_data(b, at);
}

static void data_double(dmb_buf *b, dmb_group *parent, const char *name, double v)
{
    const uint64_t info[1] = {7};
    const size_t at = data_tag(b, parent, name, info, 1, 1);
    value(b, &v, 8);
    close_data(b, at);
}

static void data_float(dmb_buf *b, dmb_group *parent, const char *name, float v)
{
    const uint64_t info[1] = {6};
    const size_t at = data_tag(b, parent, name, info, 1, 1);
    value(b, &v, 4);
    close_data(b, at);
}

static void data_bool(dmb_buf *b, dmb_group *parent, const char *name, uint8_t v)
{
    const uint64_t info[1] = {8};
    const size_t at = data_tag(b, parent, name, info, 1, 1);
    put(b, &v, 1);
    close_data(b, at);
}

/* Text as DM writes it: an array of ushort ([H] reads type 4 arrays as
 * text); ASCII and two-byte UTF-8 (such as "µm") only. */
static void data_text(dmb_buf *b, dmb_group *parent, const char *name, const char *text)
{
    uint16_t units[256];
    size_t count = 0;
    for (const uint8_t *c = (const uint8_t *)text; *c && count < 256; c++) {
        if ((*c & 0xe0) == 0xc0 && c[1]) {
            units[count++] = (uint16_t)((*c & 0x1f) << 6 | (c[1] & 0x3f));
            c++;
        } else {
            units[count++] = *c;
        }
    }
    const uint64_t info[3] = {20, 4, count};
    const size_t at = data_tag(b, parent, name, info, 3, 1);
    for (size_t k = 0; k < count; k++)
        value(b, &units[k], 2);
    close_data(b, at);
}

size_t dmb_item(int64_t data_type)
{
    switch (data_type) {
    case 1:
    case 10:
        return 2;
    case 2:
    case 7:
    case 11:
    case 23:
        return 4;
    case 12:
        return 8;
    default:
        return 1;
    }
}

/* The Data array's element type for a DataType ([G] codes). */
static uint64_t element_type(int64_t data_type)
{
    switch (data_type) {
    case 1:
        return 2;
    case 2:
        return 6;
    case 7:
        return 3;
    case 9:
        return 9;
    case 10:
        return 4;
    case 11:
    case 23:
        return 5;
    case 12:
        return 7;
    case 14:
        return 8;
    default:
        return 10;
    }
}

void dmb_value(int64_t data_type, uint64_t k, void *out)
{
    const uint64_t h = (k * 2654435761u + 12345) >> 3;
    switch (data_type) {
    case 1: {
        const int16_t v = (int16_t)(h % 60000);
        memcpy(out, &v, 2);
        break;
    }
    case 2: {
        const float v = (float)(h % 100000) * 0.25f - 1000.0f;
        memcpy(out, &v, 4);
        break;
    }
    case 7: {
        const int32_t v = (int32_t)(h % 65536);
        memcpy(out, &v, 4);
        break;
    }
    case 9: {
        const int8_t v = (int8_t)(h % 128);
        memcpy(out, &v, 1);
        break;
    }
    case 10: {
        const uint16_t v = (uint16_t)h;
        memcpy(out, &v, 2);
        break;
    }
    case 11:
    case 23: {
        const uint32_t v = (uint32_t)(h % 65536);
        memcpy(out, &v, 4);
        break;
    }
    case 12: {
        const double v = (double)(h % 1000) * 0.5;
        memcpy(out, &v, 8);
        break;
    }
    default: {
        const uint8_t v = (uint8_t)h;
        memcpy(out, &v, 1);
        break;
    }
    }
}

/* One image group of ImageList. */
static void write_image(dmb_buf *b, dmb_group *list, const dmb_options *o, int thumbnail)
{
    dmb_group image, data, cal, dim, one, dims, tags, meta, scope, acq, dev;
    group_begin(b, list, "", &image);
    group_begin(b, &image, "ImageData", &data);
    const unsigned ndims = thumbnail ? 2 : o->ndims;
    const uint64_t thumb_dims[2] = {4, 4};
    const uint64_t *d = thumbnail ? thumb_dims : o->dims;
    const int64_t type = thumbnail ? 23 : o->data_type;
    if (!thumbnail) {
        group_begin(b, &data, "Calibrations", &cal);
        group_begin(b, &cal, "Dimension", &dim);
        for (unsigned k = 0; k < ndims && k < 4; k++) {
            group_begin(b, &dim, "", &one);
            data_float(b, &one, "Origin", 0.0f);
            data_float(b, &one, "Scale", o->units[k] ? (float)o->scales[k] : 1.0f);
            data_text(b, &one, "Units", o->units[k] ? o->units[k] : "");
            group_end(b, &one, 0);
        }
        group_end(b, &dim, 0);
        group_end(b, &cal, 0);
    }
    /* Data: [20, element type, count], then the values. */
    uint64_t count = 1;
    for (unsigned k = 0; k < ndims; k++)
        count *= d[k];
    if (!thumbnail)
        count = (uint64_t)((int64_t)count + o->extra_values);
    const size_t item = dmb_item(type);
    const uint64_t info[3] = {20, element_type(type), count};
    const size_t at = data_tag(b, &data, "Data", info, 3, 1);
    for (uint64_t k = 0; k < count && !b->fail; k++) {
        uint8_t v[8];
        if (!thumbnail && o->data && k < count - (uint64_t)(o->extra_values > 0 ? o->extra_values
                                                                                 : 0))
            memcpy(v, (const uint8_t *)o->data + k * item, item);
        else
            dmb_value(type, k, v);
        value(b, v, item);
    }
    close_data(b, at);
    if (thumbnail || !o->no_data_type)
        data_long(b, &data, "DataType", (int32_t)type, thumbnail || !o->bad_mark);
    group_begin(b, &data, "Dimensions", &dims);
    int stated = 0;
    for (unsigned k = 0; !thumbnail && k < ndims; k++)
        stated |= o->stated_dims[k] != 0;
    for (unsigned k = 0; k < ndims; k++)
        data_long(b, &dims, "", (int32_t)(stated ? o->stated_dims[k] : d[k]), 1);
    group_end(b, &dims, 0);
    group_end(b, &data, thumbnail ? 0 : o->group_len_delta);
    group_begin(b, &image, "ImageTags", &tags);
    if (!thumbnail) {
        if (o->order_swapped >= 0 || o->format) {
            group_begin(b, &tags, "Meta Data", &meta);
            if (o->format)
                data_text(b, &meta, "Format", o->format);
            if (o->order_swapped >= 0)
                data_bool(b, &meta, "Data Order Swapped", (uint8_t)o->order_swapped);
            group_end(b, &meta, 0);
        }
        group_begin(b, &tags, "Microscope Info", &scope);
        if (o->voltage > 0)
            data_double(b, &scope, "Voltage", o->voltage);
        data_text(b, &scope, "Name", "test microscope");
        group_end(b, &scope, 0);
        group_begin(b, &tags, "Acquisition", &acq);
        group_begin(b, &acq, "Device", &dev);
        data_text(b, &dev, "Name", "K3");
        group_end(b, &dev, 0);
        group_end(b, &acq, 0);
        /* Nested groups, for the depth limit. */
        dmb_group *nested = calloc(o->nest + 1, sizeof *nested);
        dmb_group *parent = &tags;
        for (unsigned k = 0; nested && k < o->nest; k++) {
            group_begin(b, parent, "nest", &nested[k]);
            parent = &nested[k];
        }
        for (unsigned k = o->nest; nested && k > 0; k--)
            group_end(b, &nested[k - 1], 0);
        free(nested);
    }
    group_end(b, &tags, 0);
    data_text(b, &image, "Name", thumbnail ? "thumbnail" : o->name ? o->name : "dm_build");
    group_end(b, &image, 0);
}

/* Writes the buffer to `path` and frees it: 0, or -1 (a line on stderr). */
static int finish(dmb_buf *b, const char *path)
{
    FILE *f = b->fail ? NULL : fopen(path, "wb");
    const int ok = f && fwrite(b->p, 1, b->n, f) == b->n;
    if (f && fclose(f) != 0)
        f = NULL;
    free(b->p);
    if (!ok || !f) {
        fprintf(stderr, "dmb_write: cannot write '%s'\n", path);
        return -1;
    }
    return 0;
}

#define DMB_TAG_DEPTH 8

int dmb_write_tags(const char *path, int version, const dmb_tag *tags, size_t count)
{
    dmb_buf b;
    memset(&b, 0, sizeof b);
    b.v4 = version == 4;
    b.little = 1;
    /* [G], [C]: the header and the root group, as dmb_write. */
    be(&b, (uint64_t)version, 4);
    const size_t root_len_at = b.n;
    len(&b, 0);
    be(&b, 1, 4);
    const size_t header = b.n;
    dmb_group stack[DMB_TAG_DEPTH + 1];
    char names[DMB_TAG_DEPTH + 1][64];
    memset(stack, 0, sizeof stack);
    be(&b, 0x0100, 2);
    stack[0].count_at = b.n;
    len(&b, 0);
    size_t open = 0; /* groups open below the root */
    for (size_t i = 0; i < count; i++) {
        char seg[DMB_TAG_DEPTH + 1][64];
        size_t n = 0;
        for (const char *c = tags[i].path; n <= DMB_TAG_DEPTH;) {
            const char *slash = strchr(c, '/');
            const size_t k = slash ? (size_t)(slash - c) : strlen(c);
            snprintf(seg[n++], sizeof seg[0], "%.*s", (int)k, c);
            if (!slash)
                break;
            c = slash + 1;
        }
        /* Close the groups this tag is not in, open the ones it is. */
        size_t common = 0;
        while (common < open && common + 1 < n && !strcmp(names[common + 1], seg[common]))
            common++;
        for (; open > common; open--)
            group_end(&b, &stack[open], 0);
        for (; open + 1 < n; open++) {
            group_begin(&b, &stack[open], seg[open], &stack[open + 1]);
            snprintf(names[open + 1], sizeof names[0], "%s", seg[open]);
        }
        dmb_group *g = &stack[open];
        if (tags[i].kind == 'l')
            data_long(&b, g, seg[n - 1], (int32_t)tags[i].number, 1);
        else if (tags[i].kind == 'd')
            data_double(&b, g, seg[n - 1], tags[i].real);
        else
            data_text(&b, g, seg[n - 1], tags[i].text ? tags[i].text : "");
    }
    for (; open > 0; open--)
        group_end(&b, &stack[open], 0);
    if (!b.fail) {
        be_at(b.p + stack[0].count_at, stack[0].count, b.v4 ? 8 : 4);
        be_at(b.p + root_len_at, b.n - header, b.v4 ? 8 : 4);
    }
    const uint8_t trailer[8] = {0};
    put(&b, trailer, b.v4 ? 8 : 4);
    return finish(&b, path);
}

int dmb_write(const char *path, const dmb_options *o)
{
    dmb_buf b;
    memset(&b, 0, sizeof b);
    b.v4 = o->version == 4;
    b.little = !o->big_endian;
    /* [G], [C]: version, the root length (patched), the byte order. */
    be(&b, (uint64_t)o->version, 4);
    const size_t root_len_at = b.n;
    len(&b, 0);
    be(&b, b.little ? 1 : 0, 4);
    const size_t header = b.n;
    dmb_group root = {0, 0, 0}, list, thumbs, one;
    be(&b, 0x0100, 2); /* sorted, closed */
    root.count_at = b.n;
    len(&b, 0);
    group_begin(&b, &root, "ImageList", &list);
    if (o->thumbnail)
        write_image(&b, &list, o, 1);
    write_image(&b, &list, o, 0);
    group_end(&b, &list, 0);
    if (o->thumbnail) {
        group_begin(&b, &root, "Thumbnails", &thumbs);
        group_begin(&b, &thumbs, "", &one);
        data_long(&b, &one, "ImageIndex", 0, 1);
        group_end(&b, &one, 0);
        group_end(&b, &thumbs, 0);
    }
    if (!b.fail) {
        be_at(b.p + root.count_at, root.count, b.v4 ? 8 : 4);
        be_at(b.p + root_len_at, b.n - header, b.v4 ? 8 : 4);
    }
    const uint8_t trailer[8] = {0};
    put(&b, trailer, b.v4 ? 8 : 4);
    return finish(&b, path);
}
