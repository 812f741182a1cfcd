/* The product commands: dp, mean, virtual, com, dpc, calibrate. Each opens
 * the file, computes with libqem's products engine and writes the result
 * by the output's extension (.npy exact, .tif float32, .png 8-bit). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "detector.h"

const char *const dp_help =
    "usage: qem dp FILE --scan ROW,COLUMN -o OUT [--raw] [--json]\n"
    "       qem dp FILE --region R0:R1,C0:C1 [--reduce sum|mean|max] -o OUT [--json]\n"
    "\n"
    "The diffraction pattern at scan position (ROW, COLUMN), or a reduction\n"
    "over the scan rectangle rows [R0, R1) x columns [C0, C1):\n"
    "  counts: the pattern in its dtype; sum and max exact uint64; mean\n"
    "          float32 of the exact total;\n"
    "  float32 data: value - mean-dark plane (if recorded), compensated sums;\n"
    "  scaled data: restored intensities.\n"
    "Invalid (pack: excluded) detector pixels are 0. --raw writes the stored\n"
    "values of one pattern instead (pack: the raw reconstruction).\n"
    "OUT's extension picks the format: .npy (exact dtype), .tif (float32),\n"
    ".png (8-bit, percentile contrast).\n";

const char *const mean_help =
    "usage: qem mean FILE -o OUT [--json]\n"
    "\n"
    "The mean diffraction pattern over every scan position, float32: counts\n"
    "as the exact total divided by the scan count in float64, rounded once;\n"
    "float32 data compensated, dark plane subtracted once; invalid pixels 0.\n";

const char *const virtual_help =
    "usage: qem virtual FILE --mask MASK.npy -o OUT [--json]\n"
    "       qem virtual FILE --detector bf|abf|adf|haadf|df|annulus\n"
    "                   [--center ROW,COL] [--radius R] [--inner A --outer B]\n"
    "                   [--unit px|mrad] [--semiangle MRAD] -o OUT [--json]\n"
    "\n"
    "A virtual image (scan rows x columns): the sum of each pattern over a\n"
    "detector mask. Named detectors take every pixel whose distance d from\n"
    "the centre satisfies lo <= d <= hi (both ends inclusive), r the\n"
    "bright-field radius: bf [0, r], abf [r/2, r], adf [r, 2r] (or\n"
    "[inner, outer]), haadf [2r, 4r], df [r, inf), annulus [inner, outer].\n"
    "The centre and radius default to the file's detector calibration, else\n"
    "to the mean-diffraction-half-maximum estimate; the output says which.\n"
    "--unit mrad reads R, A and B in mrad (needs the convergence semi-angle:\n"
    "the file's or --semiangle). Invalid pixels never count.\n"
    "Counts give exact uint32 (uint64 when the mask could exceed it);\n"
    "float32 data compensated float32; scaled data calibrated sums.\n";

const char *const com_help =
    "usage: qem com FILE -o OUT [--subtract-mean] [--mask MASK.npy |\n"
    "               --detector ... (as qem virtual)] [--json]\n"
    "\n"
    "Centre of mass per scan position in absolute detector coordinates,\n"
    "scan rows x columns x 2 float32 (row component first): exact integer\n"
    "moments over the total, in float64, rounded once. A frame with zero\n"
    "total (or a non-finite value) is NaN and left out of the mean that\n"
    "--subtract-mean removes (giving the DPC components).\n";

const char *const dpc_help =
    "usage: qem dpc FILE -o OUT [--rotation DEG] [--mask MASK.npy |\n"
    "               --detector ...] [--json]\n"
    "\n"
    "Differential phase contrast: mean-subtracted centre of mass, rotated by\n"
    "the angle that minimises the mean squared curl (180 angles over [0, pi],\n"
    "with and without exchanged components, first minimum wins) or by\n"
    "--rotation, then integrated (iDPC) by an FFT Poisson solve with the zero\n"
    "frequency removed. OUT is the iDPC phase image (float32).\n";

const char *const calibrate_help =
    "usage: qem calibrate FILE [-o NEW_COPY] [--json]\n"
    "\n"
    "Estimates the detector centre and bright-field radius from the mean\n"
    "pattern (mean-diffraction-half-maximum: the pixels at or above half the\n"
    "maximum; centre = their intensity-weighted centroid, radius =\n"
    "sqrt(count / pi)) and prints it. With -o, writes a new copy that\n"
    "records it: a pack as detector_calibration bound to the source identity\n"
    "(payload unchanged), a .qem file in its metadata extensions. The\n"
    "original is never modified.\n";

/* An open file with its products session. */
typedef struct product_run {
    qem_source *source;
    qem_products *products;
    progress_state progress;
    const char *command;
} product_run;

