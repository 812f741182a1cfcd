/* fuzz_seq seeds (layout in fuzz_seq.c): plain sequences (8 and 16 bits,
 * versions 4 and 5, padded strides) and a Celeritas pair with its XML,
 * built with tvseq_build.c; every seed a few kilobytes past the header. */
#include "seeds_seq.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tvseq_build.h"

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    *size = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    *size = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static void put_len(FILE *f, size_t n)
{
    const uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
                            (uint8_t)(n >> 24)};
    fwrite(len, 1, 4, f);
}

/* One seed: rows, columns, mode, the XML, the second file, the first. */
static void seed(const char *out, const char *name, uint8_t rows, uint8_t cols, uint8_t mode,
                 const char *xml, const char *second, const char *first)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/seq", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/seq/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    const uint8_t head[3] = {rows, cols, mode};
    fwrite(head, 1, 3, f);
    const char *files[3] = {xml, second, first};
    for (int k = 0; k < 3; k++) {
        size_t n = 0;
        uint8_t *b = files[k] ? slurp(files[k], &n) : NULL;
        if (k < 2)
            put_len(f, n);
        if (b)
            fwrite(b, 1, n, f);
        free(b);
    }
    fclose(f);
}

void seeds_seq(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io;
    char first[1024], second[1024], xml[1024];
    snprintf(first, sizeof first, "%s/seed_first.seq", out);
    snprintf(second, sizeof second, "%s/seed_second.seq", out);
    snprintf(xml, sizeof xml, "%s/seed.xml", out);
    static const seqb_options plain[] = {
        {.width = 8, .height = 4, .bits = 16, .frames = 6},
        {.width = 5, .height = 3, .bits = 8, .frames = 4, .padding = 40},
        {.width = 4, .height = 4, .bits = 16, .frames = 2, .version = 4},
    };
    static const uint8_t scans[][2] = {{2, 3}, {2, 2}, {1, 2}};
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "plain_%zu", k);
        if (seqb_write(first, &plain[k]) == 0)
            seed(out, name, scans[k][0], scans[k][1], 0, NULL, NULL, first);
    }
    /* A Celeritas pair: 2 stored images of 3 frames of 2 rows each. */
    seqb_options top = {.width = 6, .height = 6, .bits = 16, .frames = 2, .half = 1,
                        .prebuffer = 3};
    seqb_options bottom = top;
    bottom.half = 2;
    if (seqb_write(first, &top) == 0 && seqb_write(second, &bottom) == 0 &&
        seqb_write_config_xml(xml, 3) == 0)
        seed(out, "celeritas", 2, 3, 1, xml, second, first);
    remove(first);
    remove(second);
    remove(xml);
}
