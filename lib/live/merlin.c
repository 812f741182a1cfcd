/* The Quantum Detectors Merlin data port (TCP, default 6342). Every
 * message is "MPX," + ten decimal digits (the payload's length plus one)
 * + "," + the payload. The first payload is the acquisition header (the
 * .hdr text, "HDR,..."); each further one is a .mib frame record: its
 * "MQ1,..." header and big-endian samples. The frame headers are parsed
 * and checked by the .mib family's own code (lib/input/mib_header.h);
 * numbers must follow one another. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "input/mib_header.h"
#include "input/swap.h"
#include "live/live.h"

#define MPX_PREFIX 15u                  /* "MPX," + 10 digits + "," */
#define MPX_MAX_HEADER (1u << 20)       /* an acquisition header is a few kilobytes */
#define MPX_MAX_FRAME ((1ull << 28) + (1u << 16)) /* 2^26 pixels of 4 bytes and a header */

/* The payload length of a message prefix. */
static qem_status mpx_length(const uint8_t *p, const char *where, uint64_t message,
                             uint64_t *payload, qem_error *error)
{
    uint64_t value = 0;
    int digits = memcmp(p, "MPX,", 4) == 0 && p[14] == ',';
    for (unsigned i = 4; digits && i < 14; i++) {
        digits = p[i] >= '0' && p[i] <= '9';
        value = value * 10 + (uint64_t)(p[i] - '0');
    }
    if (!digits || value == 0)
        return qem_fail(error, QEM_E_STREAM,
                        "message %llu from %s does not start \"MPX,\" + ten digits + \",\" "
                        "(a Merlin data port message)",
                        (unsigned long long)message, where);
    *payload = value - 1;
    return QEM_OK;
}

/* Reads one message's payload into *buf (grown as needed, up to `limit`):
 * QEM_OK, QEM_E_FILE_LENGTH at a clean end (no byte of a new message), or
 * the failure. */
static qem_status read_message(live_read_fn read, void *reader, const char *where,
                               uint64_t message, uint64_t limit, uint8_t **buf, size_t *cap,
                               uint64_t *size, qem_error *error)
{
    uint8_t prefix[MPX_PREFIX];
    size_t got = 0;
    qem_status st = read(reader, prefix, sizeof prefix, &got, error);
    if (st == QEM_E_FILE_LENGTH && got > 0)
        st = qem_fail(error, QEM_E_FILE_LENGTH, "message %llu from %s was cut short",
                      (unsigned long long)message, where);
    QEM_TRY(st);
    QEM_TRY(mpx_length(prefix, where, message, size, error));
    if (*size > limit)
        return qem_fail(error, QEM_E_STREAM,
                        "message %llu from %s states %llu bytes; at most %llu are accepted",
                        (unsigned long long)message, where, (unsigned long long)*size,
                        (unsigned long long)limit);
    if (*size + 1 > *cap) {
        uint8_t *grown = realloc(*buf, (size_t)*size + 1);
        if (!grown)
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        *buf = grown;
        *cap = (size_t)*size + 1;
    }
    st = read(reader, *buf, (size_t)*size, &got, error);
    if (st == QEM_E_FILE_LENGTH)
        return qem_fail(error, QEM_E_FILE_LENGTH, "message %llu from %s was cut short",
                        (unsigned long long)message, where);
    (*buf)[*size] = 0;
    return st;
}

/* The acquisition header's facts and scan shape. */
static qem_status parse_acquisition_header(uint8_t *text, uint64_t size, const char *where,
                                           json_t **map, uint64_t *frames, uint64_t scan[2],
                                           qem_error *error)
{
    if (size < 4 || memcmp(text, "HDR,", 4) != 0)
        return qem_fail(error, QEM_E_STREAM,
                        "the first message from %s is not a Merlin acquisition header (it must "
                        "start \"HDR,\")",
                        where);
    uint64_t fpt = 0;
    *map = qem_mib_hdr_map((char *)text, (size_t)size, &fpt);
    if (!*map)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    *frames = 0;
    const char *stated = json_string_value(json_object_get(*map, "Frames in Acquisition (Number)"));
    if (stated) {
        char *end = NULL;
        errno = 0;
        const unsigned long long v = strtoull(stated, &end, 10);
        if (errno || end == stated || *end || v == 0 || stated[0] == '-')
            return qem_fail(error, QEM_E_STREAM,
                            "the acquisition header from %s states \"%.40s\" frames in "
                            "acquisition, not a positive number",
                            where, stated);
        *frames = v;
    }
    scan[0] = scan[1] = 0;
    if (fpt > 1 && *frames && *frames % fpt == 0) {
        scan[0] = *frames / fpt;
        scan[1] = fpt;
    }
    return QEM_OK;
}