static int run_open(product_run *r, const char *command, const options *o)
{
    memset(r, 0, sizeof *r);
    r->command = command;
    r->source = open_source(command, o);
    if (!r->source)
        return 0;
    qem_products_options po;
    qem_products_options_init(&po);
    po.threads = o->threads;
    po.path = o->reference_path ? QEM_PATH_REFERENCE : QEM_PATH_FAST;
    progress_setup(&r->progress, command, o, &po.progress, &po.progress_user);
    qem_error e = {0};
    if (qem_products_open(r->source, &po, &r->products, &e) != QEM_OK) {
        fail(command, &e);
        qem_source_close(r->source);
        return 0;
    }
    return 1;
}

static void run_close(product_run *r)
{
    qem_products_close(r->products);
    qem_source_close(r->source);
}

/* Writes the image; with --json prints a summary object. */
static int finish(product_run *r, const options *o, qem_image *image, json_t *summary)
{
    qem_error e = {0};
    const qem_status st = qem_image_write(image, o->output, &e);
    if (st != QEM_OK) {
        json_decref(summary);
        qem_image_free(image);
        return fail(r->command, &e);
    }
    if (o->json) {
        json_t *shape = json_array();
        for (unsigned k = 0; k < image->ndim; k++)
            json_array_append_new(shape, json_integer((json_int_t)image->shape[k]));
        json_object_set_new(summary, "product", json_string(r->command));
        json_object_set_new(summary, "source", json_string(o->positional[0]));
        json_object_set_new(summary, "output", json_string(o->output));
        json_object_set_new(summary, "format", json_string(qem_image_format(o->output)));
        json_object_set_new(summary, "dtype", json_string(qem_dtype_name(image->dtype)));
        json_object_set_new(summary, "shape", shape);
        char *text = json_dumps(summary, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
        if (text)
            puts(text);
        free(text);
    } else if (!o->quiet) {
        fprintf(stderr, "wrote %s (%s %s)\n", o->output, qem_image_format(o->output),
                qem_dtype_name(image->dtype));
    }
    json_decref(summary);
    qem_image_free(image);
    return EXIT_OK;
}

static int need_output(const options *o, const char *help)
{
    if (!o->output)
        return usage_error(help, "-o OUT is required (.npy, .tif or .png)%s", "");
    if (!qem_image_format(o->output))
        return usage_error(help, "'%s' must end in .npy, .tif, .tiff or .png", o->output);
    return 0;
}

int cmd_dp(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, dp_help, 1, "raw scan output expect region reduce json reference",
                        &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if (o.have_scan == o.have_region)
        return usage_error(dp_help, "dp needs exactly one of --scan ROW,COLUMN or --region%s", "");
    if ((rc = need_output(&o, dp_help)))
        return rc;
    product_run r;
    if (!run_open(&r, "dp", &o))
        return EXIT_FAILED;
    qem_source_info info;
    qem_source_get_info(r.source, &info);
    qem_error e = {0};
    qem_image im = {0};
    qem_status st = QEM_OK;
    json_t *summary = json_object();
    if (o.have_scan) {
        if ((uint64_t)o.scan_row >= info.shape[0] || (uint64_t)o.scan_column >= info.shape[1]) {
            fprintf(stderr, "qem dp: scan (%ld, %ld) is outside the %llu x %llu scan\n",
                    o.scan_row, o.scan_column, (unsigned long long)info.shape[0],
                    (unsigned long long)info.shape[1]);
            json_decref(summary);
            run_close(&r);
            return EXIT_FAILED;
        }
        const uint64_t scan = (uint64_t)o.scan_row * info.shape[1] + (uint64_t)o.scan_column;
        json_object_set_new(summary, "scan", json_pack("[I,I]", (json_int_t)o.scan_row,
                                                       (json_int_t)o.scan_column));
        if (o.raw) {
            /* The stored values, as the file keeps them. */
            im.dtype = info.raw_dtype;
            im.ndim = 2;
            im.shape[0] = info.shape[2];
            im.shape[1] = info.shape[3];
            const size_t bytes = (size_t)qem_source_read_bound(r.source, QEM_VALUES_RAW, 1);
            im.data = malloc(bytes);
            st = im.data ? qem_source_read(r.source, scan, 1, QEM_VALUES_RAW, im.data, bytes, &e)
                         : QEM_E_NO_MEMORY;
            json_object_set_new(summary, "values", json_string("raw"));
        } else {
            st = qem_products_frame(r.products, scan, &im, &e);
        }
    } else {
        const qem_reduce reduce = !o.reduce || !strcmp(o.reduce, "sum") ? QEM_REDUCE_SUM
                                  : !strcmp(o.reduce, "mean")          ? QEM_REDUCE_MEAN
                                                                       : QEM_REDUCE_MAX;
        st = qem_products_region(r.products, o.region[0], o.region[1], o.region[2], o.region[3],
                                 reduce, &im, &e);
        json_object_set_new(summary, "region",
                            json_pack("[I,I,I,I]", (json_int_t)o.region[0], (json_int_t)o.region[1],
                                      (json_int_t)o.region[2], (json_int_t)o.region[3]));
        json_object_set_new(summary, "reduce", json_string(o.reduce ? o.reduce : "sum"));
    }
    int code = st == QEM_OK ? finish(&r, &o, &im, summary) : (json_decref(summary),
                                                               qem_image_free(&im), fail("dp", &e));
    run_close(&r);
    return code;
}

int cmd_mean(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, mean_help, 1, "output expect json reference", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = need_output(&o, mean_help)))
        return rc;
    product_run r;
    if (!run_open(&r, "mean", &o))
        return EXIT_FAILED;
    qem_error e = {0};
    qem_image im;
    int code = qem_products_mean(r.products, &im, &e) == QEM_OK
                   ? finish(&r, &o, &im, json_object())
                   : fail("mean", &e);
    run_close(&r);
    return code;
}

