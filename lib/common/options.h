/* Options structs begin with `size_t struct_size`. A caller built against
 * an older, smaller struct still works: fields it lacks keep defaults. */
#ifndef QEM_COMMON_OPTIONS_H
#define QEM_COMMON_OPTIONS_H

#include <stddef.h>

#include "qem.h"

/* `local` holds defaults (from the *_init function); overlays the caller's
 * `user` struct (may be NULL) up to its declared size. A struct_size that
 * is not plausible means *_init() was never called. */
qem_status qem_options_overlay(void *local, size_t local_size, const void *user,
                               const char *what, qem_error *error);

#endif
