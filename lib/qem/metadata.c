/* scientific_metadata, schema "quantem.scientific-metadata/2": the
 * calibration authority of a .qem file (doc/metadata.md lists every rule).
 *
 * The validator refuses, with QEM_E_METADATA and a message naming the key
 * path and the rule, anything that could make a reader use a calibration
 * other than the one the file states: unknown or non-canonical units on
 * known quantities, conflicting duplicates, unevidenced overrides, and
 * processing that the stored counts contradict. Everything it does not
 * know (extra keys, unknown microscope quantities, extensions) is left
 * alone. The known quantities' unit tables live here too, behind the
 * lookups of metadata_quantities.h; the calibration reader and the
 * calibration-file merge are metadata_calibration.c and
 * metadata_calibration_file.c. */
#include <expat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "common/sha256.h"
#include "qem/metadata.h"
#include "qem/metadata_quantities.h"

#define MAX_DOCUMENTS 16
#define MAX_DOCUMENT_BYTES ((size_t)4 << 20)
#define DUPLICATE_RTOL 1e-14

#define ANGSTROM_SIGN "\xc3\x85" /* U+00C5, as the reference spells it */

static const char *const axis_names[4] = {"scan_row", "scan_column", "detector_row",
                                          "detector_column"};

/* ------------------------------------------------------------------------ */
/* Known quantities and their units (notes §5.2)                              */
/* ------------------------------------------------------------------------ */

typedef struct kind_info {
    const char *canonical;         /* for messages */
    const unit_conversion *units;  /* accepted units, canonical ones first */
    const char *const *calc_units; /* schema-1 override units; NULL: no override */
    const char *calc_text;         /* for messages */
} kind_info;

static const unit_conversion voltage_units[] = {{"kV", "kV", 1}, {"V", "kV", 0.001}, {0}};
static const unit_conversion beam_energy_units[] = {{"keV", "keV", 1}, {"eV", "keV", 0.001}, {0}};
static const unit_conversion angle_units[] = {{"mrad", "mrad", 1}, {"rad", "mrad", 1000}, {0}};
static const unit_conversion dwell_units[] = {
    {"us", "us", 1}, {"s", "us", 1e6}, {"ms", "us", 1000}, {0}};
static const unit_conversion camera_units[] = {
    {"mm", "mm", 1}, {"m", "mm", 1000}, {"cm", "mm", 10}, {0}};
static const unit_conversion scan_units[] = {{"angstrom", "angstrom", 1},
                                             {"m", "angstrom", 1e10},
                                             {"nm", "angstrom", 10},
                                             {ANGSTROM_SIGN, "angstrom", 1},
                                             {0}};
static const unit_conversion detector_units[] = {
    {"mrad", "mrad", 1},         {"1/angstrom", "1/angstrom", 1},       {"rad", "mrad", 1000},
    {"1/nm", "1/angstrom", 0.1}, {"1/" ANGSTROM_SIGN, "1/angstrom", 1}, {0}};

/* Units of the calculation boundary, in which schema-1 files store overrides. */
static const char *const calc_voltage[] = {"V", NULL};
static const char *const calc_angle[] = {"mrad", NULL};
static const char *const calc_dwell[] = {"s", NULL};
static const char *const calc_metre[] = {"m", NULL};
static const char *const calc_detector[] = {"mrad", "1/nm", "1/" ANGSTROM_SIGN, NULL};

static const kind_info kinds[] = {
    [KIND_UNKNOWN] = {NULL, NULL, NULL, NULL},
    [KIND_VOLTAGE] = {"kV", voltage_units, calc_voltage, "V"},
    [KIND_BEAM_ENERGY] = {"keV", beam_energy_units, NULL, NULL},
    [KIND_ANGLE] = {"mrad", angle_units, calc_angle, "mrad"},
    [KIND_DWELL] = {"us", dwell_units, calc_dwell, "s"},
    [KIND_CAMERA] = {"mm", camera_units, calc_metre, "m"},
    [KIND_SCAN] = {"angstrom", scan_units, calc_metre, "m"},
    [KIND_DETECTOR] = {"mrad or 1/angstrom", detector_units, calc_detector,
                       "mrad, 1/nm or 1/" ANGSTROM_SIGN},
};

/* The electron_microscope duplicate of each axis's sampling, axes 0..3. */
static const char *const axis_duplicates[4] = {P_PIXEL "row", P_PIXEL "column", P_RECIPROCAL "row",
                                               P_RECIPROCAL "column"};

static const struct {
    const char *path;
    quantity_kind kind;
} known_paths[] = {
    {P_VOLTAGE, KIND_VOLTAGE},     {P_BEAM, KIND_BEAM_ENERGY}, {P_ANGLE, KIND_ANGLE},
    {P_DWELL, KIND_DWELL},         {P_CAMERA, KIND_CAMERA},    {P_PIXEL "row", KIND_SCAN},
    {P_PIXEL "column", KIND_SCAN},
};