/* The mask a command asks for (--mask or --detector), or NULL with *none
 * set when it asks for neither. Records what was used in `summary`. */
static uint8_t *build_mask(product_run *r, const options *o, const char *help, json_t *summary,
                           int *none, int *code)
{
    *none = 0;
    *code = EXIT_OK;
    qem_source_info info;
    qem_source_get_info(r->source, &info);
    qem_error e = {0};
    if (o->mask && o->detector) {
        *code = usage_error(help, "give --mask or --detector, not both%s", "");
        return NULL;
    }
    if (!o->mask && !o->detector) {
        *none = 1;
        return NULL;
    }
    uint8_t *mask = malloc((size_t)info.pixels);
    if (!mask) {
        *code = EXIT_FAILED;
        return NULL;
    }
    if (o->mask) {
        if (qem_products_mask_from_npy(r->products, o->mask, mask, &e) != QEM_OK) {
            free(mask);
            *code = fail(r->command, &e);
            return NULL;
        }
        json_object_set_new(summary, "mask", json_string(o->mask));
        return mask;
    }
    detector_request dr;
    memset(&dr, 0, sizeof dr);
    if (!detector_parse_name(o->detector, &dr.detector)) {
        free(mask);
        *code = usage_error(help, "unknown detector '%s' (bf, abf, adf, haadf, df, annulus)",
                            o->detector);
        return NULL;
    }
    dr.have_center = o->have_center;
    dr.center[0] = o->center[0];
    dr.center[1] = o->center[1];
    dr.have_radius = o->have_radius;
    dr.radius = o->radius;
    dr.have_inner = o->have_inner;
    dr.inner = o->inner;
    dr.have_outer = o->have_outer;
    dr.outer = o->outer;
    dr.unit_mrad = o->unit && !strcmp(o->unit, "mrad");
    dr.semiangle = o->semiangle;
    /* Centre and radius: given, else the file's calibration, else the
     * estimate from the mean pattern (cli/detector.c). */
    qem_detector_calibration cal;
    const char *origin = "given";
    if (detector_needs_calibration(&dr) &&
        detector_default_calibration(r->products, &cal, &origin, &e) != QEM_OK) {
        free(mask);
        *code = fail(r->command, &e);
        return NULL;
    }
    detector_resolved resolved;
    if (detector_build(r->products, &dr, detector_needs_calibration(&dr) ? &cal : NULL, origin,
                       mask, &resolved, &e) != QEM_OK) {
        free(mask);
        *code = fail(r->command, &e);
        return NULL;
    }
    const qem_detector_geometry g = resolved.geometry;
    const int radius_unused = resolved.radius_unused;
    uint64_t selected = 0;
    for (uint64_t k = 0; k < info.pixels; k++)
        selected += mask[k];
    json_object_set_new(summary, "detector", json_string(o->detector));
    json_object_set_new(summary, "center", json_pack("[f,f]", g.center_row, g.center_column));
    json_object_set_new(summary, "radius", radius_unused ? json_null() : json_real(g.radius));
    json_object_set_new(summary, "unit", json_string(g.unit_mrad ? "mrad" : "px"));
    json_object_set_new(summary, "center_radius_from", json_string(origin));
    json_object_set_new(summary, "mask_pixels", json_integer((json_int_t)selected));
    if (!o->json && !o->quiet && radius_unused)
        fprintf(stderr, "%s detector: centre (%.3f, %.3f), [%g, %g] px given; %llu pixels\n",
                o->detector, g.center_row, g.center_column, g.inner, g.outer,
                (unsigned long long)selected);
    else if (!o->json && !o->quiet)
        fprintf(stderr, "%s detector: centre (%.3f, %.3f), radius %.3f %s from the %s; %llu pixels\n",
                o->detector, g.center_row, g.center_column, g.radius, g.unit_mrad ? "mrad" : "px",
                origin, (unsigned long long)selected);
    return mask;
}

