/* Named detector resolution shared by the product commands and the viewer
 * (see detector.h). */
#include "detector.h"

#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    qem_detector d;
} detector_names[] = {{"bf", QEM_DETECTOR_BF},     {"abf", QEM_DETECTOR_ABF},
                      {"adf", QEM_DETECTOR_ADF},   {"haadf", QEM_DETECTOR_HAADF},
                      {"df", QEM_DETECTOR_DF},     {"annulus", QEM_DETECTOR_ANNULUS}};

int detector_parse_name(const char *name, qem_detector *d)
{
    for (size_t k = 0; k < sizeof detector_names / sizeof detector_names[0]; k++)
        if (!strcasecmp(name, detector_names[k].name)) {
            *d = detector_names[k].d;
            return 1;
        }
    return 0;
}

const char *detector_name(qem_detector d)
{
    for (size_t k = 0; k < sizeof detector_names / sizeof detector_names[0]; k++)
        if (detector_names[k].d == d)
            return detector_names[k].name;
    return "unknown";
}

/* An annulus (or ADF) given by both bounds needs no radius. */
static int bounds_given(const detector_request *r)
{
    return r->have_inner && r->have_outer &&
           (r->detector == QEM_DETECTOR_ANNULUS || r->detector == QEM_DETECTOR_ADF);
}

int detector_needs_calibration(const detector_request *r)
{
    return !r->have_center || !(r->have_radius || bounds_given(r)) || r->unit_mrad;
}

qem_status detector_default_calibration(qem_products *products, qem_detector_calibration *cal,
                                        const char **origin, qem_error *error)
{
    memset(cal, 0, sizeof *cal);
    if (qem_products_file_calibration(products, cal)) {
        *origin = "file detector calibration";
        return QEM_OK;
    }
    *origin = "estimate (mean-diffraction-half-maximum)";
    return qem_products_estimate_calibration(products, cal, error);
}

qem_status detector_build(qem_products *products, const detector_request *r,
                          const qem_detector_calibration *cal, const char *origin, uint8_t *mask,
                          detector_resolved *out, qem_error *error)
{
    qem_detector_calibration none;
    memset(&none, 0, sizeof none);
    if (!detector_needs_calibration(r) || !cal) {
        cal = &none;
        origin = "given";
    }
    memset(out, 0, sizeof *out);
    qem_detector_geometry *g = &out->geometry;
    qem_detector_geometry_init(g);
    g->detector = r->detector;
    g->center_row = r->have_center ? r->center[0] : cal->center_row;
    g->center_column = r->have_center ? r->center[1] : cal->center_column;
    g->unit_mrad = r->unit_mrad;
    g->semiangle_mrad = r->semiangle;
    double semi = r->semiangle;
    if (g->unit_mrad && !(semi > 0))
        qem_products_semiangle(products, &semi);
    /* With both bounds and the centre given, no radius is needed or known. */
    out->radius_unused = bounds_given(r) && r->have_center && !r->have_radius && !g->unit_mrad;
    g->radius = r->have_radius ? r->radius
                : g->unit_mrad ? semi
                : out->radius_unused ? 0
                                     : cal->bright_field_radius;
    g->inner = r->have_inner ? r->inner : 0;
    g->outer = r->have_outer ? r->outer : 0;
    out->radius_px = r->have_center && r->have_radius && !g->unit_mrad ? r->radius
                                                                       : cal->bright_field_radius;
    out->origin = origin;
    return qem_products_detector_mask(products, g, out->radius_px, mask, error);
}
