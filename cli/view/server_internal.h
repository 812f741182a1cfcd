/* What the viewer server's three parts share (private to cli/view/):
 * state.c keeps the open files, their caches, the detector sessions and
 * the pattern block cache; routes.c turns a parsed request into a reply;
 * server.c is the HTTP side (libmicrohttpd, the connection guard, the
 * token, the log) and the public calls of server.h. */
#ifndef QEM_VIEW_SERVER_INTERNAL_H
#define QEM_VIEW_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "qem.h"
#include "terminal.h"
#include "view/request.h"
#include "view/server.h"

#define VIEW_MAX_SESSIONS 16     /* pages with a detector session at once */
#define VIEW_MAX_CONNECTIONS 128 /* libmicrohttpd's limit; the guard's table */
#define VIEW_BODY_POOL 4         /* sent live bodies kept for the next replies */

/* Patterns at the cursor from a .qem file: one 512-scan block of a chunk
 * is decoded whole (a single scan costs about as much) and kept, so that
 * hovering over neighbouring positions is a copy. Two blocks in all. */

/* Where a named detector's centre and radius come from when a request
 * leaves them out (the file's detector calibration, else the estimate),
 * as qem_products_resolve_detector reports them for a plain BF request. */
typedef struct view_default_detector {
    double center_row, center_column, radius;
    char origin[sizeof ((qem_detector_resolution *)0)->origin];
} view_default_detector;

typedef struct view_file {
    view_server *server;
    int live; /* the container of a recording in progress (config.live) */
    char *path;
    const char *name; /* the last path component */
    qem_container *source;
    qem_products *products;
    qem_container_info info;
    uint8_t *valid;   /* pixels bytes */
    int counts;       /* integer counts (not float values or scaled codes) */
    pthread_mutex_t lock; /* guards the two caches below */
    int have_mean;
    qem_image mean;
    int have_default;
    view_default_detector defaults;
    /* Opening's progress (packs: shards loaded) and its cancellation, kept
     * for the container's later calls: a .qem body is checked after the
     * server starts (view_body_check_start). */
    progress_state loading;
    qem_progress_fn loading_fn;
    void *loading_user;
    atomic_int body_failed; /* the check found a damaged block: body_error says which */
    qem_error body_error;
} view_file;

typedef struct view_client {
    char id[VIEW_CLIENT_MAX + 1];
    qem_detector_session *session;
    pthread_mutex_t lock; /* one update at a time per page */
    int refs;             /* guarded by server->clients_lock */
    uint64_t used;        /* guarded by server->clients_lock: LRU clock */
} view_client;

/* One open connection as the guard sees it; libmicrohttpd's socket
 * context points here from its start to its close. */
typedef struct view_conn {
    int used;
    int fd;
    int authenticated; /* a request on it carried the token */
    int cut;           /* shut down by the guard; libmicrohttpd closes it next */
    double opened_ms;
} view_conn;

struct view_server {
    view_config config;
    view_file *files;
    size_t nfiles;
    qem_products **products;
    uint64_t (*shapes)[4];
    view_limits limits;
    char token[VIEW_TOKEN_HEX + 1];
    char nonce[VIEW_TOKEN_HEX + 1];
    char *page;
    size_t page_length;
    char *info_json;
    size_t info_length;
    struct MHD_Daemon *daemon;
    atomic_int stopping;
    atomic_int live_settled; /* config.live: the recording was seen finished */
    pthread_mutex_t clients_lock;
    view_client *clients[VIEW_MAX_SESSIONS];
    uint64_t clock;
    atomic_ullong requests, live_updates, refused, failed, sessions_created, sessions_evicted;
    /* The connection guard: conns_lock guards the table and guard_stop. */
    pthread_mutex_t conns_lock;
    pthread_cond_t guard_wake;
    view_conn conns[VIEW_MAX_CONNECTIONS];
    pthread_t guard;
    int guard_running, guard_stop;
    /* Checks the .qem bodies opened unchecked, after the server starts. */
    pthread_t body_checker;
    int body_checker_running;
    atomic_int bodies_checked; /* 1 once every body has been checked */
    /* 1 once the packed copies asked for are built (or did not fit). */
    atomic_int packed_done;
    /* Data requests being computed now: the packed copies' build waits. */
    atomic_int computing;
    atomic_ullong unauth_evicted, unauth_timed_out;
    /* Live replies' bodies given back once sent, for the next (view_body_take). */
    pthread_mutex_t bodies_lock;
    unsigned char *bodies[VIEW_BODY_POOL];
    size_t nbodies;
};