int cmd_virtual(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, virtual_help, 1,
                        "output expect json mask detector center radius inner outer unit "
                        "semiangle reference",
                        &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = need_output(&o, virtual_help)))
        return rc;
    if (!o.mask && !o.detector)
        return usage_error(virtual_help, "virtual needs --mask or --detector%s", "");
    product_run r;
    if (!run_open(&r, "virtual", &o))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, &o, virtual_help, summary, &none, &code);
    if (mask) {
        qem_error e = {0};
        qem_image im;
        code = qem_products_virtual(r.products, mask, &im, &e) == QEM_OK
                   ? finish(&r, &o, &im, summary)
                   : (json_decref(summary), fail("virtual", &e));
        summary = NULL;
    }
    json_decref(summary);
    free(mask);
    run_close(&r);
    return code;
}

int cmd_com(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, com_help, 1,
                        "output expect json mask detector center radius inner outer unit "
                        "semiangle subtract reference",
                        &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = need_output(&o, com_help)))
        return rc;
    product_run r;
    if (!run_open(&r, "com", &o))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, &o, com_help, summary, &none, &code);
    if (mask || none) {
        qem_error e = {0};
        qem_image im;
        json_object_set_new(summary, "subtract_mean", json_boolean(o.subtract_mean));
        code = qem_products_com(r.products, mask, o.subtract_mean, &im, &e) == QEM_OK
                   ? finish(&r, &o, &im, summary)
                   : (json_decref(summary), fail("com", &e));
        summary = NULL;
    }
    json_decref(summary);
    free(mask);
    run_close(&r);
    return code;
}

