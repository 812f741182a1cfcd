/* A calibrated copy of a .qem file (see calibrated_copy.c). */
#ifndef QEM_QEM_CALIBRATED_COPY_H
#define QEM_QEM_CALIBRATED_COPY_H

#include "qem.h"

/* Re-saves `src` as `dest` with scientific_metadata.extensions[
 * QEM_DETECTOR_CALIBRATION_KEY] set to `c` (schema
 * qem.detector-calibration/v1); every measurement, the codec and the rest
 * of the metadata are kept. */
qem_status qem_file_write_calibrated_copy(const char *src, const char *dest,
                                          const qem_detector_calibration *c, qem_error *error);

#endif
