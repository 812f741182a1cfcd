/* A pack's resident on an NVIDIA GPU, as stored (bit-packed tiles, their
 * widths and where each starts), and the exact integer reductions of
 * products on it: weighted sums per scan (virtual images, CoM moments)
 * and per-pixel sums and maxima (the mean pattern). Integers throughout,
 * so every result equals the CPU's bit for bit whatever the order. */
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_module.h"

/* Every name here is static: libqem defines only qem_ names (nvcc gives
 * an anonymous namespace's functions global symbols). */

/* Scans a block covers: one uint16 tile, four uint8 tiles. */
#define BLOCK_SCANS 128u

static qem_status fail(qem_error *error, qem_status status, const char *format, ...)
{
    if (error) {
        error->status = status;
        va_list ap;
        va_start(ap, format);
        vsnprintf(error->message, sizeof error->message, format, ap);
        va_end(ap);
    }
    return status;
}

static qem_status cuda_fail(qem_error *error, cudaError_t e, const char *what)
{
    return fail(error, e == cudaErrorMemoryAllocation ? QEM_E_NO_MEMORY : QEM_E_IO,
                "cuda: %s failed: %s", what, cudaGetErrorString(e));
}

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail(error, e_, what);                                                     \
    } while (0)

struct qem_cuda_pack {
    qem_cuda_pack_shape shape;
    /* Per shard: its words and its (pixel, tile) table, in one allocation
     * each so a kernel finds shard s at base[s]. */
    uint32_t **words;
    uint32_t **tile_words;
    uint8_t **tile_widths;
    uint32_t *const *d_words;       /* device copies of the pointer arrays */
    uint32_t *const *d_tile_words;
    uint8_t *const *d_tile_widths;
    uint64_t bytes;
};

/* Value `lane` of a tile of `width` bits (1..16) starting at word `at`:
 * LSB first; reads the second word only when the value spans two. */
static __device__ __forceinline__ uint32_t tile_value(const uint32_t *__restrict__ words, uint32_t at,
                                               unsigned lane, unsigned width)
{
    const unsigned bit = lane * width;
    const uint32_t *w = words + at + (bit >> 5);
    const unsigned shift = bit & 31u;
    uint32_t v = w[0] >> shift;
    if (shift + width > 32u)
        v |= w[1] << (32u - shift);
    return v & ((1u << width) - 1u);
}

/* One thread a scan of shard shard0 + blockIdx.y; the block's scans share tiles,
 * so each (pixel, tile) entry is read by every thread alike. */
static __global__ void weighted_sums_kernel(const qem_cuda_pack_shape shape,
                                     uint32_t *const *__restrict__ words,
                                     uint32_t *const *__restrict__ tile_words,
                                     uint8_t *const *__restrict__ tile_widths, uint64_t shard0,
                                     uint64_t first, uint64_t count,
                                     const uint32_t *__restrict__ pixels, uint64_t n,
                                     const int32_t *__restrict__ weights, unsigned planes,
                                     long long *__restrict__ out)
{
    const uint64_t shard = shard0 + blockIdx.y;
    const uint64_t local = (uint64_t)blockIdx.x * BLOCK_SCANS + threadIdx.x;
    const uint64_t scan = shard * shape.scans_per_shard + local;
    if (local >= shape.scans_per_shard || scan < first || scan >= first + count)
        return;
    const uint64_t tile = local / shape.tile_scans;
    const unsigned lane = (unsigned)(local % shape.tile_scans);
    const uint32_t *w = words[shard];
    const uint32_t *tw = tile_words[shard];
    const uint8_t *tb = tile_widths[shard];
    long long acc[QEM_CUDA_MAX_PLANES] = {0};
    for (uint64_t j = 0; j < n; j++) {
        const uint64_t entry = (uint64_t)pixels[j] * shape.tiles + tile;
        const unsigned width = tb[entry];
        if (!width)
            continue;
        const long long v = tile_value(w, tw[entry], lane, width);
        for (unsigned k = 0; k < planes; k++)
            acc[k] += (long long)weights[k * n + j] * v;
    }
    for (unsigned k = 0; k < planes; k++)
        out[k * count + (scan - first)] = acc[k];
}

/* One block a (pixel, shard): its threads walk the shard's scans, then
 * the block adds its sum and raises its maximum atomically. */
