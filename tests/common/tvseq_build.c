/* Writers of TVIPS and Norpix .seq files for the tests (tvseq_build.h).
 * The layouts follow the published descriptions cited in doc/inputs.md:
 * TVIPS, LiberTEM's and HyperSpy's readers; .seq, the Norpix header as
 * LiberTEM's and RosettaSciIO's readers lay it out. */
#include "tvseq_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t tvseqb_value(uint64_t frame, uint64_t row, uint64_t column, unsigned bits)
{
    uint64_t x = frame * 0x9E3779B97F4A7C15ull ^ (row << 20) ^ (column << 1) ^ 0x5bd1e995u;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return bits >= 32 ? (uint32_t)x : (uint32_t)(x & ((1ull << bits) - 1));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void putf32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(p, u);
}

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "tvseq_build: %s '%s'\n", what, path);
    return -1;
}

/* --- TVIPS --------------------------------------------------------------------- */

void tvipsb_part_path(const char *first, unsigned k, char *out, size_t size)
{
    const size_t n = strlen(first);
    /* first ends "_000.tvips": replace the three digits. */
    snprintf(out, size, "%.*s%03u%s", (int)(n - 9), first, k, first + n - 6);
}

int tvipsb_write(const char *first, const tvipsb_options *o)
{
    const uint32_t version = o->version ? o->version : 2;
    const uint32_t fh = version == 1 ? 12 : o->frame_header ? o->frame_header : 60;
    const size_t item = o->bits <= 8 ? 1 : o->bits <= 16 ? 2 : 4;
    const size_t frame_bytes = (size_t)o->width * o->height * item;
    uint8_t *record = calloc(1, fh + frame_bytes);
    if (!record)
        return fail("out of memory for", first);
    /* The series header: LiberTEM's series_header_dtype (13 int32, then
     * 204 unused bytes that the recorder fills with "TVIPS "). */
    uint8_t h[256];
    memset(h, 0, sizeof h);
    const uint32_t fields[13] = {256, version, o->width, o->height, o->bits, 0, 0, 1, 1,
                                 3,   300,     1000,     version == 2 ? fh : 0};
    for (int k = 0; k < 13; k++)
        put32(h + 4 * k, fields[k]);
    for (int k = 52; k < 256; k++)
        h[k] = (uint8_t)"TVIPS "[(k - 52) % 6];
    const uint64_t per = o->frames_per_part ? o->frames_per_part : o->frames;
    FILE *f = NULL;
    int rc = 0;
    for (uint64_t frame = 0; rc == 0 && frame < o->frames; frame++) {
        if (frame % per == 0) {
            char path[1024];
            tvipsb_part_path(first, (unsigned)(frame / per), path, sizeof path);
            if (f && fclose(f) != 0)
                rc = fail("cannot write", path);
            f = fopen(path, "wb");
            if (!f) {
                rc = fail("cannot create", path);
                break;
            }
            if (frame == 0 && fwrite(h, 1, sizeof h, f) != sizeof h)
                rc = fail("cannot write", path);
        }
        memset(record, 0, fh);
        /* Frame header v2 (LiberTEM's image_header_v2_dtype): counter, time
         * (s), ms, LUT index, Faraday, magnification, mode, stage x y z a
         * b, rotator index ...; Scan_x and Scan_y at 68 and 72. Version 1:
         * the first three. */
        uint32_t seconds = 1600000000u + (uint32_t)(frame / 1000), ms = (uint32_t)(frame % 1000);
        if (o->time_back_at > 0 && frame == (uint64_t)o->time_back_at)
            seconds -= 1;
        put32(record, (uint32_t)frame);
        put32(record + 4, seconds);
        put32(record + 8, ms);
        if (version == 2) {
            put32(record + 20, 1000);
            put32(record + 24, 2);
            put32(record + 48, o->first_rotator + (uint32_t)frame);
            if (fh >= 76) {
                putf32(record + 68, (float)(frame % 4));
                putf32(record + 72, (float)(frame / 4));
            }
        }
        uint8_t *d = record + fh;
        for (uint32_t r = 0; r < o->height; r++)
            for (uint32_t c = 0; c < o->width; c++) {
                const uint32_t v = tvseqb_value(frame, r, c, o->bits > 16 ? 16 : o->bits);
                const size_t at = ((size_t)r * o->width + c) * item;
                if (item == 1)
                    d[at] = (uint8_t)v;
                else if (item == 2)
                    put16(d + at, v);
                else
                    put32(d + at, v);
            }
        if (fwrite(record, 1, fh + frame_bytes, f) != fh + frame_bytes)
            rc = fail("cannot write", first);
    }
    if (f && fclose(f) != 0)
        rc = fail("cannot write", first);
    free(record);
    return rc;
}

