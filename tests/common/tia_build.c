/* Writes TIA .ser and .emi files from the published layout (tia_build.h). */
#include "tia_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIAB_DESCRIPTION "Position"
#define TIAB_UNITS "meters"
#define TIAB_ELEMENT_HEADER 50u

static uint16_t version_of(const tiab_options *o)
{
    return o->version ? o->version : 0x0220;
}

static unsigned offset_size(const tiab_options *o)
{
    return version_of(o) <= 0x0210 ? 4 : 8;
}

static uint32_t tag_type_of(const tiab_options *o)
{
    return o->tag_type ? o->tag_type : 0x4142;
}

static uint16_t data_type_of(const tiab_options *o)
{
    return o->data_type ? o->data_type : 2;
}

static uint32_t sx(const tiab_options *o)
{
    return o->size_x ? o->size_x : 8;
}

static uint32_t sy(const tiab_options *o)
{
    return o->size_y ? o->size_y : 6;
}

static uint32_t total_of(const tiab_options *o)
{
    if (o->total)
        return o->total;
    uint32_t t = 1;
    for (uint32_t d = 0; d < o->ndim && d < 2; d++)
        t *= o->dims[d];
    return t;
}

static uint32_t valid_of(const tiab_options *o)
{
    return o->valid ? o->valid : total_of(o);
}

size_t tiab_item(uint16_t data_type)
{
    static const size_t items[] = {0, 1, 2, 4, 1, 2, 4, 4, 8, 8, 16};
    return data_type < sizeof items / sizeof items[0] ? items[data_type] : 0;
}

double tiab_value(const tiab_options *o, uint64_t frame, uint64_t pixel)
{
    const uint32_t p = (uint32_t)((131 * frame + 7 * pixel) % 1000);
    switch (data_type_of(o)) {
    case 1:
        return p % 251;
    case 4:
        return (double)(p % 120) - (o->negative ? 60 : 0);
    default:
        return (double)p - (o->negative ? 500 : 0) + (o->fractional ? 0.1 : 0);
    }
}

static size_t tag_size(const tiab_options *o)
{
    return tag_type_of(o) == 0x4142 ? 24 : 8;
}

static uint64_t header_bytes(const tiab_options *o)
{
    uint64_t n = 26 + offset_size(o);
    for (uint32_t d = 0; d < o->ndim; d++)
        n += 28 + strlen(TIAB_DESCRIPTION) + 4 + strlen(TIAB_UNITS);
    return n;
}

uint64_t tiab_offsets_at(const tiab_options *o)
{
    return header_bytes(o);
}

static uint64_t stride(const tiab_options *o)
{
    const size_t item = tiab_item(data_type_of(o)) ? tiab_item(data_type_of(o)) : 2;
    return TIAB_ELEMENT_HEADER + (uint64_t)sx(o) * sy(o) * item + tag_size(o) + o->gap;
}

uint64_t tiab_element_at(const tiab_options *o, uint64_t k)
{
    return header_bytes(o) + 2ull * total_of(o) * offset_size(o) + k * stride(o);
}

static void put(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    put(p, bits, 8);
}

static void put_sample(uint8_t *p, uint16_t type, double v)
{
    switch (type) {
    case 1:
    case 4:
        put(p, (uint64_t)(int64_t)v, 1);
        break;
    case 2:
    case 5:
        put(p, (uint64_t)(int64_t)v, 2);
        break;
    case 3:
    case 6:
        put(p, (uint64_t)(int64_t)v, 4);
        break;
    case 7: {
        const float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        put(p, bits, 4);
        break;
    }
    case 8:
        put_f64(p, v);
        break;
    case 9: /* complex64: real, imaginary float32 */
        put_sample(p, 7, v);
        put_sample(p + 4, 7, 0);
        break;
    case 10:
        put_f64(p, v);
        put_f64(p + 8, 0);
        break;
    default:
        put(p, (uint64_t)(int64_t)v, 2);
        break;
    }
}