static __global__ void pixel_sums_kernel(const qem_cuda_pack_shape shape,
                                  uint32_t *const *__restrict__ words,
                                  uint32_t *const *__restrict__ tile_words,
                                  uint8_t *const *__restrict__ tile_widths, uint64_t first,
                                  uint64_t count, const uint32_t *__restrict__ pixels,
                                  unsigned long long *__restrict__ sums,
                                  unsigned *__restrict__ max)
{
    const uint64_t j = blockIdx.x, shard = blockIdx.y;
    const uint64_t s0 = shard * shape.scans_per_shard;
    const uint64_t lo = first > s0 ? first - s0 : 0;
    const uint64_t end = first + count;
    const uint64_t hi = end - s0 < shape.scans_per_shard ? end - s0 : shape.scans_per_shard;
    unsigned long long acc = 0;
    unsigned top = 0;
    if (end > s0 && lo < hi) {
        const uint32_t *w = words[shard];
        const uint64_t base = (uint64_t)pixels[j] * shape.tiles;
        for (uint64_t local = lo + threadIdx.x; local < hi; local += blockDim.x) {
            const uint64_t entry = base + local / shape.tile_scans;
            const unsigned width = tile_widths[shard][entry];
            if (!width)
                continue;
            const unsigned v = tile_value(w, tile_words[shard][entry],
                                          (unsigned)(local % shape.tile_scans), width);
            acc += v;
            top = v > top ? v : top;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, o);
        const unsigned t = __shfl_down_sync(0xffffffffu, top, o);
        top = t > top ? t : top;
    }
    if ((threadIdx.x & 31u) == 0) {
        if (acc)
            atomicAdd(&sums[j], acc);
        if (max && top)
            atomicMax(&max[j], top);
    }
}

static qem_status probe(char *name, size_t size, qem_error *error)
{
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    /* Without a driver (or GPU) the runtime says so in its own words. */
    if (e != cudaSuccess)
        return fail(error, QEM_E_UNSUPPORTED,
                    "cuda: no usable GPU here (an NVIDIA driver and GPU are needed): %s",
                    cudaGetErrorString(e));
    if (devices < 1)
        return fail(error, QEM_E_UNSUPPORTED, "cuda: no usable GPU here: the driver sees none");
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading the device's properties");
    if (name && size)
        snprintf(name, size, "%s (compute capability %d.%d)", prop.name, prop.major, prop.minor);
    return QEM_OK;
}

static void pack_free(qem_cuda_pack *p)
{
    if (!p)
        return;
    for (uint64_t s = 0; s < p->shape.shards; s++) {
        if (p->words)
            cudaFree(p->words[s]);
        if (p->tile_words)
            cudaFree(p->tile_words[s]);
        if (p->tile_widths)
            cudaFree(p->tile_widths[s]);
    }
    cudaFree((void *)p->d_words);
    cudaFree((void *)p->d_tile_words);
    cudaFree((void *)p->d_tile_widths);
    free(p->words);
    free(p->tile_words);
    free(p->tile_widths);
    free(p);
}

static qem_status pack_new(const qem_cuda_pack_shape *shape, qem_cuda_pack **out, qem_error *error)
{
    *out = NULL;
    if (!shape->shards || !shape->scans_per_shard || !shape->tiles ||
        (shape->tile_scans != 128 && shape->tile_scans != 32) || shape->shards > 65535u)
        return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: a pack shape the device cannot take");
    qem_status st = probe(NULL, 0, error);
    if (st != QEM_OK)
        return st;
    qem_cuda_pack *p = (qem_cuda_pack *)calloc(1, sizeof *p);
    if (!p)
        return fail(error, QEM_E_NO_MEMORY, "out of memory");
    p->shape = *shape;
    p->words = (uint32_t **)calloc(shape->shards, sizeof *p->words);
    p->tile_words = (uint32_t **)calloc(shape->shards, sizeof *p->tile_words);
    p->tile_widths = (uint8_t **)calloc(shape->shards, sizeof *p->tile_widths);
    if (!p->words || !p->tile_words || !p->tile_widths) {
        pack_free(p);
        return fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    const size_t table = shape->shards * sizeof(void *);
    cudaError_t e = cudaMalloc((void **)&p->d_words, table);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&p->d_tile_words, table);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&p->d_tile_widths, table);
    if (e != cudaSuccess) {
        pack_free(p);
        return cuda_fail(error, e, "allocating the shard tables");
    }
    *out = p;
    return QEM_OK;
}

