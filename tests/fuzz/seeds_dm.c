/* fuzz_dm's seeds: scan rows, scan columns (u8 each), then a DM file:
 * HyperSpy's DM3/DM4 test files (each below 1 MB) and files built by
 * tests/common/dm_build.c (4D, big-endian, every sample type, and tag
 * files without an image such as a K2 IS .gtg). */
#include "seeds_dm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dm_build.h"

static void put_seed(const char *out, const char *name, uint8_t rows, uint8_t columns,
                     const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    uint8_t *b = malloc(1u << 20);
    const size_t n = b ? fread(b, 1, 1u << 20, f) : 0;
    fclose(f);
    char dest[1024];
    snprintf(dest, sizeof dest, "%s/dm", out);
    mkdir(dest, 0755);
    snprintf(dest, sizeof dest, "%s/dm/%s", out, name);
    FILE *g = b && n < (1u << 20) ? fopen(dest, "wb") : NULL;
    if (g) {
        const uint8_t prefix[2] = {rows, columns};
        fwrite(prefix, 1, 2, g);
        fwrite(b, 1, n, g);
        fclose(g);
    }
    free(b);
}

void seeds_dm(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    static const struct {
        const char *file;
        uint8_t rows, columns;
    } real[] = {
        {"dm3_3D_data/test-1.dm3", 2, 1},  {"dm4_3D_data/test-10.dm4", 1, 2},
        {"dm4_3D_data/test-12.dm4", 2, 1}, {"dm3_2D_data/test-11.dm3", 0, 0},
        {"dm4_2D_data/test-9.dm4", 0, 0},  {"dm3_3D_data/test-13.dm3", 2, 1},
        {"dm4_3D_data/EELS_SI.dm4", 0, 0}, {"dm3_2D_data/test_diffraction_pattern.dm3", 0, 0},
        {"dm3_1D_data/test-2.dm3", 0, 0},
    };
    char path[1024], name[256];
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", hyperspy_io, real[i].file);
        snprintf(name, sizeof name, "hyperspy_%zu", i);
        put_seed(out, name, real[i].rows, real[i].columns, path);
    }
    static const int64_t types[] = {1, 2, 6, 7, 9, 10, 11, 12};
    snprintf(path, sizeof path, "%s/built.dm", out);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        dmb_options o;
        memset(&o, 0, sizeof o);
        o.version = i % 2 ? 4 : 3;
        o.big_endian = i % 3 == 0;
        o.data_type = types[i];
        o.ndims = 4;
        o.dims[0] = 6, o.dims[1] = 5, o.dims[2] = 3, o.dims[3] = 2;
        o.order_swapped = 1;
        o.thumbnail = 1;
        o.units[0] = o.units[1] = "1/nm";
        o.scales[0] = o.scales[1] = 0.5;
        o.units[2] = o.units[3] = "nm";
        o.scales[2] = o.scales[3] = 2;
        o.voltage = 200000;
        if (dmb_write(path, &o) != 0)
            continue;
        snprintf(name, sizeof name, "built_4d_%zu", i);
        put_seed(out, name, 0, 0, path);
    }
    /* A tag file with no image, as a K2 IS .gtg. */
    static const dmb_tag gtg[] = {
        {"SI Dimensions/Size X", 'l', 4, 0, NULL},
        {"SI Dimensions/Size Y", 'l', 3, 0, NULL},
        {"SI Image Tags/SI/Acquisition/Spatial Sampling/Height (pixels)", 'l', 3, 0, NULL},
        {"Microscope Info/Voltage", 'd', 0, 300000.0, NULL},
        {"Microscope Info/Name", 't', 0, 0, "K2 IS"},
    };
    for (int version = 3; version <= 4; version++)
        if (dmb_write_tags(path, version, gtg, sizeof gtg / sizeof gtg[0]) == 0) {
            snprintf(name, sizeof name, "gtg_dm%d", version);
            put_seed(out, name, 0, 0, path);
        }
    remove(path);
}