/* An answer being built: status, content type, body and extra headers. */
#define VIEW_REPLY_HEADERS 10

typedef struct view_reply {
    unsigned status;
    const char *type;
    const void *data; /* static data, or `owned` */
    unsigned char *owned;
    int pooled;       /* `owned` came from view_body_take */
    size_t length;
    int nheaders;
    char headers[VIEW_REPLY_HEADERS][2][64];
} view_reply;

/* --- server.c ------------------------------------------------------------ */

/* The viewer's own failure (not the library's): `e` filled, `st` returned. */
qem_status view_fail(qem_error *e, qem_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* CLOCK_MONOTONIC in milliseconds. */
double view_now_ms(void);
/* A text/plain reply of one line (the message and a newline). */
void view_reply_text(view_reply *r, unsigned status, const char *message);
/* Connections libmicrohttpd holds now (0 before it starts). */
unsigned view_connections_open(view_server *s);

/* --- state.c ------------------------------------------------------------- */

/* Opens config.files files into s (files, products, shapes, limits, the
 * locks of the caches and sessions) and checks that one detector and one
 * session can serve them all. s->nfiles counts those to close. */
qem_status view_state_open(view_server *s, qem_error *error);
/* Frees what view_state_open made, after the daemon has stopped. */
void view_state_close(view_server *s);
/* Files open with their bodies unchecked and packs unloaded (their first
 * image can come from values the file records); a thread checks every
 * .qem block and loads every pack now, and a failure fails every later
 * data request (view_body_failure). Stopped (cancelled, joined) by
 * view_body_check_stop. */
void view_body_check_start(view_server *s);
void view_body_check_stop(view_server *s);
/* The first file whose body check or load failed, else NULL. */
const view_file *view_body_failure(view_server *s);
/* How such a failure is said: "is damaged" when the file's bytes failed
 * a check, else (memory, a read, a changed file) "could not be loaded". */
const char *view_body_failure_words(qem_status status);
/* "qem view: " and `text` on stderr as one line, the token masked. */
void view_log_line(const view_server *s, const char *text);

/* A .npy body in memory: the library's header, then the array; NULL when
 * out of memory or too large. */
unsigned char *view_npy_body(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                             const void *data, size_t *length);
unsigned char *view_image_npy(const qem_image *im, size_t *length);
/* The .npy of each image, one after another, in one body. */
unsigned char *view_images_npy(const qem_image *images, size_t count, size_t *length);
/* The same in two steps: the body's bytes (0: too large), then the body
 * written into `out` of at least that many. */
size_t view_images_npy_size(const qem_image *images, size_t count);
void view_images_npy_write(const qem_image *images, size_t count, unsigned char *out);
/* A body of at least `bytes` for a reply (NULL when out of memory): one
 * a reply sent before gave back when it fits, else new. Live updates take
 * theirs here: a series' body is MiBs a move, and new heap pages for it
 * cost about 14 ms on the benchmark's guest. view_body_give (or the
 * response, once sent) hands it back; the server frees what it holds. */
unsigned char *view_body_take(view_server *s, size_t bytes);
void view_body_give(unsigned char *body);
/* Frees a reply's owned body, or gives it back when pooled. */
void view_reply_drop_body(view_reply *r);

/* Where the recording stands (config.live); files: finished and complete,
 * every scan of file 0 received. */
void view_live_poll(view_server *s, view_live_state *out);
/* 1 while the data may still change (a recording not yet finished):
 * nothing computed from them may then be kept. Ask before computing, so
 * that what was computed on changing data is never kept. */
int view_data_changing(view_server *s);

/* The file's defaults for a named detector, resolved once and kept (while
 * the data change: resolved on each call). */
qem_status view_file_defaults(view_file *f, view_default_detector *out, qem_error *e);
/* The file's mean pattern as a .npy body, computed once and kept (while
 * the data change: on each call). */
qem_status view_mean_npy(view_file *f, unsigned char **body, size_t *length, qem_error *e);

/* The page's session (created on its first update), held until
 * view_client_release; NULL with `e` filled when none can be had. */
view_client *view_client_acquire(view_server *s, const char *id, qem_error *e);
void view_client_release(view_server *s, view_client *c);
size_t view_sessions_open(view_server *s);


/* --- routes.c ------------------------------------------------------------ */

/* The page (token, nonce and import map filled in) and /api/info, built
 * once the files are open and the token drawn; 0 when out of memory. */
int view_routes_prepare(view_server *s);
/* Answers a request that passed every check. */
void view_dispatch(view_server *s, const view_request *q, view_reply *r);

#endif
