/* A user calibration file merged into scientific_metadata (`qem save
 * --calibration`; doc/metadata.md, "Calibration files"). Every entry is
 * checked and converted to the schema-2 unit, the result is validated, and
 * a refused file leaves the metadata unchanged. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/json.h"
#include "qem/metadata.h"
#include "qem/metadata_quantities.h"

#define CAL_DEFAULT_PROVENANCE "calibration_file"

/* What a calibration-file path names: the electron_microscope / override
 * path it sets and the axis whose sampling it also sets (-1: none). */
typedef struct cal_target {
    const char *name;
    const char *path;
    int axis;
    quantity_kind kind;
    int overridable;
} cal_target;

static const cal_target cal_targets[] = {
    {P_VOLTAGE, P_VOLTAGE, -1, KIND_VOLTAGE, 1},
    {P_BEAM, P_BEAM, -1, KIND_BEAM_ENERGY, 0},
    {P_ANGLE, P_ANGLE, -1, KIND_ANGLE, 1},
    {P_DWELL, P_DWELL, -1, KIND_DWELL, 1},
    {P_CAMERA, P_CAMERA, -1, KIND_CAMERA, 1},
    {P_PIXEL "row", P_PIXEL "row", 0, KIND_SCAN, 1},
    {P_PIXEL "column", P_PIXEL "column", 1, KIND_SCAN, 1},
    {P_RECIPROCAL "row", P_RECIPROCAL "row", 2, KIND_DETECTOR, 1},
    {P_RECIPROCAL "column", P_RECIPROCAL "column", 3, KIND_DETECTOR, 1},
    {"scan_sampling_row", P_PIXEL "row", 0, KIND_SCAN, 1},
    {"scan_sampling_column", P_PIXEL "column", 1, KIND_SCAN, 1},
    {"detector_sampling_row", P_RECIPROCAL "row", 2, KIND_DETECTOR, 1},
    {"detector_sampling_column", P_RECIPROCAL "column", 3, KIND_DETECTOR, 1},
};
#define CAL_TARGETS (sizeof cal_targets / sizeof cal_targets[0])

static const cal_target *find_target(const char *name)
{
    for (size_t i = 0; i < CAL_TARGETS; i++)
        if (strcmp(cal_targets[i].name, name) == 0)
            return &cal_targets[i];
    return NULL;
}

/* Parses one calibration-file entry into a canonical quantity object.
 * `section` is "quantities" or "overrides". */
static qem_status cal_entry(const char *section, const char *name, const json_t *entry,
                            const cal_target *t, json_t **out, qem_error *error)
{
    static const char *const allowed[] = {"value", "unit", "provenance", "evidence"};
    int override = strcmp(section, "overrides") == 0;
    if (!json_is_object(entry))
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file: %s[\"%s\"] must be an object with value and unit",
                        section, name);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        if (!in_list(allowed, 4, key))
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: %s[\"%s\"] has unknown field '%.40s' (use value, "
                            "unit, provenance, evidence)",
                            section, name, key);
    }
    double value;
    const json_t *jv = json_object_get(entry, "value");
    if (json_is_boolean(jv) || !number_value(jv, &value) || !isfinite(value) || value <= 0)
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file: %s[\"%s\"] value must be a finite number greater than "
                        "zero",
                        section, name);
    const json_t *ju = json_object_get(entry, "unit");
    const unit_conversion *c =
        json_is_string(ju) ? qem_metadata_find_unit(t->kind, json_string_value(ju)) : NULL;
    if (!c)
        return qem_fail(
            error, QEM_E_METADATA,
            "calibration file: %s[\"%s\"] has unknown unit '%.40s' (give it in %s or an "
            "accepted source unit)",
            section, name, json_is_string(ju) ? json_string_value(ju) : "(missing)",
            qem_metadata_canonical_unit(t->kind));
    double canonical = value * c->factor;
    if (!isfinite(canonical))
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file: %s[\"%s\"] value is not finite once converted to %s",
                        section, name, c->target);
    const json_t *prov = json_object_get(entry, "provenance");
    const json_t *evidence = json_object_get(entry, "evidence");
    if (evidence && !json_is_string(evidence))
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file: %s[\"%s\"] evidence must be a string", section, name);
    const char *provenance;
    if (override) {
        if (prov &&
            !(json_is_string(prov) && strcmp(json_string_value(prov), "user_override") == 0))
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: overrides[\"%s\"] provenance, when given, must be "
                            "\"user_override\"",
                            name);
        if (!evidence || json_string_length(evidence) == 0)
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: overrides[\"%s\"] needs non-empty evidence (where "
                            "the value comes from)",
                            name);
        if (t->kind == KIND_SCAN && !scan_override_in_range(canonical * 1e-10))
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: overrides[\"%s\"] = %g angstrom: scan sampling must "
                            "lie between 0.0001 and 10000 angstrom per pixel",
                            name, canonical);
        provenance = "user_override";
    } else {
        if (prov && (!json_is_string(prov) || is_blank(json_string_value(prov))))
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: quantities[\"%s\"] provenance must be a non-blank "
                            "string",
                            name);
        provenance = prov ? json_string_value(prov) : CAL_DEFAULT_PROVENANCE;
    }
    json_t *q = json_pack("{s:f, s:s, s:s}", "value", canonical, "unit", c->target, "provenance",
                          provenance);
    if (q && evidence && json_object_set(q, "evidence", (json_t *)evidence) != 0) {
        json_decref(q);
        q = NULL;
    }
    if (!q)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory applying the calibration file");
    *out = q;
    return QEM_OK;
}

