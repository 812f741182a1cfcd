#include "products/fftw_loader.h"

#include <pthread.h>
#include <string.h>

#include "common/error.h"
#include "common/lazy_library.h"

/* Written once under pthread_once, read-only after (fork-safe as the
 * libcrypto loader is). */
static struct {
    pthread_once_t once;
    int ok;
    qem_fftw table;
    char why[400];
} loader = {.once = PTHREAD_ONCE_INIT};

static void load_once(void)
{
    qem_fftw *out = &loader.table;
    char *why = loader.why;
    const size_t why_size = sizeof loader.why;
    void *handle = qem_lazy_open(QEM_LIBFFTW_SONAME, why, why_size);
    loader.ok = handle && !QEM_LAZY_BIND(handle, out, plan_dft_2d, fftw_plan_dft_2d, why, why_size) &&
                !QEM_LAZY_BIND(handle, out, execute, fftw_execute, why, why_size) &&
                !QEM_LAZY_BIND(handle, out, destroy_plan, fftw_destroy_plan, why, why_size);
    if (!loader.ok)
        memset(out, 0, sizeof *out);
}

qem_status qem_fftw_get(const qem_fftw **table, qem_error *error)
{
    pthread_once(&loader.once, load_once);
    *table = loader.ok ? &loader.table : NULL;
    return loader.ok ? QEM_OK
                     : qem_fail(error, QEM_E_IO, "cannot load FFTW (%s): %s", QEM_LIBFFTW_SONAME,
                                loader.why);
}
