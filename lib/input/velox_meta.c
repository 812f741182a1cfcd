/* The JSON a Thermo Fisher Velox EMD file carries (velox.c reads it out
 * of the file): the /Version document and the per-frame Metadata text.
 * Kept apart from libhdf5 so that its parsing can be fuzzed alone. The
 * facts it keeps are bounded; the one value the reader uses is the scan
 * shape of camera frames, when Scan.ScanSize states it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/input.h"

/* A section larger than this (serialized) is left out of the facts. */
#define SECTION_BYTES (16u << 10)

static json_t *parse_text(const char *text, size_t size, json_error_t *jerr)
{
    /* Velox pads the uint8 array with NULs after the document. */
    const size_t n = strnlen(text, size);
    return json_loadb(text, n, JSON_DISABLE_EOF_CHECK, jerr);
}

int qem_input_velox_version(const char *text, size_t size, json_t **version)
{
    *version = NULL;
    if (size > VELOX_MAX_METADATA_BYTES)
        return 0;
    json_error_t jerr;
    json_t *doc = parse_text(text, size, &jerr);
    const char *format = json_string_value(json_object_get(doc, "format"));
    if (!json_is_object(doc) || !format || strcmp(format, "Velox") != 0) {
        json_decref(doc);
        return 0;
    }
    *version = doc;
    return 1;
}

/* A count written as decimal digits (Velox writes numbers as strings) or
 * as a JSON integer: 1 and `*v`, 0 when absent, -1 when malformed. */
static int count_of(json_t *value, uint64_t *v)
{
    *v = 0;
    if (!value)
        return 0;
    if (json_is_integer(value)) {
        if (json_integer_value(value) < 0)
            return -1;
        *v = (uint64_t)json_integer_value(value);
        return 1;
    }
    const char *s = json_string_value(value);
    if (!s || !s[0] || strlen(s) > 12)
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        *v = *v * 10 + (uint64_t)(*p - '0');
    }
    return 1;
}

static void keep_section(json_t *facts, const char *key, json_t *value)
{
    if (!value)
        return;
    char *text = json_dumps(value, JSON_COMPACT);
    if (text && strlen(text) <= SECTION_BYTES)
        json_object_set(facts, key, value);
    else
        json_object_set_new(facts, key, json_string("left out: larger than 16 KiB"));
    free(text);
}

static int is(json_t *value, const char *text)
{
    const char *s = json_string_value(value);
    return s && strcmp(s, text) == 0;
}

qem_status qem_input_velox_parse_metadata(const char *text, size_t size, uint64_t frames,
                                          const char *where, input_velox_meta *out,
                                          qem_error *error)
{
    memset(out, 0, sizeof *out);
    if (size > VELOX_MAX_METADATA_BYTES)
        return qem_fail(error, QEM_E_LIMIT,
                        "%s holds %zu bytes of metadata; Velox writes at most %u per frame", where,
                        size, (unsigned)VELOX_MAX_METADATA_BYTES);
    json_error_t jerr;
    json_t *doc = parse_text(text, size, &jerr);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return qem_fail(error, QEM_E_METADATA,
                        "%s is not the JSON object Velox writes (%s at line %d, column %d)",
                        where, doc ? "not an object" : jerr.text, jerr.line, jerr.column);
    }
    json_t *facts = json_object();
    static const char *const sections[] = {"Core",  "Instrument", "Acquisition", "Optics",
                                           "Scan",  "Stage",      "BinaryResult", "Sample"};
    for (size_t k = 0; k < sizeof sections / sizeof sections[0]; k++)
        keep_section(facts, sections[k], json_object_get(doc, sections[k]));
    /* The detector that made the frames: BinaryResult names its index in
     * Detectors ("Detector-<index>"). */
    json_t *result = json_object_get(doc, "BinaryResult");
    json_t *detector = NULL;
    uint64_t index = 0;
    if (count_of(json_object_get(result, "DetectorIndex"), &index) == 1) {
        char key[48];
        snprintf(key, sizeof key, "Detector-%llu", (unsigned long long)index);
        detector = json_object_get(json_object_get(doc, "Detectors"), key);
        keep_section(facts, "detector", detector);
    }
    out->camera = is(json_object_get(result, "AcquisitionUnit"), "CameraImage") ||
                  is(json_object_get(detector, "DetectorType"), "ImagingDetector");
    json_t *size_of = json_object_get(json_object_get(doc, "Scan"), "ScanSize");
    uint64_t width = 0, height = 0, positions = 0;
    const int w = count_of(json_object_get(size_of, "width"), &width);
    const int h = count_of(json_object_get(size_of, "height"), &height);
    qem_status st = QEM_OK;
    if (w < 0 || h < 0)
        st = qem_fail(error, QEM_E_METADATA,
                      "%s states a Scan.ScanSize whose width or height is not a count", where);
    /* Camera frames, one per position of the scan the metadata states:
     * a 4D-STEM scan, rows = height (scan lines), columns = width. A scan
     * of another size describes something else (the image's own raster). */
    else if (out->camera && w == 1 && h == 1 && width && height && frames > 1 &&
             !qem_mul_overflow_u64(width, height, &positions) && positions == frames) {
        out->scan[0] = height;
        out->scan[1] = width;
    }
    if (st != QEM_OK) {
        json_decref(facts);
        json_decref(doc);
        return st;
    }
    json_object_set_new(facts, "frames_from_camera", json_boolean(out->camera));
    out->facts = facts;
    json_decref(doc);
    return QEM_OK;
}

void qem_input_velox_meta_free(input_velox_meta *m)
{
    json_decref(m->facts);
    m->facts = NULL;
}
