/* The product commands: dp, mean, virtual, com, dpc, calibrate. Each opens
 * the file, computes with libqem's products engine and writes the result
 * by the output's extension (.npy exact, .tif float32, .png 8-bit). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qem_experimental.h" /* --reference: the dense path */
#include "terminal.h"

#define IMAGE_EXTENSIONS "npy|tif|tiff|png"

/* An open file with its products session. */
typedef struct product_run {
    qem_container *source;
    qem_products *products;
    progress_state load_progress, progress;
    const char *command;
} product_run;

static int run_open(product_run *r, const args *a)
{
    memset(r, 0, sizeof *r);
    r->command = a->command;
    qem_error e = {0};
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = (int)a->v[OPT_THREADS].i[0];
    so.expect_sha256 = text_of(a, OPT_EXPECT_SHA256);
    progress_setup(&r->load_progress, "loading shards", "shards", given(a, OPT_QUIET), &so.progress,
                   &so.progress_user);
    if (qem_container_open(a->positional[0], &so, &r->source, &e) != QEM_OK) {
        fail(a->command, &e);
        return 0;
    }
    qem_products_options po;
    qem_products_options_init(&po);
    po.threads = (int)a->v[OPT_THREADS].i[0];
    const char *device = text_of(a, OPT_DEVICE);
    po.device = device && !strcmp(device, "cuda") ? QEM_DEVICE_CUDA : QEM_DEVICE_CPU;
    const qem_products_path path = given(a, OPT_REFERENCE) ? QEM_PATH_REFERENCE : QEM_PATH_FAST;
    progress_setup(&r->progress, a->command, "scan positions", given(a, OPT_QUIET), &po.progress,
                   &po.progress_user);
    if (qem_products_open_path(r->source, &po, path, &r->products, &e) != QEM_OK) {
        fail(a->command, &e);
        qem_container_close(r->source);
        return 0;
    }
    return 1;
}

static void run_close(product_run *r)
{
    qem_products_close(r->products);
    qem_container_close(r->source);
}

/* What the file written holds: the product's dtype in a .npy, 32-bit
 * floats in a TIFF, 8-bit display values in a PNG. */
static const char *file_dtype(const char *format, const qem_image *image)
{
    return !strcmp(format, "png")    ? "uint8"
           : !strcmp(format, "tiff") ? "float32"
                                     : qem_dtype_name(image->dtype);
}

static const char *format_words(const char *format)
{
    return !strcmp(format, "png")    ? "8-bit PNG, percentile contrast"
           : !strcmp(format, "tiff") ? "32-bit float TIFF"
                                     : "npy";
}

/* Writes the image; with --json prints a summary object. */
static int finish(product_run *r, const args *a, qem_image *image, json_t *summary)
{
    qem_error e = {0};
    const char *out = text_of(a, OPT_OUTPUT);
    const qem_status st = qem_image_write(image, out, &e);
    if (st != QEM_OK) {
        json_decref(summary);
        qem_image_free(image);
        return fail(r->command, &e);
    }
    const char *format = qem_image_format(out);
    if (given(a, OPT_JSON)) {
        json_t *shape = json_array();
        for (unsigned k = 0; k < image->ndim; k++)
            json_array_append_new(shape, json_integer((json_int_t)image->shape[k]));
        json_object_set_new(summary, "product", json_string(r->command));
        json_object_set_new(summary, "source", json_string(a->positional[0]));
        json_object_set_new(summary, "output", json_string(out));
        json_object_set_new(summary, "format", json_string(format));
        json_object_set_new(summary, "dtype", json_string(qem_dtype_name(image->dtype)));
        json_object_set_new(summary, "file_dtype", json_string(file_dtype(format, image)));
        json_object_set_new(summary, "shape", shape);
        print_json_value(summary, 1);
    } else if (!given(a, OPT_QUIET)) {
        if (!strcmp(format, "npy"))
            fprintf(stderr, "wrote %s (npy %s)\n", SAFE(out), qem_dtype_name(image->dtype));
        else
            fprintf(stderr, "wrote %s (%s of the %s %s)\n", SAFE(out), format_words(format),
                    qem_dtype_name(image->dtype), r->command);
    }
    json_decref(summary);
    qem_image_free(image);
    return EXIT_OK;
}

static int need_output(const args *a)
{
    if (!given(a, OPT_OUTPUT))
        return usage_fail(a->command, "-o OUT is required (.npy, .tif or .png)");
    return need_destination(a->command, text_of(a, OPT_OUTPUT), IMAGE_EXTENSIONS,
                            ".npy exact, .tif/.tiff 32-bit float, .png 8-bit");
}

