/* Detector masks: named detectors from a centre and radius, and 0/1 .npy
 * masks. One geometry rule everywhere: squared distance from the centre in
 * double precision, compared with squared radii, both ends inclusive (a
 * pixel at exactly r belongs to BF, ABF, ADF and DF alike). Invalid or
 * excluded pixels are cleared from every mask. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/calibration_estimate.h"
#include "common/error.h"
#include "common/options.h"
#include "products/products.h"

/* A named detector with every number known: what a request resolves to. */
typedef struct mask_geometry {
    qem_detector detector;
    double center_row, center_column; /* detector pixels */
    double radius;                    /* bright-field radius r (0: unused) */
    double inner, outer;              /* band (both 0: none) */
    int unit_mrad;
    double semiangle_mrad; /* 0 = the file's */
} mask_geometry;

static const char *detector_name(qem_detector d)
{
    switch (d) {
    case QEM_DETECTOR_BF: return "bf";
    case QEM_DETECTOR_ABF: return "abf";
    case QEM_DETECTOR_ADF: return "adf";
    case QEM_DETECTOR_HAADF: return "haadf";
    case QEM_DETECTOR_DF: return "df";
    case QEM_DETECTOR_ANNULUS: return "annulus";
    }
    return "unknown";
}

static qem_status mask_of(const qem_products *p, const mask_geometry *geometry, double radius_px,
                          uint8_t *mask, size_t mask_size, qem_error *error)
{
    QEM_TRY(qem_prod_check_buffer(mask_size, p->pixels, 1, "the mask", error));
    const mask_geometry g = *geometry;
    if (!isfinite(g.center_row) || !isfinite(g.center_column))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "the detector centre must be finite");
    double semi = g.semiangle_mrad;
    if (g.unit_mrad) {
        if (!(semi > 0) && !p->ops->semiangle_mrad(p->impl, &semi))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "radii in mrad need the convergence semi-angle, which this file "
                            "does not state; give it (--semiangle MRAD) or use pixels");
        if (!(semi > 0) || !isfinite(semi) || !(radius_px > 0) || !isfinite(radius_px))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "mrad conversion needs a positive semi-angle and bright-field radius "
                            "in pixels (got %g mrad, %g px)",
                            semi, radius_px);
    }
    const double r = g.radius;
    const int has_band = g.inner > 0 || g.outer > 0;
    if (g.detector == QEM_DETECTOR_ANNULUS || (g.detector == QEM_DETECTOR_ADF && has_band)) {
        if (!(g.inner >= 0) || !(g.outer > g.inner) || isnan(g.outer))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "%s needs 0 <= inner < outer (got inner %g, outer %g)",
                            detector_name(g.detector), g.inner, g.outer);
    } else if (!(r > 0) || !isfinite(r)) {
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the %s detector needs a positive finite radius (got %g)",
                        detector_name(g.detector), r);
    }
    double lo, hi;
    switch (g.detector) {
    case QEM_DETECTOR_BF: lo = 0; hi = r; break;
    case QEM_DETECTOR_ABF: lo = r / 2; hi = r; break;
    case QEM_DETECTOR_ADF:
        lo = has_band ? g.inner : r;
        hi = has_band ? g.outer : 2 * r;
        break;
    case QEM_DETECTOR_HAADF: lo = 2 * r; hi = 4 * r; break;
    case QEM_DETECTOR_DF: lo = r; hi = INFINITY; break;
    case QEM_DETECTOR_ANNULUS: lo = g.inner; hi = g.outer; break;
    default:
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown detector %d", (int)g.detector);
    }
    if (g.unit_mrad) {
        /* The bright-field disk edge is the convergence semi-angle. */
        lo *= radius_px / semi;
        hi *= radius_px / semi;
    }
    const double lo2 = lo * lo, hi2 = isinf(hi) ? INFINITY : hi * hi;
    /* An empty mask is valid: its image is all zeros. */
    qem_ring_mask(p->det_rows, p->det_cols, g.center_row, g.center_column, lo2, hi2, p->valid,
                  mask);
    return QEM_OK;
}

qem_status qem_products_detector_mask(const qem_products *p, const qem_detector_request *request,
                                      double radius_px, uint8_t *mask, size_t mask_size,
                                      qem_error *error)
{
    qem_error_clear(error);
    if (!p || !request || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_detector_mask: NULL");
    qem_detector_request q;
    qem_detector_request_init(&q);
    QEM_TRY(qem_options_overlay(&q, sizeof q, request, "qem_detector_request", error));
    QEM_TRY(qem_prod_check_buffer(mask_size, p->pixels, 1, "the mask", error));
    if (isnan(q.center_row) || isnan(q.center_column))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_products_detector_mask needs the detector centre "
                        "(qem_products_resolve_detector resolves a missing one)");
    const mask_geometry g = {
        .detector = q.detector,
        .center_row = q.center_row,
        .center_column = q.center_column,
        .radius = isnan(q.radius) ? 0 : q.radius,
        .inner = isnan(q.inner) ? 0 : q.inner,
        .outer = isnan(q.outer) ? 0 : q.outer,
        .unit_mrad = q.unit_mrad,
        .semiangle_mrad = isnan(q.semiangle_mrad) ? 0 : q.semiangle_mrad,
    };
    return mask_of(p, &g, radius_px, mask, mask_size, error);
}

