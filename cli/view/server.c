/* The viewer's server (see server.h and doc/viewer.md): the HTTP side.
 * Every request is checked in one order: token (403), method (405), path
 * (404), parameters (400); only then does routes.c answer it. One
 * libmicrohttpd thread serves each connection; a guard thread holds
 * connections without the token apart. The state (state.c) and the
 * routes (routes.c) share server_internal.h. */
#include "view/server_internal.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "terminal.h"

#define CONNECTION_TIMEOUT_S 120 /* idle */
#define CONNECTION_MEMORY (64 * 1024) /* request line and headers */

/* Connections that have not shown the token are held apart (the guard
 * below): at most MAX_UNAUTHENTICATED at once, the oldest closed when a
 * new one would exceed it, and each closed HEADER_DEADLINE_S after it
 * opened, however it trickles. The rest of VIEW_MAX_CONNECTIONS stays for
 * the token holder, whose connections only the idle timeout closes. */
#define MAX_UNAUTHENTICATED 32
#define HEADER_DEADLINE_S 10
#define GUARD_TICK_MS 200

qem_status view_fail(qem_error *e, qem_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return e->status = st;
}

/* A request in flight: its raw target, kept by the URI callback. */
typedef struct view_call {
    int seen; /* the access handler has been called once */
    size_t length;
    int too_long;
    char target[];
} view_call;

double view_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int random_hex(char out[VIEW_TOKEN_HEX + 1])
{
    unsigned char bytes[VIEW_TOKEN_HEX / 2];
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    return 1;
}

qem_status view_server_create(const view_config *config, view_server **out, qem_error *error)
{
    *out = NULL;
    view_server *s = calloc(1, sizeof *s);
    if (!s) {
        qem_container_close(config->live); /* the server's from here on */
        snprintf(error->message, sizeof error->message, "out of memory");
        return error->status = QEM_E_NO_MEMORY;
    }
    s->config = *config;
    pthread_mutex_init(&s->conns_lock, NULL);
    pthread_mutex_init(&s->bodies_lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&s->guard_wake, &monotonic);
    pthread_condattr_destroy(&monotonic);
    qem_status st = view_state_open(s, error);
    if (st == QEM_OK && (!random_hex(s->token) || !random_hex(s->nonce))) {
        snprintf(error->message, sizeof error->message,
                 "no random bytes from the kernel (getrandom) for the access token");
        st = QEM_E_IO;
    }
    if (st == QEM_OK && !view_routes_prepare(s)) {
        snprintf(error->message, sizeof error->message, "out of memory preparing the page");
        st = QEM_E_NO_MEMORY;
    }
    if (st != QEM_OK) {
        if (st == QEM_E_NO_MEMORY && !error->message[0])
            snprintf(error->message, sizeof error->message, "out of memory");
        error->status = st;
        view_server_free(s);
        return st;
    }
    *out = s;
    return QEM_OK;
}

const char *view_server_token(const view_server *s)
{
    return s->token;
}

/* --- libmicrohttpd ----------------------------------------------------------- */

/* Keeps the raw request target (path and query, undecoded): the request
 * parser sees exactly what the client sent. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *connection)
{
    (void)cls;
    (void)connection;
    const size_t n = strlen(uri);
    const size_t kept = n > VIEW_MAX_TARGET ? 0 : n;
    view_call *call = malloc(sizeof *call + kept + 1);
    if (!call)
        return NULL;
    call->seen = 0;
    call->length = kept;
    call->too_long = n > VIEW_MAX_TARGET;
    memcpy(call->target, uri, kept);
    call->target[kept] = '\0';
    return call;
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **req_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)connection;
    (void)code;
    free(*req_cls);
    *req_cls = NULL;
}

static void free_body(void *body)
{
    free(body);
}

/* A pooled body follows its head, which says whose pool and how large. */
typedef struct body_head {
    view_server *server;
    size_t capacity;
} body_head;
enum { BODY_HEAD = 64 }; /* room for the head; the body keeps malloc's alignment */

unsigned char *view_body_take(view_server *s, size_t bytes)
{
    pthread_mutex_lock(&s->bodies_lock);
    size_t best = s->nbodies;
    for (size_t k = 0; k < s->nbodies; k++) {
        const body_head *h = (const body_head *)s->bodies[k];
        if (h->capacity >= bytes &&
            (best == s->nbodies || h->capacity < ((const body_head *)s->bodies[best])->capacity))
            best = k;
    }
    unsigned char *head = NULL;
    if (best < s->nbodies) {
        head = s->bodies[best];
        s->bodies[best] = s->bodies[--s->nbodies];
    }
    pthread_mutex_unlock(&s->bodies_lock);
    if (!head) {
        if (bytes > SIZE_MAX - BODY_HEAD || !(head = malloc(BODY_HEAD + bytes)))
            return NULL;
        *(body_head *)head = (body_head){s, bytes};
    }
    return head + BODY_HEAD;
}