/* Spec 0.0.1 names, retired by 0.0.2 (source y is row, source x column). */
static const char *const retired_paths[] = {P_PIXEL "x", P_PIXEL "y", P_RECIPROCAL "x",
                                            P_RECIPROCAL "y"};

/* The only paths calibration_overrides may hold. */
static const char *const override_paths[] = {P_VOLTAGE,
                                             P_ANGLE,
                                             P_DWELL,
                                             P_CAMERA,
                                             P_PIXEL "row",
                                             P_PIXEL "column",
                                             P_RECIPROCAL "row",
                                             P_RECIPROCAL "column"};

/* Kind of an electron_microscope / override path. Like the reference, every
 * imaging_system/reciprocal_pixel_size_* path is a detector quantity. */
static quantity_kind path_kind(const char *path)
{
    for (size_t i = 0; i < sizeof known_paths / sizeof known_paths[0]; i++)
        if (strcmp(path, known_paths[i].path) == 0)
            return known_paths[i].kind;
    if (strncmp(path, P_RECIPROCAL, strlen(P_RECIPROCAL)) == 0)
        return KIND_DETECTOR;
    return KIND_UNKNOWN;
}

const unit_conversion *qem_metadata_find_unit(quantity_kind kind, const char *unit)
{
    for (const unit_conversion *u = kinds[kind].units; u && u->unit; u++)
        if (strcmp(u->unit, unit) == 0)
            return u;
    return NULL;
}

const char *qem_metadata_canonical_unit(quantity_kind kind)
{
    return kinds[kind].canonical;
}

const char *qem_metadata_axis_name(size_t axis)
{
    return axis_names[axis];
}

const char *qem_metadata_axis_duplicate(size_t axis)
{
    return axis_duplicates[axis];
}

