/* A shared library opened on first use instead of linked: what mapping and
 * relocating it costs is paid only by the commands that call it (issue 28:
 * libcrypto, FFTW). The callers keep a table of function pointers, filled
 * once per process. */
#ifndef QEM_COMMON_LAZY_LIBRARY_H
#define QEM_COMMON_LAZY_LIBRARY_H

#include <stddef.h>

/* dlopen(soname, RTLD_NOW | RTLD_LOCAL): the library's names stay out of
 * the global scope, so they cannot interpose on another copy the host
 * program loads. NULL with `why` filled. Never closed: tables point into it. */
void *qem_lazy_open(const char *soname, char *why, size_t why_size);

/* Stores the address of `name` in `*field` (a function pointer's bytes);
 * 0, or -1 with `why` filled. */
int qem_lazy_symbol(void *handle, const char *name, void *field, char *why, size_t why_size);

/* Binds `out->field` to the function `name`: the sizeof assignment is never
 * evaluated and emits no reference to the library, it only makes the
 * compiler check the field's type against the function's declaration. */
#define QEM_LAZY_BIND(handle, out, field, name, why, why_size)                                    \
    ((void)sizeof((out)->field = name),                                                             \
     qem_lazy_symbol(handle, #name, &(out)->field, why, why_size))

#endif