void view_body_give(unsigned char *body)
{
    if (!body)
        return;
    unsigned char *head = body - BODY_HEAD;
    view_server *s = ((body_head *)head)->server;
    const size_t capacity = ((body_head *)head)->capacity;
    pthread_mutex_lock(&s->bodies_lock);
    /* Full: the smallest kept gives way to a larger one. */
    size_t smallest = 0;
    for (size_t k = 1; k < s->nbodies; k++)
        if (((body_head *)s->bodies[k])->capacity < ((body_head *)s->bodies[smallest])->capacity)
            smallest = k;
    unsigned char *drop = head;
    if (s->nbodies < VIEW_BODY_POOL) {
        s->bodies[s->nbodies++] = head;
        drop = NULL;
    } else if (((body_head *)s->bodies[smallest])->capacity < capacity) {
        drop = s->bodies[smallest];
        s->bodies[smallest] = head;
    }
    pthread_mutex_unlock(&s->bodies_lock);
    free(drop);
}

static void give_body(void *body)
{
    view_body_give(body);
}

void view_reply_drop_body(view_reply *r)
{
    if (r->pooled)
        view_body_give(r->owned);
    else
        free(r->owned);
    r->owned = NULL;
    r->pooled = 0;
}

static enum MHD_Result send_reply(view_server *s, struct MHD_Connection *connection, view_reply *r)
{
    struct MHD_Response *response;
    if (r->owned)
        response = MHD_create_response_from_buffer_with_free_callback(
            r->length, r->owned, r->pooled ? give_body : free_body);
    else
        response = MHD_create_response_from_buffer(r->length, (void *)r->data,
                                                   MHD_RESPMEM_PERSISTENT);
    if (!response) {
        view_reply_drop_body(r);
        return MHD_NO;
    }
    r->owned = NULL; /* the response frees it now */
    r->pooled = 0;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r->type);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(response, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(response, "Cross-Origin-Resource-Policy", "same-origin");
    if (r->status == 405)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET");
    if (r->type && !strncmp(r->type, "text/html", 9)) {
        char csp[256];
        snprintf(csp, sizeof csp,
                 "default-src 'none'; script-src 'self' 'nonce-%s'; style-src 'self'; "
                 "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; "
                 "form-action 'none'; frame-ancestors 'none'",
                 s->nonce);
        MHD_add_response_header(response, "Content-Security-Policy", csp);
        MHD_add_response_header(response, "X-Frame-Options", "DENY");
    }
    for (int k = 0; k < r->nheaders; k++)
        MHD_add_response_header(response, r->headers[k][0], r->headers[k][1]);
    const enum MHD_Result result = MHD_queue_response(connection, r->status, response);
    MHD_destroy_response(response);
    return result;
}

/* Writes "qem view: " and `text` to stderr as one line: every
 * occurrence of the token masked (whatever key, place or encoding it came
 * in), then escaped for the terminal. The escaped copy is masked again:
 * escapes add hex digits, which must not complete a token either. */
void view_log_line(const view_server *s, const char *text)
{
    const size_t n = strlen(text);
    char *masked = malloc(n + 1);
    /* term_safe writes at most 4 bytes per input byte: never truncated here. */
    char *safe = n < SIZE_MAX / 8 ? malloc(6 * n + 8) : NULL;
    char *shown = safe ? malloc(6 * n + 8) : NULL;
    if (!masked || !safe || !shown) {
        fputs("qem view: (a line not logged: out of memory)\n", stderr);
    } else {
        view_mask_token(text, n, s->token, masked);
        masked[n] = '\0';
        term_safe(masked, safe, 6 * n + 8);
        const size_t m = strlen(safe);
        view_mask_token(safe, m, s->token, shown);
        shown[m] = '\0';
        fprintf(stderr, "qem view: %s\n", shown);
    }
    free(masked);
    free(safe);
    free(shown);
}

/* One request: the method and target as sent, any `token=` value shown
 * as 'x's and the token itself masked wherever else it stands. */
static void log_request(const view_server *s, const char *method, const view_call *call,
                        unsigned status, double ms)
{
    const char *target = call && !call->too_long ? call->target : "(too long)";
    const size_t n = strlen(method) + strlen(target) + 64;
    char *line = malloc(n);
    if (!line) {
        fputs("qem view: (a line not logged: out of memory)\n", stderr);
        return;
    }
    const int at = snprintf(line, n, "%s ", method);
    snprintf(line + at, n - (size_t)at, "%s -> %u (%.2f ms)", target, status, ms);
    for (char *t = strstr(line + at, "token="); t; t = strstr(t + 6, "token="))
        for (char *v = t + 6; *v && *v != '&' && *v != ' '; v++)
            *v = 'x';
    view_log_line(s, line);
    free(line);
}