static int in_null_list(const char *const *list, const char *s)
{
    for (; list && *list; list++)
        if (strcmp(*list, s) == 0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Small JSON helpers                                                         */
/* ------------------------------------------------------------------------ */

/* A positive finite number, never a boolean. */
static int positive_number(const json_t *v)
{
    double d;
    return number_value(v, &d) && isfinite(d) && d > 0;
}

/* Python truthiness, as the reference tests header flags. */
static int truthy(const json_t *v)
{
    if (!v)
        return 0;
    switch (json_typeof(v)) {
    case JSON_TRUE: return 1;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    default: return 0;
    }
}

static int ascii_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* Case-insensitive (ASCII) search for `needle` in `size` bytes. */
static int contains_nocase(const char *text, size_t size, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= size; i++) {
        size_t k = 0;
        while (k < n &&
               ascii_lower((unsigned char)text[i + k]) == ascii_lower((unsigned char)needle[k]))
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

/* A list of `length` JSON integers, each >= `minimum` unless !use_min. */
static int integer_list(const json_t *v, size_t length, int use_min, json_int_t minimum)
{
    if (!json_is_array(v) || json_array_size(v) != length)
        return 0;
    for (size_t i = 0; i < length; i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || (use_min && json_integer_value(x) < minimum))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Quantities                                                                 */
/* ------------------------------------------------------------------------ */

enum { PROVENANCE_NONE = 0, PROVENANCE_REQUIRED = 1 };

/* Checks one quantity at `where` (a key path used in messages). For a known
 * kind the unit must be accepted (schema 1) or canonical (schema 2), and
 * the converted value finite. Returns the canonical value and unit. */
static qem_status check_quantity(const json_t *q, const char *where, quantity_kind kind, int schema,
                                 int provenance, double *canonical, qem_error *error)
{
    if (!json_is_object(q))
        return qem_fail(error, QEM_E_METADATA,
                        "%s must be a quantity object with value, unit and provenance", where);
    const json_t *value = json_object_get(q, "value");
    double v;
    if (json_is_boolean(value))
        return qem_fail(error, QEM_E_METADATA,
                        "%s value is a boolean, not a number; re-export the metadata", where);
    if (!number_value(value, &v))
        return qem_fail(error, QEM_E_METADATA, "%s value must be a number", where);
    if (!isfinite(v))
        return qem_fail(error, QEM_E_METADATA, "%s value must be finite", where);
    if (v <= 0)
        return qem_fail(error, QEM_E_METADATA, "%s value must be greater than zero (found %g)",
                        where, v);
    const json_t *unit = json_object_get(q, "unit");
    if (!json_is_string(unit) || json_string_length(unit) == 0)
        return qem_fail(error, QEM_E_METADATA, "%s unit must be a non-empty string", where);
    const char *u = json_string_value(unit);
    double converted = v;
    const char *target = u;
    if (kind != KIND_UNKNOWN) {
        const unit_conversion *c = qem_metadata_find_unit(kind, u);
        if (!c)
            return qem_fail(error, QEM_E_METADATA,
                            "%s has unknown unit '%.40s' (a known quantity in %s); unknown units "
                            "are never used as calibration",
                            where, u, kinds[kind].canonical);
        if (schema == 2 && strcmp(c->target, u) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "%s is in '%.40s': schema-2 quantities require canonical microscopy "
                            "units (%s)",
                            where, u, kinds[kind].canonical);
        converted = v * c->factor;
        target = c->target;
        if (!isfinite(converted))
            return qem_fail(error, QEM_E_METADATA, "%s value is not finite once converted to %s",
                            where, target);
    }
    if (provenance == PROVENANCE_REQUIRED) {
        const json_t *p = json_object_get(q, "provenance");
        if (!json_is_string(p) || is_blank(json_string_value(p)))
            return qem_fail(error, QEM_E_METADATA,
                            "%s lacks provenance: a calibrated quantity needs a non-blank "
                            "provenance string",
                            where);
    }
    const json_t *evidence = json_object_get(q, "evidence");
    if (evidence && !json_is_string(evidence))
        return qem_fail(error, QEM_E_METADATA, "%s evidence must be a string", where);
    if (canonical)
        *canonical = converted;
    return QEM_OK;
}

/* ------------------------------------------------------------------------ */
/* Validator sections                                                         */
/* ------------------------------------------------------------------------ */

/* Returns 2 or 1 for a supported schema string, else fails. */
static qem_status check_schema(const json_t *sm, int *schema, qem_error *error)
{
    const json_t *value = json_object_get(sm, "schema");
    if (!json_is_string(value))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.schema is missing or not a string");
    const char *s = json_string_value(value);
    if (strcmp(s, SCHEMA_2) == 0) {
        *schema = 2;
        return QEM_OK;
    }
    if (strcmp(s, SCHEMA_1) == 0) {
        *schema = 1;
        return QEM_OK;
    }
    size_t prefix = strlen(SCHEMA_PREFIX);
    if (strncmp(s, SCHEMA_PREFIX, prefix) == 0) {
        const char *n = s + prefix;
        size_t digits = strspn(n, "0123456789");
        /* A plain decimal major above 2 (no sign, no leading zero). */
        if (digits > 0 && n[digits] == '\0' && n[0] != '0' && (digits > 1 || n[0] > '2'))
            return qem_fail(error, QEM_E_UNSUPPORTED,
                            "scientific metadata schema '%.80s' is newer than this qem "
                            "understands; update qem to read this file",
                            s);
    }
    return qem_fail(error, QEM_E_METADATA,
                    "unknown scientific metadata schema '%.80s' (expected '" SCHEMA_2 "')", s);
}

static qem_status check_axes(const json_t *axes, const uint64_t shape[4], qem_error *error)
{
    if (!json_is_array(axes) || json_array_size(axes) != 4)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.axes must be a list of four axis objects "
                        "(scan_row, scan_column, detector_row, detector_column)");
    for (size_t i = 0; i < 4; i++) {
        const json_t *axis = json_array_get(axes, i);
        if (!json_is_object(axis))
            return qem_fail(error, QEM_E_METADATA, "scientific_metadata.axes[%zu] is not an object",
                            i);
        const json_t *name = json_object_get(axis, "name");
        if (!json_is_string(name) || strcmp(json_string_value(name), axis_names[i]) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.axes[%zu] must be named '%s' (axes are scan_row, "
                            "scan_column, detector_row, detector_column in order)",
                            i, axis_names[i]);
        uint64_t size;
        if (!qem_json_as_u64(json_object_get(axis, "size"), &size) || size != shape[i])
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.axes[%zu].size ('%s') disagrees with the header "
                            "shape %llu",
                            i, axis_names[i], (unsigned long long)shape[i]);
    }
    return QEM_OK;
}

static qem_status check_sections(const json_t *sm, qem_error *error)
{
    static const char *const sections[] = {"electron_microscope", "calibration_overrides"};
    for (size_t s = 0; s < 2; s++) {
        const json_t *v = json_object_get(sm, sections[s]);
        if (v && !json_is_object(v))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.%s must be an object of named quantities",
                            sections[s]);
    }
    for (size_t s = 0; s < 2; s++) {
        const json_t *v = json_object_get(sm, sections[s]);
        for (size_t r = 0; v && r < sizeof retired_paths / sizeof retired_paths[0]; r++)
            if (json_object_get(v, retired_paths[r]))
                return qem_fail(error, QEM_E_METADATA,
                                "scientific_metadata.%s[\"%s\"] uses a retired x/y name of "
                                "specification 0.0.1; quantities are named by row and column",
                                sections[s], retired_paths[r]);
    }
    return QEM_OK;
}

static qem_status check_axis_sampling(const json_t *axes, int schema, qem_error *error)
{
    for (size_t i = 0; i < 4; i++) {
        const json_t *sampling = json_object_get(json_array_get(axes, i), "sampling");
        if (!sampling)
            continue;
        char where[96];
        snprintf(where, sizeof where, "scientific_metadata.axes[%zu].sampling (%s)", i,
                 axis_names[i]);
        QEM_TRY(check_quantity(sampling, where, i < 2 ? KIND_SCAN : KIND_DETECTOR, schema,
                               PROVENANCE_REQUIRED, NULL, error));
    }
    return QEM_OK;
}

static qem_status check_microscope(const json_t *sm, int schema, qem_error *error)
{
    const json_t *em = json_object_get(sm, "electron_microscope");
    const char *path;
    const json_t *q;
    json_object_foreach((json_t *)em, path, q) {
        char where[192];
        snprintf(where, sizeof where, "scientific_metadata.electron_microscope[\"%.120s\"]", path);
        QEM_TRY(
            check_quantity(q, where, path_kind(path), schema, PROVENANCE_REQUIRED, NULL, error));
    }
    return QEM_OK;
}

/* Schema 2: each electron_microscope pixel size duplicates an axis sampling
 * and must agree with it (same unit, relative tolerance 1e-14). */
static qem_status check_duplicates(const json_t *sm, const json_t *axes, qem_error *error)
{
    const json_t *em = json_object_get(sm, "electron_microscope");
    for (size_t i = 0; em && i < 4; i++) {
        const json_t *dup = json_object_get(em, axis_duplicates[i]);
        if (!dup)
            continue;
        const json_t *sampling = json_object_get(json_array_get(axes, i), "sampling");
        if (!sampling)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.electron_microscope[\"%s\"] duplicates "
                            "axes[%zu] (%s), but that axis has no sampling",
                            axis_duplicates[i], i, axis_names[i]);
        const char *du = json_string_value(json_object_get(dup, "unit"));
        const char *su = json_string_value(json_object_get(sampling, "unit"));
        if (strcmp(du, su) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.electron_microscope[\"%s\"] is in '%.40s' but its "
                            "duplicate axes[%zu].sampling (%s) is in '%.40s'; the unit differs",
                            axis_duplicates[i], du, i, axis_names[i], su);
        double a = json_number_value(json_object_get(dup, "value"));
        double b = json_number_value(json_object_get(sampling, "value"));
        if (!(fabs(a - b) <= DUPLICATE_RTOL * fmax(fabs(a), fabs(b))))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.electron_microscope[\"%s\"] = %.17g conflicts "
                            "with axes[%zu].sampling (%s) = %.17g; duplicates must agree within "
                            "a relative 1e-14",
                            axis_duplicates[i], a, i, axis_names[i], b);
    }
    return QEM_OK;
}

/* calibration_overrides (§5.3): 8 paths, canonical units in schema 2
 * (calculation units in schema 1), user_override provenance, evidence,
 * the scan range, and complete row/column pairs in one unit. */
static qem_status check_overrides(const json_t *sm, int schema, qem_error *error)
{
    const json_t *ov = json_object_get(sm, "calibration_overrides");
    const char *path;
    const json_t *q;
    json_object_foreach((json_t *)ov, path, q) {
        char where[192];
        snprintf(where, sizeof where, "scientific_metadata.calibration_overrides[\"%.120s\"]",
                 path);
        if (!in_list(override_paths, sizeof override_paths / sizeof override_paths[0], path))
            return qem_fail(error, QEM_E_METADATA,
                            "%s is not an allowed override path (only accelerating_voltage, "
                            "semi_convergence_angle, dwell_time, camera_length, pixel_size_row/"
                            "_column and reciprocal_pixel_size_row/_column)",
                            where);
        quantity_kind kind = path_kind(path);
        double value;
        QEM_TRY(check_quantity(q, where, kind, schema, PROVENANCE_NONE, &value, error));
        const char *unit = json_string_value(json_object_get(q, "unit"));
        if (schema == 1 && !in_null_list(kinds[kind].calc_units, unit))
            return qem_fail(error, QEM_E_METADATA,
                            "%s is in '%.40s': schema-1 calibration overrides use calculation "
                            "units (%s)",
                            where, unit, kinds[kind].calc_text);
        const json_t *prov = json_object_get(q, "provenance");
        if (!json_is_string(prov) || strcmp(json_string_value(prov), "user_override") != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "%s provenance must be exactly \"user_override\"", where);
        const json_t *evidence = json_object_get(q, "evidence");
        if (!json_is_string(evidence) || json_string_length(evidence) == 0)
            return qem_fail(error, QEM_E_METADATA,
                            "%s needs non-empty evidence (where the user value comes from)", where);
        /* Schema 1 stores metres (checked above); schema 2 angstrom. */
        double metres =
            schema == 1 ? json_number_value(json_object_get(q, "value")) : value * 1e-10;
        if (kind == KIND_SCAN && !scan_override_in_range(metres))
            return qem_fail(error, QEM_E_METADATA,
                            "%s = %g angstrom: scan sampling must lie between 0.0001 and 10000 "
                            "angstrom per pixel",
                            where, value);
    }
    static const char *const pairs[] = {P_PIXEL, P_RECIPROCAL};
    for (size_t p = 0; ov && p < 2; p++) {
        char row[96], column[96];
        snprintf(row, sizeof row, "%srow", pairs[p]);
        snprintf(column, sizeof column, "%scolumn", pairs[p]);
        const json_t *r = json_object_get(ov, row), *c = json_object_get(ov, column);
        if (!r != !c)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.calibration_overrides[\"%s\"] needs both row and "
                            "column: '%s' is missing",
                            r ? row : column, r ? column : row);
        if (r && strcmp(json_string_value(json_object_get(r, "unit")),
                        json_string_value(json_object_get(c, "unit"))) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.calibration_overrides[\"%s\"] and [\"%s\"] must "
                            "give row and column in the same unit",
                            row, column);
    }
    return QEM_OK;
}

static qem_status check_source_metadata(const json_t *sm, qem_error *error)
{
    if (!json_is_object(json_object_get(sm, "source_metadata")))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_metadata must be an object (possibly empty)");
    const json_t *coverage = json_object_get(sm, "source_metadata_coverage");
    const char *cov = json_is_string(coverage) ? json_string_value(coverage) : "";
    if (strcmp(cov, "reader-retained") != 0 && strcmp(cov, "exhaustive") != 0 &&
        strcmp(cov, "unknown") != 0)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_metadata_coverage must be one of "
                        "reader-retained, exhaustive or unknown");
    return QEM_OK;
}

/* --- source_documents ----------------------------------------------------- */

static qem_status check_xml(const char *content, size_t size, const char *where, qem_error *error)
{
    if (contains_nocase(content, size, "<!DOCTYPE") || contains_nocase(content, size, "<!ENTITY"))
        return qem_fail(error, QEM_E_METADATA,
                        "%s: XML documents may not contain a DOCTYPE or ENTITY declaration", where);
    XML_Parser parser = XML_ParserCreate(NULL);
    if (!parser)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory parsing %s", where);
    enum XML_Status st = XML_Parse(parser, content, (int)size, 1);
    qem_status result = QEM_OK;
    if (st != XML_STATUS_OK)
        result = qem_fail(error, QEM_E_METADATA, "%s is not well-formed XML (line %lu: %s)", where,
                          (unsigned long)XML_GetCurrentLineNumber(parser),
                          XML_ErrorString(XML_GetErrorCode(parser)));
    XML_ParserFree(parser);
    return result;
}

static qem_status check_json_document(const char *content, size_t size, const char *where,
                                      qem_error *error)
{
    json_error_t jerr;
    /* Big integers are numbers, as in any JSON reader; NaN and Infinity are
     * not JSON and jansson refuses them. */
    json_t *doc = json_loadb(content, size,
                             JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &jerr);
    if (!doc)
        return qem_fail(error, QEM_E_METADATA,
                        "%s is not valid JSON (NaN and Infinity are not allowed): line %d: %s",
                        where, jerr.line, qem_json_error_reason(&jerr));
    int object = json_is_object(doc);
    json_decref(doc);
    if (!object)
        return qem_fail(error, QEM_E_METADATA, "%s must be a JSON object of named fields", where);
    return QEM_OK;
}

static qem_status check_documents(const json_t *sm, qem_error *error)
{
    const json_t *docs = json_object_get(sm, "source_documents");
    if (!docs)
        return QEM_OK;
    if (!json_is_array(docs))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_documents must be a list");
    if (json_array_size(docs) > MAX_DOCUMENTS)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.source_documents holds %zu documents; at most %d are "
                        "allowed",
                        json_array_size(docs), MAX_DOCUMENTS);
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(docs); i++) {
        const json_t *doc = json_array_get(docs, i);
        char where[64];
        snprintf(where, sizeof where, "scientific_metadata.source_documents[%zu]", i);
        if (!json_is_object(doc))
            return qem_fail(error, QEM_E_METADATA, "%s must be an object", where);
        const json_t *name = json_object_get(doc, "filename");
        if (!json_is_string(name) || json_string_length(name) == 0 ||
            strpbrk(json_string_value(name), "/\\") ||
            strlen(json_string_value(name)) != json_string_length(name))
            return qem_fail(error, QEM_E_METADATA,
                            "%s.filename must be a non-empty name without '/' or '\\'", where);
        const json_t *content = json_object_get(doc, "content");
        if (!json_is_string(content))
            return qem_fail(error, QEM_E_METADATA, "%s.content must be a string", where);
        const char *text = json_string_value(content);
        size_t size = json_string_length(content);
        total += size;
        if (total > MAX_DOCUMENT_BYTES)
            return qem_fail(error, QEM_E_METADATA,
                            "%s: source documents exceed 4 MiB of UTF-8 content in total", where);
        uint8_t digest[QEM_SHA256_BYTES];
        char hex[65];
        if (qem_sha256_oneshot(text, size, digest) != 0)
            return qem_fail(error, QEM_E_NO_MEMORY, "could not hash %s", where);
        qem_sha256_hex(digest, hex);
        const json_t *sha = json_object_get(doc, "sha256");
        if (!json_is_string(sha) || strcmp(json_string_value(sha), hex) != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "%s.sha256 does not match the SHA-256 of its content (%s)", where, hex);
        const json_t *media = json_object_get(doc, "mediaType");
        const char *m = json_is_string(media) ? json_string_value(media) : "";
        if (strcmp(m, "application/xml") == 0)
            QEM_TRY(check_xml(text, size, where, error));
        else if (strcmp(m, "application/json") == 0)
            QEM_TRY(check_json_document(text, size, where, error));
        else
            return qem_fail(error, QEM_E_METADATA,
                            "%s.mediaType must be application/xml or application/json", where);
    }
    return QEM_OK;
}

/* --- processing ------------------------------------------------------------ */

static qem_status check_processing(const json_t *sm, qem_error *error)
{
    const json_t *processing = json_object_get(sm, "processing");
    if (!json_is_array(processing) || json_array_size(processing) == 0)
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.processing must be a non-empty list of operations");
    size_t i;
    const json_t *entry;
    json_array_foreach(processing, i, entry) {
        if (!json_is_object(entry))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.processing[%zu] must be an object", i);
        const json_t *op = json_object_get(entry, "operation");
        if (!json_is_string(op) || json_string_length(op) == 0)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.processing[%zu] needs a non-empty string "
                            "'operation'",
                            i);
        if (!json_is_boolean(json_object_get(entry, "changes_measurements")))
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.processing[%zu] ('%.60s') needs a boolean "
                            "'changes_measurements'",
                            i, json_string_value(op));
    }
    return QEM_OK;
}

