/* The CUDA module (libqem-cuda.so; linked into libqem.a when built): a
 * device copy of a pack's resident as it is stored, bit-packed tiles and
 * their widths, and the exact integer reductions products need, run on
 * the GPU. It sees only this header's plain view of a shard, never the
 * pack's internals, so it is the one part of qem that nvcc compiles.
 * Built only when CMake finds nvcc (QEM_CUDA, CMakeLists.txt). */
#ifndef QEM_GPU_CUDA_MODULE_H
#define QEM_GPU_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "common/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One shard as the device needs it: its words, and for every (pixel,
 * tile) in pixel-major order the word where the tile starts and its width
 * in bits (0..16). Tiles hold `tile_scans` consecutive scans (128 for
 * the uint16 profile, 32 for uint8), LSB-first in little-endian words. */
typedef struct qem_cuda_shard_view {
    const uint32_t *words;
    uint64_t word_count;
    const uint32_t *tile_words;
    const uint8_t *tile_widths;
} qem_cuda_shard_view;

typedef struct qem_cuda_pack_shape {
    uint64_t shards, scans_per_shard, scans, pixels;
    uint64_t tiles;      /* per pixel per shard */
    uint32_t tile_scans; /* 128 or 32 */
} qem_cuda_pack_shape;

typedef struct qem_cuda_pack qem_cuda_pack; /* the device resident */

/* At most this many weight planes per call (products use up to 5). */
#define QEM_CUDA_MAX_PLANES 8u

typedef struct qem_cuda_table {
    qem_module_header header;
    /* QEM_OK with the first device's name in `name`, or QEM_E_UNSUPPORTED
     * saying why none can be used (no driver, no device, a CUDA error). */
    qem_status (*probe)(char *name, size_t size, qem_error *error);
    /* An empty device resident for `shape`; then each shard once. */
    qem_status (*pack_new)(const qem_cuda_pack_shape *shape, qem_cuda_pack **out,
                           qem_error *error);
    qem_status (*pack_shard)(qem_cuda_pack *pack, uint64_t shard, const qem_cuda_shard_view *view,
                             qem_error *error);
    /* out[k * count + i] = sum over the `n` pixels of weights[k * n + j] *
     * the value of scan first + i at pixels[j] (exact, int64). */
    qem_status (*weighted_sums)(qem_cuda_pack *pack, uint64_t first, uint64_t count,
                                const uint32_t *pixels, uint64_t n, const int32_t *weights,
                                unsigned planes, int64_t *out, qem_error *error);
    /* sums[j] = the sum, max[j] (if given) the largest value, of pixels[j]
     * over scans [first, first + count). */
    qem_status (*pixel_sums)(qem_cuda_pack *pack, uint64_t first, uint64_t count,
                             const uint32_t *pixels, uint64_t n, uint64_t *sums, uint32_t *max,
                             qem_error *error);
    /* Bytes the device resident holds on the GPU. */
    uint64_t (*pack_bytes)(const qem_cuda_pack *pack);
    void (*pack_free)(qem_cuda_pack *pack);
} qem_cuda_table;

const void *qem_module_cuda_v1(void);

#ifdef __cplusplus
}
#endif

#endif
