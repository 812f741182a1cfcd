/* fuzz_tvips seeds (layout in fuzz_tvips.c): HyperSpy's three TVIPS
 * files (one split in three parts) and series built with tvseq_build.c. */
#include "seeds_tvips.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tvseq_build.h"

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
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

/* One seed: rows, columns, the parts after the first, the first. */
static void seed(const char *out, const char *name, uint8_t rows, uint8_t cols,
                 const char *first)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tvips", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tvips/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    uint8_t parts = 0;
    char part[1024];
    for (unsigned k = 1; k <= 3; k++) {
        tvipsb_part_path(first, k, part, sizeof part);
        if (access(part, R_OK) == 0)
            parts = (uint8_t)k;
    }
    const uint8_t head[3] = {rows, cols, parts};
    fwrite(head, 1, 3, f);
    for (unsigned k = 1; k <= parts; k++) {
        size_t n = 0;
        tvipsb_part_path(first, k, part, sizeof part);
        uint8_t *b = slurp(part, &n);
        const uint8_t len[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
                                (uint8_t)(n >> 24)};
        fwrite(len, 1, 4, f);
        if (b)
            fwrite(b, 1, n, f);
        free(b);
    }
    size_t n = 0;
    uint8_t *b = slurp(first, &n);
    if (b)
        fwrite(b, 1, n, f);
    free(b);
    fclose(f);
}

void seeds_tvips(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    static const struct {
        const char *name;
        uint8_t rows, cols;
    } real[] = {{"test_tvips_2233_000", 2, 2},
                {"test_tvips_2345_000", 2, 3},
                {"test_tvips_2345_split_000", 2, 3}};
    char path[1024];
    for (size_t k = 0; k < sizeof real / sizeof real[0]; k++) {
        snprintf(path, sizeof path, "%s/tvips_files/%s.tvips", hyperspy_io, real[k].name);
        if (access(path, R_OK) == 0)
            seed(out, real[k].name, real[k].rows, real[k].cols, path);
    }
    static const tvipsb_options built[] = {
        {.width = 8, .height = 4, .bits = 8, .frames = 6, .frames_per_part = 2},
        {.width = 4, .height = 4, .bits = 16, .frames = 4, .frame_header = 108},
        {.width = 3, .height = 5, .bits = 16, .frames = 2, .version = 1},
    };
    static const uint8_t scans[][2] = {{2, 3}, {2, 2}, {1, 2}};
    for (size_t k = 0; k < sizeof built / sizeof built[0]; k++) {
        char first[1024], part[1024], name[64];
        snprintf(first, sizeof first, "%s/built_000.tvips", out);
        if (tvipsb_write(first, &built[k]) == 0) {
            snprintf(name, sizeof name, "built_%zu", k);
            seed(out, name, scans[k][0], scans[k][1], first);
        }
        for (unsigned p = 0; p <= 3; p++) {
            tvipsb_part_path(first, p, part, sizeof part);
            remove(part);
        }
    }
}
