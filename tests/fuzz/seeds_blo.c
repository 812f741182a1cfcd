/* See seeds_blo.h. */
#include "seeds_blo.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blo_build.h"

/* OUT/blo/NAME: rows, columns, then the bytes of the file at `path`. */
static void put_seed(const char *out, const char *name, unsigned rows, unsigned columns,
                     const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return;
    char seed[1024];
    snprintf(seed, sizeof seed, "%s/blo", out);
    mkdir(seed, 0755);
    snprintf(seed, sizeof seed, "%s/blo/%s", out, name);
    FILE *f = fopen(seed, "wb");
    if (f) {
        fputc((int)rows, f);
        fputc((int)columns, f);
        char buffer[4096];
        size_t n;
        while ((n = fread(buffer, 1, sizeof buffer, in)) > 0)
            fwrite(buffer, 1, n, f);
        fclose(f);
    }
    fclose(in);
}

void seeds_blo(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    char path[1024];
    /* HyperSpy's: 3 x 2 patterns of 144 x 144 (128 KB) and 2 x 3 of 5 x 5;
     * without and with the scan shape they state. */
    snprintf(path, sizeof path, "%s/blockfile_data/test1.blo", hyperspy_io);
    put_seed(out, "hyperspy_test1", 0, 0, path);
    snprintf(path, sizeof path, "%s/blockfile_data/test2.blo", hyperspy_io);
    put_seed(out, "hyperspy_test2", 0, 0, path);
    put_seed(out, "hyperspy_test2_scan", 2, 3, path);
    /* Built: 8, 16 and 32 bits (magic 0x0103 with a "Blo Bit Depth" note). */
    static const struct {
        blob_options o;
        const char *name;
    } built[] = {
        {{.nx = 4, .ny = 3, .dp = 6, .sx = 1.5, .sy = 2.5, .note = "a note"}, "u8"},
        {{.nx = 2, .ny = 2, .dp = 5, .bits = 16, .magic = 0x0103,
          .note = "Blo Bit Depth: 16 bits\r\n"},
         "u16"},
        {{.nx = 3, .ny = 1, .dp = 4, .bits = 32, .magic = 0x0103,
          .note = "Blo Bit Depth: 32 bits"},
         "u32"},
    };
    snprintf(path, sizeof path, "%s/blo_seed.tmp", out);
    for (size_t i = 0; i < sizeof built / sizeof built[0]; i++)
        if (blob_write(path, &built[i].o) == 0)
            put_seed(out, built[i].name, 0, 0, path);
    unlink(path);
}
