/* The DECTRIS SIMPLON stream receivers: a ZeroMQ PULL socket connected to
 * the detector's PUSH. V1 (dectris://HOST[:9999]): each multipart message
 * is parsed by dectris_message.c; V2 (dectris2://HOST[:31001]): each
 * one-part CBOR message by dectris_cbor.c. Either way the frame goes to the
 * sink. One message is held at a time, and libzmq queues only a few
 * (ZMQ_RCVHWM), so the detector waits rather than the memory growing. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "live/dectris_cbor.h"
#include "live/dectris_message.h"
#include "live/live.h"
#include "live/zmq_loader.h"

/* Parts libzmq may queue before the detector waits: about four images. */
#define RECEIVE_HIGH_WATER 16
/* The largest part accepted: a 16-megapixel uint32 image, raw, and more. */
#define MAX_PART_BYTES ((int64_t)1 << 30)

typedef struct receiver {
    const qem_zmq *z;
    void *context;
    void *socket;
    char endpoint[300];
    zmq_msg_t parts[QEM_DECTRIS_MAX_PARTS];
    size_t count; /* parts held (initialised) */
    int v2;                      /* stream V2: series2, one CBOR part a message */
    qem_dectris_series series;   /* V1 */
    qem_dectris2_series series2; /* V2 */
    int header_sent;
    uint8_t *frame;
    uint8_t *scratch;
    size_t frame_bytes;
} receiver;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static qem_dectris_series *series_of(receiver *r)
{
    return r->v2 ? &r->series2.s : &r->series;
}

static void release_parts(receiver *r)
{
    for (size_t k = 0; k < r->count; k++)
        r->z->msg_close(&r->parts[k]);
    r->count = 0;
}

static qem_status zmq_failure(const receiver *r, const char *what, qem_error *error)
{
    return qem_fail(error, QEM_E_IO, "%s %s failed: %s", what, r->endpoint,
                    r->z->strerror(r->z->errno_()));
}

static qem_status open_socket(receiver *r, const live_address *address, qem_error *error)
{
    const int ipv6 = strchr(address->host, ':') != NULL;
    snprintf(r->endpoint, sizeof r->endpoint, ipv6 ? "tcp://[%s]:%u" : "tcp://%s:%u",
             address->host, address->port);
    r->context = r->z->ctx_new();
    if (!r->context)
        return zmq_failure(r, "creating a ZeroMQ context for", error);
    r->socket = r->z->socket(r->context, ZMQ_PULL);
    if (!r->socket)
        return zmq_failure(r, "creating a ZeroMQ socket for", error);
    const int hwm = RECEIVE_HIGH_WATER, linger = 0;
    const int64_t max_part = MAX_PART_BYTES;
    if (r->z->setsockopt(r->socket, ZMQ_RCVHWM, &hwm, sizeof hwm) ||
        r->z->setsockopt(r->socket, ZMQ_LINGER, &linger, sizeof linger) ||
        r->z->setsockopt(r->socket, ZMQ_MAXMSGSIZE, &max_part, sizeof max_part) ||
        r->z->setsockopt(r->socket, ZMQ_IPV6, &ipv6, sizeof ipv6))
        return zmq_failure(r, "setting the ZeroMQ socket options for", error);
    if (r->z->connect(r->socket, r->endpoint))
        return zmq_failure(r, "connecting to", error);
    return QEM_OK;
}

/* One whole multipart message into r->parts (the first part is waiting).
 * Parts beyond QEM_DECTRIS_MAX_PARTS are drained and the message refused. */
static qem_status receive_message(receiver *r, qem_error *error)
{
    size_t total = 0;
    int more = 1;
    zmq_msg_t extra;
    while (more) {
        zmq_msg_t *msg = r->count < QEM_DECTRIS_MAX_PARTS ? &r->parts[r->count] : &extra;
        r->z->msg_init(msg);
        if (r->z->msg_recv(msg, r->socket, total ? 0 : ZMQ_DONTWAIT) < 0) {
            const int why = r->z->errno_();
            r->z->msg_close(msg);
            if (why == EINTR && total)
                continue; /* a signal between parts: the rest is queued */
            if ((why == EAGAIN || why == EINTR) && !total)
                return QEM_OK; /* nothing after all: r->count stays 0 */
            return zmq_failure(r, "receiving from", error);
        }
        more = r->z->msg_more(msg);
        total++;
        if (msg == &extra)
            r->z->msg_close(msg);
        else
            r->count++;
    }
    if (total > QEM_DECTRIS_MAX_PARTS)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %" PRIu64 " (expected next): a message of %zu parts (at most %d)",
                        series_of(r)->next_frame, total, QEM_DECTRIS_MAX_PARTS);
    return QEM_OK;
}