/* --- dp ------------------------------------------------------------------------- */

static int run_dp(const args *a)
{
    if (given(a, OPT_SCAN) == given(a, OPT_REGION))
        return usage_fail("dp", "give exactly one of --scan ROW,COLUMN or --region R0:R1,C0:C1");
    if (given(a, OPT_REDUCE) && !given(a, OPT_REGION))
        return usage_fail("dp", "--reduce applies to --region; one pattern is not reduced");
    if (given(a, OPT_RAW) && !given(a, OPT_SCAN))
        return usage_fail("dp", "--raw applies to --scan (one stored pattern)");
    int rc = need_output(a);
    if (rc)
        return rc;
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(r.source, &info, NULL);
    qem_error e = {0};
    qem_image im = {0};
    qem_status st = QEM_OK;
    json_t *summary = json_object();
    if (given(a, OPT_SCAN)) {
        const uint64_t row = (uint64_t)a->v[OPT_SCAN].i[0], col = (uint64_t)a->v[OPT_SCAN].i[1];
        if (row >= info.shape[0] || col >= info.shape[1]) {
            fprintf(stderr, "qem dp: scan (%llu, %llu) is outside the %llu x %llu scan\n",
                    (unsigned long long)row, (unsigned long long)col,
                    (unsigned long long)info.shape[0], (unsigned long long)info.shape[1]);
            json_decref(summary);
            run_close(&r);
            return EXIT_FAILED;
        }
        const uint64_t scan = row * info.shape[1] + col;
        json_object_set_new(summary, "scan", json_pack("[I,I]", (json_int_t)row, (json_int_t)col));
        if (given(a, OPT_RAW)) {
            /* The stored values, as the file keeps them. */
            im.dtype = info.raw_dtype;
            im.ndim = 2;
            im.shape[0] = info.shape[2];
            im.shape[1] = info.shape[3];
            const size_t bytes = (size_t)qem_container_read_bound(r.source, QEM_VALUES_RAW, 1);
            im.data = malloc(bytes);
            st = im.data ? qem_container_read(r.source, scan, 1, QEM_VALUES_RAW, im.data, bytes, &e)
                         : QEM_E_NO_MEMORY;
            json_object_set_new(summary, "values", json_string("raw"));
        } else {
            st = qem_products_frame(r.products, scan, &im, &e);
        }
    } else {
        const char *reduce = given(a, OPT_REDUCE) ? text_of(a, OPT_REDUCE) : "sum";
        const qem_reduce how = !strcmp(reduce, "sum")    ? QEM_REDUCE_SUM
                               : !strcmp(reduce, "mean") ? QEM_REDUCE_MEAN
                                                         : QEM_REDUCE_MAX;
        const int64_t *g = a->v[OPT_REGION].i;
        st = qem_products_region(r.products, (uint64_t)g[0], (uint64_t)g[1], (uint64_t)g[2],
                                 (uint64_t)g[3], how, &im, &e);
        json_object_set_new(summary, "region",
                            json_pack("[I,I,I,I]", (json_int_t)g[0], (json_int_t)g[1],
                                      (json_int_t)g[2], (json_int_t)g[3]));
        json_object_set_new(summary, "reduce", json_string(reduce));
    }
    int code;
    if (st == QEM_OK) {
        code = finish(&r, a, &im, summary);
    } else {
        json_decref(summary);
        qem_image_free(&im);
        code = fail("dp", &e);
    }
    run_close(&r);
    return code;
}

/* --- mean ----------------------------------------------------------------------- */

static int run_mean(const args *a)
{
    int rc = need_output(a);
    if (rc)
        return rc;
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    qem_error e = {0};
    qem_image im;
    int code = qem_products_mean(r.products, &im, &e) == QEM_OK
                   ? finish(&r, a, &im, json_object())
                   : fail("mean", &e);
    run_close(&r);
    return code;
}

/* --- detectors ------------------------------------------------------------------ */

static qem_detector detector_of(const char *name)
{
    static const struct {
        const char *name;
        qem_detector d;
    } names[] = {{"bf", QEM_DETECTOR_BF},   {"abf", QEM_DETECTOR_ABF}, {"adf", QEM_DETECTOR_ADF},
                 {"haadf", QEM_DETECTOR_HAADF}, {"df", QEM_DETECTOR_DF},
                 {"annulus", QEM_DETECTOR_ANNULUS}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name))
            return names[k].d;
    return QEM_DETECTOR_BF; /* unreachable: the parser admits only these */
}

