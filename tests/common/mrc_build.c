/* See mrc_build.h. Byte offsets are those of the MRC2014 main header table
 * (word n at byte 4(n - 1)). */
#include "mrc_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v, int big)
{
    for (int k = 0; k < 4; k++)
        p[big ? 3 - k : k] = (uint8_t)(v >> (8 * k));
}

static void put_int(uint8_t *p, int32_t v, int big)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put32(p, u, big);
}

static void put_float(uint8_t *p, float f, int big)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put32(p, u, big);
}

size_t mrcb_item(int32_t mode)
{
    switch (mode) {
    case 0:
        return 1;
    case 1:
    case 6:
    case 12:
        return 2;
    case 2:
        return 4;
    default:
        return 0;
    }
}

void mrcb_value(int32_t mode, uint64_t index, void *out)
{
    const uint64_t v = index * 2654435761u + (index >> 5);
    if (mode == 0) {
        const int8_t x = (int8_t)((int)(v % 200) - 100);
        memcpy(out, &x, 1);
    } else if (mode == 1) {
        const int16_t x = (int16_t)((int)(v % 60000) - 1000);
        memcpy(out, &x, 2);
    } else if (mode == 6) {
        const uint16_t x = (uint16_t)(v % 65536);
        memcpy(out, &x, 2);
    } else if (mode == 12) {
        const uint16_t x = (uint16_t)(v % 65536); /* every float16 bit pattern, NaNs too */
        memcpy(out, &x, 2);
    } else {
        const float x = (float)((double)(v % 100000) / 7.0 - 300.0);
        memcpy(out, &x, 4);
    }
}

void mrcb_header(const mrcb_options *o, uint8_t h[1024])
{
    const int big = o->big_endian;
    memset(h, 0, 1024);
    put_int(h + 0, o->nx, big); /* words 1-3: NX, NY, NZ */
    put_int(h + 4, o->ny, big);
    put_int(h + 8, o->nz, big);
    put_int(h + 12, o->mode, big); /* word 4: MODE */
    put_int(h + 28, o->nx, big);   /* words 8-10: MX, MY, MZ */
    put_int(h + 32, o->ny, big);
    put_int(h + 36, o->nz, big);
    for (int k = 0; k < 3; k++) {
        put_float(h + 40 + 4 * k, o->cell[k], big); /* words 11-13: CELLA */
        put_float(h + 52 + 4 * k, 90.0f, big);      /* words 14-16: CELLB */
        const int32_t map = o->map[0] || o->map[1] || o->map[2] ? o->map[k] : k + 1;
        put_int(h + 64 + 4 * k, map, big); /* words 17-19: MAPC, MAPR, MAPS */
    }
    put_int(h + 88, 0, big);          /* word 23: ISPG, 0 for an image stack */
    put_int(h + 92, o->nsymbt, big);  /* word 24: NSYMBT */
    if (o->exttyp)
        memcpy(h + 104, o->exttyp, 4); /* word 27: EXTTYP */
    put_int(h + 108, 20140, big);      /* word 28: NVERSION */
    memcpy(h + 208, "MAP ", 4);        /* word 53: MAP */
    static const uint8_t little[4] = {0x44, 0x44, 0, 0}, bigs[4] = {0x11, 0x11, 0, 0};
    memcpy(h + 212, o->stamp ? o->stamp : big ? bigs : little, 4); /* word 54: MACHST */
    if (o->label) {
        put_int(h + 220, 1, big); /* word 56: NLABL */
        const size_t n = strlen(o->label);
        memcpy(h + 224, o->label, n < 80 ? n : 80); /* words 57-256: 10 labels of 80 */
    }
}

int mrcb_write(const char *path, const mrcb_options *o)
{
    const size_t item = mrcb_item(o->mode) ? mrcb_item(o->mode) : 1;
    const uint64_t values = (uint64_t)(o->nx > 0 ? o->nx : 0) * (uint64_t)(o->ny > 0 ? o->ny : 0) *
                            (uint64_t)(o->nz > 0 ? o->nz : 0);
    uint8_t h[1024];
    mrcb_header(o, h);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(h, 1, sizeof h, f) == sizeof h;
    for (int32_t k = 0; ok && k < o->nsymbt; k++)
        ok = fputc(0xEE, f) != EOF;
    for (uint64_t i = 0; ok && i < values; i++) {
        uint8_t v[4];
        if (o->data)
            memcpy(v, (const uint8_t *)o->data + i * item, item);
        else
            mrcb_value(o->mode, i, v);
        uint8_t w[4];
        for (size_t b = 0; b < item; b++) {
            /* host order to the file's */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            const int swap = o->big_endian;
#else
            const int swap = !o->big_endian;
#endif
            w[b] = v[swap ? item - 1 - b : b];
        }
        ok = fwrite(w, 1, item, f) == item;
    }
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "mrcb_write: cannot write '%s'\n", path);
    return ok ? 0 : -1;
}
