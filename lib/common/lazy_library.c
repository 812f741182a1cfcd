#include "common/lazy_library.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
               "dlsym's object pointers must hold function pointers");

void *qem_lazy_open(const char *soname, char *why, size_t why_size)
{
    dlerror();
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : "dlopen failed");
    }
    return handle;
}

int qem_lazy_symbol(void *handle, const char *name, void *field, char *why, size_t why_size)
{
    dlerror();
    void *sym = dlsym(handle, name);
    if (!sym) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : name);
        return -1;
    }
    memcpy(field, &sym, sizeof sym);
    return 0;
}