int tiab_write(const char *path, const tiab_options *o)
{
    const unsigned os = offset_size(o);
    const uint32_t total = total_of(o), valid = valid_of(o);
    const uint16_t type = data_type_of(o);
    const size_t item = tiab_item(type) ? tiab_item(type) : 2;
    const uint64_t head = header_bytes(o), size = tiab_element_at(o, valid);
    uint8_t *b = calloc(1, (size_t)size);
    if (!b) {
        fprintf(stderr, "tiab_write: out of memory\n");
        return -1;
    }
    put(b, 0x4949, 2);
    put(b + 2, 0x0197, 2);
    put(b + 4, version_of(o), 2);
    put(b + 6, o->data_type_id ? o->data_type_id : 0x4122, 4);
    put(b + 10, tag_type_of(o), 4);
    put(b + 14, total, 4);
    put(b + 18, valid, 4);
    put(b + 22, head, os);
    put(b + 22 + os, o->ndim, 4);
    uint8_t *p = b + 26 + os;
    for (uint32_t d = 0; d < o->ndim; d++) {
        put(p, o->dims[d], 4);
        put_f64(p + 4, -1e-8 * (d + 1));
        put_f64(p + 12, (d ? -2e-9 : 2e-9));
        put(p + 20, 0, 4);
        put(p + 24, strlen(TIAB_DESCRIPTION), 4);
        memcpy(p + 28, TIAB_DESCRIPTION, strlen(TIAB_DESCRIPTION));
        p += 28 + strlen(TIAB_DESCRIPTION);
        put(p, strlen(TIAB_UNITS), 4);
        memcpy(p + 4, TIAB_UNITS, strlen(TIAB_UNITS));
        p += 4 + strlen(TIAB_UNITS);
    }
    const uint32_t columns = o->ndim ? o->dims[0] : 1;
    for (uint32_t k = 0; k < valid; k++) {
        const uint64_t at = tiab_element_at(o, k), tag = at + stride(o) - tag_size(o) - o->gap;
        put(b + head + (uint64_t)k * os, at, os);
        put(b + head + ((uint64_t)total + k) * os, tag, os);
        uint8_t *e = b + at;
        put_f64(e, -1e-7), put_f64(e + 8, 1e-9), put(e + 16, 0, 4);
        put_f64(e + 20, -1e-7), put_f64(e + 28, 1e-9), put(e + 36, 0, 4);
        put(e + 40, type, 2);
        put(e + 42, sx(o), 4);
        put(e + 46, sy(o), 4);
        for (uint64_t px = 0; px < (uint64_t)sx(o) * sy(o); px++)
            put_sample(e + TIAB_ELEMENT_HEADER + px * item, type, tiab_value(o, k, px));
        put(b + tag, tag_type_of(o), 2);
        put(b + tag + 4, 1000 + k, 4);
        if (tag_type_of(o) == 0x4142) {
            const double fast = (k % columns) * 1e-9, slow = (double)(k / columns) * 1e-9;
            put_f64(b + tag + 8, o->y_first ? slow : fast);
            put_f64(b + tag + 16, o->y_first ? fast : slow);
        }
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, (size_t)size, f) == size;
    if (f && fclose(f) != 0)
        ok = 0;
    free(b);
    if (!ok) {
        fprintf(stderr, "tiab_write: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

int tiab_write_emi(const char *path, const char *const *documents, size_t count)
{
    static const uint8_t head[] = {'J', 'K', 0, 2, 0, 0, 0, 0, 4, 'M', 1, 0, 0x60, 0, 0, 1};
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "tiab_write_emi: cannot write %s\n", path);
        return -1;
    }
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    for (size_t i = 0; ok && i < count; i++) {
        static const uint8_t filler[] = {0x60, 0, 0x12, 7, 0x0b, 0, 0, 0};
        ok = fwrite(filler, 1, sizeof filler, f) == sizeof filler &&
             fwrite(documents[i], 1, strlen(documents[i]), f) == strlen(documents[i]);
    }
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "tiab_write_emi: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

void tiab_object_info(char *out, size_t size, const char *microscope, const char *kv,
                      const char *camera_m)
{
    snprintf(out, size,
             "<ObjectInfo><Uuid>00000000-0000-4000-8000-000000000000</Uuid>"
             "<AcquireDate>Mon Feb 22 19:21:01 2016</AcquireDate>"
             "<AcquireInfo><CameraNamePath>BM-Ceta</CameraNamePath></AcquireInfo>"
             "<ExperimentalDescription><Root>"
             "<Data><Label>Microscope</Label><Value>%s</Value><Unit></Unit></Data>"
             "<Data><Label>High tension</Label><Value>%s</Value><Unit>kV</Unit></Data>"
             "<Data><Label>Camera length</Label><Value>%s</Value><Unit>m</Unit></Data>"
             "</Root></ExperimentalDescription>"
             "<TrueImageHeaderInfo>&lt;Root&gt;&lt;/Root&gt;</TrueImageHeaderInfo>"
             "</ObjectInfo>",
             microscope, kv, camera_m);
}
