/* scientific_metadata, schema "quantem.scientific-metadata/2" (notes §5):
 * the calibration authority of a .qem file. Validation applies every
 * rejection rule of the upstream validator; calibration is read with
 * overrides taking precedence; new metadata never guesses a quantity. */
#ifndef QEM_QEM_METADATA_H
#define QEM_QEM_METADATA_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

/* Validates `scientific` against the header: `header_metadata` is the
 * header's free-form "metadata" object (NULL when absent) used for the
 * declared-processing cross-checks, `stored_dtype` the header dtype
 * ("uint8", "uint16", "float32"). Fails with QEM_E_METADATA and a message
 * naming the rule; a newer schema major is QEM_E_UNSUPPORTED. */
qem_status qem_metadata_validate(const json_t *scientific, const json_t *header_metadata,
                                 const uint64_t shape[4], const char *stored_dtype,
                                 qem_error *error);

/* Effective calibration of validated metadata (schema 1 values converted
 * to canonical units). */
void qem_metadata_calibration(const json_t *scientific, qem_calibration *calibration);
/* The detector calibration `qem calibrate` records in scientific_metadata
 * (extension QEM_DETECTOR_CALIBRATION_KEY, doc/products.md): 1 with `c`
 * filled when it is there with a finite centre and positive radius. */
int qem_metadata_detector_calibration(const json_t *scientific, qem_detector_calibration *c);

/* A schema-2 object for freshly saved measurements: axes from the shape,
 * `processing: [lossless_storage]`, coverage reader-retained,
 * `source_metadata` = a deep copy of `source_metadata` (NULL: {}), empty
 * electron_microscope and calibration_overrides. Nothing is guessed. */
json_t *qem_metadata_new(const uint64_t shape[4], const char *source_format,
                         const json_t *source_metadata);

/* Applies a user calibration file (see doc/metadata.md) to `scientific`:
 *   {"quantities": {PATH: {"value": V, "unit": U, "provenance"?: P,
 *                          "evidence"?: E}, ...},
 *    "overrides":  {PATH: {"value": V, "unit": U, "evidence": E}, ...}}
 * PATH is a known quantity path (notes §5.2), or "scan_sampling_row" /
 * "scan_sampling_column" / "detector_sampling_row" /
 * "detector_sampling_column" for the axes. Accepted source units are
 * converted to canonical ones. Scan pixel sizes set both the axis sampling
 * and electron_microscope pixel_size_row/_column; overrides get provenance
 * "user_override". Anything unknown or invalid fails with
 * QEM_E_METADATA naming the entry. */
qem_status qem_metadata_apply_calibration(json_t *scientific, const json_t *calibration,
                                          qem_error *error);

#endif