/* The last processing record with `operation` (as the reference indexes
 * them by name), or NULL. */
static const json_t *declared(const json_t *sm, const char *operation)
{
    const json_t *processing = json_object_get(sm, "processing"), *found = NULL, *entry;
    size_t i;
    json_array_foreach(processing, i, entry) {
        if (strcmp(json_string_value(json_object_get(entry, "operation")), operation) == 0)
            found = entry;
    }
    return found;
}

/* §5.5: a change to the stored counts that the header metadata records
 * must be declared in processing. */
static qem_status check_declared_processing(const json_t *sm, const json_t *hm,
                                            const char *stored_dtype, qem_error *error)
{
    if (!json_is_object(hm))
        return QEM_OK;
    const json_t *correction = json_object_get(hm, "hot_pixel_correction");
    if (json_is_object(correction) && truthy(json_object_get(correction, "applied"))) {
        const json_t *r = declared(sm, "flagged_pixel_replacement");
        if (!r || !json_is_true(json_object_get(r, "changes_measurements")))
            return qem_fail(error, QEM_E_METADATA,
                            "metadata.hot_pixel_correction.applied says flagged detector pixels "
                            "were replaced, but scientific_metadata.processing does not declare "
                            "flagged_pixel_replacement with changes_measurements true");
    }
    if (truthy(json_object_get(hm, "flagged_markers_stored_as_zero")) &&
        !declared(sm, "flagged_marker_zeroing"))
        return qem_fail(error, QEM_E_METADATA,
                        "metadata.flagged_markers_stored_as_zero is set, but "
                        "scientific_metadata.processing does not declare flagged_marker_zeroing");
    const json_t *source = json_object_get(hm, "source_dtype");
    if (truthy(source) && stored_dtype && stored_dtype[0] &&
        !(json_is_string(source) && strcmp(json_string_value(source), stored_dtype) == 0)) {
        const char *src = json_is_string(source) ? json_string_value(source) : "(not a string)";
        const char *operation = strcmp(src, "float64") == 0 && strcmp(stored_dtype, "float32") == 0
                                    ? "exact_float_narrowing"
                                    : "exact_integer_narrowing";
        const json_t *r = declared(sm, operation);
        const json_t *rs = r ? json_object_get(r, "stored_dtype") : NULL;
        if (!r || !json_equal((json_t *)json_object_get(r, "source_dtype"), (json_t *)source) ||
            !json_is_string(rs) || strcmp(json_string_value(rs), stored_dtype) != 0 ||
            !json_is_false(json_object_get(r, "changes_measurements")))
            return qem_fail(error, QEM_E_METADATA,
                            "counts were stored as %s from %.40s (metadata.source_dtype), but "
                            "scientific_metadata.processing does not declare a matching %s "
                            "(same source_dtype and stored_dtype, changes_measurements false)",
                            stored_dtype, src, operation);
    }
    return QEM_OK;
}