qem_status qem_live_merlin_session(live_read_fn read, void *reader, const char *where,
                                   live_sink *sink, qem_error *error)
{
    uint8_t *buf = NULL;
    size_t cap = 0;
    uint64_t size = 0;
    json_t *map = NULL;
    uint64_t frames = 0, scan[2] = {0, 0};
    qem_status st = read_message(read, reader, where, 1, MPX_MAX_HEADER, &buf, &cap, &size, error);
    if (st == QEM_E_FILE_LENGTH || st == QEM_E_CANCELLED)
        st = qem_fail(error, QEM_E_STREAM, "%s closed before sending its acquisition header",
                      where);
    if (st == QEM_OK)
        st = parse_acquisition_header(buf, size, where, &map, &frames, scan, error);
    mib_header first, h;
    memset(&first, 0, sizeof first);
    uint64_t index = 0, prev = 0;
    size_t frame_bytes = 0;
    while (st == QEM_OK && !qem_live_sink_stopping(sink)) {
        const uint64_t message = index + 2;
        st = read_message(read, reader, where, message, MPX_MAX_FRAME, &buf, &cap, &size, error);
        if (st == QEM_E_FILE_LENGTH || st == QEM_E_CANCELLED) {
            st = QEM_OK; /* the stream ended: the sink knows how many frames came */
            break;
        }
        if (st != QEM_OK)
            break;
        if (index == 0) {
            st = qem_mib_parse_header(buf, (size_t)size, where, 0, &first, error);
            if (st == QEM_OK && first.header_bytes > size)
                st = qem_fail(error, QEM_E_STREAM,
                              "frame 1 from %s states a %llu-byte header in a %llu-byte message",
                              where, (unsigned long long)first.header_bytes,
                              (unsigned long long)size);
            if (st == QEM_OK)
                st = qem_mib_hdr_depth(where, map, &first, error);
            if (st != QEM_OK)
                break;
            frame_bytes = (size_t)(first.width * first.height * first.item);
            live_header lh = {
                .protocol = "merlin-stream",
                .detector = {first.height, first.width},
                .sample_type = first.item == 1   ? QEM_DTYPE_UINT8
                               : first.item == 2 ? QEM_DTYPE_UINT16
                                                 : QEM_DTYPE_UINT32,
                .scan_shape = {scan[0], scan[1]},
                .frames = frames,
                .facts = json_pack("{s:O, s:s, s:s, s:I, s:I}", "hdr", map, "data_type",
                                   first.type, "chip_layout", first.layout, "chips",
                                   (json_int_t)first.chips, "first_frame_number",
                                   (json_int_t)first.number),
            };
            st = qem_live_sink_header(sink, &lh, error);
            json_decref(lh.facts);
            if (st != QEM_OK)
                break;
            h = first;
        } else {
            st = qem_mib_check_header(buf, (size_t)size, where, index, &first, 0, 0, &h, error);
            if (st == QEM_OK && h.number != prev + 1)
                st = qem_fail(error, QEM_E_STREAM,
                              "frame %llu from %s is numbered %llu after frame number %llu (%s)",
                              (unsigned long long)index + 1, where, (unsigned long long)h.number,
                              (unsigned long long)prev,
                              h.number <= prev ? "repeated or out of order" : "frames missing");
            if (st == QEM_E_LAYOUT && error) {
                qem_error layout = *error;
                st = qem_fail(error, QEM_E_STREAM, "%s", layout.message);
            }
            if (st != QEM_OK)
                break;
        }
        if (size != first.header_bytes + frame_bytes) {
            st = qem_fail(error, QEM_E_STREAM,
                          "frame %llu from %s is a %llu-byte message; its %llu-byte header and "
                          "%llu x %llu %s samples make %llu",
                          (unsigned long long)index + 1, where, (unsigned long long)size,
                          (unsigned long long)first.header_bytes,
                          (unsigned long long)first.height, (unsigned long long)first.width,
                          first.type, (unsigned long long)(first.header_bytes + frame_bytes));
            break;
        }
        uint8_t *samples = buf + first.header_bytes;
        input_from_big_endian(samples, frame_bytes / first.item, first.item);
        st = qem_live_sink_frame(sink, index, samples, frame_bytes, error);
        prev = h.number;
        index++;
    }
    json_decref(map);
    free(buf);
    return st;
}