/* The geometry options must belong to a named detector and fit it. */
static int check_detector_options(const args *a)
{
    static const option_id geometry[] = {OPT_CENTER, OPT_RADIUS, OPT_INNER,
                                         OPT_OUTER,  OPT_UNIT,   OPT_SEMIANGLE};
    if (given(a, OPT_MASK) && given(a, OPT_DETECTOR))
        return usage_fail(a->command, "give --mask or --detector, not both");
    if (!given(a, OPT_DETECTOR)) {
        for (size_t k = 0; k < sizeof geometry / sizeof geometry[0]; k++)
            if (given(a, geometry[k]))
                return usage_fail(a->command, "%s applies to a named detector (--detector)",
                                  option_specs[geometry[k]].name);
        return 0;
    }
    const qem_detector d = detector_of(text_of(a, OPT_DETECTOR));
    const int band = d == QEM_DETECTOR_ADF || d == QEM_DETECTOR_ANNULUS;
    const int mrad = given(a, OPT_UNIT) && !strcmp(text_of(a, OPT_UNIT), "mrad");
    if ((given(a, OPT_INNER) || given(a, OPT_OUTER)) && !band)
        return usage_fail(a->command, "--inner and --outer apply to adf and annulus detectors");
    if (given(a, OPT_INNER) != given(a, OPT_OUTER) && band)
        return usage_fail(a->command, "give both --inner and --outer (or neither, for adf)");
    if (d == QEM_DETECTOR_ANNULUS && !given(a, OPT_INNER))
        return usage_fail(a->command, "the annulus detector needs --inner A and --outer B");
    if (given(a, OPT_INNER) && !(a->v[OPT_OUTER].r[0] > a->v[OPT_INNER].r[0]))
        return usage_fail(a->command, "--outer must be greater than --inner");
    /* Refusing this would break a documented use: say it is unused. */
    if (given(a, OPT_INNER) && given(a, OPT_RADIUS) && !mrad)
        fprintf(stderr, "qem %s: warning: --radius is not used when --inner and --outer bound "
                        "the detector in pixels\n",
                a->command);
    if (given(a, OPT_SEMIANGLE) && !mrad)
        return usage_fail(a->command, "--semiangle applies with --unit mrad");
    return 0;
}

/* The mask a command asks for (--mask or --detector), or NULL with *none
 * set when it asks for neither. Records what was used in `summary`. */
static uint8_t *build_mask(product_run *r, const args *a, json_t *summary, int *none, int *code)
{
    *none = 0;
    *code = EXIT_OK;
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(r->source, &info, NULL);
    qem_error e = {0};
    if (!given(a, OPT_MASK) && !given(a, OPT_DETECTOR)) {
        *none = 1;
        return NULL;
    }
    uint8_t *mask = malloc((size_t)info.pixels);
    if (!mask) {
        *code = EXIT_FAILED;
        return NULL;
    }
    if (given(a, OPT_MASK)) {
        if (qem_products_mask_from_npy(r->products, text_of(a, OPT_MASK), mask,
                                       (size_t)info.pixels, &e) != QEM_OK) {
            free(mask);
            *code = fail(r->command, &e);
            return NULL;
        }
        json_object_set_new(summary, "mask", json_string(text_of(a, OPT_MASK)));
        return mask;
    }
    qem_detector_request q;
    qem_detector_request_init(&q);
    q.detector = detector_of(text_of(a, OPT_DETECTOR));
    if (given(a, OPT_CENTER)) {
        q.center_row = a->v[OPT_CENTER].r[0];
        q.center_column = a->v[OPT_CENTER].r[1];
    }
    if (given(a, OPT_RADIUS))
        q.radius = a->v[OPT_RADIUS].r[0];
    if (given(a, OPT_INNER) && given(a, OPT_OUTER)) {
        q.inner = a->v[OPT_INNER].r[0];
        q.outer = a->v[OPT_OUTER].r[0];
    }
    q.unit_mrad = given(a, OPT_UNIT) && !strcmp(text_of(a, OPT_UNIT), "mrad");
    if (given(a, OPT_SEMIANGLE))
        q.semiangle_mrad = a->v[OPT_SEMIANGLE].r[0];
    qem_detector_resolution used = {.struct_size = sizeof used};
    if (qem_products_resolve_detector(r->products, &q, mask, (size_t)info.pixels, &used, &e) !=
        QEM_OK) {
        free(mask);
        *code = fail(r->command, &e);
        return NULL;
    }
    const int radius_unused = isnan(used.radius);
    const char *name = text_of(a, OPT_DETECTOR);
    json_object_set_new(summary, "detector", json_string(name));
    json_object_set_new(summary, "center", json_pack("[f,f]", used.center_row, used.center_column));
    json_object_set_new(summary, "radius", radius_unused ? json_null() : json_real(used.radius));
    json_object_set_new(summary, "unit", json_string(used.unit_mrad ? "mrad" : "px"));
    json_object_set_new(summary, "center_radius_from", json_string(used.origin));
    json_object_set_new(summary, "mask_pixels", json_integer((json_int_t)used.mask_pixels));
    if (!given(a, OPT_JSON) && !given(a, OPT_QUIET) && radius_unused)
        fprintf(stderr, "%s detector: centre (%.3f, %.3f), [%g, %g] px given; %llu pixels\n", name,
                used.center_row, used.center_column, q.inner, q.outer,
                (unsigned long long)used.mask_pixels);
    else if (!given(a, OPT_JSON) && !given(a, OPT_QUIET))
        fprintf(stderr, "%s detector: centre (%.3f, %.3f), radius %.3f %s from the %s; %llu pixels\n",
                name, used.center_row, used.center_column, used.radius,
                used.unit_mrad ? "mrad" : "px", used.origin, (unsigned long long)used.mask_pixels);
    return mask;
}

