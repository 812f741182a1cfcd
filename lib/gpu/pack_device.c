/* A loaded pack's reductions on a GPU: its resident handed to the CUDA
 * module as it is stored (words and tile widths, never counts), with
 * where each (pixel, tile) starts, and the same exact reductions as
 * access.c asked of it (same pixels, same exclusions). */
#include "gpu/pack_device.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/device.h"
#include "pack/pack_internal.h"

struct pack_device {
    const qem_pack *pack;
    const qem_cuda_table *cuda;
    qem_cuda_pack *resident;
};

/* Where each tile of `sh` starts, walking every pixel's tiles in order. */
static void tile_table(const qem_pack *p, const pack_shard *sh, uint32_t *starts, uint8_t *widths)
{
    for (uint64_t px = 0; px < p->pixels; px++) {
        uint64_t at;
        if (p->profile == QEM_PACK_UINT16_LZ4) {
            at = sh->pixel_words[px];
            for (uint64_t t = 0; t < p->tiles; t++) {
                const unsigned w = sh->tile_widths[px * p->tiles + t];
                starts[px * p->tiles + t] = (uint32_t)at;
                widths[px * p->tiles + t] = (uint8_t)w;
                at += 4u * w; /* 128 samples of w bits */
            }
        } else {
            at = sh->headers[px * (p->checkpoints + p->width_words)];
            for (uint64_t t = 0; t < p->tiles; t++) {
                const unsigned w = pack_v3_width(p, sh->headers, px, t);
                starts[px * p->tiles + t] = (uint32_t)at;
                widths[px * p->tiles + t] = (uint8_t)w;
                at += w; /* 32 samples of w bits */
            }
        }
    }
}

qem_status qem_pack_device_open(const qem_pack *p, pack_device **out, qem_error *error)
{
    *out = NULL;
    QEM_TRY(qem_pack_ready(p, error));
    const qem_cuda_table *cuda;
    QEM_TRY(qem_device_cuda_table(&cuda, error));
    const qem_cuda_pack_shape shape = {
        p->shard_count, p->sps, p->scans, p->pixels, p->tiles,
        p->profile == QEM_PACK_UINT16_LZ4 ? PACK_V1_TILE : PACK_V3_TILE};
    pack_device *d = calloc(1, sizeof *d);
    const uint64_t entries = p->pixels * p->tiles;
    uint32_t *starts = malloc((size_t)entries * sizeof *starts);
    uint8_t *widths = malloc((size_t)entries);
    qem_status st = d && starts && widths ? QEM_OK
                                          : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK) {
        d->pack = p;
        d->cuda = cuda;
        st = cuda->pack_new(&shape, &d->resident, error);
    }
    /* One shard's table at a time: host memory stays one shard's. */
    for (uint64_t s = 0; st == QEM_OK && s < p->shard_count; s++) {
        const pack_shard *sh = &p->shards[s];
        tile_table(p, sh, starts, widths);
        const uint64_t bytes =
            p->profile == QEM_PACK_UINT16_LZ4 ? sh->decoded_bytes : sh->payload_bytes;
        const qem_cuda_shard_view view = {sh->words, bytes / 4, starts, widths};
        st = cuda->pack_shard(d->resident, s, &view, error);
    }
    free(starts);
    free(widths);
    if (st != QEM_OK) {
        qem_pack_device_close(d);
        return st;
    }
    *out = d;
    return QEM_OK;
}

void qem_pack_device_close(pack_device *d)
{
    if (!d)
        return;
    if (d->resident)
        d->cuda->pack_free(d->resident);
    free(d);
}

qem_status qem_pack_device_weighted_sums(pack_device *d, uint64_t first, uint64_t count,
                                         const int32_t *const *weights, unsigned planes,
                                         int64_t *out, qem_error *error)
{
    const qem_pack *p = d->pack;
    if (first > p->scans || count > p->scans - first || !planes || !weights || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_pack_device_weighted_sums: bad range or argument");
    /* The pixels that count, as on the CPU: a nonzero weight somewhere,
     * not excluded. */
    uint32_t *pixels = malloc((size_t)p->pixels * sizeof *pixels);
    int32_t *flat = malloc((size_t)(p->pixels * planes) * sizeof *flat);
    if (!pixels || !flat) {
        free(pixels);
        free(flat);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    uint64_t n = 0;
    for (uint64_t px = 0; px < p->pixels; px++) {
        int any = 0;
        for (unsigned k = 0; k < planes; k++)
            any |= weights[k][px] != 0;
        if (any && !p->is_excluded[px])
            pixels[n++] = (uint32_t)px;
    }
    for (unsigned k = 0; k < planes; k++)
        for (uint64_t j = 0; j < n; j++)
            flat[k * n + j] = weights[k][pixels[j]];
    const qem_status st =
        d->cuda->weighted_sums(d->resident, first, count, pixels, n, flat, planes, out, error);
    free(pixels);
    free(flat);
    return st;
}

qem_status qem_pack_device_pixel_sums(pack_device *d, uint64_t first, uint64_t count,
                                      uint64_t *sums, uint32_t *max, qem_error *error)
{
    const qem_pack *p = d->pack;
    if (first > p->scans || count > p->scans - first || !sums)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_pack_device_pixel_sums: bad range or argument");
    uint32_t *pixels = malloc((size_t)p->pixels * sizeof *pixels);
    uint64_t *got = malloc((size_t)p->pixels * sizeof *got);
    uint32_t *top = max ? malloc((size_t)p->pixels * sizeof *top) : NULL;
    if (!pixels || !got || (max && !top)) {
        free(pixels);
        free(got);
        free(top);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    uint64_t n = 0;
    for (uint64_t px = 0; px < p->pixels; px++)
        if (!p->is_excluded[px])
            pixels[n++] = (uint32_t)px;
    const qem_status st = d->cuda->pixel_sums(d->resident, first, count, pixels, n, got, top, error);
    if (st == QEM_OK) {
        /* As qem_pack_pixel_sums: excluded pixels read 0, the others add
         * their sums and raise their maxima. */
        for (uint64_t px = 0; px < p->pixels; px++)
            if (p->is_excluded[px]) {
                sums[px] = 0;
                if (max)
                    max[px] = 0;
            }
        for (uint64_t j = 0; j < n; j++) {
            sums[pixels[j]] += got[j];
            if (max && top[j] > max[pixels[j]])
                max[pixels[j]] = top[j];
        }
    }
    free(pixels);
    free(got);
    free(top);
    return st;
}
