/* JSON through jansson: strict parsing (duplicate keys refused, 64-bit
 * integers) and small typed accessors for validating headers. */
#ifndef QEM_COMMON_JSON_H
#define QEM_COMMON_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

/* Parses exactly one JSON object from `size` bytes. A syntax error or a
 * repeated key at any depth is reported with `status` and its position. */
qem_status qem_json_parse_object(const char *data, size_t size, qem_status status, json_t **out,
                                 qem_error *error);

/* What is wrong with a document jansson refused, in qem's words (jansson's
 * own texts name its flags, such as JSON_ALLOW_NUL). */
const char *qem_json_error_reason(const json_error_t *error);

/* A non-negative JSON integer (never a boolean or a real) as uint64. */
int qem_json_as_u64(const json_t *value, uint64_t *out);

/* 1 if `value` is a string of exactly 64 lowercase hex digits (a digest
 * as the upstream formats write them). */
int qem_json_is_lower_hex64(const json_t *value);

/* 1 if `value` is the string `want`; the non-negative integer `want`. */
int qem_json_string_is(const json_t *value, const char *want);
int qem_json_u64_is(const json_t *value, uint64_t want);

/* Serialises with sorted keys, compact separators and ASCII-only output,
 * the layout the reference writer uses. Caller frees with free(). */
char *qem_json_dump_canonical(const json_t *value, size_t *size);

/* `value` (may be NULL: built out of memory) as compact JSON text to be
 * released with qem_free, taking the reference; NULL and QEM_E_NO_MEMORY
 * when it cannot be had. */
char *qem_json_take_text(json_t *value, qem_error *error);

#endif
