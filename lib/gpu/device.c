/* Which compute device products run on (qem_device, include/qem.h): the
 * CPU always; CUDA through its module, when this qem was built with it
 * and the machine has a driver and a GPU. Never a silent fallback: a
 * device that cannot be used is an error saying why. */
#include "gpu/device.h"

#include <stdio.h>

#include "common/error.h"
#include "common/module.h"
#include "gpu/cuda_module.h"

qem_status qem_device_cuda_table(const qem_cuda_table **table, qem_error *error)
{
    const void *t = NULL;
    *table = NULL;
    QEM_TRY(qem_module_get(QEM_MODULE_CUDA, sizeof(qem_cuda_table), &t, error));
    *table = t;
    return QEM_OK;
}

const char *qem_device_name(qem_device device)
{
    return device == QEM_DEVICE_CPU ? "cpu" : device == QEM_DEVICE_CUDA ? "cuda" : "unknown";
}

qem_status qem_device_probe(qem_device device, char *name, size_t size, qem_error *error)
{
    qem_error_clear(error);
    if (name && size)
        name[0] = '\0';
    if (device == QEM_DEVICE_CPU) {
        if (name && size)
            snprintf(name, size, "the CPU");
        return QEM_OK;
    }
    if (device != QEM_DEVICE_CUDA)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown device %d", (int)device);
    const qem_cuda_table *cuda;
    QEM_TRY(qem_device_cuda_table(&cuda, error));
    return cuda->probe(name, size, error);
}