static qem_status pack_shard(qem_cuda_pack *p, uint64_t s, const qem_cuda_shard_view *v, qem_error *error)
{
    if (s >= p->shape.shards || p->words[s])
        return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: shard %llu given twice or out of range",
                    (unsigned long long)s);
    const uint64_t entries = p->shape.pixels * p->shape.tiles;
    /* One spare word: a value's second word is read only when it spans
     * two, but the spare keeps every read inside the allocation. */
    const size_t word_bytes = (size_t)(v->word_count + 1) * sizeof(uint32_t);
    CUDA_TRY(cudaMalloc((void **)&p->words[s], word_bytes), "allocating a shard's words");
    CUDA_TRY(cudaMemset(p->words[s] + v->word_count, 0, sizeof(uint32_t)), "clearing a word");
    CUDA_TRY(cudaMemcpy(p->words[s], v->words, (size_t)v->word_count * sizeof(uint32_t),
                        cudaMemcpyHostToDevice),
             "copying a shard's words");
    CUDA_TRY(cudaMalloc((void **)&p->tile_words[s], (size_t)entries * sizeof(uint32_t)),
             "allocating a shard's tile table");
    CUDA_TRY(cudaMemcpy(p->tile_words[s], v->tile_words, (size_t)entries * sizeof(uint32_t),
                        cudaMemcpyHostToDevice),
             "copying a shard's tile table");
    CUDA_TRY(cudaMalloc((void **)&p->tile_widths[s], (size_t)entries), "allocating widths");
    CUDA_TRY(cudaMemcpy(p->tile_widths[s], v->tile_widths, (size_t)entries,
                        cudaMemcpyHostToDevice),
             "copying a shard's widths");
    CUDA_TRY(cudaMemcpy((void *)(p->d_words + s), &p->words[s], sizeof(void *),
                        cudaMemcpyHostToDevice),
             "recording a shard");
    CUDA_TRY(cudaMemcpy((void *)(p->d_tile_words + s), &p->tile_words[s], sizeof(void *),
                        cudaMemcpyHostToDevice),
             "recording a shard");
    CUDA_TRY(cudaMemcpy((void *)(p->d_tile_widths + s), &p->tile_widths[s], sizeof(void *),
                        cudaMemcpyHostToDevice),
             "recording a shard");
    p->bytes += word_bytes + entries * (sizeof(uint32_t) + 1);
    return QEM_OK;
}

static qem_status check_range(const qem_cuda_pack *p, uint64_t first, uint64_t count, qem_error *error)
{
    for (uint64_t s = 0; s < p->shape.shards; s++)
        if (!p->words[s])
            return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: shard %llu was never uploaded",
                        (unsigned long long)s);
    if (first > p->shape.scans || count > p->shape.scans - first)
        return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: scans out of range");
    return QEM_OK;
}

/* Device buffers of one call, freed on every return. */
typedef struct call_buffers {
    void *p[3];
} call_buffers;

static void call_buffers_free(call_buffers *b)
{
    for (int i = 0; i < 3; i++)
        cudaFree(b->p[i]);
}

static qem_status weighted_sums_on(qem_cuda_pack *p, call_buffers *b, uint64_t first,
                                   uint64_t count, const uint32_t *pixels, uint64_t n,
                                   const int32_t *weights, unsigned planes, int64_t *out,
                                   qem_error *error)
{
    if (!planes || planes > QEM_CUDA_MAX_PLANES)
        return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: 1 to %u weight planes",
                    QEM_CUDA_MAX_PLANES);
    qem_status st = check_range(p, first, count, error);
    if (st != QEM_OK || !count)
        return st;
    if (!n) {
        memset(out, 0, (size_t)(count * planes) * sizeof *out);
        return QEM_OK;
    }
    CUDA_TRY(cudaMalloc(&b->p[0], (size_t)n * sizeof *pixels), "allocating the pixel list");
    CUDA_TRY(cudaMalloc(&b->p[1], (size_t)(n * planes) * sizeof *weights), "allocating weights");
    CUDA_TRY(cudaMalloc(&b->p[2], (size_t)(count * planes) * sizeof *out), "allocating sums");
    CUDA_TRY(cudaMemcpy(b->p[0], pixels, (size_t)n * sizeof *pixels, cudaMemcpyHostToDevice),
             "copying the pixel list");
    CUDA_TRY(cudaMemcpy(b->p[1], weights, (size_t)(n * planes) * sizeof *weights,
                        cudaMemcpyHostToDevice),
             "copying weights");
    const uint64_t sps = p->shape.scans_per_shard;
    const uint64_t s_first = first / sps, s_end = (first + count + sps - 1) / sps;
    const dim3 grid((unsigned)((sps + BLOCK_SCANS - 1) / BLOCK_SCANS), (unsigned)(s_end - s_first));
    weighted_sums_kernel<<<grid, BLOCK_SCANS>>>(
        p->shape, p->d_words, p->d_tile_words, p->d_tile_widths, s_first, first, count,
        (const uint32_t *)b->p[0], n, (const int32_t *)b->p[1], planes, (long long *)b->p[2]);
    CUDA_TRY(cudaGetLastError(), "starting the weighted-sum kernel");
    CUDA_TRY(cudaMemcpy(out, b->p[2], (size_t)(count * planes) * sizeof *out,
                        cudaMemcpyDeviceToHost),
             "the weighted-sum kernel");
    return QEM_OK;
}

