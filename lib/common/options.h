/* Options structs begin with `size_t struct_size`. A caller built against
 * an older, smaller struct still works: fields it lacks keep defaults. */
#ifndef QEM_COMMON_OPTIONS_H
#define QEM_COMMON_OPTIONS_H

#include <stddef.h>

#include "qem.h"

/* `local` holds defaults (from the *_init function); overlays the caller's
 * `user` struct (may be NULL) up to its declared size. A struct_size that
 * is not plausible means *_init() was never called. A caller's struct
 * larger than the library's is accepted only when the extra bytes are zero
 * (fields a newer qem would know, left unset). */
qem_status qem_options_overlay(void *local, size_t local_size, const void *user,
                               const char *what, qem_error *error);

/* Result structs the library fills also begin with `size_t struct_size`,
 * set by the caller to the size it compiled against. Copies the library's
 * complete `value` (`value_size` bytes, its own struct_size ignored) into
 * the caller's `out`, at most out->struct_size bytes, and sets
 * out->struct_size to the bytes written. A struct_size of 0 (never set) or
 * a NULL `out` is QEM_E_INVALID_ARGUMENT. */
qem_status qem_result_deliver(void *out, const void *value, size_t value_size, const char *what,
                              qem_error *error);

/* The caller's struct_size of a result struct, for checking before work. */
qem_status qem_result_check(const void *out, const char *what, qem_error *error);

#endif
