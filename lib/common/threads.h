/* How many threads the library's parallel work uses: one helper for every
 * site, so the limit and the fork rule hold everywhere. */
#ifndef QEM_COMMON_THREADS_H
#define QEM_COMMON_THREADS_H

#include "qem.h"

/* A caller's thread count: 0 (the default) to QEM_MAX_THREADS; anything
 * else is QEM_E_INVALID_ARGUMENT naming `what` (e.g.
 * "qem_open_options.threads"). Checked where options arrive, before work. */
qem_status qem_threads_check(int requested, const char *what, qem_error *error);

/* The team size for a parallel region: `requested` if positive, else the
 * OpenMP default, at most QEM_MAX_THREADS; and 1 in a child forked after
 * this process ran a team of several threads, where GNU OpenMP's pool is
 * gone and a team would hang. */
int qem_threads_resolve(int requested);

#endif
