/* A loaded pack's exact reductions on a GPU (pack_device.c), for the
 * products' device sessions (session.c). */
#ifndef QEM_GPU_PACK_DEVICE_H
#define QEM_GPU_PACK_DEVICE_H

#include <stdint.h>

#include "qem.h"

typedef struct pack_device pack_device;

/* Copies the loaded pack's resident to the GPU (CUDA). */
qem_status qem_pack_device_open(const qem_pack *pack, pack_device **out, qem_error *error);
void qem_pack_device_close(pack_device *device);
/* As qem_pack_weighted_sums and qem_pack_pixel_sums, on the device. */
qem_status qem_pack_device_weighted_sums(pack_device *device, uint64_t first, uint64_t count,
                                         const int32_t *const *weights, unsigned planes,
                                         int64_t *out, qem_error *error);
qem_status qem_pack_device_pixel_sums(pack_device *device, uint64_t first, uint64_t count,
                                      uint64_t *sums, uint32_t *max, qem_error *error);

#endif