/* --- sample (spec 0.0.3) ------------------------------------------------------ */

static const char *const sample_geometries[] = {"cross-section", "plan-view"};
static const char *const sample_roles[] = {"film", "substrate", "support", "particle"};
static const char *const thickness_methods[] = {"diffraction_ridge", "pacbed_fit",
                                                "ssb_depth",         "ptychography_multislice",
                                                "cross_section",     "nominal"};

/* [u, v, w] or [u, v, t, w] integers, not all zero. */
static int miller_indices(const json_t *v)
{
    if (!integer_list(v, 3, 0, 0) && !integer_list(v, 4, 0, 0))
        return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (json_integer_value(json_array_get(v, i)) != 0)
            return 1;
    return 0;
}

static int scan_region(const json_t *region)
{
    if (!json_is_object(region))
        return 0;
    if (json_object_size(region) == 1 && json_object_get(region, "point"))
        return integer_list(json_object_get(region, "point"), 2, 1, 0);
    if (json_object_size(region) != 2)
        return 0;
    static const char *const keys[] = {"rows", "cols"};
    for (size_t k = 0; k < 2; k++) {
        const json_t *pair = json_object_get(region, keys[k]);
        if (!integer_list(pair, 2, 1, 0) || json_integer_value(json_array_get(pair, 0)) >=
                                                json_integer_value(json_array_get(pair, 1)))
            return 0;
    }
    return 1;
}

