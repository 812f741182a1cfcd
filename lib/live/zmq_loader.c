#include "live/zmq_loader.h"

#include <pthread.h>
#include <string.h>

#include "common/error.h"
#include "common/lazy_library.h"

/* Written once under pthread_once, read-only after (as the FFTW loader). */
static struct {
    pthread_once_t once;
    int ok;
    qem_zmq table;
    char why[400];
} loader = {.once = PTHREAD_ONCE_INIT};

static void load_once(void)
{
    qem_zmq *out = &loader.table;
    char *why = loader.why;
    const size_t n = sizeof loader.why;
    void *h = qem_lazy_open(QEM_LIBZMQ_SONAME, why, n);
    loader.ok = h && !QEM_LAZY_BIND(h, out, ctx_new, zmq_ctx_new, why, n) &&
                !QEM_LAZY_BIND(h, out, ctx_term, zmq_ctx_term, why, n) &&
                !QEM_LAZY_BIND(h, out, socket, zmq_socket, why, n) &&
                !QEM_LAZY_BIND(h, out, close, zmq_close, why, n) &&
                !QEM_LAZY_BIND(h, out, setsockopt, zmq_setsockopt, why, n) &&
                !QEM_LAZY_BIND(h, out, connect, zmq_connect, why, n) &&
                !QEM_LAZY_BIND(h, out, poll, zmq_poll, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_init, zmq_msg_init, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_recv, zmq_msg_recv, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_close, zmq_msg_close, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_data, zmq_msg_data, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_size, zmq_msg_size, why, n) &&
                !QEM_LAZY_BIND(h, out, msg_more, zmq_msg_more, why, n) &&
                !QEM_LAZY_BIND(h, out, errno_, zmq_errno, why, n) &&
                !QEM_LAZY_BIND(h, out, strerror, zmq_strerror, why, n);
    if (!loader.ok)
        memset(out, 0, sizeof *out);
}

qem_status qem_zmq_get(const qem_zmq **table, qem_error *error)
{
    pthread_once(&loader.once, load_once);
    *table = loader.ok ? &loader.table : NULL;
    return loader.ok ? QEM_OK
                     : qem_fail(error, QEM_E_IO, "cannot load libzmq (%s): %s", QEM_LIBZMQ_SONAME,
                                loader.why);
}
