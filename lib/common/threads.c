/* Thread counts, and running on after fork(). */
#include <pthread.h>
#include <stdatomic.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"
#include "common/threads.h"

/* Process-wide by nature (fork copies the process, not a handle): whether
 * this process has started a team of several threads, and whether it is a
 * child forked after that. Written only by qem_threads_resolve and the
 * fork handler; nothing else in the library is global. */
static atomic_int teams_started;
static atomic_int forked_after_teams;
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void child_after_fork(void)
{
    if (atomic_load(&teams_started))
        atomic_store(&forked_after_teams, 1);
}

static void install_fork_handler(void)
{
    (void)pthread_atfork(NULL, NULL, child_after_fork);
}

qem_status qem_threads_check(int requested, const char *what, qem_error *error)
{
    if (requested < 0 || requested > QEM_MAX_THREADS)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "%s is %d; it must be 0 (every core) to %d", what, requested,
                        QEM_MAX_THREADS);
    return QEM_OK;
}

int qem_threads_resolve(int requested)
{
#ifdef _OPENMP
    pthread_once(&fork_handler_once, install_fork_handler);
    if (atomic_load(&forked_after_teams))
        return 1;
    int threads = requested > 0 ? requested : omp_get_max_threads();
    if (threads > QEM_MAX_THREADS)
        threads = QEM_MAX_THREADS;
    if (threads < 1)
        threads = 1;
    if (threads > 1 && !atomic_load(&teams_started))
        atomic_store(&teams_started, 1);
    return threads;
#else
    (void)requested;
    return 1;
#endif
}
