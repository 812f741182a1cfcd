/* The scaled codec's intensity_calibration: a version-2 precision report
 * whose contiguous regions each restore codes as float32(code*scale+offset). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "qem/qem_internal.h"

static int finite_number(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return 0;
    double d = json_number_value(v);
    if (!isfinite(d))
        return 0;
    if (out)
        *out = d;
    return 1;
}

static int string_is(const json_t *v, const char *want)
{
    return json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

#define REPORT_FAIL(...) qem_fail(error, QEM_E_METADATA, "intensity_calibration: " __VA_ARGS__)

qem_status qem_precision_load(const json_t *report, const uint64_t shape[4],
                              qem_region **regions_out, uint64_t *count_out, qem_error *error)
{
    uint64_t v;
    if (!json_is_object(report))
        return REPORT_FAIL("the precision report is missing or not an object");
    if (!qem_json_as_u64(json_object_get(report, "version"), &v) || v != 2)
        return REPORT_FAIL("version must be 2");
    if (!string_is(json_object_get(report, "storage"), "scaled_uint16"))
        return REPORT_FAIL("storage must be \"scaled_uint16\"");
    if (!json_is_true(json_object_get(report, "complete")))
        return REPORT_FAIL("complete must be true; an incomplete report cannot restore values");
    const json_t *source_shape = json_object_get(report, "source_shape");
    if (!json_is_array(source_shape) || json_array_size(source_shape) != 4)
        return REPORT_FAIL("source_shape must list four integers");
    for (size_t i = 0; i < 4; i++)
        if (!qem_json_as_u64(json_array_get(source_shape, i), &v) || v != shape[i])
            return REPORT_FAIL("source_shape differs from the header shape");
    /* The rounding error is part of the report. */
    static const char *const errors[] = {"rmse", "max_abs_error"};
    for (size_t i = 0; i < 2; i++) {
        double d;
        if (!finite_number(json_object_get(report, errors[i]), &d) || d < 0)
            return REPORT_FAIL("%s must be a finite, non-negative number", errors[i]);
    }
    static const char *const counts[] = {"clipped", "overflow"};
    for (size_t i = 0; i < 2; i++)
        if (!qem_json_as_u64(json_object_get(report, counts[i]), &v))
            return REPORT_FAIL("%s must be a non-negative integer count", counts[i]);

    const json_t *list = json_object_get(report, "regions");
    if (!json_is_array(list) || json_array_size(list) == 0)
        return REPORT_FAIL("regions must be a non-empty list");
    size_t n = json_array_size(list);
    qem_region *regions = calloc(n, sizeof *regions);
    if (!regions)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const uint64_t scans = shape[0] * shape[1];
    uint64_t next = 0;
    qem_status st = QEM_OK;
    for (size_t i = 0; i < n && st == QEM_OK; i++) {
        const json_t *r = json_array_get(list, i);
        qem_region *g = &regions[i];
        if (!json_is_object(r) || !qem_json_as_u64(json_object_get(r, "first_frame"), &g->first) ||
            !qem_json_as_u64(json_object_get(r, "stop_frame"), &g->stop))
            st = REPORT_FAIL("region %zu needs integer first_frame and stop_frame", i);
        else if (g->first != next || g->stop <= g->first || g->stop > scans)
            st = REPORT_FAIL("region %zu covers frames [%llu, %llu); regions must follow each "
                             "other from frame %llu",
                             i, (unsigned long long)g->first, (unsigned long long)g->stop,
                             (unsigned long long)next);
        else if (!finite_number(json_object_get(r, "scale"), &g->scale) || g->scale <= 0)
            st = REPORT_FAIL("region %zu scale must be finite and positive", i);
        else if (!finite_number(json_object_get(r, "offset"), &g->offset))
            st = REPORT_FAIL("region %zu offset must be finite", i);
        else if (!string_is(json_object_get(r, "storage"), "scaled_uint16"))
            st = REPORT_FAIL("region %zu storage must be \"scaled_uint16\"", i);
        else if (!finite_number(json_object_get(r, "intensity_min"), NULL) ||
                 !finite_number(json_object_get(r, "intensity_max"), NULL))
            st = REPORT_FAIL("region %zu needs finite intensity_min and intensity_max", i);
        next = g->stop;
    }
    if (st == QEM_OK && next != scans)
        st = REPORT_FAIL("regions end at frame %llu but there are %llu frames",
                         (unsigned long long)next, (unsigned long long)scans);
    if (st != QEM_OK) {
        free(regions);
        return st;
    }
    *regions_out = regions;
    *count_out = n;
    return QEM_OK;
}

qem_status qem_precision_check_processing(const json_t *scientific, qem_error *error)
{
    size_t i;
    const json_t *entry;
    json_array_foreach(json_object_get(scientific, "processing"), i, entry) {
        if (string_is(json_object_get(entry, "operation"), "scaled_uint16_quantization") &&
            json_is_true(json_object_get(entry, "changes_measurements")))
            return QEM_OK;
    }
    return qem_fail(error, QEM_E_METADATA,
                    "scaled codes change the measurements: scientific_metadata.processing must "
                    "include scaled_uint16_quantization with changes_measurements true");
}