/* Sets `key` of `object` (created when missing) to `value` (stolen). */
static int set_in(json_t *parent, const char *member, const char *key, json_t *value)
{
    json_t *object = json_object_get(parent, member);
    if (!json_is_object(object)) {
        object = json_object();
        if (!object || json_object_set_new(parent, member, object) != 0) {
            json_decref(value);
            return -1;
        }
    }
    return json_object_set_new(object, key, value);
}

static qem_status apply_section(json_t *sm, const json_t *calibration, const char *section,
                                qem_error *error)
{
    const json_t *entries = json_object_get(calibration, section);
    if (!entries)
        return QEM_OK;
    if (!json_is_object(entries))
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file: \"%s\" must be an object mapping paths to entries",
                        section);
    int override = strcmp(section, "overrides") == 0;
    const char *set_by[CAL_TARGETS] = {0}; /* per electron_microscope path, the entry name */
    const char *name;
    const json_t *entry;
    json_object_foreach((json_t *)entries, name, entry) {
        const cal_target *t = find_target(name);
        if (!t)
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: %s[\"%.80s\"] is not a known quantity path", section,
                            name);
        if (override && !t->overridable)
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: overrides[\"%s\"] is not an allowed override path",
                            name);
        /* The first target with the same path is the canonical slot. */
        size_t slot = (size_t)(find_target(t->path) - cal_targets);
        if (set_by[slot])
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: %s[\"%s\"] and [\"%s\"] set the same quantity",
                            section, set_by[slot], name);
        set_by[slot] = name;
        json_t *q = NULL;
        QEM_TRY(cal_entry(section, name, entry, t, &q, error));
        int failed;
        if (override) {
            failed = set_in(sm, "calibration_overrides", t->path, q);
        } else {
            failed = 0;
            json_t *em = json_object_get(sm, "electron_microscope");
            int set_em = t->axis < 0 || t->kind == KIND_SCAN || strcmp(t->name, t->path) == 0 ||
                         (json_is_object(em) && json_object_get(em, t->path));
            if (t->axis >= 0) {
                json_t *axis = json_array_get(json_object_get(sm, "axes"), (size_t)t->axis);
                failed = !json_is_object(axis) || json_object_set(axis, "sampling", q) != 0;
            }
            if (!failed && set_em)
                failed = set_in(sm, "electron_microscope", t->path, json_incref(q)) != 0;
            json_decref(q);
        }
        if (failed)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory applying the calibration file");
    }
    return QEM_OK;
}

