/* Named detectors as every qem command resolves them: the centre and
 * radius given, else the file's detector calibration, else the
 * mean-diffraction-half-maximum estimate; radii in mrad through the
 * convergence semi-angle. Shared by `qem virtual|com|dpc` and `qem view`
 * so that both select exactly the same pixels. */
#ifndef QEM_CLI_DETECTOR_H
#define QEM_CLI_DETECTOR_H

#include "qem.h"

typedef struct detector_request {
    qem_detector detector;
    int have_center;
    double center[2];
    int have_radius, have_inner, have_outer;
    double radius, inner, outer;
    int unit_mrad;
    double semiangle; /* 0 = the file's */
} detector_request;

typedef struct detector_resolved {
    qem_detector_geometry geometry; /* what the mask was built from */
    double radius_px;               /* bright-field radius in pixels (mrad conversion) */
    int radius_unused;              /* both bounds and the centre given: no radius */
    const char *origin;             /* where centre and radius came from */
} detector_resolved;

/* bf, abf, adf, haadf, df or annulus (any case): 1 and *d set, else 0. */
int detector_parse_name(const char *name, qem_detector *d);
const char *detector_name(qem_detector d);

/* 1 when the request leaves the centre or radius to the file. */
int detector_needs_calibration(const detector_request *r);

/* The file's detector calibration, else the estimate from the mean
 * pattern; *origin says which. */
qem_status detector_default_calibration(qem_products *products, qem_detector_calibration *cal,
                                        const char **origin, qem_error *error);

/* Builds the mask (pixels bytes). `cal` and `origin` come from
 * detector_default_calibration and are only read when
 * detector_needs_calibration(r); pass NULL otherwise. */
qem_status detector_build(qem_products *products, const detector_request *r,
                          const qem_detector_calibration *cal, const char *origin, uint8_t *mask,
                          detector_resolved *out, qem_error *error);

#endif
