/* What the three scientific_metadata files share: the validator
 * (metadata.c, which also holds the unit tables), the calibration reader
 * (metadata_calibration.c) and the calibration-file merge
 * (metadata_calibration_file.c). Known quantities, their units and
 * conversion, the path constants, and small JSON value helpers. */
#ifndef QEM_QEM_METADATA_QUANTITIES_H
#define QEM_QEM_METADATA_QUANTITIES_H

#include <jansson.h>
#include <stddef.h>
#include <string.h>

#define SCHEMA_PREFIX "quantem.scientific-metadata/"
#define SCHEMA_2 SCHEMA_PREFIX "2"
#define SCHEMA_1 SCHEMA_PREFIX "1"

/* Scan-pixel overrides lie in [1e-14 m, 1e-6 m] = [1e-4, 1e4] angstrom,
 * compared in metres as the reference does. */
#define SCAN_OVERRIDE_MIN_M 1e-14
#define SCAN_OVERRIDE_MAX_M 1e-6

#define P_VOLTAGE "electron_source/accelerating_voltage"
#define P_BEAM "electron_source/beam_energy"
#define P_ANGLE "illumination_system/semi_convergence_angle"
#define P_DWELL "scan_controller/regular_scan/dwell_time"
#define P_CAMERA "imaging_system/camera_length"
#define P_PIXEL "scan_controller/regular_scan/pixel_size_"
#define P_RECIPROCAL "imaging_system/reciprocal_pixel_size_"

/* ------------------------------------------------------------------------ */
/* Known quantities and their units (notes §5.2)                              */
/* ------------------------------------------------------------------------ */

typedef enum quantity_kind {
    KIND_UNKNOWN = 0,
    KIND_VOLTAGE,
    KIND_BEAM_ENERGY,
    KIND_ANGLE,
    KIND_DWELL,
    KIND_CAMERA,
    KIND_SCAN,
    KIND_DETECTOR
} quantity_kind;

typedef struct unit_conversion {
    const char *unit;   /* as written in a file */
    const char *target; /* the canonical (schema-2) unit */
    double factor;      /* value[target] = value[unit] * factor */
} unit_conversion;

/* The accepted unit `unit` of `kind` with its conversion, or NULL (always
 * NULL for KIND_UNKNOWN). */
const unit_conversion *qem_metadata_find_unit(quantity_kind kind, const char *unit);

/* The canonical unit(s) of a known `kind`, as messages name them. */
const char *qem_metadata_canonical_unit(quantity_kind kind);

/* Axis 0..3's name (scan_row, scan_column, detector_row, detector_column). */
const char *qem_metadata_axis_name(size_t axis);

/* The electron_microscope path that duplicates axis 0..3's sampling. */
const char *qem_metadata_axis_duplicate(size_t axis);

static inline int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return 1;
    return 0;
}

/* A scan-pixel override within the allowed range, given in metres. */
static inline int scan_override_in_range(double metres)
{
    return metres >= SCAN_OVERRIDE_MIN_M && metres <= SCAN_OVERRIDE_MAX_M;
}

/* ------------------------------------------------------------------------ */
/* Small JSON helpers                                                         */
/* ------------------------------------------------------------------------ */

static inline int is_blank(const char *s)
{
    for (; *s; s++)
        if (!(*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v'))
            return 0;
    return 1;
}

/* A JSON number that is not a boolean (jansson keeps the two apart). */
static inline int number_value(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return 1;
}

#endif