/* --- virtual, com, dpc ------------------------------------------------------------ */

static int run_virtual(const args *a)
{
    if (!given(a, OPT_MASK) && !given(a, OPT_DETECTOR))
        return usage_fail("virtual", "virtual needs --mask MASK.npy or --detector NAME");
    int rc = check_detector_options(a);
    if (rc || (rc = need_output(a)))
        return rc;
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, a, summary, &none, &code);
    if (mask) {
        qem_error e = {0};
        qem_image im;
        code = qem_products_virtual(r.products, mask, &im, &e) == QEM_OK
                   ? finish(&r, a, &im, summary)
                   : (json_decref(summary), fail("virtual", &e));
        summary = NULL;
    }
    json_decref(summary);
    free(mask);
    run_close(&r);
    return code;
}

static int run_com(const args *a)
{
    int rc = check_detector_options(a);
    if (rc || (rc = need_output(a)))
        return rc;
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, a, summary, &none, &code);
    if (mask || none) {
        qem_error e = {0};
        qem_image im;
        json_object_set_new(summary, "subtract_mean", json_boolean(given(a, OPT_SUBTRACT_MEAN)));
        code = qem_products_com(r.products, mask, given(a, OPT_SUBTRACT_MEAN), &im, &e) == QEM_OK
                   ? finish(&r, a, &im, summary)
                   : (json_decref(summary), fail("com", &e));
        summary = NULL;
    }
    json_decref(summary);
    free(mask);
    run_close(&r);
    return code;
}