static qem_status check_estimate(const json_t *e, const char *where, const json_t *components,
                                 qem_error *error)
{
    if (!json_is_object(e))
        return qem_fail(error, QEM_E_METADATA, "%s must be an object", where);
    const json_t *method = json_object_get(e, "method");
    if (!json_is_string(method) ||
        !in_list(thickness_methods, sizeof thickness_methods / sizeof thickness_methods[0],
                 json_string_value(method)))
        return qem_fail(error, QEM_E_METADATA,
                        "%s.method must be one of diffraction_ridge, pacbed_fit, ssb_depth, "
                        "ptychography_multislice, cross_section, nominal",
                        where);
    const json_t *unit = json_object_get(e, "unit");
    if (!json_is_string(unit) || strcmp(json_string_value(unit), "angstrom") != 0 ||
        !positive_number(json_object_get(e, "value")))
        return qem_fail(error, QEM_E_METADATA, "%s needs a positive value with unit \"angstrom\"",
                        where);
    const json_t *uncertainty = json_object_get(e, "uncertainty");
    if (uncertainty && !positive_number(uncertainty))
        return qem_fail(error, QEM_E_METADATA,
                        "%s.uncertainty must be a positive number (angstrom)", where);
    const json_t *range = json_object_get(e, "range");
    if (range && !json_is_null(range) &&
        (!json_is_array(range) || json_array_size(range) != 2 ||
         !positive_number(json_array_get(range, 0)) || !positive_number(json_array_get(range, 1)) ||
         json_number_value(json_array_get(range, 0)) > json_number_value(json_array_get(range, 1))))
        return qem_fail(error, QEM_E_METADATA,
                        "%s.range must be [low, high], positive, low <= high (angstrom)", where);
    const json_t *region = json_object_get(e, "region");
    if (region && !json_is_null(region)) {
        if (json_is_string(region)) {
            if (!json_object_get(components, json_string_value(region)))
                return qem_fail(error, QEM_E_METADATA, "%s.region '%.60s' is not a component label",
                                where, json_string_value(region));
        } else if (!scan_region(region)) {
            return qem_fail(error, QEM_E_METADATA,
                            "%s.region must be a component label, {rows:[a,b], cols:[c,d]} with "
                            "0 <= a < b and 0 <= c < d, or {point:[row, col]}",
                            where);
        }
    }
    static const char *const texts[] = {"reference", "date"};
    for (size_t k = 0; k < 2; k++) {
        const json_t *t = json_object_get(e, texts[k]);
        if (t && !json_is_string(t))
            return qem_fail(error, QEM_E_METADATA, "%s.%s must be a string", where, texts[k]);
    }
    const json_t *preferred = json_object_get(e, "preferred");
    if (preferred && !json_is_boolean(preferred))
        return qem_fail(error, QEM_E_METADATA, "%s.preferred must be true or false", where);
    return QEM_OK;
}

