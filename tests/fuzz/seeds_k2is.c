/* Seeds of fuzz_k2is: one sector file of a built acquisition (every
 * sector file of the fuzz input is cut from it), whole frames only or
 * starting and ending mid-frame, with a .gtg stating the scan (built by
 * dm_build.c) or none. Each seed is under 1 MB. */
#include "seeds_k2is.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dm_build.h"
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

void seeds_k2is(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    (void)hyperspy_io;
    static const struct {
        const char *name;
        unsigned lead, trail;
        uint8_t prefix[10]; /* rows, columns, per-sector skips (bit 7: a .gtg) */
    } cases[] = {
        {"one_frame", 0, 0, {1, 1, 0x80, 0, 0, 0, 0, 0, 0, 0}},
        {"mid_frame", 3, 2, {1, 1, 0, 1, 2, 0, 3, 0, 0, 0}},
        {"gtg_scan", 0, 0, {0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0}},
    };
    /* The .gtg of the third: a DM4 tag file stating a 1 x 1 scan and a tag
     * of each kind. */
    static const dmb_tag tags[] = {
        {"SI Dimensions/Size X", 'l', 1, 0, NULL},
        {"SI Dimensions/Size Y", 'l', 1, 0, NULL},
        {"SI Image Tags/SI/Acquisition/Spatial Sampling/Width (pixels)", 'l', 1, 0, NULL},
        {"Microscope Info/Voltage", 'd', 0, 300000.0, NULL},
        {"Microscope Info/Name", 't', 0, 0, "K2 IS"},
    };
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/k2is", out);
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        k2b_options o;
        memset(&o, 0, sizeof o);
        o.first_id = 40;
        o.frames = 1;
        for (unsigned s = 0; s < K2B_SECTORS; s++) {
            o.lead_blocks[s] = cases[i].lead;
            o.trail_blocks[s] = cases[i].trail;
        }
        if (k2b_write(dir, "tmp_", &o) != 0)
            continue;
        size_t n = 0;
        snprintf(path, sizeof path, "%s/tmp_1.bin", dir);
        uint8_t *sector = slurp(path, &n);
        for (unsigned s = 0; s < K2B_SECTORS; s++) {
            snprintf(path, sizeof path, "%s/tmp_%u.bin", dir, s + 1);
            remove(path);
        }
        size_t gtg_size = 0;
        uint8_t *gtg = NULL;
        if (cases[i].prefix[2] & 0x80) {
            snprintf(path, sizeof path, "%s/tmp_.gtg", dir);
            if (dmb_write_tags(path, 4, tags, sizeof tags / sizeof tags[0]) == 0)
                gtg = slurp(path, &gtg_size);
            remove(path);
        }
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        FILE *f = sector ? fopen(path, "wb") : NULL;
        if (f) {
            const uint8_t length[4] = {(uint8_t)gtg_size, (uint8_t)(gtg_size >> 8),
                                       (uint8_t)(gtg_size >> 16), (uint8_t)(gtg_size >> 24)};
            fwrite(cases[i].prefix, 1, sizeof cases[i].prefix, f);
            if (cases[i].prefix[2] & 0x80) {
                fwrite(length, 1, 4, f);
                fwrite(gtg, 1, gtg_size, f);
            }
            fwrite(sector, 1, n, f);
            fclose(f);
        }
        free(gtg);
        free(sector);
    }
}