static void part_views(receiver *r, qem_dectris_part *views)
{
    for (size_t k = 0; k < r->count; k++) {
        views[k].data = r->z->msg_data(&r->parts[k]);
        views[k].size = r->z->msg_size(&r->parts[k]);
    }
}

static qem_status send_header(receiver *r, live_sink *sink, qem_error *error)
{
    live_header header;
    if (r->v2)
        qem_dectris2_series_header(&r->series2, &header);
    else
        qem_dectris_series_header(&r->series, &header);
    r->header_sent = 1;
    return qem_live_sink_header(sink, &header, error);
}

/* The frame and bitshuffle scratch buffers, on the first image (every
 * image after has the same size: the parsers check it). */
static qem_status frame_buffers(receiver *r, size_t bytes, qem_error *error)
{
    if (r->frame)
        return QEM_OK;
    r->frame_bytes = bytes;
    r->frame = malloc(bytes);
    r->scratch = malloc(bytes);
    if (!r->frame || !r->scratch)
        return qem_fail(error, QEM_E_NO_MEMORY, "no memory for a frame of %zu bytes", bytes);
    return QEM_OK;
}

static qem_status on_image(receiver *r, const qem_dectris_part *views, live_sink *sink,
                           qem_error *error)
{
    qem_dectris_image image;
    QEM_TRY(qem_dectris_parse_image(views, r->count, &r->series, &image, error));
    if (!r->header_sent)
        QEM_TRY(send_header(r, sink, error)); /* a "none" header: the first image told */
    QEM_TRY(frame_buffers(r, image.frame_bytes, error));
    QEM_TRY(qem_dectris_decode_image(&image, r->frame, r->frame_bytes, r->scratch,
                                     r->frame_bytes, error));
    return qem_live_sink_frame(sink, image.frame, r->frame, r->frame_bytes, error);
}

/* One message; `*ended` is set at the series end. */
static qem_status on_message(receiver *r, live_sink *sink, int *ended, qem_error *error)
{
    qem_dectris_part views[QEM_DECTRIS_MAX_PARTS];
    part_views(r, views);
    qem_dectris_kind kind;
    QEM_TRY(qem_dectris_message_kind(&views[0], r->series.next_frame, &kind, error));
    switch (kind) {
    case QEM_DECTRIS_HEADER:
        if (r->series.started)
            return qem_fail(error, QEM_E_STREAM,
                            "frame %" PRIu64 " (expected next): a second series header arrived "
                            "before series %" PRIu64 " ended",
                            r->series.next_frame, r->series.series);
        QEM_TRY(qem_dectris_parse_header(views, r->count, &r->series, error));
        return qem_dectris_series_known(&r->series) ? send_header(r, sink, error) : QEM_OK;
    case QEM_DECTRIS_IMAGE: return on_image(r, views, sink, error);
    case QEM_DECTRIS_END:
        QEM_TRY(qem_dectris_parse_end(views, r->count, &r->series, error));
        if (!r->header_sent)
            return qem_fail(error, QEM_E_STREAM,
                            "series %" PRIu64 " ended before any frame or header stated the "
                            "detector's shape and sample type", r->series.series);
        *ended = 1;
        return QEM_OK;
    }
    return QEM_OK;
}

/* A V2 message: one CBOR part. */
static qem_status on_cbor(receiver *r, const qem_dectris2_message *m, live_sink *sink,
                          int *ended, qem_error *error)
{
    qem_dectris2_series *x = &r->series2;
    switch (m->kind) {
    case QEM_DECTRIS2_START:
        if (x->s.started)
            return qem_fail(error, QEM_E_STREAM,
                            "frame %" PRIu64 " (expected next): a second start message arrived "
                            "before series %" PRIu64 " ended",
                            x->s.next_frame, x->s.series);
        QEM_TRY(qem_dectris2_parse_start(m, x, error));
        return qem_dectris_series_known(&x->s) ? send_header(r, sink, error) : QEM_OK;
    case QEM_DECTRIS2_IMAGE: {
        qem_dectris_image image;
        QEM_TRY(qem_dectris2_parse_image(m, x, &image, error));
        if (!r->header_sent)
            QEM_TRY(send_header(r, sink, error)); /* the first image told shape or type */
        QEM_TRY(frame_buffers(r, image.frame_bytes, error));
        QEM_TRY(qem_dectris2_decode_image(&image, r->frame, r->frame_bytes, r->scratch,
                                          r->frame_bytes, error));
        return qem_live_sink_frame(sink, image.frame, r->frame, r->frame_bytes, error);
    }
    case QEM_DECTRIS2_END:
        QEM_TRY(qem_dectris2_parse_end(m, x, error));
        if (!r->header_sent)
            return qem_fail(error, QEM_E_STREAM,
                            "series %" PRIu64 " ended before any frame or the start message "
                            "stated the detector's shape and sample type", x->s.series);
        *ended = 1;
        return QEM_OK;
    }
    return QEM_OK;
}

