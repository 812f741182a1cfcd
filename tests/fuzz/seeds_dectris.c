/* See seeds_dectris.h. */
#include "seeds_dectris.h"

#include <lz4.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A seed being assembled: messages of length-prefixed parts. */
typedef struct seed {
    uint8_t *bytes;
    size_t size;
} seed;

static void append(seed *s, const void *data, size_t size)
{
    uint8_t *grown = realloc(s->bytes, s->size + size + 1);
    if (!grown)
        return;
    s->bytes = grown;
    memcpy(s->bytes + s->size, data, size);
    s->size += size;
}

static void message(seed *s, unsigned parts)
{
    const uint8_t count = (uint8_t)parts;
    append(s, &count, 1);
}

static void part(seed *s, const void *data, size_t size)
{
    const uint8_t length[4] = {(uint8_t)size, (uint8_t)(size >> 8), (uint8_t)(size >> 16),
                               (uint8_t)(size >> 24)};
    append(s, length, 4);
    append(s, data, size);
}

static void text(seed *s, const char *t)
{
    part(s, t, strlen(t));
}

static void save(const char *out, const char *name, seed *s)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/dectris_message", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/dectris_message/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(s->bytes, 1, s->size, f);
        fclose(f);
    }
    free(s->bytes);
    s->bytes = NULL;
    s->size = 0;
}

/* Bitshuffle by its definition (bit b of byte k of element e to row
 * 8k + b, position e), then LZ4, in the HDF5 filter's framing. */
static size_t bitshuffle_lz4(const uint8_t *in, size_t elements, unsigned es, size_t block,
                             uint8_t *out, size_t out_size)
{
    const uint64_t total = (uint64_t)elements * es;
    for (int k = 0; k < 8; k++)
        out[k] = (uint8_t)(total >> (56 - 8 * k));
    const uint32_t block_bytes = (uint32_t)(block * es);
    for (int k = 0; k < 4; k++)
        out[8 + k] = (uint8_t)(block_bytes >> (24 - 8 * k));
    size_t at = 12, done = 0;
    uint8_t *shuffled = malloc(block * es);
    while (elements - done >= 8) {
        const size_t n = elements - done >= block ? block : (elements - done) / 8 * 8;
        memset(shuffled, 0, n * es);
        for (size_t e = 0; e < n; e++)
            for (unsigned bit = 0; bit < 8 * es; bit++)
                if (in[(done + e) * es + bit / 8] >> (bit % 8) & 1)
                    shuffled[(bit * n + e) / 8] |= (uint8_t)(1u << (e % 8));
        const int c = LZ4_compress_default((const char *)shuffled, (char *)out + at + 4,
                                           (int)(n * es), (int)(out_size - at - 4));
        for (int k = 0; k < 4; k++)
            out[at + (size_t)k] = (uint8_t)((uint32_t)c >> (24 - 8 * k));
        at += 4 + (size_t)c;
        done += n;
    }
    free(shuffled);
    memcpy(out + at, in + done * es, (elements - done) * es);
    return at + (elements - done) * es;
}

/* One image message; `encoding` "<", "lz4<" or "bsN-lz4<". */
static void image(seed *s, unsigned frame, unsigned columns, unsigned rows, const char *type,
                  unsigned es, const char *encoding, size_t block, const uint8_t *pixels)
{
    const size_t bytes = (size_t)columns * rows * es, room = 2 * bytes + 4096;
    uint8_t *blob = malloc(room);
    size_t size = bytes;
    if (!strcmp(encoding, "<"))
        memcpy(blob, pixels, bytes);
    else if (!strcmp(encoding, "lz4<"))
        size = (size_t)LZ4_compress_default((const char *)pixels, (char *)blob, (int)bytes,
                                            (int)room);
    else
        size = bitshuffle_lz4(pixels, (size_t)columns * rows, es, block, blob, room);
    char head[160], desc[200];
    snprintf(head, sizeof head, "{\"htype\": \"dimage-1.0\", \"series\": 1, \"frame\": %u, "
             "\"hash\": \"d41d8cd98f00b204e9800998ecf8427e\"}", frame);
    snprintf(desc, sizeof desc, "{\"htype\": \"dimage_d-1.0\", \"shape\": [%u, %u], \"type\": "
             "\"%s\", \"encoding\": \"%s\", \"size\": %zu}", columns, rows, type, encoding, size);
    message(s, 4);
    text(s, head);
    text(s, desc);
    part(s, blob, size);
    text(s, "{\"htype\": \"dconfig-1.0\", \"start_time\": 0, \"stop_time\": 99, "
            "\"real_time\": 99}");
    free(blob);
}

