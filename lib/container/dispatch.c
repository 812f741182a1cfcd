/* What needs to know which format a file is, above both formats: the
 * products never do. A calibrated copy is written in the source's own
 * format (qem_identify tells which). */
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "pack/calibrated_copy.h"
#include "qem/calibrated_copy.h"

static qem_status qem_write_calibrated_copy_body(const char *src, const char *dest,
                                                 const qem_detector_calibration *calibration,
                                                 qem_error *error)
{
    qem_error_clear(error);
    if (!src || !dest || !calibration)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_write_calibrated_copy: NULL");
    /* The caller's struct may be older (smaller): missing fields stay 0. */
    qem_detector_calibration local;
    memset(&local, 0, sizeof local);
    local.struct_size = sizeof local;
    QEM_TRY(qem_options_overlay(&local, sizeof local, calibration, "qem_detector_calibration",
                                error));
    const qem_detector_calibration *c = &local;
    qem_file_kind kind;
    QEM_TRY(qem_identify(src, &kind, error));
    if (kind == QEM_KIND_PACK) {
        const pack_calibration_in in = {c->center_row,   c->center_column,
                                        c->bright_field_radius, c->method,
                                        c->has_dpc,      c->dpc_rotation_degrees,
                                        c->dpc_component_order_exchanged};
        return qem_pack_write_calibrated_copy(src, dest, &in, NULL, error);
    }
    if (kind == QEM_KIND_QEM)
        return qem_file_write_calibrated_copy(src, dest, c, error);
    return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                    "'%s' is neither a .qem file nor a pack; nothing to calibrate", src);
}

qem_status qem_write_calibrated_copy(const char *src, const char *dest,
                                     const qem_detector_calibration *c, qem_error *error)
{
    const qem_status st = qem_write_calibrated_copy_body(src, dest, c, error);
    qem_error_name_destination(error, dest);
    return st;
}