qem_status qem_metadata_apply_calibration(json_t *scientific, const json_t *calibration,
                                          qem_error *error)
{
    if (!json_is_object(scientific))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_metadata_apply_calibration: no scientific_metadata object");
    if (!json_is_object(calibration))
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file must be a JSON object with \"quantities\" and/or "
                        "\"overrides\"");
    const json_t *schema = json_object_get(scientific, "schema");
    if (!json_is_string(schema) || strcmp(json_string_value(schema), SCHEMA_2) != 0)
        return qem_fail(error, QEM_E_METADATA,
                        "a calibration file applies to schema-2 scientific metadata only");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)calibration, key, v) {
        if (strcmp(key, "quantities") != 0 && strcmp(key, "overrides") != 0)
            return qem_fail(error, QEM_E_METADATA,
                            "calibration file: unknown top-level key '%.60s' (use \"quantities\" "
                            "and \"overrides\")",
                            key);
    }
    if (json_object_size(calibration) == 0)
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file sets nothing: give \"quantities\" and/or \"overrides\"");
    uint64_t shape[4];
    const json_t *axes = json_object_get(scientific, "axes");
    for (size_t i = 0; i < 4; i++)
        if (!qem_json_as_u64(json_object_get(json_array_get(axes, i), "size"), &shape[i]) ||
            json_array_size(axes) != 4)
            return qem_fail(error, QEM_E_METADATA,
                            "scientific_metadata.axes must be a list of four axis objects");

    /* The metadata must be valid before anything is added to it. */
    qem_error before = {0};
    if (qem_metadata_validate(scientific, NULL, shape, NULL, &before) != QEM_OK)
        return qem_fail(error, QEM_E_METADATA,
                        "calibration file cannot be applied: the scientific metadata is invalid: %s",
                        before.message);

    /* Work on a copy so that a refused file leaves `scientific` untouched. */
    json_t *copy = json_deep_copy(scientific);
    if (!copy)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory applying the calibration file");
    qem_status st = apply_section(copy, calibration, "quantities", error);
    if (st == QEM_OK)
        st = apply_section(copy, calibration, "overrides", error);
    /* Pairs and detector units, named by entry before the general check. */
    static const char *const pair_prefix[] = {P_PIXEL, P_RECIPROCAL};
    const json_t *ov = json_object_get(copy, "calibration_overrides");
    for (size_t p = 0; st == QEM_OK && json_is_object(ov) && p < 2; p++) {
        char row[96], column[96];
        snprintf(row, sizeof row, "%srow", pair_prefix[p]);
        snprintf(column, sizeof column, "%scolumn", pair_prefix[p]);
        const json_t *r = json_object_get(ov, row), *c = json_object_get(ov, column);
        if (!r != !c)
            st = qem_fail(error, QEM_E_METADATA,
                          "calibration file: override \"%s\" needs its partner \"%s\" (row and "
                          "column are set together)",
                          r ? row : column, r ? column : row);
        else if (r && !json_equal(json_object_get(r, "unit"), json_object_get(c, "unit")))
            st = qem_fail(error, QEM_E_METADATA,
                          "calibration file: overrides \"%s\" and \"%s\" must resolve to the same "
                          "unit",
                          row, column);
    }
    if (st == QEM_OK) {
        const json_t *new_axes = json_object_get(copy, "axes");
        const json_t *dr = json_object_get(json_array_get(new_axes, 2), "sampling");
        const json_t *dc = json_object_get(json_array_get(new_axes, 3), "sampling");
        if (dr && dc && !json_equal(json_object_get(dr, "unit"), json_object_get(dc, "unit")))
            st = qem_fail(error, QEM_E_METADATA,
                          "calibration file: detector row and column sampling must use the same "
                          "unit");
    }
    if (st == QEM_OK) { /* a safety net: every entry was checked above */
        qem_error inner = {0};
        if (qem_metadata_validate(copy, NULL, shape, NULL, &inner) != QEM_OK)
            st = qem_fail(error, QEM_E_METADATA, "calibration file: the result is invalid: %s",
                          inner.message);
    }
    if (st == QEM_OK) {
        /* Move the result into place. */
        if (json_object_clear(scientific) != 0 || json_object_update(scientific, copy) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory applying the calibration file");
    }
    json_decref(copy);
    return st;
}
