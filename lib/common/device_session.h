/* Products on a device other than the CPU (qem_products_options.device):
 * a session holds the source's resident copied to the device and runs
 * the representation's integer reductions there, with the contracts of
 * its weighted_sums and pixel_sums (representation.h). The products see
 * this interface only; lib/gpu implements it per format. */
#ifndef QEM_COMMON_DEVICE_SESSION_H
#define QEM_COMMON_DEVICE_SESSION_H

#include <stdint.h>

#include "qem.h"

typedef struct qem_device_session qem_device_session;

/* QEM_E_UNSUPPORTED saying why when `source` cannot run on `device`. */
qem_status qem_device_session_open(qem_container *source, qem_device device,
                                   qem_device_session **out, qem_error *error);
void qem_device_session_close(qem_device_session *session);
qem_status qem_device_session_weighted_sums(qem_device_session *session, uint64_t first,
                                            uint64_t count, const int32_t *const *weights,
                                            unsigned planes, int64_t *out, qem_error *error);
qem_status qem_device_session_pixel_sums(qem_device_session *session, uint64_t first,
                                         uint64_t count, uint64_t *sums, uint32_t *max,
                                         qem_error *error);

#endif