static qem_status check_component(const char *label, const json_t *c, const json_t *components,
                                  qem_error *error)
{
    char where[160];
    snprintf(where, sizeof where, "scientific_metadata.sample.components[\"%.60s\"]", label);
    if (!json_is_object(c))
        return qem_fail(error, QEM_E_METADATA, "%s must be an object", where);
    const json_t *formula = json_object_get(c, "chemical_formula");
    if (formula && !json_is_string(formula))
        return qem_fail(error, QEM_E_METADATA, "%s.chemical_formula must be a string", where);
    const json_t *role = json_object_get(c, "role");
    if (role && (!json_is_string(role) || !in_list(sample_roles, 4, json_string_value(role))))
        return qem_fail(error, QEM_E_METADATA,
                        "%s.role must be one of film, substrate, support, particle", where);
    const json_t *zone = json_object_get(c, "zone_axis");
    if (zone && !miller_indices(zone))
        return qem_fail(error, QEM_E_METADATA, "%s.zone_axis must be 3 or 4 integers, not all zero",
                        where);
    const json_t *cif = json_object_get(c, "cif");
    if (cif && !json_is_null(cif) &&
        (!json_is_object(cif) || !json_is_string(json_object_get(cif, "document")) ||
         !json_is_string(json_object_get(cif, "sha256"))))
        return qem_fail(error, QEM_E_METADATA,
                        "%s.cif must be an object with string 'document' and 'sha256'", where);
    const json_t *estimates = json_object_get(c, "thickness_estimates");
    if (!estimates)
        return QEM_OK;
    if (!json_is_array(estimates))
        return qem_fail(error, QEM_E_METADATA, "%s.thickness_estimates must be a list", where);
    size_t preferred = 0;
    for (size_t i = 0; i < json_array_size(estimates); i++) {
        char ewhere[224];
        snprintf(ewhere, sizeof ewhere, "%s.thickness_estimates[%zu]", where, i);
        const json_t *e = json_array_get(estimates, i);
        QEM_TRY(check_estimate(e, ewhere, components, error));
        preferred += json_is_true(json_object_get(e, "preferred"));
    }
    if (preferred > 1)
        return qem_fail(error, QEM_E_METADATA,
                        "%s: at most one preferred thickness estimate per component", where);
    return QEM_OK;
}

