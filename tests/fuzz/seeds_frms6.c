/* Seeds of fuzz_frms6: built acquisitions (the .hdr, the dark frame file
 * and one data file) with and without stated frame counts, scan and
 * binning. */
#include "seeds_frms6.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "k2frms_build.h"

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
    const uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    fwrite(b, 1, 4, f);
}

void seeds_frms6(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/frms6", out);
    mkdir(dir, 0755);
    for (int variant = 0; variant < 3; variant++) {
        f6b_options o;
        memset(&o, 0, sizeof o);
        o.width = variant == 2 ? 32 : 8;
        o.height = variant == 2 ? 12 : 4;
        o.dark_frames = 2;
        o.frames[0] = 4;
        o.data_files = 1;
        o.write_hdr = 1;
        o.scan_rows = variant == 1 ? 0 : 2;
        o.scan_columns = 2;
        o.bin = variant == 2 ? 2 : variant == 0;
        o.state_signal = variant != 1;
        o.omit_count = variant == 1;
        if (f6b_write(dir, "tmp", &o) != 0)
            continue;
        size_t nh = 0, nd = 0, nf = 0;
        snprintf(path, sizeof path, "%s/tmp.hdr", dir);
        uint8_t *hdr = slurp(path, &nh);
        remove(path);
        snprintf(path, sizeof path, "%s/tmp_000.frms6", dir);
        uint8_t *dark = slurp(path, &nd);
        remove(path);
        snprintf(path, sizeof path, "%s/tmp_001.frms6", dir);
        uint8_t *file = slurp(path, &nf);
        remove(path);
        snprintf(path, sizeof path, "%s/built_%d", dir, variant);
        FILE *f = hdr && dark && file ? fopen(path, "wb") : NULL;
        if (f) {
            const uint8_t scan[2] = {2, 2};
            fwrite(scan, 1, 2, f);
            u32le(f, nh);
            fwrite(hdr, 1, nh, f);
            u32le(f, nd);
            fwrite(dark, 1, nd, f);
            fwrite(file, 1, nf, f);
            fclose(f);
        }
        free(hdr);
        free(dark);
        free(file);
    }
}