static qem_status weighted_sums(qem_cuda_pack *p, uint64_t first, uint64_t count,
                                const uint32_t *pixels, uint64_t n, const int32_t *weights,
                                unsigned planes, int64_t *out, qem_error *error)
{
    call_buffers b = {{NULL, NULL, NULL}};
    const qem_status st =
        weighted_sums_on(p, &b, first, count, pixels, n, weights, planes, out, error);
    call_buffers_free(&b);
    return st;
}

static qem_status pixel_sums_on(qem_cuda_pack *p, call_buffers *b, uint64_t first,
                                uint64_t count, const uint32_t *pixels, uint64_t n,
                                uint64_t *sums, uint32_t *max, qem_error *error)
{
    qem_status st = check_range(p, first, count, error);
    if (st != QEM_OK)
        return st;
    memset(sums, 0, (size_t)n * sizeof *sums);
    if (max)
        memset(max, 0, (size_t)n * sizeof *max);
    if (!n || !count)
        return QEM_OK;
    if (n > 0x7fffffffu)
        return fail(error, QEM_E_INVALID_ARGUMENT, "cuda: too many pixels in one call");
    CUDA_TRY(cudaMalloc(&b->p[0], (size_t)n * sizeof *pixels), "allocating the pixel list");
    CUDA_TRY(cudaMalloc(&b->p[1], (size_t)n * sizeof *sums), "allocating sums");
    CUDA_TRY(cudaMemset(b->p[1], 0, (size_t)n * sizeof *sums), "clearing sums");
    if (max) {
        CUDA_TRY(cudaMalloc(&b->p[2], (size_t)n * sizeof *max), "allocating maxima");
        CUDA_TRY(cudaMemset(b->p[2], 0, (size_t)n * sizeof *max), "clearing maxima");
    }
    CUDA_TRY(cudaMemcpy(b->p[0], pixels, (size_t)n * sizeof *pixels, cudaMemcpyHostToDevice),
             "copying the pixel list");
    const dim3 grid((unsigned)n, (unsigned)p->shape.shards);
    pixel_sums_kernel<<<grid, 256>>>(p->shape, p->d_words, p->d_tile_words, p->d_tile_widths,
                                     first, count, (const uint32_t *)b->p[0],
                                     (unsigned long long *)b->p[1], (unsigned *)b->p[2]);
    CUDA_TRY(cudaGetLastError(), "starting the pixel-sum kernel");
    CUDA_TRY(cudaMemcpy(sums, b->p[1], (size_t)n * sizeof *sums, cudaMemcpyDeviceToHost),
             "the pixel-sum kernel");
    if (max)
        CUDA_TRY(cudaMemcpy(max, b->p[2], (size_t)n * sizeof *max, cudaMemcpyDeviceToHost),
                 "the pixel-sum kernel");
    return QEM_OK;
}

static qem_status pixel_sums(qem_cuda_pack *p, uint64_t first, uint64_t count,
                             const uint32_t *pixels, uint64_t n, uint64_t *sums, uint32_t *max,
                             qem_error *error)
{
    call_buffers b = {{NULL, NULL, NULL}};
    const qem_status st = pixel_sums_on(p, &b, first, count, pixels, n, sums, max, error);
    call_buffers_free(&b);
    return st;
}

static uint64_t pack_bytes(const qem_cuda_pack *p)
{
    return p ? p->bytes : 0;
}

static const qem_cuda_table table = {
    QEM_MODULE_HEADER(qem_cuda_table), probe, pack_new, pack_shard, weighted_sums,
    pixel_sums, pack_bytes, pack_free,
};

extern "C" __attribute__((visibility("default"))) const void *qem_module_cuda_v1(void)
{
    return &table;
}