static qem_status on_message2(receiver *r, live_sink *sink, int *ended, qem_error *error)
{
    const uint64_t next = r->series2.s.next_frame;
    if (r->count != 1)
        return qem_fail(error, QEM_E_STREAM,
                        "frame %" PRIu64 " (expected next): a message of %zu parts; stream V2 "
                        "messages have one", next, r->count);
    qem_dectris2_message m;
    QEM_TRY(qem_dectris2_load(r->z->msg_data(&r->parts[0]), r->z->msg_size(&r->parts[0]), next,
                              &m, error));
    const qem_status st = on_cbor(r, &m, sink, ended, error);
    qem_dectris2_message_free(&m);
    return st;
}

static qem_status receive_loop(receiver *r, const live_receive_options *options, live_sink *sink,
                               qem_error *error)
{
    int64_t last = now_ms();
    for (;;) {
        if (qem_live_sink_stopping(sink)) {
            /* Take the series end when it follows at once, so that the
             * detector's PUSH socket is not left holding it. */
            zmq_pollitem_t item = {.socket = r->socket, .events = ZMQ_POLLIN};
            if (r->z->poll(&item, 1, 50) > 0 && (item.revents & ZMQ_POLLIN) &&
                receive_message(r, error) == QEM_OK)
                release_parts(r);
            return QEM_OK;
        }
        zmq_pollitem_t item = {.socket = r->socket, .events = ZMQ_POLLIN};
        const int ready = r->z->poll(&item, 1, LIVE_POLL_MS);
        if (ready < 0 && r->z->errno_() != EINTR)
            return zmq_failure(r, "waiting for", error);
        if (ready <= 0 || !(item.revents & ZMQ_POLLIN)) {
            const int64_t waited = now_ms() - last;
            const int started = series_of(r)->started;
            if (!started && options->connect_timeout_ms > 0 &&
                waited >= options->connect_timeout_ms)
                return qem_fail(error, QEM_E_IO,
                                "nothing arrived from %s within %d ms; is the detector's "
                                "stream interface enabled and armed?",
                                r->endpoint, options->connect_timeout_ms);
            if (started && options->idle_ms > 0 && waited >= options->idle_ms)
                return QEM_OK; /* the detector went quiet: the sink knows how many came */
            continue;
        }
        int ended = 0;
        qem_status st = receive_message(r, error);
        if (st == QEM_OK && r->count)
            st = r->v2 ? on_message2(r, sink, &ended, error) : on_message(r, sink, &ended, error);
        const int received = r->count > 0;
        release_parts(r);
        QEM_TRY(st);
        if (ended)
            return QEM_OK;
        if (received)
            last = now_ms();
    }
}

static qem_status receive(const live_address *address, const live_receive_options *options,
                          live_sink *sink, int v2, qem_error *error)
{
    if (!address || !options || !sink)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_live_receive_dectris%s: a NULL argument", v2 ? "2" : "");
    receiver r;
    memset(&r, 0, sizeof r);
    r.v2 = v2;
    QEM_TRY(qem_zmq_get(&r.z, error));
    qem_status st = open_socket(&r, address, error);
    if (st == QEM_OK)
        st = receive_loop(&r, options, sink, error);
    release_parts(&r);
    if (r.socket)
        r.z->close(r.socket);
    if (r.context)
        r.z->ctx_term(r.context);
    qem_dectris_series_free(&r.series);
    qem_dectris2_series_free(&r.series2);
    free(r.frame);
    free(r.scratch);
    return st;
}

qem_status qem_live_receive_dectris(const live_address *address,
                                    const live_receive_options *options, live_sink *sink,
                                    qem_error *error)
{
    return receive(address, options, sink, 0, error);
}

qem_status qem_live_receive_dectris2(const live_address *address,
                                     const live_receive_options *options, live_sink *sink,
                                     qem_error *error)
{
    return receive(address, options, sink, 1, error);
}