/* --- the connection guard ------------------------------------------------------ */

/* Closes a connection from outside its thread: shutdown(2) wakes
 * libmicrohttpd's poll on it with end of file, and libmicrohttpd closes it
 * as if the client had. The caller holds conns_lock, and libmicrohttpd
 * reports the close (on_connection) before it closes the descriptor, so
 * the descriptor is still this connection's. */
static void cut_connection(view_conn *c)
{
    c->cut = 1;
    shutdown(c->fd, SHUT_RDWR);
}

/* Every connection enters the table unauthenticated; past
 * MAX_UNAUTHENTICATED, the oldest such one is closed to make room. */
static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    view_server *s = cls;
    pthread_mutex_lock(&s->conns_lock);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        view_conn *c = *socket_context;
        if (c)
            c->used = 0;
        *socket_context = NULL;
        pthread_mutex_unlock(&s->conns_lock);
        return;
    }
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    view_conn *fresh = NULL, *oldest = NULL;
    int unauthenticated = 0;
    for (int k = 0; k < VIEW_MAX_CONNECTIONS; k++) {
        view_conn *c = &s->conns[k];
        if (!c->used) {
            fresh = fresh ? fresh : c;
        } else if (!c->authenticated && !c->cut) {
            unauthenticated++;
            if (!oldest || c->opened_ms < oldest->opened_ms)
                oldest = c;
        }
    }
    /* libmicrohttpd admits at most VIEW_MAX_CONNECTIONS, so a slot is free. */
    if (fresh && info) {
        *fresh = (view_conn){1, info->connect_fd, 0, 0, view_now_ms()};
        *socket_context = fresh;
        if (unauthenticated + 1 > MAX_UNAUTHENTICATED && oldest) {
            cut_connection(oldest);
            atomic_fetch_add(&s->unauth_evicted, 1);
        }
    } else if (info) {
        shutdown(info->connect_fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->conns_lock);
}

/* A request on this connection carried the token: from now on only the
 * idle timeout closes it. */
static void mark_authenticated(view_server *s, struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pthread_mutex_lock(&s->conns_lock);
    view_conn *c = info ? info->socket_context : NULL;
    if (c)
        c->authenticated = 1;
    pthread_mutex_unlock(&s->conns_lock);
}

/* Closes every unauthenticated connection HEADER_DEADLINE_S after it
 * opened, whether it is still sending its headers (one byte at a time
 * keeps the idle timeout from ever firing) or has been answered. */
