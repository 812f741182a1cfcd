/* See seeds_mrc.h. */
#include "seeds_mrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mrc_build.h"

static void put_seed(const char *out, const char *name, unsigned rows, unsigned columns,
                     const char *path)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return;
    char seed[1024];
    snprintf(seed, sizeof seed, "%s/mrc", out);
    mkdir(seed, 0755);
    snprintf(seed, sizeof seed, "%s/mrc/%s", out, name);
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

void seeds_mrc(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io; /* HyperSpy 1.7.3 ships no .mrc test file */
    static const int32_t modes[] = {0, 1, 2, 6, 12};
    char path[1024], name[64];
    snprintf(path, sizeof path, "%s/mrc_seed.tmp", out);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        for (int big = 0; big < 2; big++) {
            const mrcb_options m = {.nx = 5, .ny = 4, .nz = 6, .mode = modes[i],
                                    .big_endian = big, .cell = {50, 40, 60},
                                    .label = "fuzz seed"};
            snprintf(name, sizeof name, "mode%d_%s", (int)modes[i], big ? "be" : "le");
            if (mrcb_write(path, &m) == 0)
                put_seed(out, name, 2, 3, path);
        }
    /* One section (no scan shape needed); an FEI1 extended header. */
    const mrcb_options one = {.nx = 8, .ny = 8, .nz = 1, .mode = 6};
    if (mrcb_write(path, &one) == 0)
        put_seed(out, "one_section", 0, 0, path);
    const mrcb_options fei = {.nx = 3, .ny = 2, .nz = 4, .mode = 2, .nsymbt = 512,
                              .exttyp = "FEI1"};
    if (mrcb_write(path, &fei) == 0)
        put_seed(out, "fei1", 2, 2, path);
    unlink(path);
}