/* --- Norpix .seq ------------------------------------------------------------------ */

uint32_t seqb_true_image_size(const seqb_options *o)
{
    const uint32_t item = o->bits <= 8 ? 1 : o->bits <= 16 ? 2 : 4;
    const int32_t version = o->version ? o->version : 5;
    return o->width * o->height * item + (version >= 5 ? 8 : 6) + o->padding;
}

int seqb_write(const char *path, const seqb_options *o)
{
    const int32_t version = o->version ? o->version : 5;
    const uint32_t header = version >= 5 ? 8192 : 1024;
    const uint32_t item = o->bits <= 8 ? 1 : o->bits <= 16 ? 2 : 4;
    const uint32_t image_bytes = o->width * o->height * item, tis = seqb_true_image_size(o);
    uint8_t *h = calloc(1, header), *img = calloc(1, tis);
    FILE *f = fopen(path, "wb");
    int rc = h && img && f ? 0 : fail("cannot create", path);
    if (rc == 0) {
        /* The header (LiberTEM's HEADER_FIELDS, packed little-endian):
         * magic, name (UTF-16 "Norpix seq"), version, header size,
         * description (512 bytes), then the image info. */
        put32(h, 0xFEED);
        const char *name = "Norpix seq";
        for (size_t i = 0; name[i]; i++)
            put16(h + 4 + 2 * i, (uint8_t)name[i]);
        put32(h + 28, (uint32_t)version);
        put32(h + 32, (uint32_t)(o->header_size ? o->header_size : (int32_t)header));
        const char *description = "qem test sequence";
        for (size_t i = 0; description[i]; i++)
            put16(h + 36 + 2 * i, (uint8_t)description[i]);
        put32(h + 548, o->width);
        put32(h + 552, o->height);
        put32(h + 556, o->bits);
        put32(h + 560, o->bits == 16 ? 12 : o->bits); /* real bits, as a 12-bit camera */
        put32(h + 564, image_bytes);
        put32(h + 568, o->image_format ? o->image_format : 100);
        put32(h + 572, o->stated_frames ? o->stated_frames : o->frames);
        put32(h + 580, tis);
        const double fps = 400.0;
        uint64_t bits64;
        memcpy(&bits64, &fps, 8);
        put32(h + 584, (uint32_t)bits64);
        put32(h + 588, (uint32_t)(bits64 >> 32));
        put32(h + 620, o->compression);
        if (fwrite(h, 1, header, f) != header)
            rc = fail("cannot write", path);
    }
    const uint32_t block_rows = o->half ? o->height / o->prebuffer : o->height;
    for (uint32_t j = 0; rc == 0 && j < o->frames; j++) {
        memset(img, 0, tis);
        for (uint32_t r = 0; r < o->height; r++) {
            /* The logical frame and row this stored row holds. */
            uint64_t frame = j, row = r;
            if (o->half) {
                const uint32_t b = r / block_rows, rr = r % block_rows;
                frame = (uint64_t)j * o->prebuffer + b;
                row = o->half == 1 ? block_rows - 1 - rr : block_rows + rr;
            }
            for (uint32_t c = 0; c < o->width; c++) {
                const uint32_t v = tvseqb_value(frame, row, c, o->bits > 16 ? 16 : o->bits);
                const size_t at = ((size_t)r * o->width + c) * item;
                if (item == 1)
                    img[at] = (uint8_t)v;
                else
                    put16(img + at, v);
            }
        }
        /* The timestamp after the image: u32 s, u16 ms, u16 us. */
        put32(img + image_bytes, 1700000000u + j / 100);
        put16(img + image_bytes + 4,
              o->ms_out_of_range && j + 1 == o->frames ? 1000 : (j % 100) * 10);
        if (version >= 5)
            put16(img + image_bytes + 6, j % 1000);
        if (fwrite(img, 1, tis, f) != tis)
            rc = fail("cannot write", path);
    }
    if (f && fclose(f) != 0)
        rc = fail("cannot write", path);
    free(h);
    free(img);
    return rc;
}

int seqb_write_config_xml(const char *path, uint32_t prebuffer)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fail("cannot create", path);
    /* FileInfo/SegmentPreBuffer/@Value, as RosettaSciIO reads it. */
    fprintf(f,
            "<?xml version=\"1.0\"?>\n<Configuration>\n  <FileInfo>\n"
            "    <ImageSizeX Value=\"8\"/>\n    <SegmentPreBuffer Value=\"%u\"/>\n"
            "  </FileInfo>\n</Configuration>\n",
            prebuffer);
    return fclose(f) == 0 ? 0 : fail("cannot write", path);
}
