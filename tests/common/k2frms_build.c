/* Writers of K2 IS and FRMS6 files for the tests (k2frms_build.h). */
#include "k2frms_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- Gatan K2 IS ----------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_be16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

uint16_t k2b_value(uint64_t id, uint64_t row, uint64_t column)
{
    return (uint16_t)((id * 2654435761u + row * 40503u + column * 9973u + row * column) & 0xFFF);
}

/* Block b of a sector frame covers x 256 - 16 (b % 16 + 1) .. + 15 and
 * y 930 (b / 16) .. + 929 of the sector (the file order LiberTEM's reader
 * reads, right to left). */
static void block_origin(unsigned b, unsigned *x0, unsigned *y0)
{
    *x0 = 256 - 16 * (b % 16 + 1);
    *y0 = 930 * (b / 16);
}

void k2b_header(uint8_t out[40], unsigned s, unsigned b, uint32_t id, uint32_t count, int shutter)
{
    (void)s;
    unsigned x0, y0;
    block_origin(b, &x0, &y0);
    memset(out, 0, 40);
    put_be32(out, 0xFFFF0055u);
    out[8] = 2;                   /* version */
    out[9] = shutter ? 0x01 : 0;  /* flags: bit 0 shutter active */
    put_be32(out + 16, count);    /* block count */
    put_be16(out + 20, 256);      /* sector width */
    put_be16(out + 22, 1860);     /* sector height */
    put_be32(out + 24, id);
    put_be16(out + 28, x0);
    put_be16(out + 30, y0);
    put_be16(out + 32, x0 + 15);
    put_be16(out + 34, y0 + 929);
    put_be32(out + 36, K2B_BLOCK_BYTES);
}

/* One block: its header and 930 x 16 values packed two in three bytes
 * (low 8 bits of the first; its high 4 bits and the second's low 4; the
 * second's high 8). */
static void k2b_block(uint8_t *out, unsigned s, unsigned b, uint32_t id, uint32_t count,
                      int shutter)
{
    k2b_header(out, s, b, id, count, shutter);
    unsigned x0, y0;
    block_origin(b, &x0, &y0);
    uint8_t *p = out + K2B_HEADER_BYTES;
    for (unsigned r = 0; r < 930; r++)
        for (unsigned c = 0; c < 16; c += 2, p += 3) {
            const uint16_t a = k2b_value(id, y0 + r, 256u * s + x0 + c);
            const uint16_t v = k2b_value(id, y0 + r, 256u * s + x0 + c + 1);
            p[0] = (uint8_t)(a & 0xFF);
            p[1] = (uint8_t)((a >> 8) | (v & 0x0F) << 4);
            p[2] = (uint8_t)(v >> 4);
        }
}

