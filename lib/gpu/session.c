/* Device sessions (common/device_session.h): a pack's resident on the
 * GPU. Formats without a device resident are refused by name. */
#include "common/device_session.h"

#include <stdlib.h>

#include "common/error.h"
#include "common/representation.h"
#include "gpu/pack_device.h"

struct qem_device_session {
    pack_device *pack;
};

qem_status qem_device_session_open(qem_container *source, qem_device device,
                                   qem_device_session **out, qem_error *error)
{
    *out = NULL;
    if (device != QEM_DEVICE_CUDA)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "no device session for %s",
                        qem_device_name(device));
    if (source->ops->kind != QEM_KIND_PACK)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s: products of .qem files do not run on the GPU yet (packs do); ask for "
                        "device cpu",
                        qem_device_name(device));
    qem_device_session *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const qem_status st = qem_pack_device_open(source->impl, &s->pack, error);
    if (st != QEM_OK) {
        free(s);
        return st;
    }
    *out = s;
    return QEM_OK;
}

void qem_device_session_close(qem_device_session *s)
{
    if (!s)
        return;
    qem_pack_device_close(s->pack);
    free(s);
}

qem_status qem_device_session_weighted_sums(qem_device_session *s, uint64_t first, uint64_t count,
                                            const int32_t *const *weights, unsigned planes,
                                            int64_t *out, qem_error *error)
{
    return qem_pack_device_weighted_sums(s->pack, first, count, weights, planes, out, error);
}

qem_status qem_device_session_pixel_sums(qem_device_session *s, uint64_t first, uint64_t count,
                                         uint64_t *sums, uint32_t *max, qem_error *error)
{
    return qem_pack_device_pixel_sums(s->pack, first, count, sums, max, error);
}