static void *guard_main(void *arg)
{
    view_server *s = arg;
    pthread_mutex_lock(&s->conns_lock);
    while (!s->guard_stop) {
        const double now = view_now_ms();
        for (int k = 0; k < VIEW_MAX_CONNECTIONS; k++) {
            view_conn *c = &s->conns[k];
            if (c->used && !c->authenticated && !c->cut &&
                now - c->opened_ms >= HEADER_DEADLINE_S * 1000.0) {
                cut_connection(c);
                atomic_fetch_add(&s->unauth_timed_out, 1);
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += GUARD_TICK_MS * 1000L * 1000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->guard_wake, &s->conns_lock, &until);
    }
    pthread_mutex_unlock(&s->conns_lock);
    return NULL;
}

static void guard_stop(view_server *s)
{
    if (!s->guard_running)
        return;
    pthread_mutex_lock(&s->conns_lock);
    s->guard_stop = 1;
    pthread_cond_signal(&s->guard_wake);
    pthread_mutex_unlock(&s->conns_lock);
    pthread_join(s->guard, NULL);
    s->guard_running = 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **req_cls)
{
    (void)url;
    (void)version;
    (void)upload_data;
    (void)upload_size;
    view_server *s = cls;
    view_call *call = *req_cls;
    /* The token, from the header or the query. */
    const char *header = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "X-Qem-Token");
    char query_token[VIEW_TOKEN_HEX + 1];
    const int in_query = call && view_query_token(call->target, call->length, query_token);
    const int allowed = header ? view_token_equal(s->token, header) &&
                                     (!in_query || view_token_equal(s->token, query_token))
                               : in_query && view_token_equal(s->token, query_token);
    if (allowed)
        mark_authenticated(s, connection);
    /* The first call comes with the headers. A plain GET is answered on
     * the second, which lets libmicrohttpd keep the connection alive; any
     * request with a body is answered at once, unread (and the connection
     * closed), so that no body is ever taken in. */
    const int has_body =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) ||
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (call && !call->seen && !has_body && !strcmp(method, MHD_HTTP_METHOD_GET)) {
        call->seen = 1;
        return MHD_YES;
    }
    if (call && call->seen == 2)
        return MHD_YES; /* answered already */
    if (call)
        call->seen = 2;
    const double t0 = view_now_ms();
    atomic_fetch_add(&s->requests, 1);
    view_reply r;
    memset(&r, 0, sizeof r);
    char why[256] = "";
    /* 1. The token (above); nothing is answered without it, not even "no
     * such path". */
    view_request q;
    if (!call) {
        view_reply_text(&r, 503, "out of memory");
    } else if (!allowed) {
        view_reply_text(&r, 403, "forbidden: this server needs its access token (the token "
                                 "query parameter or the X-Qem-Token header)");
    } else if (strcmp(method, MHD_HTTP_METHOD_GET)) {
        view_reply_text(&r, 405, "only GET is served");
    } else if (call->too_long) {
        view_reply_text(&r, 400, "the request target is too long");
    } else {
        int status = view_parse_target(call->target, call->length, &q, why, sizeof why);
        if (!status)
            status = view_check_request(&q, &s->limits, why, sizeof why);
        if (status)
            view_reply_text(&r, (unsigned)status, why);
        else {
            /* What reads the data counts as being computed (stats does not:
             * clients poll it). */
            const int data = q.route >= VIEW_ROUTE_MEAN && q.route != VIEW_ROUTE_RECORDING;
            if (data)
                atomic_fetch_add(&s->computing, 1);
            view_dispatch(s, &q, &r);
            if (data)
                atomic_fetch_sub(&s->computing, 1);
        }
    }
    if (r.status == 403 || r.status == 405 || r.status == 404 || r.status == 400)
        atomic_fetch_add(&s->refused, 1);
    else if (r.status >= 500)
        atomic_fetch_add(&s->failed, 1);
    const unsigned status = r.status;
    const enum MHD_Result result = send_reply(s, connection, &r);
    if (s->config.verbose)
        log_request(s, method, call, status, view_now_ms() - t0);
    return result;
}

/* libmicrohttpd's own messages (--verbose only) may quote what a client
 * sent: they go through the same masking. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    const view_server *s = cls;
    if (!s->config.verbose)
        return;
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    const size_t size = n > 0 ? (size_t)n + sizeof "(libmicrohttpd) " : 0;
    char *text = size ? malloc(size) : NULL;
    if (text) {
        const int at = snprintf(text, size, "(libmicrohttpd) ");
        vsnprintf(text + at, size - (size_t)at, fmt, again);
        const size_t length = strlen(text);
        if (length && text[length - 1] == '\n')
            text[length - 1] = '\0';
        view_log_line(s, text);
    }
    free(text);
    va_end(again);
}

unsigned view_connections_open(view_server *s)
{
    const union MHD_DaemonInfo *info =
        s->daemon ? MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
    return info ? info->num_connections : 0;
}

qem_status view_server_start(view_server *s, unsigned *port, qem_error *e)
{
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)s->config.port);
    if (inet_pton(AF_INET, s->config.bind, &address.sin_addr) != 1)
        return view_fail(e, QEM_E_INVALID_ARGUMENT, "'%s' is not an IPv4 address", s->config.bind);
    if (pthread_create(&s->guard, NULL, guard_main, s) != 0)
        return view_fail(e, QEM_E_NO_MEMORY, "cannot start the connection guard thread");
    s->guard_running = 1;
    s->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)VIEW_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONNECTION_MEMORY, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        s, MHD_OPTION_END);
    if (!s->daemon) {
        guard_stop(s);
        return view_fail(e, QEM_E_IO, "cannot listen on %s port %u (in use, or not an address "
                                      "of this machine)",
                         s->config.bind, s->config.port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : s->config.port;
    view_body_check_start(s);
    return QEM_OK;
}

void view_server_free(view_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1); /* running products cancel at their next window */
    view_body_check_stop(s);
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    guard_stop(s); /* after the daemon: no connection is left to guard */
    /* Every response is gone with the daemon: each pooled body is here. */
    for (size_t k = 0; k < s->nbodies; k++)
        free(s->bodies[k]);
    pthread_mutex_destroy(&s->bodies_lock);
    pthread_mutex_destroy(&s->conns_lock);
    pthread_cond_destroy(&s->guard_wake);
    view_state_close(s);
    free(s->page);
    free(s->info_json);
    free(s);
}
