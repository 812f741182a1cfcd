/* See blo_build.h. */
#include "blo_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(bits >> (8 * k));
}

static int bits_of(const blob_options *o)
{
    return o->bits ? o->bits : 8;
}

static uint32_t offset1_of(const blob_options *o)
{
    return o->offset1 ? o->offset1 : 4096;
}

static uint32_t offset2_of(const blob_options *o)
{
    if (o->offset2)
        return o->offset2;
    const uint32_t end = offset1_of(o) + (uint32_t)o->nx * o->ny;
    return (end + 15) / 16 * 16;
}

uint32_t blob_value(uint64_t frame, uint64_t pixel, int bits)
{
    const uint64_t v = frame * 2654435761u + pixel * 40503u + (pixel >> 3);
    return bits == 8 ? (uint32_t)(v % 251) : bits == 16 ? (uint32_t)(v % 65521) : (uint32_t)v;
}

uint64_t blob_record_at(const blob_options *o, uint64_t frame)
{
    const uint64_t record = 6 + (uint64_t)o->dp * o->dp * (uint64_t)(bits_of(o) / 8);
    return offset2_of(o) + frame * record;
}

uint64_t blob_size(const blob_options *o)
{
    return blob_record_at(o, (uint64_t)o->nx * o->ny);
}

int blob_write(const char *path, const blob_options *o)
{
    const int bits = bits_of(o);
    const size_t item = (size_t)bits / 8, pixels = (size_t)o->dp * o->dp;
    const uint64_t frames = (uint64_t)o->nx * o->ny;
    const uint32_t off1 = offset1_of(o), off2 = offset2_of(o);
    FILE *f = fopen(path, "wb");
    uint8_t *head = calloc(off2, 1);
    uint8_t *record = malloc(6 + pixels * item);
    int ok = f && head && record && off1 >= 240 && off2 >= off1;
    if (ok) {
        memcpy(head, "IMGBLO", 6);
        put16(head + 6, o->magic ? o->magic : 0x0102);
        put32(head + 8, off1);
        put32(head + 12, off2);
        put32(head + 16, 131135); /* UNKNOWN1 as in HyperSpy's test files */
        put16(head + 20, o->dp);
        put16(head + 24, o->nx);
        put16(head + 26, o->ny);
        put16(head + 28, 2500);
        put_f64(head + 30, o->sx);
        put_f64(head + 38, o->sy);
        put32(head + 46, 200000);
        put16(head + 50, 6226);
        put32(head + 52, 2000);
        put_f64(head + 56, 42339.5);
        if (o->note) {
            const size_t n = strlen(o->note);
            memcpy(head + 240, o->note, n < off1 - 240u ? n : off1 - 240u);
        }
        for (uint64_t k = 0; k < frames && off1 + k < off2; k++)
            head[off1 + k] = (uint8_t)(k * 7);
        ok = fwrite(head, 1, off2, f) == off2;
    }
    for (uint64_t k = 0; ok && k < frames; k++) {
        record[0] = 0xAA;
        record[1] = 0x55;
        put32(record + 2, (uint32_t)k);
        for (size_t p = 0; p < pixels; p++) {
            uint32_t v;
            if (!o->data)
                v = blob_value(k, p, bits);
            else if (bits == 8)
                v = ((const uint8_t *)o->data)[k * pixels + p];
            else if (bits == 16)
                v = ((const uint16_t *)o->data)[k * pixels + p];
            else
                v = ((const uint32_t *)o->data)[k * pixels + p];
            for (size_t b = 0; b < item; b++)
                record[6 + p * item + b] = (uint8_t)(v >> (8 * b));
        }
        ok = fwrite(record, 1, 6 + pixels * item, f) == 6 + pixels * item;
    }
    if (f && fclose(f) != 0)
        ok = 0;
    free(head);
    free(record);
    if (!ok)
        fprintf(stderr, "blob_write: cannot write '%s'\n", path);
    return ok ? 0 : -1;
}
