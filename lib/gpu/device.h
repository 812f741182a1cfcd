/* The CUDA module's table for the layers that use a device (device.c). */
#ifndef QEM_GPU_DEVICE_H
#define QEM_GPU_DEVICE_H

#include "gpu/cuda_module.h"
#include "qem.h"

/* QEM_E_UNSUPPORTED saying why when there is none (a build without CUDA,
 * a module that will not load). */
qem_status qem_device_cuda_table(const qem_cuda_table **table, qem_error *error);

#endif
