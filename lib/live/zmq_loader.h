/* libzmq, opened on the first `qem record dectris://` instead of linked:
 * only the DECTRIS receiver uses it, so libqem.so never lists it and no
 * other command maps it (as FFTW and libcrypto, issue 28). */
#ifndef QEM_LIVE_ZMQ_LOADER_H
#define QEM_LIVE_ZMQ_LOADER_H

#include <stddef.h>
#include <zmq.h>

#include "qem.h"

#define QEM_LIBZMQ_SONAME "libzmq.so.5"

/* The libzmq calls the receiver makes, with <zmq.h>'s prototypes (checked
 * at compile time by QEM_LAZY_BIND). */
typedef struct qem_zmq {
    void *(*ctx_new)(void);
    int (*ctx_term)(void *context);
    void *(*socket)(void *context, int type);
    int (*close)(void *socket);
    int (*setsockopt)(void *socket, int option, const void *value, size_t size);
    int (*connect)(void *socket, const char *address);
    int (*poll)(zmq_pollitem_t *items, int count, long timeout);
    int (*msg_init)(zmq_msg_t *msg);
    int (*msg_recv)(zmq_msg_t *msg, void *socket, int flags);
    int (*msg_close)(zmq_msg_t *msg);
    void *(*msg_data)(zmq_msg_t *msg);
    size_t (*msg_size)(const zmq_msg_t *msg);
    int (*msg_more)(const zmq_msg_t *msg);
    int (*errno_)(void);
    const char *(*strerror)(int error_number);
} qem_zmq;

/* The table, loading libzmq on the process's first call (once, whichever
 * thread gets there first); QEM_E_IO with "cannot load libzmq
 * (libzmq.so.5): <why>" if it cannot be loaded. */
qem_status qem_zmq_get(const qem_zmq **table, qem_error *error);

#endif