static int run_dpc(const args *a)
{
    int rc = check_detector_options(a);
    if (rc || (rc = need_output(a)))
        return rc;
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    json_t *summary = json_object();
    int none, code;
    uint8_t *mask = build_mask(&r, a, summary, &none, &code);
    if (mask || none) {
        qem_error e = {0};
        qem_dpc_result d = {.struct_size = sizeof d};
        const int fixed = given(a, OPT_ROTATION);
        if (qem_products_dpc(r.products, mask, fixed ? a->v[OPT_ROTATION].r[0] : NAN, &d, &e) ==
            QEM_OK) {
            json_object_set_new(summary, "rotation_degrees", json_real(d.rotation_degrees));
            json_object_set_new(summary, "rotation_searched", json_boolean(!fixed));
            json_object_set_new(summary, "components_exchanged",
                                json_boolean(d.components_exchanged));
            json_object_set_new(summary, "ffts", json_integer((json_int_t)d.ffts));
            if (!given(a, OPT_JSON) && !given(a, OPT_QUIET))
                fprintf(stderr, "rotation %.4f degrees%s%s, %llu FFTs\n", d.rotation_degrees,
                        fixed ? " (given)" : " (curl minimum)",
                        d.components_exchanged ? ", components exchanged" : "",
                        (unsigned long long)d.ffts);
            code = finish(&r, a, &d.phase, summary);
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

/* --- calibrate -------------------------------------------------------------------- */

static int run_calibrate(const args *a)
{
    const char *src = a->positional[0], *out = text_of(a, OPT_OUTPUT);
    if (out) {
        /* A calibrated copy is of the source's own format. */
        qem_file_kind kind;
        if (!identify("calibrate", src, &kind))
            return EXIT_FAILED;
        char what[96];
        snprintf(what, sizeof what, "a calibrated copy keeps its source's format, %s",
                 qem_file_kind_name(kind));
        int rc = qem_file_kind_is_container(kind)
                     ? need_destination("calibrate", out, qem_file_kind_extensions(kind), what)
                     : EXIT_OK; /* opening it says what it is instead */
        if (rc)
            return rc;
    }
    product_run r;
    if (!run_open(&r, a))
        return EXIT_FAILED;
    qem_error e = {0};
    qem_detector_calibration cal = {.struct_size = sizeof cal};
    qem_detector_calibration recorded = {.struct_size = sizeof recorded};
    const qem_status got = qem_products_file_calibration(r.products, &recorded, &e);
    const int has_recorded = got == QEM_OK;
    if ((got != QEM_OK && got != QEM_E_NOT_RECORDED) ||
        qem_products_estimate_calibration(r.products, &cal, &e) != QEM_OK) {
        run_close(&r);
        return fail("calibrate", &e);
    }
    run_close(&r);
    int code = EXIT_OK;
    if (out && qem_write_calibrated_copy(src, out, &cal, &e) != QEM_OK)
        code = fail("calibrate", &e);
    if (given(a, OPT_JSON)) {
        json_t *j = json_pack("{s:s, s:[f,f], s:f, s:s}", "source", src, "detector_center_px",
                              cal.center_row, cal.center_column, "bright_field_radius_px",
                              cal.bright_field_radius, "method", cal.method);
        if (has_recorded)
            json_object_set_new(j, "recorded",
                                json_pack("{s:[f,f], s:f, s:s}", "detector_center_px",
                                          recorded.center_row, recorded.center_column,
                                          "bright_field_radius_px", recorded.bright_field_radius,
                                          "method", recorded.method));
        if (out && code == EXIT_OK)
            json_object_set_new(j, "written", json_string(out));
        print_json_value(j, 1);
        json_decref(j);
    } else {
        printf("detector centre    (%.3f, %.3f) px (row, column)\n", cal.center_row,
               cal.center_column);
        printf("bright-field radius %.3f px\n", cal.bright_field_radius);
        printf("method             %s\n", SAFE(cal.method));
        if (has_recorded)
            printf("recorded in file   centre (%.3f, %.3f), radius %.3f (%s)\n",
                   recorded.center_row, recorded.center_column, recorded.bright_field_radius,
                   SAFE(recorded.method));
        if (out && code == EXIT_OK)
            printf("wrote %s with this calibration; %s is unchanged\n", SAFE(out), SAFE(src));
    }
    return code;
}

/* --- the table ---------------------------------------------------------------- */

#define DETECTOR_OPTIONS                                                                           \
    {OPT_MASK, NULL}, {OPT_DETECTOR, NULL}, {OPT_CENTER, NULL}, {OPT_RADIUS, NULL},                \
        {OPT_INNER, NULL}, {OPT_OUTER, NULL}, {OPT_UNIT, NULL}, {OPT_SEMIANGLE, NULL}

#define PRODUCT_COMMON                                                                             \
    {OPT_OUTPUT, NULL}, {OPT_JSON, "print a summary of the product as JSON"},                     \
        {OPT_EXPECT_SHA256, NULL}, {OPT_REFERENCE, NULL}, {OPT_DEVICE, NULL}

static const command_option dp_options[] = {
    {OPT_SCAN, NULL},
    {OPT_REGION, NULL},
    {OPT_REDUCE, NULL},
    {OPT_RAW, "with --scan: the stored values of the pattern (pack: the raw\n"
              "reconstruction)"},
    PRODUCT_COMMON,
    {OPT_NONE, NULL}};
static const command_option mean_options[] = {PRODUCT_COMMON, {OPT_NONE, NULL}};
static const command_option virtual_options[] = {DETECTOR_OPTIONS, PRODUCT_COMMON,
                                                 {OPT_NONE, NULL}};
static const command_option com_options[] = {
    DETECTOR_OPTIONS, {OPT_SUBTRACT_MEAN, NULL}, PRODUCT_COMMON, {OPT_NONE, NULL}};
static const command_option dpc_options[] = {
    DETECTOR_OPTIONS, {OPT_ROTATION, NULL}, PRODUCT_COMMON, {OPT_NONE, NULL}};
static const command_option calibrate_options[] = {
    {OPT_OUTPUT, "write a new copy recording the estimate (NEW_COPY: .qem for a\n"
                 ".qem file, .h5 for a pack)"},
    {OPT_JSON, NULL},
    {OPT_EXPECT_SHA256, NULL},
    {OPT_REFERENCE, NULL},
    {OPT_NONE, NULL}};

#define OUTPUT_FORMATS                                                                             \
    "OUT's extension picks the format: .npy (exact dtype), .tif/.tiff\n"                           \
    "(32-bit float), .png (8-bit, 0.5/99.5 percentile contrast).\n"

const command_spec product_commands[] = {
    {"dp", "FILE (--scan ROW,COLUMN | --region R0:R1,C0:C1) -o OUT [options]",
     "one diffraction pattern, or a sum/mean/max over a scan region",
     "The diffraction pattern at scan position (ROW, COLUMN), or a reduction\n"
     "over the scan rectangle rows [R0, R1) x columns [C0, C1):\n"
     "  counts: the pattern in its dtype; sum and max exact uint64; mean\n"
     "          float32 of the exact total;\n"
     "  float32 data: value - mean-dark plane (if recorded), compensated sums;\n"
     "  scaled data: restored intensities.\n"
     "Invalid (pack: excluded) detector pixels are 0.\n" OUTPUT_FORMATS,
     1, 1, "FILE", dp_options, run_dp},
    {"mean", "FILE -o OUT [options]", "the mean diffraction pattern",
     "The mean diffraction pattern over every scan position, float32: counts\n"
     "as the exact total divided by the scan count in float64, rounded once;\n"
     "float32 data compensated, dark plane subtracted once; invalid pixels 0.\n" OUTPUT_FORMATS,
     1, 1, "FILE", mean_options, run_mean},
    {"virtual", "FILE (--mask MASK.npy | --detector NAME [geometry]) -o OUT [options]",
     "a virtual image: --mask M.npy or --detector bf|adf|...",
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
     "float32 data compensated float32; scaled data calibrated sums.\n" OUTPUT_FORMATS,
     1, 1, "FILE", virtual_options, run_virtual},
    {"com", "FILE -o OUT [--subtract-mean] [--mask MASK.npy | --detector NAME] [options]",
     "centre of mass per scan (--subtract-mean: DPC)",
     "Centre of mass per scan position in absolute detector coordinates,\n"
     "scan rows x columns x 2 float32 (row component first): exact integer\n"
     "moments over the total, in float64, rounded once. A frame with zero\n"
     "total (or a non-finite value) is NaN and left out of the mean that\n"
     "--subtract-mean removes (giving the DPC components). .npy or .tif only\n"
     "(two components).\n",
     1, 1, "FILE", com_options, run_com},
    {"dpc", "FILE -o OUT [--rotation DEG] [--mask MASK.npy | --detector NAME] [options]",
     "DPC rotation search and iDPC phase",
     "Differential phase contrast: mean-subtracted centre of mass, rotated by\n"
     "the angle that minimises the mean squared curl (180 angles over [0, pi],\n"
     "with and without exchanged components, first minimum wins) or by\n"
     "--rotation, then integrated (iDPC) by an FFT Poisson solve with the zero\n"
     "frequency removed. OUT is the iDPC phase image (float32).\n" OUTPUT_FORMATS,
     1, 1, "FILE", dpc_options, run_dpc},
    {"calibrate", "FILE [-o NEW_COPY] [options]",
     "detector centre and bright-field radius estimate",
     "Estimates the detector centre and bright-field radius from the mean\n"
     "pattern (mean-diffraction-half-maximum: the pixels at or above half the\n"
     "maximum; centre = their intensity-weighted centroid, radius =\n"
     "sqrt(count / pi)) and prints it. With -o, writes a new copy that\n"
     "records it: a pack as detector_calibration bound to the source identity\n"
     "(payload unchanged) with the upstream's prepared values for it (exact\n"
     "per-scan DPC moments; for the uint8 profile BF/ABF/ADF masks and images\n"
     "about the new calibration), which CoM, DPC and those detectors then use\n"
     "without decoding; a .qem file in its metadata extensions. The original\n"
     "is never modified.\n",
     1, 1, "FILE", calibrate_options, run_calibrate},
    {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL}};
