/* Human-readable summaries of files, pack sources and pack plans. */
#ifndef QEM_CLI_SUMMARY_PRINT_H
#define QEM_CLI_SUMMARY_PRINT_H

#include <jansson.h>

#include "qem.h"

/* `qem info` of a container (qem_container_summary_json, escaped): each
 * format's summary laid out for reading. */
void print_container_summary(const json_t *summary);
/* `qem pack inspect` (qem_pack_inspection_json, escaped) and `qem pack plan`. */
void print_inspection(const json_t *inspection);
void print_plan(const qem_pack_plan *plan);
/* `qem inspect` of any acquisition (qem_acquisition_json, escaped). */
void print_acquisition(const json_t *description, const char *path);

#endif