int k2b_write(const char *dir, const char *stem, const k2b_options *o)
{
    uint8_t *block = malloc(K2B_BLOCK_BYTES);
    if (!block)
        return -1;
    char path[2048];
    int rc = 0;
    const uint64_t whole = o->before + o->frames;
    for (unsigned s = 0; rc == 0 && s < K2B_SECTORS; s++) {
        snprintf(path, sizeof path, "%s/%s%u.bin", dir, stem, s + 1);
        FILE *f = fopen(path, "wb");
        if (!f) {
            fprintf(stderr, "k2b_write: cannot create %s\n", path);
            rc = -1;
            break;
        }
        uint32_t count = 1000u * (s + 1);
        const uint64_t skip = o->skip_frames[s];
        /* The tail of the frame before: its last lead_blocks blocks. */
        for (unsigned b = K2B_BLOCKS_PER_FRAME - o->lead_blocks[s]; b < K2B_BLOCKS_PER_FRAME;
             b++) {
            k2b_block(block, s, b, o->first_id + (uint32_t)skip - 1, count++, 0);
            rc |= fwrite(block, 1, K2B_BLOCK_BYTES, f) != K2B_BLOCK_BYTES;
        }
        for (uint64_t k = skip; k < whole; k++)
            for (unsigned b = 0; b < K2B_BLOCKS_PER_FRAME; b++) {
                k2b_block(block, s, b, o->first_id + (uint32_t)k, count++,
                          !o->no_shutter && k >= o->before);
                rc |= fwrite(block, 1, K2B_BLOCK_BYTES, f) != K2B_BLOCK_BYTES;
            }
        for (unsigned b = 0; b < o->trail_blocks[s]; b++) {
            k2b_block(block, s, b, o->first_id + (uint32_t)whole, count++, !o->no_shutter);
            rc |= fwrite(block, 1, K2B_BLOCK_BYTES, f) != K2B_BLOCK_BYTES;
        }
        rc |= fclose(f) != 0;
    }
    free(block);
    if (rc == 0 && o->write_gtg) {
        snprintf(path, sizeof path, "%s/%s.gtg", dir, stem);
        FILE *f = fopen(path, "wb");
        /* A DM4 tag file with no tags (the tests write the tags they need
         * with dm_build.c): version 4, the root's length (10 bytes), byte
         * order 1, the root group (sorted, closed, no tags), the 8-byte
         * trailer. */
        static const uint8_t gtg[] = {0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 1, 1, 0,
                                      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        rc = !f || fwrite(gtg, 1, sizeof gtg, f) != sizeof gtg;
        if (f)
            rc |= fclose(f) != 0;
    }
    if (rc)
        fprintf(stderr, "k2b_write: writing %s failed\n", path);
    return rc ? -1 : 0;
}

/* --- PNDetector FRMS6 ------------------------------------------------------------- */

static void put_le16(uint8_t *p, uint64_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

uint16_t f6b_value(uint64_t frame, uint64_t y, uint64_t x)
{
    return (uint16_t)(frame * 40503u + y * 977u + x * 31u + (y ^ x) * 7u);
}

void f6b_file_header(uint8_t out[1024], uint64_t width, uint64_t height, uint64_t frames)
{
    memset(out, 0, 1024);
    put_le16(out, 1024);     /* header size */
    put_le16(out + 2, 64);   /* frame header size */
    out[7] = 6;              /* version */
    memcpy(out + 8, "qem test file", 13); /* comment */
    put_le16(out + 88, width);
    put_le16(out + 90, height);
    put_le32(out + 1020, frames);
}

static int write_frms6(const char *path, const f6b_options *o, uint64_t frames, uint64_t base)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "f6b_write: cannot create %s\n", path);
        return -1;
    }
    uint8_t header[1024];
    f6b_file_header(header, o->width, o->height, o->omit_count ? 0 : frames);
    int rc = fwrite(header, 1, sizeof header, f) != sizeof header;
    const size_t n = (size_t)(o->width * o->height);
    uint8_t *samples = malloc(2 * n + 64);
    rc |= samples == NULL;
    for (uint64_t k = 0; !rc && k < frames; k++) {
        memset(samples, 0, 64);
        put_le32(samples + 4, 1500000000u + base + k); /* timestamp s */
        put_le32(samples + 8, 250);                   /* timestamp us */
        put_le32(samples + 12, base + k);             /* frame number */
        for (uint64_t y = 0; y < o->height; y++)
            for (uint64_t x = 0; x < o->width; x++)
                put_le16(samples + 64 + 2 * (y * o->width + x), f6b_value(base + k, y, x));
        rc |= fwrite(samples, 1, 2 * n + 64, f) != 2 * n + 64;
    }
    free(samples);
    rc |= fclose(f) != 0;
    if (rc)
        fprintf(stderr, "f6b_write: writing %s failed\n", path);
    return rc ? -1 : 0;
}

int f6b_write(const char *dir, const char *stem, const f6b_options *o)
{
    char path[2048];
    if (o->write_hdr) {
        snprintf(path, sizeof path, "%s/%s.hdr", dir, stem);
        FILE *f = fopen(path, "w");
        if (!f)
            return -1;
        uint64_t signal = 0;
        for (size_t i = 0; i < o->data_files; i++)
            signal += o->frames[i];
        fprintf(f, "[measurementInfo]\n");
        fprintf(f, "darkFrames=%llu\n", (unsigned long long)o->dark_frames);
        fprintf(f, "dwellTimeMicroSeconds=1000\n");
        fprintf(f, "gain=1\n");
        if (o->state_signal)
            fprintf(f, "signalFrames=%llu\n", (unsigned long long)signal);
        if (o->scan_rows)
            fprintf(f, "stemImageSize=%llux%llu\n", (unsigned long long)o->scan_rows,
                    (unsigned long long)o->scan_columns);
        if (o->bin)
            fprintf(f, "readoutMode=\"bin: %llu, windowing: %llu x %llu \"\n",
                    (unsigned long long)o->bin, (unsigned long long)(2 * o->height),
                    (unsigned long long)(o->width / 2));
        fprintf(f, "\n[other]\nnote = not read\n");
        if (fclose(f) != 0)
            return -1;
    }
    snprintf(path, sizeof path, "%s/%s_000.frms6", dir, stem);
    if (write_frms6(path, o, o->dark_frames, 100000) != 0)
        return -1;
    uint64_t base = 0;
    for (size_t i = 0; i < o->data_files; i++) {
        snprintf(path, sizeof path, "%s/%s_%03zu.frms6", dir, stem, i + 1);
        if (write_frms6(path, o, o->frames[i], base) != 0)
            return -1;
        base += o->frames[i];
    }
    return 0;
}
