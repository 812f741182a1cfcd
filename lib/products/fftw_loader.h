/* FFTW (double precision), opened on the first iDPC instead of linked:
 * only `qem dpc` and the DPC calls use it, and mapping it costs every other
 * command about a fifth of its start-up (issue 28). */
#ifndef QEM_PRODUCTS_FFTW_LOADER_H
#define QEM_PRODUCTS_FFTW_LOADER_H

#include <fftw3.h>

#include "qem.h"

#define QEM_LIBFFTW_SONAME "libfftw3.so.3"

typedef struct qem_fftw {
    fftw_plan (*plan_dft_2d)(int n0, int n1, fftw_complex *in, fftw_complex *out, int sign,
                             unsigned flags);
    void (*execute)(const fftw_plan plan);
    void (*destroy_plan)(fftw_plan plan);
} qem_fftw;

/* The table, loading FFTW on the process's first call (once, whichever
 * thread gets there first); QEM_E_IO with "cannot load FFTW
 * (libfftw3.so.3): <why>" if it cannot be loaded. */
qem_status qem_fftw_get(const qem_fftw **table, qem_error *error);

#endif
