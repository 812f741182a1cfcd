/* The public acquisition handle, qem_acquisition_*: the caller's options
 * checked and turned into the input layer's, then open, close,
 * authenticate and describe (qem_acquisition_get_info, the JSON of
 * qem_acquisition_json). Saving from a handle is save.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "input/acquisition_handle.h"
#include "input/input.h"

void qem_acquisition_options_init(qem_acquisition_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

/* "uint16", "u2", "<u2", ">u2", ...; signed, 64-bit and float64 types are
 * settled at open (values.c). */
static qem_status parse_raw_dtype(const char *text, input_raw *raw, qem_error *error)
{
    static const struct {
        const char *name;
        qem_dtype dtype;
        input_values values;
        int big_endian;
    } names[] = {
        {"uint8", QEM_DTYPE_UINT8, 0, 0},    {"u1", QEM_DTYPE_UINT8, 0, 0},
        {"|u1", QEM_DTYPE_UINT8, 0, 0},      {"uint16", QEM_DTYPE_UINT16, 0, 0},
        {"u2", QEM_DTYPE_UINT16, 0, 0},      {"<u2", QEM_DTYPE_UINT16, 0, 0},
        {">u2", QEM_DTYPE_UINT16, 0, 1},     {"uint32", QEM_DTYPE_UINT32, 0, 0},
        {"u4", QEM_DTYPE_UINT32, 0, 0},      {"<u4", QEM_DTYPE_UINT32, 0, 0},
        {">u4", QEM_DTYPE_UINT32, 0, 1},     {"float32", QEM_DTYPE_FLOAT32, 0, 0},
        {"f4", QEM_DTYPE_FLOAT32, 0, 0},     {"<f4", QEM_DTYPE_FLOAT32, 0, 0},
        {">f4", QEM_DTYPE_FLOAT32, 0, 1},    {"int8", 0, INPUT_VALUES_INT8, 0},
        {"i1", 0, INPUT_VALUES_INT8, 0},     {"|i1", 0, INPUT_VALUES_INT8, 0},
        {"int16", 0, INPUT_VALUES_INT16, 0}, {"<i2", 0, INPUT_VALUES_INT16, 0},
        {">i2", 0, INPUT_VALUES_INT16, 1},   {"int32", 0, INPUT_VALUES_INT32, 0},
        {"<i4", 0, INPUT_VALUES_INT32, 0},   {">i4", 0, INPUT_VALUES_INT32, 1},
        {"float64", 0, INPUT_VALUES_FLOAT64, 0}, {"<f8", 0, INPUT_VALUES_FLOAT64, 0},
        {">f8", 0, INPUT_VALUES_FLOAT64, 1}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(text, names[k].name)) {
            raw->dtype = names[k].dtype;
            raw->values = names[k].values;
            raw->big_endian = names[k].big_endian;
            return QEM_OK;
        }
    return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                    "the raw sample type '%.32s' is not one of uint8, uint16, uint32, float32, "
                    "int8, int16, int32, float64 (little-endian) or a descr such as >u2, <i4, "
                    ">f8",
                    text);
}

/* The public options as the layer's own. */
static qem_status input_options_of(const qem_acquisition_options *user, input_options *o,
                                   qem_acquisition_options *local, qem_error *error)
{
    qem_acquisition_options_init(local);
    QEM_TRY(qem_options_overlay(local, sizeof *local, user, "qem_acquisition_options", error));
    memset(o, 0, sizeof *o);
    o->dataset = local->dataset;
    memcpy(o->scan_shape, local->scan_shape, sizeof o->scan_shape);
    o->progress = local->progress;
    o->progress_user = local->progress_user;
    const int shaped = local->raw_shape[0] || local->raw_shape[1] || local->raw_shape[2] ||
                       local->raw_shape[3];
    if (!shaped && !local->raw_dtype && (local->raw_offset || local->raw_frame_header))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "a raw offset or frame header needs the raw shape and sample type too");
    if (shaped != (local->raw_dtype != NULL))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "raw binary needs both its shape (--raw-shape) and its sample type "
                        "(--raw-dtype)");
    if (local->raw_dtype) {
        QEM_TRY(parse_raw_dtype(local->raw_dtype, &o->raw, error));
        memcpy(o->raw.shape, local->raw_shape, sizeof o->raw.shape);
        o->raw.offset = local->raw_offset;
        o->raw.frame_header = local->raw_frame_header;
        if (local->scan_shape[0] || local->scan_shape[1] || local->dataset)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "raw binary takes its whole shape from --raw-shape; --scan-shape "
                            "and --dataset do not apply");
    }
    return QEM_OK;
}