static qem_status check_sample(const json_t *sm, qem_error *error)
{
    const json_t *sample = json_object_get(sm, "sample");
    if (!sample)
        return QEM_OK;
    if (!json_is_object(sample))
        return qem_fail(error, QEM_E_METADATA, "scientific_metadata.sample must be an object");
    const json_t *prov = json_object_get(sample, "provenance");
    if (!json_is_string(prov) || is_blank(json_string_value(prov)))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.sample lacks provenance: a declared specimen needs a "
                        "non-blank provenance string");
    static const char *const texts[] = {"id", "name", "description", "orientation_relationship",
                                        "evidence"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const json_t *t = json_object_get(sample, texts[k]);
        if (t && !json_is_string(t))
            return qem_fail(error, QEM_E_METADATA, "scientific_metadata.sample.%s must be a string",
                            texts[k]);
    }
    const json_t *geometry = json_object_get(sample, "geometry");
    if (geometry &&
        (!json_is_string(geometry) || !in_list(sample_geometries, 2, json_string_value(geometry))))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.sample.geometry must be cross-section or plan-view");
    const json_t *growth = json_object_get(sample, "growth_direction");
    if (growth && !miller_indices(growth))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.sample.growth_direction must be 3 or 4 integers, not "
                        "all zero");
    const json_t *components = json_object_get(sample, "components");
    if (components && !json_is_object(components))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata.sample.components must map non-empty labels to "
                        "component objects");
    const char *label;
    const json_t *c;
    json_object_foreach((json_t *)components, label, c) {
        if (!label[0])
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.sample.components must map non-empty labels to "
                            "component objects");
        QEM_TRY(check_component(label, c, components, error));
    }
    const json_t *in_view = json_object_get(sample, "components_in_view");
    if (in_view && !json_is_null(in_view)) {
        int ok = json_is_array(in_view);
        for (size_t i = 0; ok && i < json_array_size(in_view); i++) {
            const json_t *l = json_array_get(in_view, i);
            ok = json_is_string(l) && json_object_get(components, json_string_value(l));
        }
        if (!ok)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.sample.components_in_view must list component "
                            "labels");
    }
    return QEM_OK;
}

/* ------------------------------------------------------------------------ */

qem_status qem_metadata_validate(const json_t *sm, const json_t *header_metadata,
                                 const uint64_t shape[4], const char *stored_dtype,
                                 qem_error *error)
{
    if (!json_is_object(sm))
        return qem_fail(error, QEM_E_METADATA,
                        "scientific_metadata is missing or not an object; re-export the original "
                        "acquisition");
    int schema = 0;
    QEM_TRY(check_schema(sm, &schema, error));
    const json_t *axes = json_object_get(sm, "axes");
    QEM_TRY(check_axes(axes, shape, error));
    QEM_TRY(check_sections(sm, error));
    QEM_TRY(check_axis_sampling(axes, schema, error));
    QEM_TRY(check_microscope(sm, schema, error));
    if (schema == 2)
        QEM_TRY(check_duplicates(sm, axes, error));
    QEM_TRY(check_overrides(sm, schema, error));
    QEM_TRY(check_source_metadata(sm, error));
    QEM_TRY(check_documents(sm, error));
    QEM_TRY(check_processing(sm, error));
    QEM_TRY(check_sample(sm, error));
    return check_declared_processing(sm, header_metadata, stored_dtype, error);
}
