/* Seeds of fuzz_csr: small raw_csr sets of each value type, index type and
 * byte order, with duplicates, empty frames and a descriptor using every
 * construct of the TOML subset, in the layout fuzz_csr reads (scan rows,
 * scan columns, then descriptor, indptr and indices behind their u32 LE
 * lengths, then the data file). */
#include "seeds_csr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csr_build.h"

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

static void u32le(FILE *f, size_t v)
{
    for (int k = 0; k < 4; k++)
        fputc((int)((v >> (8 * k)) & 0xff), f);
}

/* Writes the set with `o` into a scratch folder, then the four files as one
 * seed OUT/csr/<name>. */
static void seed(const char *out, const char *name, const csrb_set *s, const csrb_options *o,
                 uint8_t rows, uint8_t columns)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/csr-scratch", out);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/sparse.toml", dir);
    if (csrb_write(path, s, o) != 0)
        return;
    static const char *const files[4] = {"sparse.toml", "indptr.raw", "coords.raw",
                                         "values.raw"};
    snprintf(path, sizeof path, "%s/csr/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fputc(rows, f);
    fputc(columns, f);
    for (int k = 0; k < 4; k++) {
        char file[1100];
        snprintf(file, sizeof file, "%s/%s", dir, files[k]);
        size_t n = 0;
        uint8_t *b = slurp(file, &n);
        if (k < 3)
            u32le(f, b ? n : 0);
        if (b)
            fwrite(b, 1, n, f);
        free(b);
        remove(file);
    }
    fclose(f);
    rmdir(dir);
}

void seeds_csr(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io;
    char path[1024];
    snprintf(path, sizeof path, "%s/csr", out);
    mkdir(path, 0755);
    /* 2 x 3 frames of 4 x 5 pixels, frame 0 empty, about one pixel in 3 hit. */
    enum { FRAMES = 6, PIXELS = 20 };
    uint64_t dense[FRAMES * PIXELS];
    uint64_t state = 30;
    for (size_t k = 0; k < FRAMES * PIXELS; k++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        dense[k] = k < PIXELS || (state >> 60) % 3 ? 0 : (state >> 40) % 200 + 1;
    }
    static const struct {
        const char *name, *data, *indptr, *indices;
        char kind;
        size_t size;
    } types[] = {
        {"u8", "|u1", "<i4", "<i4", 'u', 1},       {"u16_be", ">u2", ">i8", ">u2", 'u', 2},
        {"u32", "uint32", "int32", "int16", 'u', 4}, {"f32", "<f4", "<u4", "|u1", 'f', 4},
        {"i16", "<i2", "<i4", "<i4", 'i', 2},      {"i64_be", ">i8", "<i4", "<i4", 'i', 8},
        {"u64", "<u8", "<u8", "<u8", 'u', 8},      {"f64", "float64", "int64", "int64", 'f', 8},
    };
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint8_t values[FRAMES * PIXELS * 8];
        for (size_t k = 0; k < FRAMES * PIXELS; k++) {
            const size_t z = types[t].size;
            if (types[t].kind == 'f' && z == 4) {
                const float v = (float)dense[k] * 0.5f;
                memcpy(values + k * z, &v, z);
            } else if (types[t].kind == 'f') {
                const double v = (double)dense[k] * 0.5;
                memcpy(values + k * z, &v, z);
            } else {
                memcpy(values + k * z, &dense[k], z); /* little-endian host */
            }
        }
        csrb_set s;
        if (csrb_from_dense(&s, values, types[t].kind, types[t].size, FRAMES, PIXELS, t) != 0)
            continue;
        const csrb_options o = {.data_dtype = types[t].data, .indptr_dtype = types[t].indptr,
                                .indices_dtype = types[t].indices, .nav_shape = "[2, 3]",
                                .sig_shape = "[4, 5]"};
        seed(out, types[t].name, &s, &o, 0, 0);
        csrb_free(&s);
    }
    /* Electron events: value 1 each, pixels repeated (duplicates add), a
     * one-axis nav_shape with the scan shape given, and a descriptor with
     * comments, literal strings, a multi-line array and an extra table. */
    const uint64_t indptr[5] = {0, 3, 3, 7, 9};
    const uint64_t indices[9] = {4, 4, 11, 0, 19, 0, 0, 7, 7};
    const uint8_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 255};
    csrb_set s;
    if (csrb_from_entries(&s, 'u', 1, 4, PIXELS, indptr, indices, ones) == 0) {
        const csrb_options o = {.nav_shape = "[\n  4, # frames\n]", .sig_shape = "[4, 5]",
                                .data_dtype = "uint8",
                                .extra = "# events\n[meta]\nnote = 'caf\\u00e9'\nn = -1_0\n"};
        seed(out, "events", &s, &o, 2, 2);
        const csrb_options two = {.nav_shape = "[2, 2]", .sig_shape = "[4, 5]",
                                  .data_dtype = "|u1", .filetype = "RAW_CSR"};
        seed(out, "events_2d", &s, &two, 0, 0);
        csrb_free(&s);
    }
}