/* --- TCP ---------------------------------------------------------------------------- */

typedef struct tcp_reader {
    int fd;
    live_sink *sink;
    int idle_ms;
    int first_ms; /* until the first byte */
    int seen;     /* a byte arrived */
    const char *where;
} tcp_reader;

static qem_status tcp_read(void *arg, void *buf, size_t size, size_t *got, qem_error *error)
{
    tcp_reader *t = arg;
    uint8_t *p = buf;
    *got = 0;
    int waited = 0;
    while (*got < size) {
        if (qem_live_sink_stopping(t->sink))
            return QEM_E_CANCELLED;
        struct pollfd pfd = {t->fd, POLLIN, 0};
        const int ready = poll(&pfd, 1, LIVE_POLL_MS);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            return qem_fail(error, QEM_E_IO, "waiting for %s failed: %s", t->where,
                            strerror(errno));
        if (ready == 0) {
            waited += LIVE_POLL_MS;
            const int limit = t->seen ? t->idle_ms : t->first_ms;
            if (limit > 0 && waited >= limit) {
                if (!t->seen)
                    return qem_fail(error, QEM_E_IO, "nothing arrived from %s in %d ms",
                                    t->where, t->first_ms);
                return QEM_E_CANCELLED;
            }
            continue;
        }
        const ssize_t n = recv(t->fd, p + *got, size - *got, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return qem_fail(error, QEM_E_IO, "reading from %s failed: %s", t->where,
                            strerror(errno));
        if (n == 0)
            return QEM_E_FILE_LENGTH;
        *got += (size_t)n;
        t->seen = 1;
        waited = 0;
    }
    return QEM_OK;
}

/* A TCP connection to the address, within `timeout_ms`. */
static qem_status tcp_connect(const live_address *address, const char *where, int timeout_ms,
                              int *out, qem_error *error)
{
    char port[16];
    snprintf(port, sizeof port, "%u", address->port);
    struct addrinfo hints = {0}, *list = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int gai = getaddrinfo(address->host, port, &hints, &list);
    if (gai != 0)
        return qem_fail(error, QEM_E_IO, "cannot resolve %s: %s", where, gai_strerror(gai));
    int fd = -1, why = ECONNREFUSED;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* A detector's port opens when the acquisition is armed: retry until
     * the timeout. */
    for (;;) {
        for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                why = errno;
                continue;
            }
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                why = errno;
                close(fd);
                fd = -1;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        const double ms = 1e3 * (double)(now.tv_sec - t0.tv_sec) +
                          1e-6 * (double)(now.tv_nsec - t0.tv_nsec);
        if (fd >= 0 || ms >= timeout_ms)
            break;
        struct timespec pause = {0, 50 * 1000000L};
        nanosleep(&pause, NULL);
    }
    freeaddrinfo(list);
    if (fd < 0)
        return qem_fail(error, QEM_E_IO, "cannot connect to %s: %s", where, strerror(why));
    *out = fd;
    return QEM_OK;
}

qem_status qem_live_receive_merlin(const live_address *address, const live_receive_options *options,
                                   live_sink *sink, qem_error *error)
{
    char where[300];
    snprintf(where, sizeof where, "merlin://%s:%u", address->host, address->port);
    int fd = -1;
    QEM_TRY(tcp_connect(address, where, options->connect_timeout_ms, &fd, error));
    tcp_reader t = {fd, sink, options->idle_ms, options->connect_timeout_ms, 0, where};
    const qem_status st = qem_live_merlin_session(tcp_read, &t, where, sink, error);
    close(fd);
    return st;
}