int cmd_dpc(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, dpc_help, 1,
                        "output expect json mask detector center radius inner outer unit "
                        "semiangle rotation reference",
                        &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    if ((rc = need_output(&o, dpc_help)))
        return rc;
    product_run r;
    if (!run_open(&r, "dpc", &o))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, &o, dpc_help, summary, &none, &code);
    if (mask || none) {
        qem_error e = {0};
        qem_dpc_result d;
        if (qem_products_dpc(r.products, mask, o.have_rotation ? o.rotation : NAN, &d, &e) ==
            QEM_OK) {
            json_object_set_new(summary, "rotation_degrees", json_real(d.rotation_degrees));
            json_object_set_new(summary, "rotation_searched", json_boolean(!o.have_rotation));
            json_object_set_new(summary, "components_exchanged",
                                json_boolean(d.components_exchanged));
            json_object_set_new(summary, "ffts", json_integer((json_int_t)d.ffts));
            if (!o.json && !o.quiet)
                fprintf(stderr, "rotation %.4f degrees%s%s, %llu FFTs\n", d.rotation_degrees,
                        o.have_rotation ? " (given)" : " (curl minimum)",
                        d.components_exchanged ? ", components exchanged" : "",
                        (unsigned long long)d.ffts);
            code = finish(&r, &o, &d.phase, summary);
            qem_dpc_result_free(&d);
        } else {
            json_decref(summary);
            code = fail("dpc", &e);
        }
        summary = NULL;
    }
    json_decref(summary);
    free(mask);
    run_close(&r);
    return code;
}

int cmd_calibrate(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, calibrate_help, 1, "output expect json reference", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    product_run r;
    if (!run_open(&r, "calibrate", &o))
        return EXIT_FAILED;
    qem_error e = {0};
    qem_detector_calibration cal, recorded;
    const int has_recorded = qem_products_file_calibration(r.products, &recorded);
    if (qem_products_estimate_calibration(r.products, &cal, &e) != QEM_OK) {
        run_close(&r);
        return fail("calibrate", &e);
    }
    run_close(&r);
    int code = EXIT_OK;
    if (o.output && qem_write_calibrated_copy(o.positional[0], o.output, &cal, &e) != QEM_OK)
        code = fail("calibrate", &e);
    if (o.json) {
        json_t *j = json_pack("{s:s, s:[f,f], s:f, s:s}", "source", o.positional[0],
                              "detector_center_px", cal.center_row, cal.center_column,
                              "bright_field_radius_px", cal.bright_field_radius, "method",
                              cal.method);
        if (has_recorded)
            json_object_set_new(j, "recorded",
                                json_pack("{s:[f,f], s:f, s:s}", "detector_center_px",
                                          recorded.center_row, recorded.center_column,
                                          "bright_field_radius_px", recorded.bright_field_radius,
                                          "method", recorded.method));
        if (o.output && code == EXIT_OK)
            json_object_set_new(j, "written", json_string(o.output));
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
        if (text)
            puts(text);
        free(text);
        json_decref(j);
    } else {
        printf("detector centre    (%.3f, %.3f) px (row, column)\n", cal.center_row,
               cal.center_column);
        printf("bright-field radius %.3f px\n", cal.bright_field_radius);
        printf("method             %s\n", cal.method);
        if (has_recorded)
            printf("recorded in file   centre (%.3f, %.3f), radius %.3f (%s)\n",
                   recorded.center_row, recorded.center_column, recorded.bright_field_radius,
                   recorded.method);
        if (o.output && code == EXIT_OK)
            printf("wrote %s with this calibration; %s is unchanged\n", o.output,
                   o.positional[0]);
    }
    return code;
}