static void end(seed *s)
{
    message(s, 1);
    text(s, "{\"htype\": \"dseries_end-1.0\", \"series\": 1}");
}

/* The Arina fixture's first frames (its .npy: uint32 192 x 192). */
static void arina_seeds(const char *shared, const char *out)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/detectors/arina/test_00_data_000001.npy", shared);
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    uint8_t start[10];
    const size_t frame = 192 * 192 * 4;
    uint8_t *frames = malloc(2 * frame);
    int ok = fread(start, 1, 10, f) == 10 &&
             !fseek(f, 10 + (long)(start[8] | start[9] << 8), SEEK_SET) &&
             fread(frames, 1, 2 * frame, f) == 2 * frame;
    fclose(f);
    static const char config[] =
        "{\"x_pixels_in_detector\": 192, \"y_pixels_in_detector\": 192, \"nimages\": 1, "
        "\"ntrigger\": 16, \"bit_depth_image\": 32, \"count_time\": 9.95e-05, "
        "\"detector_serial_number\": \"A-01-0011\", \"description\": \"Dectris ARINA CZT\"}";
    const char *encodings[] = {"bs32-lz4<", "lz4<"};
    const char *names[] = {"arina_bs32", "arina_lz4"};
    for (int k = 0; ok && k < 2; k++) {
        seed s = {0};
        message(&s, 2);
        text(&s, "{\"htype\": \"dheader-1.0\", \"series\": 1, \"header_detail\": \"basic\"}");
        text(&s, config);
        for (unsigned n = 0; n < 2; n++)
            image(&s, n, 192, 192, "uint32", 4, encodings[k], 2048, frames + n * frame);
        end(&s);
        save(out, names[k], &s);
    }
    free(frames);
}

void seeds_dectris(const char *shared, const char *out)
{
    arina_seeds(shared, out);
    /* 8 x 6 detectors: every detail, appendix and encoding. */
    uint8_t pixels[3][8 * 6 * 4];
    for (unsigned f = 0; f < 3; f++)
        for (unsigned i = 0; i < sizeof pixels[f]; i++)
            pixels[f][i] = (uint8_t)((i * 7 + f * 13) % 5 == 0 ? i + f : 0);
    uint32_t mask[8 * 6] = {0};
    mask[3] = 1;
    mask[40] = 8;
    const float flat[8 * 6] = {1.0f};

    seed s = {0};
    message(&s, 8);
    text(&s, "{\"htype\": \"dheader-1.0\", \"series\": 1, \"header_detail\": \"all\"}");
    text(&s, "{\"x_pixels_in_detector\": 8, \"y_pixels_in_detector\": 6, \"nimages\": 3, "
             "\"ntrigger\": 1, \"bit_depth_image\": 16}");
    text(&s, "{\"htype\": \"dflatfield-1.0\", \"shape\": [8, 6], \"type\": \"float32\"}");
    part(&s, flat, sizeof flat);
    text(&s, "{\"htype\": \"dpixelmask-1.0\", \"shape\": [8, 6], \"type\": \"uint32\"}");
    part(&s, mask, sizeof mask);
    text(&s, "{\"htype\": \"dcountrate_table-1.0\", \"shape\": [2, 2], \"type\": \"float32\"}");
    part(&s, flat, 16);
    image(&s, 0, 8, 6, "uint16", 2, "<", 0, pixels[0]);
    image(&s, 1, 8, 6, "uint16", 2, "lz4<", 0, pixels[1]);
    image(&s, 2, 8, 6, "uint16", 2, "bs16-lz4<", 16, pixels[2]); /* 3 blocks of 16 */
    end(&s);
    save(out, "small_all_u16", &s);

    message(&s, 1);
    text(&s, "{\"htype\": \"dheader-1.0\", \"series\": 1, \"header_detail\": \"none\"}");
    image(&s, 0, 7, 5, "uint32", 4, "bs32-lz4<", 16, pixels[0]); /* partial block, 3 left */
    image(&s, 1, 7, 5, "uint32", 4, "bs32-lz4<", 2048, pixels[1]);
    end(&s);
    save(out, "small_none_u32", &s);

    message(&s, 2);
    text(&s, "{\"htype\": \"dheader-1.0\", \"series\": 1, \"header_detail\": \"basic\"}");
    text(&s, "{\"x_pixels_in_detector\": 8, \"y_pixels_in_detector\": 6, \"nimages\": 2, "
             "\"bit_depth_image\": 8}");
    image(&s, 0, 8, 6, "uint8", 1, "bs8-lz4<", 8192, pixels[0]);
    image(&s, 1, 8, 6, "uint8", 1, "<", 0, pixels[1]);
    end(&s);
    save(out, "small_basic_u8", &s);
}