qem_status qem_acquisition_open(const char *path, const qem_acquisition_options *options,
                                qem_acquisition **out, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_acquisition_open: NULL argument");
    *out = NULL;
    input_options o;
    qem_acquisition_options local;
    QEM_TRY(input_options_of(options, &o, &local, error));
    qem_acquisition *q = calloc(1, sizeof *q);
    if (!q)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    q->progress = local.progress;
    q->progress_user = local.progress_user;
    const qem_status st = qem_input_open(path, &o, &q->input, error);
    if (st != QEM_OK) {
        free(q);
        return st;
    }
    *out = q;
    return QEM_OK;
}

void qem_acquisition_close(qem_acquisition *q)
{
    if (!q)
        return;
    qem_input_close(q->input);
    free(q);
}

qem_status qem_acquisition_authenticate(qem_acquisition *q, qem_error *error)
{
    qem_error_clear(error);
    if (!q)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_acquisition_authenticate: NULL");
    return q->input->authenticated
               ? QEM_OK
               : qem_input_authenticate(q->input, q->progress, q->progress_user, error);
}

acquisition *qem_acquisition_input(qem_acquisition *q)
{
    return q->input;
}

qem_status qem_acquisition_get_info(const qem_acquisition *q, qem_acquisition_info *out,
                                    qem_error *error)
{
    qem_error_clear(error);
    if (!q)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_acquisition_get_info: NULL");
    const acquisition *a = q->input;
    qem_acquisition_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.family, sizeof info.family, "%s", a->family->name);
    memcpy(info.shape, a->shape, sizeof info.shape);
    info.scans = a->shape[0] * a->shape[1];
    info.pixels = a->shape[2] * a->shape[3];
    info.sample_type = a->sample_type;
    info.stored_dtype = qem_input_stored_dtype(a);
    info.flagged_pixels = a->flagged_count;
    info.members = a->member_count;
    for (size_t i = 0; i < a->member_count; i++)
        info.bytes += a->members[i].bytes;
    info.authenticated = a->authenticated;
    return qem_result_deliver(out, &info, sizeof info, "qem_acquisition_info", error);
}

char *qem_acquisition_json(const qem_acquisition *q, qem_error *error)
{
    qem_error_clear(error);
    if (!q) {
        qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_acquisition_json: NULL");
        return NULL;
    }
    const acquisition *a = q->input;
    json_t *root = qem_input_source_metadata(a);
    const uint64_t scans = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    const uint64_t stored = scans * pixels * qem_dtype_size(qem_input_stored_dtype(a));
    json_t *flagged = json_array();
    for (uint64_t k = 0; k < a->flagged_count && k < 4096; k++)
        json_array_append_new(flagged, json_integer(a->flagged[k]));
    char hex[65];
    qem_sha256_hex(a->detector_mask_sha256, hex);
    if (root) {
        json_object_set_new(root, "shape",
                            json_pack("[I,I,I,I]", (json_int_t)a->shape[0], (json_int_t)a->shape[1],
                                      (json_int_t)a->shape[2], (json_int_t)a->shape[3]));
        json_object_set_new(root, "flagged_pixel_indices", flagged);
        json_object_set_new(root, "detector_mask_sha256", json_string(hex));
        json_object_set_new(root, "detector_mask_origin", json_string(a->mask_origin));
        json_object_set_new(root, "logical_bytes", json_integer((json_int_t)stored));
        /* What would be written, and how large it can be. The .qem bound:
         * raw streams (2 bytes per count at worst, plus spatial sums of
         * integer data); packs: see qem pack plan for exact bounds. */
        const qem_dtype d = qem_input_stored_dtype(a);
        json_object_set_new(
            root, "would_store",
            json_pack("{s:s, s:s, s:I, s:s}", "qem_codec",
                      d == QEM_DTYPE_FLOAT32 ? "float32-bit-lanes-rans-v1"
                                             : "runtime-column-rans-spatial-v2",
                      "dtype", qem_dtype_name(d), "qem_bytes_at_most",
                      (json_int_t)(stored + stored / 64 + scans * 32 + (1u << 20)), "pack",
                      d == QEM_DTYPE_FLOAT32 ? "refused: packs hold integer counts"
                                             : "see qem pack plan"));
        if (a->calibration)
            json_object_set(root, "calibration", a->calibration);
    } else {
        json_decref(flagged);
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    if (!text)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return text;
}