qem_status qem_products_mask_from_npy(const qem_products *p, const char *path, uint8_t *mask,
                                      size_t mask_size, qem_error *error)
{
    qem_error_clear(error);
    if (!p || !path || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_mask_from_npy: NULL");
    QEM_TRY(qem_npy_read_mask(path, p->det_rows, p->det_cols, mask, mask_size, error));
    for (uint64_t px = 0; px < p->pixels; px++)
        mask[px] = (uint8_t)(mask[px] && p->valid[px]);
    return QEM_OK;
}

void qem_detector_request_init(qem_detector_request *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    r->detector = QEM_DETECTOR_BF;
    r->center_row = r->center_column = r->radius = NAN;
    r->inner = r->outer = r->semiangle_mrad = NAN;
}

qem_status qem_products_resolve_detector(qem_products *p, const qem_detector_request *request,
                                         uint8_t *mask, size_t mask_size,
                                         qem_detector_resolution *resolution, qem_error *error)
{
    qem_error_clear(error);
    if (!p || !request || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_products_resolve_detector: NULL");
    qem_detector_request q;
    qem_detector_request_init(&q);
    QEM_TRY(qem_options_overlay(&q, sizeof q, request, "qem_detector_request", error));
    const char *name = detector_name(q.detector);
    if (isnan(q.center_row) != isnan(q.center_column))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "give both coordinates of the detector centre, or neither");
    if (isnan(q.inner) != isnan(q.outer))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "give both inner and outer bounds, or neither");
    const int have_center = !isnan(q.center_row), have_radius = !isnan(q.radius);
    const int bounds = !isnan(q.inner);
    const int band = q.detector == QEM_DETECTOR_ADF || q.detector == QEM_DETECTOR_ANNULUS;
    if (bounds && !band)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "inner and outer bounds apply to the adf and annulus detectors, not %s",
                        name);
    if (q.detector == QEM_DETECTOR_ANNULUS && !bounds)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the annulus detector needs inner and outer bounds");
    /* Centre and radius: given, else the file's calibration, else the
     * estimate from the mean pattern. Bounds in pixels need no radius. */
    qem_detector_calibration cal = {.struct_size = sizeof cal};
    const char *origin = "given";
    if (!have_center || !(have_radius || bounds) || q.unit_mrad) {
        const qem_status got = qem_products_file_calibration(p, &cal, error);
        if (got != QEM_OK && got != QEM_E_NOT_RECORDED)
            return got;
        if (got == QEM_OK) {
            origin = "file detector calibration";
        } else {
            QEM_TRY(qem_products_estimate_calibration(p, &cal, error));
            origin = "estimate (mean-diffraction-half-maximum)";
        }
    }
    mask_geometry g = {.detector = q.detector};
    g.center_row = have_center ? q.center_row : cal.center_row;
    g.center_column = have_center ? q.center_column : cal.center_column;
    g.unit_mrad = q.unit_mrad;
    double semi = q.semiangle_mrad > 0 ? q.semiangle_mrad : 0;
    g.semiangle_mrad = semi;
    if (g.unit_mrad && !(semi > 0))
        qem_products_semiangle(p, &semi, NULL); /* none: stays 0, refused below */
    const int radius_unused = bounds && have_center && !have_radius && !g.unit_mrad;
    g.radius = have_radius     ? q.radius
               : g.unit_mrad   ? semi
               : radius_unused ? 0
                               : cal.bright_field_radius;
    g.inner = bounds ? q.inner : 0;
    g.outer = bounds ? q.outer : 0;
    const double radius_px =
        have_center && have_radius && !g.unit_mrad ? q.radius : cal.bright_field_radius;
    QEM_TRY(mask_of(p, &g, radius_px, mask, mask_size, error));
    qem_detector_resolution r;
    memset(&r, 0, sizeof r);
    r.center_row = g.center_row;
    r.center_column = g.center_column;
    r.radius = radius_unused ? NAN : g.radius;
    r.unit_mrad = g.unit_mrad;
    snprintf(r.origin, sizeof r.origin, "%s", origin);
    for (uint64_t px = 0; px < p->pixels; px++)
        r.mask_pixels += mask[px];
    return resolution ? qem_result_deliver(resolution, &r, sizeof r, "qem_detector_resolution", error)
                      : QEM_OK;
}
