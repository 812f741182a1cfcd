/* The viewer's server (see server.h and doc/viewer.md). Every request is
 * checked in one order: token (403), method (405), path (404), parameters
 * (400); only then does the library run. Products come from the public
 * API only; named detectors resolve through qem_products_resolve_detector,
 * the rule `qem virtual` uses. One libmicrohttpd thread serves each
 * connection; the mean pattern and the default centre and radius of each
 * file are computed once and kept; each page (client id) has its own
 * detector session, updated by signed deltas. */
#include "view/server.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "terminal.h"
#include "view/assets.h"
#include "view/request.h"

#define MAX_SESSIONS 16          /* pages with a detector session at once */
#define CONNECTION_TIMEOUT_S 120 /* idle */
#define CONNECTION_MEMORY (64 * 1024) /* request line and headers */

/* Connections that have not shown the token are held apart (the guard
 * below): at most MAX_UNAUTHENTICATED at once, the oldest closed when a
 * new one would exceed it, and each closed HEADER_DEADLINE_S after it
 * opened, however it trickles. The rest of MAX_CONNECTIONS stays for the
 * token holder, whose connections only the idle timeout closes. */
#define MAX_CONNECTIONS 128
#define MAX_UNAUTHENTICATED 32
#define HEADER_DEADLINE_S 10
#define GUARD_TICK_MS 200

/* Where a named detector's centre and radius come from when a request
 * leaves them out (the file's detector calibration, else the estimate),
 * as qem_products_resolve_detector reports them for a plain BF request. */
typedef struct default_detector {
    double center_row, center_column, radius;
    char origin[sizeof ((qem_detector_resolution *)0)->origin];
} default_detector;

typedef struct view_file {
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
    default_detector defaults;
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

/* Patterns at the cursor from a .qem file: one 512-scan block of a chunk
 * is decoded whole (a single scan costs about as much) and kept, so that
 * hovering over neighbouring positions is a copy. Two blocks in all. */
#define FRAME_BLOCK 512
#define FRAME_SLOTS 2

typedef struct frame_slot {
    int used;
    size_t file;
    uint64_t first, count, tick;
    unsigned char *data; /* count scans in the working dtype, invalid pixels 0 */
    size_t size;
} frame_slot;

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
    pthread_mutex_t clients_lock;
    view_client *clients[MAX_SESSIONS];
    uint64_t clock;
    pthread_mutex_t frames_lock;
    frame_slot frames[FRAME_SLOTS];
    uint64_t frames_clock;
    atomic_ullong frame_hits, frame_misses;
    atomic_ullong requests, live_updates, refused, failed, sessions_created, sessions_evicted;
    /* The connection guard: conns_lock guards the table and guard_stop. */
    pthread_mutex_t conns_lock;
    pthread_cond_t guard_wake;
    view_conn conns[MAX_CONNECTIONS];
    pthread_t guard;
    int guard_running, guard_stop;
    atomic_ullong unauth_evicted, unauth_timed_out;
};

#define TRY(call)                                                                                  \
    do {                                                                                           \
        const qem_status try_ = (call);                                                            \
        if (try_ != QEM_OK)                                                                        \
            return try_;                                                                           \
    } while (0)

static qem_status own_error(qem_error *e, qem_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static qem_status own_error(qem_error *e, qem_status st, const char *fmt, ...)
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

static double now_ms(void)
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

/* Long computations ask this between windows: a stopping server, or
 * Ctrl-C / SIGTERM on its way to stopping it, cancels them. */
static int cancel_when_stopping(void *user, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    return atomic_load(&((view_server *)user)->stopping) || interrupted_by();
}

/* --- files and the page ---------------------------------------------------- */

static json_t *quantity_json(const qem_quantity *q)
{
    if (q->source == QEM_CALIBRATION_ABSENT)
        return json_null();
    return json_pack("{s:f, s:s, s:s}", "value", q->value, "unit", q->unit, "source",
                     q->source == QEM_CALIBRATION_OVERRIDE ? "override" : "recorded");
}

static json_t *file_json(view_file *f, size_t index)
{
    json_t *j = json_object();
    json_t *shape = json_array();
    for (int k = 0; k < 4; k++)
        json_array_append_new(shape, json_integer((json_int_t)f->info.shape[k]));
    json_object_set_new(j, "index", json_integer((json_int_t)index));
    json_object_set_new(j, "path", json_string(f->path));
    json_object_set_new(j, "name", json_string(f->name));
    json_object_set_new(j, "kind",
                        json_string(f->info.kind == QEM_CONTAINER_PACK ? "pack" : "qem"));
    json_object_set_new(j, "shape", shape);
    json_object_set_new(j, "dtype", json_string(qem_dtype_name(f->info.working_dtype)));
    json_object_set_new(j, "raw_dtype", json_string(qem_dtype_name(f->info.raw_dtype)));
    json_object_set_new(j, "data", json_string(f->counts ? "counts"
                                               : f->info.raw_dtype == QEM_DTYPE_UINT16
                                                   ? "scaled"
                                                   : "float"));
    uint64_t valid = 0;
    for (uint64_t p = 0; p < f->info.pixels; p++)
        valid += f->valid[p];
    json_object_set_new(j, "valid_pixels", json_integer((json_int_t)valid));
    char *text = NULL;
    qem_file *qf = qem_container_file(f->source);
    qem_pack *qp = qem_container_pack(f->source);
    text = qf ? qem_summary_json(qf, NULL) : qem_pack_summary_json(qp, NULL);
    json_t *summary = text ? json_loads(text, 0, NULL) : NULL;
    qem_free(text);
    if (!summary)
        summary = json_object();
    json_t *format = json_object_get(summary, qf ? "codec" : "profile");
    json_object_set(j, "format", format ? format : json_null());
    json_t *bytes = json_object_get(summary, "file_bytes");
    json_object_set(j, "file_bytes", bytes ? bytes : json_null());
    json_t *ratio = json_object_get(summary, "compression_ratio");
    json_object_set(j, "compression_ratio", ratio ? ratio : json_null());
    json_object_set_new(j, "logical_bytes",
                        json_integer((json_int_t)(f->info.scans * f->info.pixels *
                                                  qem_dtype_size(f->info.raw_dtype))));
    if (qf) {
        qem_calibration c = {.struct_size = sizeof c};
        qem_get_calibration(qf, &c, NULL);
        json_object_set_new(
            j, "calibration",
            json_pack("{s:[o,o], s:[o,o], s:o, s:o, s:o, s:o}", "scan_step",
                      quantity_json(&c.scan_step[0]), quantity_json(&c.scan_step[1]),
                      "detector_step", quantity_json(&c.detector_step[0]),
                      quantity_json(&c.detector_step[1]), "voltage", quantity_json(&c.voltage),
                      "semiangle", quantity_json(&c.semiangle), "dwell",
                      quantity_json(&c.dwell), "camera_length",
                      quantity_json(&c.camera_length)));
    } else {
        json_object_set_new(j, "calibration", json_null());
    }
    qem_detector_calibration dc = {.struct_size = sizeof dc};
    int recorded = 0;
    qem_products_file_calibration(f->products, &dc, &recorded, NULL);
    if (recorded)
        json_object_set_new(j, "detector_calibration",
                            json_pack("{s:[f,f], s:f, s:s}", "center", dc.center_row,
                                      dc.center_column, "radius", dc.bright_field_radius,
                                      "method", dc.method));
    else
        json_object_set_new(j, "detector_calibration", json_null());
    double semi = 0;
    json_object_set_new(j, "semiangle_mrad",
                        qem_products_semiangle(f->products, &semi) ? json_real(semi) : json_null());
    json_object_set_new(j, "summary", summary);
    return j;
}

static char *dump(json_t *j, size_t *length)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(j);
    if (text && length)
        *length = strlen(text);
    return text;
}

static int build_info(view_server *s)
{
    json_t *files = json_array();
    for (size_t k = 0; k < s->nfiles; k++)
        json_array_append_new(files, file_json(&s->files[k], k));
    json_t *j = json_pack(
        "{s:s, s:o, s:[I,I], s:b, s:{s:i, s:i, s:i, s:i, s:i}}", "qem_version", qem_version(),
        "files", files, "detector_shape", (json_int_t)s->files[0].info.shape[2],
        (json_int_t)s->files[0].info.shape[3], "series", s->nfiles > 1, "limits", "target_bytes",
        VIEW_MAX_TARGET, "query_bytes", VIEW_MAX_QUERY, "value_bytes", VIEW_MAX_VALUE - 1,
        "parameters", VIEW_MAX_PARAMS, "sessions", MAX_SESSIONS);
    s->info_json = j ? dump(j, &s->info_length) : NULL;
    return s->info_json != NULL;
}

static const view_asset *find_asset(const char *name)
{
    for (size_t k = 0; k < view_asset_count; k++)
        if (!strcmp(view_assets[k].name, name))
            return &view_assets[k];
    return NULL;
}

/* Appends `n` bytes to a growing buffer; 0 when out of memory. */
static int append(char **buf, size_t *used, size_t *cap, const char *text, size_t n)
{
    if (*used + n + 1 > *cap) {
        size_t grown = (*cap ? *cap : 4096);
        while (grown < *used + n + 1)
            grown *= 2;
        char *b = realloc(*buf, grown);
        if (!b)
            return 0;
        *buf = b;
        *cap = grown;
    }
    memcpy(*buf + *used, text, n);
    *used += n;
    (*buf)[*used] = '\0';
    return 1;
}

/* index.html with the token, the script nonce and an import map that adds
 * the token to every module the page imports. */
static int build_page(view_server *s)
{
    const view_asset *index = find_asset("index.html");
    if (!index)
        return 0;
    char *map = NULL;
    size_t map_used = 0, map_cap = 0;
    int ok = append(&map, &map_used, &map_cap, "{\"imports\": {", 13);
    int first = 1;
    for (size_t k = 0; ok && k < view_asset_count; k++) {
        const char *name = view_assets[k].name;
        const size_t n = strlen(name);
        if (n < 3 || strcmp(name + n - 3, ".js"))
            continue;
        char entry[256];
        int len = snprintf(entry, sizeof entry, "%s\"/page/%s\": \"/page/%s?token=%s\"",
                           first ? "" : ", ", name, name, s->token);
        ok = len > 0 && (size_t)len < sizeof entry &&
             append(&map, &map_used, &map_cap, entry, (size_t)len);
        first = 0;
    }
    ok = ok && append(&map, &map_used, &map_cap, "}}", 2);
    const char *text = (const char *)index->data, *end = text + index->size;
    size_t used = 0, cap = 0;
    while (ok && text < end) {
        const char *open = memmem(text, (size_t)(end - text), "{{", 2);
        if (!open) {
            ok = append(&s->page, &used, &cap, text, (size_t)(end - text));
            break;
        }
        ok = append(&s->page, &used, &cap, text, (size_t)(open - text));
        const char *close = memmem(open, (size_t)(end - open), "}}", 2);
        if (!ok || !close)
            break;
        const size_t name_len = (size_t)(close - open - 2);
        if (name_len == 5 && !memcmp(open + 2, "TOKEN", 5))
            ok = append(&s->page, &used, &cap, s->token, strlen(s->token));
        else if (name_len == 5 && !memcmp(open + 2, "NONCE", 5))
            ok = append(&s->page, &used, &cap, s->nonce, strlen(s->nonce));
        else if (name_len == 9 && !memcmp(open + 2, "IMPORTMAP", 9))
            ok = append(&s->page, &used, &cap, map, map_used);
        else
            ok = 0; /* a placeholder the server does not know: a build defect */
        text = close + 2;
    }
    free(map);
    s->page_length = used;
    return ok && s->page;
}

static void file_close(view_file *f)
{
    qem_products_close(f->products);
    qem_container_close(f->source);
    qem_image_free(&f->mean);
    free(f->valid);
    free(f->path);
    pthread_mutex_destroy(&f->lock);
}

qem_status view_server_create(const view_config *config, view_server **out, qem_error *error)
{
    *out = NULL;
    view_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(error->message, sizeof error->message, "out of memory");
        return error->status = QEM_E_NO_MEMORY;
    }
    s->config = *config;
    s->files = calloc(config->files, sizeof *s->files);
    s->products = calloc(config->files, sizeof *s->products);
    s->shapes = calloc(config->files, sizeof *s->shapes);
    pthread_mutex_init(&s->clients_lock, NULL);
    pthread_mutex_init(&s->frames_lock, NULL);
    pthread_mutex_init(&s->conns_lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&s->guard_wake, &monotonic);
    pthread_condattr_destroy(&monotonic);
    qem_status st = s->files && s->products && s->shapes ? QEM_OK : QEM_E_NO_MEMORY;
    if (st != QEM_OK)
        snprintf(error->message, sizeof error->message, "out of memory");
    for (size_t k = 0; st == QEM_OK && k < config->files; k++) {
        view_file *f = &s->files[k];
        pthread_mutex_init(&f->lock, NULL);
        s->nfiles = k + 1;
        f->path = strdup(config->paths[k]);
        if (!f->path) {
            st = QEM_E_NO_MEMORY;
            break;
        }
        const char *slash = strrchr(f->path, '/');
        f->name = slash ? slash + 1 : f->path;
        qem_container_options so;
        qem_container_options_init(&so);
        so.threads = config->threads;
        progress_state loading;
        progress_setup(&loading, "loading shards", "shards", config->quiet, &so.progress,
                       &so.progress_user);
        st = qem_container_open(f->path, &so, &f->source, error);
        if (st != QEM_OK)
            break;
        qem_products_options po;
        qem_products_options_init(&po);
        po.threads = config->threads;
        po.progress = cancel_when_stopping;
        po.progress_user = s;
        st = qem_products_open(f->source, &po, &f->products, error);
        if (st != QEM_OK)
            break;
        f->info.struct_size = sizeof f->info;
        qem_container_get_info(f->source, &f->info, NULL);
        f->counts = f->info.working_dtype == QEM_DTYPE_UINT8 ||
                    f->info.working_dtype == QEM_DTYPE_UINT16;
        f->valid = malloc((size_t)f->info.pixels);
        if (!f->valid) {
            st = QEM_E_NO_MEMORY;
            break;
        }
        qem_products_valid(f->products, f->valid, (size_t)f->info.pixels, NULL);
        s->products[k] = f->products;
        memcpy(s->shapes[k], f->info.shape, sizeof s->shapes[k]);
        if (f->info.shape[2] != s->files[0].info.shape[2] ||
            f->info.shape[3] != s->files[0].info.shape[3]) {
            snprintf(error->message, sizeof error->message,
                     "'%s' has a %llu x %llu detector and '%s' %llu x %llu: one detector "
                     "cannot serve both; view them separately",
                     f->path, (unsigned long long)f->info.shape[2],
                     (unsigned long long)f->info.shape[3], s->files[0].path,
                     (unsigned long long)s->files[0].info.shape[2],
                     (unsigned long long)s->files[0].info.shape[3]);
            st = QEM_E_INVALID_ARGUMENT;
        }
    }
    if (st == QEM_OK) {
        /* The same checks a session makes (no file twice), up front. */
        qem_detector_session *probe = NULL;
        st = qem_detector_session_create(s->products, s->nfiles, &probe, error);
        qem_detector_session_free(probe);
    }
    s->limits.files = s->nfiles;
    s->limits.shapes = (const uint64_t(*)[4])s->shapes;
    if (st == QEM_OK && (!random_hex(s->token) || !random_hex(s->nonce))) {
        snprintf(error->message, sizeof error->message,
                 "no random bytes from the kernel (getrandom) for the access token");
        st = QEM_E_IO;
    }
    if (st == QEM_OK && (!build_info(s) || !build_page(s))) {
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

/* --- computing ------------------------------------------------------------- */

/* The file's defaults for a named detector: what the library takes from
 * the file's detector calibration, else the estimate (a pass over every
 * scan), resolved once through the library for a plain BF request and
 * kept. */
static qem_status file_defaults(view_file *f, default_detector *out, qem_error *e)
{
    qem_status st = QEM_OK;
    pthread_mutex_lock(&f->lock);
    if (!f->have_default) {
        uint8_t *scratch = malloc((size_t)f->info.pixels);
        qem_detector_request q;
        qem_detector_request_init(&q);
        qem_detector_resolution r = {.struct_size = sizeof r};
        st = scratch ? qem_products_resolve_detector(f->products, &q, scratch,
                                                     (size_t)f->info.pixels, &r, e)
                     : own_error(e, QEM_E_NO_MEMORY, "out of memory for a detector mask");
        free(scratch);
        if (st == QEM_OK) {
            f->defaults.center_row = r.center_row;
            f->defaults.center_column = r.center_column;
            f->defaults.radius = r.radius;
            memcpy(f->defaults.origin, r.origin, sizeof f->defaults.origin);
            f->have_default = 1;
        }
    }
    *out = f->defaults;
    pthread_mutex_unlock(&f->lock);
    return st;
}

/* A .npy body in memory: the library's header, then the array. */
static unsigned char *npy_body(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                               const void *data, size_t *length)
{
    unsigned char header[QEM_NPY_HEADER_MAX];
    size_t n = 0;
    if (qem_npy_header(dtype, ndim, shape, header, sizeof header, &n, NULL) != QEM_OK)
        return NULL;
    const size_t item = qem_dtype_size(dtype);
    size_t elements = 1;
    for (unsigned k = 0; k < ndim; k++) {
        if (shape[k] && elements > SIZE_MAX / shape[k])
            return NULL;
        elements *= (size_t)shape[k];
    }
    if (elements > (SIZE_MAX - n) / item)
        return NULL;
    unsigned char *out = malloc(n + elements * item);
    if (!out)
        return NULL;
    memcpy(out, header, n);
    if (elements)
        memcpy(out + n, data, elements * item);
    *length = n + elements * item;
    return out;
}

static unsigned char *image_npy(const qem_image *im, size_t *length)
{
    return npy_body(im->dtype, im->ndim, im->shape, im->data, length);
}

static qem_status mean_npy(view_file *f, unsigned char **body, size_t *length, qem_error *e)
{
    qem_status st = QEM_OK;
    pthread_mutex_lock(&f->lock);
    if (!f->have_mean) {
        st = qem_products_mean(f->products, &f->mean, e);
        f->have_mean = st == QEM_OK;
    }
    if (st == QEM_OK) {
        *body = image_npy(&f->mean, length);
        if (!*body)
            st = own_error(e, QEM_E_NO_MEMORY, "out of memory for the mean pattern's body");
    }
    pthread_mutex_unlock(&f->lock);
    return st;
}

typedef struct resolved_detector {
    qem_detector_resolution named; /* named detectors: what the library used */
    double radius_px;              /* the bright-field radius in pixels (mrad: the scale) */
    uint64_t pixels;               /* selected pixels of the file's mask */
} resolved_detector;

static void library_request(const view_detector_params *p, qem_detector_request *q)
{
    qem_detector_request_init(q);
    q->detector = (qem_detector)p->kind;
    if (p->have_center) {
        q->center_row = p->center[0];
        q->center_column = p->center[1];
    }
    if (p->have_radius)
        q->radius = p->radius;
    if (p->have_inner)
        q->inner = p->inner;
    if (p->have_outer)
        q->outer = p->outer;
    q->unit_mrad = p->unit_mrad;
    if (p->have_semiangle)
        q->semiangle_mrad = p->semiangle;
}

/* A named detector of file f, resolved by the library as for `qem virtual`.
 * In pixels, a centre or radius the request leaves to the file comes from
 * the kept defaults (the same values the library would find, without its
 * pass over the data), and the origin is theirs; radii in mrad are asked
 * as they are (the library converts them by the file's own scale). */
static qem_status resolve_named(view_file *f, const view_detector_params *p, uint8_t *mask,
                                resolved_detector *out, qem_error *e)
{
    qem_detector_request q;
    library_request(p, &q);
    const int bounds = p->have_inner && p->have_outer;
    const int center_left = !p->have_center;
    const int radius_left = !p->have_radius && !(p->have_center && bounds);
    default_detector d;
    int filled = 0;
    qem_error ignored = {0};
    if (!p->unit_mrad && (center_left || radius_left) && file_defaults(f, &d, &ignored) == QEM_OK) {
        if (center_left) {
            q.center_row = d.center_row;
            q.center_column = d.center_column;
        }
        if (radius_left)
            q.radius = d.radius;
        filled = 1;
    }
    out->named.struct_size = sizeof out->named;
    TRY(qem_products_resolve_detector(f->products, &q, mask, (size_t)f->info.pixels, &out->named,
                                      e));
    if (filled)
        memcpy(out->named.origin, d.origin, sizeof out->named.origin);
    out->radius_px = out->named.radius;
    if (p->unit_mrad) {
        TRY(file_defaults(f, &d, e));
        out->radius_px = d.radius;
    }
    return QEM_OK;
}

/* The mask of file f for the request's detector, as `qem virtual FILE
 * --detector ...` (or `--mask` of the same rectangle) would select. */
static qem_status request_mask(view_file *f, const view_detector_params *p, uint8_t *mask,
                               resolved_detector *out, qem_error *e)
{
    memset(out, 0, sizeof *out);
    const uint64_t cols = f->info.shape[3];
    if (p->kind == VIEW_DETECTOR_RECT) {
        for (uint64_t px = 0; px < f->info.pixels; px++) {
            const uint64_t r = px / cols, c = px % cols;
            mask[px] = f->valid[px] && r >= p->rect[0] && r < p->rect[1] && c >= p->rect[2] &&
                       c < p->rect[3];
        }
        snprintf(out->named.origin, sizeof out->named.origin, "given");
    } else {
        TRY(resolve_named(f, p, mask, out, e));
    }
    for (uint64_t px = 0; px < f->info.pixels; px++)
        out->pixels += mask[px];
    return QEM_OK;
}

/* The mask every file of the series shares: file `base`'s detector,
 * resolved there, over the detector geometry alone; the session leaves
 * out each file's own invalid pixels, so each image equals `qem virtual`
 * of that file with the same centre and radius. */
static qem_status series_mask(view_server *s, size_t base, const view_detector_params *p,
                              uint8_t *mask, resolved_detector *out, qem_error *e)
{
    view_file *f = &s->files[base];
    TRY(request_mask(f, p, mask, out, e));
    if (s->nfiles == 1)
        return QEM_OK;
    const uint64_t pixels = f->info.pixels, cols = f->info.shape[3];
    if (p->kind == VIEW_DETECTOR_RECT) {
        for (uint64_t px = 0; px < pixels; px++) {
            const uint64_t r = px / cols, c = px % cols;
            mask[px] = r >= p->rect[0] && r < p->rect[1] && c >= p->rect[2] && c < p->rect[3];
        }
        return QEM_OK;
    }
    /* The geometry the base file's resolution used, in its own scale. */
    qem_detector_geometry g;
    qem_detector_geometry_init(&g);
    g.detector = (qem_detector)p->kind;
    g.center_row = out->named.center_row;
    g.center_column = out->named.center_column;
    g.radius = isnan(out->named.radius) ? 0 : out->named.radius;
    g.inner = p->have_inner ? p->inner : 0;
    g.outer = p->have_outer ? p->outer : 0;
    g.unit_mrad = p->unit_mrad;
    g.semiangle_mrad = p->have_semiangle ? p->semiangle : 0;
    if (g.unit_mrad && !(g.semiangle_mrad > 0))
        qem_products_semiangle(f->products, &g.semiangle_mrad);
    uint8_t *other = malloc((size_t)pixels);
    if (!other)
        return own_error(e, QEM_E_NO_MEMORY, "out of memory for a detector mask");
    qem_status st = QEM_OK;
    for (size_t k = 0; st == QEM_OK && k < s->nfiles; k++) {
        if (k == base)
            continue;
        st = qem_products_detector_mask(s->files[k].products, &g, out->radius_px, other,
                                        (size_t)pixels, e);
        for (uint64_t px = 0; st == QEM_OK && px < pixels; px++)
            mask[px] |= other[px];
    }
    free(other);
    return st;
}

/* --- sessions -------------------------------------------------------------- */

static void client_free(view_client *c)
{
    if (!c)
        return;
    qem_detector_session_free(c->session);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* The page's session, created on its first update; the least recently
 * used idle one makes room when MAX_SESSIONS pages are open. */
static view_client *client_acquire(view_server *s, const char *id, qem_error *e)
{
    pthread_mutex_lock(&s->clients_lock);
    view_client *found = NULL;
    int free_slot = -1, idle = -1;
    for (int k = 0; k < MAX_SESSIONS; k++) {
        view_client *c = s->clients[k];
        if (!c) {
            if (free_slot < 0)
                free_slot = k;
        } else if (!strcmp(c->id, id)) {
            found = c;
        } else if (c->refs == 0 && (idle < 0 || c->used < s->clients[idle]->used)) {
            idle = k;
        }
    }
    if (!found) {
        const int slot = free_slot >= 0 ? free_slot : idle;
        found = slot >= 0 ? calloc(1, sizeof *found) : NULL;
        if (found && qem_detector_session_create(s->products, s->nfiles, &found->session, e) ==
                         QEM_OK) {
            memcpy(found->id, id, strlen(id) + 1);
            pthread_mutex_init(&found->lock, NULL);
            if (!s->clients[slot]) {
                s->clients[slot] = found;
            } else {
                client_free(s->clients[slot]);
                s->clients[slot] = found;
                atomic_fetch_add(&s->sessions_evicted, 1);
            }
            atomic_fetch_add(&s->sessions_created, 1);
        } else {
            if (found)
                free(found);
            else if (slot < 0)
                own_error(e, QEM_E_LIMIT,
                          "%d pages are updating at once; close one or wait for it", MAX_SESSIONS);
            else
                own_error(e, QEM_E_NO_MEMORY, "out of memory for a detector session");
            found = NULL;
        }
    }
    if (found) {
        found->refs++;
        found->used = ++s->clock;
    }
    pthread_mutex_unlock(&s->clients_lock);
    return found;
}

static void client_release(view_server *s, view_client *c)
{
    pthread_mutex_lock(&s->clients_lock);
    c->refs--;
    pthread_mutex_unlock(&s->clients_lock);
}

static size_t sessions_open(view_server *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->clients_lock);
    for (int k = 0; k < MAX_SESSIONS; k++)
        n += s->clients[k] != NULL;
    pthread_mutex_unlock(&s->clients_lock);
    return n;
}

/* --- replies --------------------------------------------------------------- */

#define MAX_HEADERS 8

typedef struct reply {
    unsigned status;
    const char *type;
    const void *data; /* static data, or `owned` */
    unsigned char *owned;
    size_t length;
    int nheaders;
    char headers[MAX_HEADERS][2][64];
} reply;

static void reply_header(reply *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_header(reply *r, const char *name, const char *fmt, ...)
{
    if (r->nheaders >= MAX_HEADERS)
        return;
    snprintf(r->headers[r->nheaders][0], sizeof r->headers[0][0], "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->headers[r->nheaders][1], sizeof r->headers[0][1], fmt, ap);
    va_end(ap);
    r->nheaders++;
}

static void reply_text(reply *r, unsigned status, const char *message)
{
    static const char no_memory[] = "out of memory\n";
    free(r->owned);
    r->status = status;
    r->type = "text/plain; charset=utf-8";
    const size_t n = strlen(message);
    r->owned = malloc(n + 2);
    if (r->owned) {
        memcpy(r->owned, message, n);
        r->owned[n] = '\n';
        r->owned[n + 1] = '\0';
        r->data = r->owned;
        r->length = n + 1;
    } else {
        r->data = no_memory;
        r->length = sizeof no_memory - 1;
    }
}

/* A library failure: the caller's geometry or parameters (400), memory or
 * a stop (503), else the data or the machine (500). */
static void reply_failure(reply *r, const qem_error *e)
{
    const unsigned status = e->status == QEM_E_INVALID_ARGUMENT ? 400
                            : e->status == QEM_E_NO_MEMORY || e->status == QEM_E_LIMIT ||
                                    e->status == QEM_E_INSUFFICIENT_MEMORY ||
                                    e->status == QEM_E_CANCELLED
                                ? 503
                                : 500;
    reply_text(r, status, e->message[0] ? e->message : qem_strerror(e->status));
}

static void reply_owned(reply *r, const char *type, unsigned char *body, size_t length)
{
    if (!body) {
        reply_text(r, 503, "out of memory for the reply");
        return;
    }
    r->status = 200;
    r->type = type;
    r->owned = body;
    r->data = body;
    r->length = length;
}

static void reply_image(reply *r, qem_image *im)
{
    size_t n = 0;
    unsigned char *body = image_npy(im, &n);
    qem_image_free(im);
    reply_owned(r, "application/octet-stream", body, n);
}

static void reply_json(reply *r, json_t *j)
{
    size_t n = 0;
    char *text = j ? dump(j, &n) : NULL;
    reply_owned(r, "application/json", (unsigned char *)text, n);
}

/* --- routes ---------------------------------------------------------------- */

/* The 512-scan block of a .qem chunk that holds `scan`: [*first, +*count). */
static int frame_block(qem_file *qf, uint64_t scan, uint64_t *first, uint64_t *count)
{
    qem_file_info fi = {.struct_size = sizeof fi};
    if (qem_get_info(qf, &fi, NULL) != QEM_OK)
        return 0;
    uint64_t lo = 0, hi = fi.chunk_count;
    while (lo < hi) { /* chunks are contiguous and in order */
        const uint64_t mid = lo + (hi - lo) / 2;
        uint64_t at, n;
        if (qem_get_chunk(qf, mid, &at, &n, NULL) != QEM_OK)
            return 0;
        if (scan < at) {
            hi = mid;
        } else if (scan >= at + n) {
            lo = mid + 1;
        } else {
            *first = at + (scan - at) / FRAME_BLOCK * FRAME_BLOCK;
            *count = at + n - *first < FRAME_BLOCK ? at + n - *first : FRAME_BLOCK;
            return 1;
        }
    }
    return 0;
}

/* The pattern at `scan` of a .qem file of counts, through the block
 * cache: the working values with invalid pixels 0, which is what
 * qem_products_frame gives (tests/viewer checks the bytes against qem dp).
 * 0 when the cache does not apply (then the library is asked directly). */
static int frame_from_block(view_server *s, size_t index, uint64_t scan, reply *r)
{
    view_file *f = &s->files[index];
    qem_file *qf = qem_container_file(f->source);
    uint64_t first, count;
    if (!f->counts || !qf || !frame_block(qf, scan, &first, &count))
        return 0;
    const size_t item = qem_dtype_size(f->info.working_dtype);
    const size_t frame = (size_t)f->info.pixels * item;
    qem_error e = {0};
    pthread_mutex_lock(&s->frames_lock);
    frame_slot *slot = NULL;
    for (int k = 0; k < FRAME_SLOTS && !slot; k++)
        if (s->frames[k].used && s->frames[k].file == index && s->frames[k].first == first)
            slot = &s->frames[k];
    if (slot) {
        atomic_fetch_add(&s->frame_hits, 1);
    } else {
        atomic_fetch_add(&s->frame_misses, 1);
        slot = &s->frames[0];
        for (int k = 1; k < FRAME_SLOTS; k++)
            if (!s->frames[k].used || (slot->used && s->frames[k].tick < slot->tick))
                slot = &s->frames[k];
        slot->used = 0;
        const size_t size = (size_t)count * frame;
        if (slot->size < size) {
            free(slot->data);
            slot->data = malloc(size);
            slot->size = slot->data ? size : 0;
        }
        qem_status st = slot->data ? qem_container_read(f->source, first, count,
                                                        QEM_VALUES_WORKING, slot->data, size, &e)
                                   : own_error(&e, QEM_E_NO_MEMORY, "out of memory for patterns");
        if (st != QEM_OK) {
            pthread_mutex_unlock(&s->frames_lock);
            reply_failure(r, &e);
            return 1;
        }
        for (uint64_t k = 0; k < count; k++)
            for (uint64_t px = 0; px < f->info.pixels; px++)
                if (!f->valid[px])
                    memset(slot->data + k * frame + px * item, 0, item);
        slot->used = 1;
        slot->file = index;
        slot->first = first;
        slot->count = count;
    }
    slot->tick = ++s->frames_clock;
    size_t n = 0;
    unsigned char *body = npy_body(f->info.working_dtype, 2, f->info.shape + 2,
                                   slot->data + (scan - first) * frame, &n);
    pthread_mutex_unlock(&s->frames_lock);
    reply_owned(r, "application/octet-stream", body, n);
    return 1;
}

static void route_dp(view_server *s, const view_request *q, reply *r)
{
    view_file *f = &s->files[q->file];
    const uint64_t scan = q->scan[0] * f->info.shape[1] + q->scan[1];
    if (frame_from_block(s, (size_t)q->file, scan, r))
        return;
    qem_error e = {0};
    qem_image im;
    if (qem_products_frame(f->products, scan, &im, &e) != QEM_OK)
        reply_failure(r, &e);
    else
        reply_image(r, &im);
}

/* The request's mask (NULL when it names no detector: the CoM then takes
 * every valid pixel, as `qem com` without --mask/--detector). */
static int optional_mask(view_server *s, const view_request *q, uint8_t **mask,
                         resolved_detector *res, reply *r)
{
    *mask = NULL;
    if (!q->det.kind)
        return 1;
    view_file *f = &s->files[q->file];
    qem_error e = {0};
    *mask = malloc((size_t)f->info.pixels);
    if (!*mask) {
        reply_text(r, 503, "out of memory for a detector mask");
        return 0;
    }
    if (request_mask(f, &q->det, *mask, res, &e) != QEM_OK) {
        free(*mask);
        *mask = NULL;
        reply_failure(r, &e);
        return 0;
    }
    return 1;
}

/* A virtual image or the centre of mass, over the request's mask. */
static void route_image(view_server *s, const view_request *q, reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    qem_error e = {0};
    qem_image im;
    qem_products *p = s->files[q->file].products;
    const qem_status st = q->route == VIEW_ROUTE_COM
                              ? qem_products_com(p, mask, q->subtract_mean, &im, &e)
                              : qem_products_virtual(p, mask, &im, &e);
    if (st != QEM_OK)
        reply_failure(r, &e);
    else
        reply_image(r, &im);
    free(mask);
}

static void route_mask(view_server *s, const view_request *q, reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    const view_file *f = &s->files[q->file];
    size_t n = 0;
    unsigned char *body = npy_body(QEM_DTYPE_UINT8, 2, f->info.shape + 2, mask, &n);
    free(mask);
    reply_owned(r, "application/octet-stream", body, n);
}

static void route_detector(view_server *s, const view_request *q, reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    free(mask);
    json_t *j = json_object();
    json_object_set_new(j, "file", json_integer((json_int_t)q->file));
    json_object_set_new(j, "mask_pixels", json_integer((json_int_t)res.pixels));
    json_object_set_new(j, "center_radius_from", json_string(res.named.origin));
    if (q->det.kind == VIEW_DETECTOR_RECT) {
        json_object_set_new(j, "detector", json_string("rect"));
        json_object_set_new(j, "rect",
                            json_pack("[I,I,I,I]", (json_int_t)q->det.rect[0],
                                      (json_int_t)q->det.rect[1], (json_int_t)q->det.rect[2],
                                      (json_int_t)q->det.rect[3]));
    } else {
        const qem_detector_resolution *u = &res.named;
        json_object_set_new(j, "detector", json_string(view_detector_name(q->det.kind)));
        json_object_set_new(j, "center", json_pack("[f,f]", u->center_row, u->center_column));
        json_object_set_new(j, "radius", isnan(u->radius) ? json_null() : json_real(u->radius));
        json_object_set_new(j, "inner", q->det.have_inner ? json_real(q->det.inner) : json_null());
        json_object_set_new(j, "outer", q->det.have_outer ? json_real(q->det.outer) : json_null());
        json_object_set_new(j, "unit", json_string(u->unit_mrad ? "mrad" : "px"));
        json_object_set_new(j, "radius_px",
                            isnan(res.radius_px) ? json_null() : json_real(res.radius_px));
    }
    reply_json(r, j);
}

static void route_dpc(view_server *s, const view_request *q, reply *r)
{
    uint8_t *mask;
    resolved_detector res;
    if (!optional_mask(s, q, &mask, &res, r))
        return;
    qem_error e = {0};
    qem_dpc_result d = {.struct_size = sizeof d};
    if (qem_products_dpc(s->files[q->file].products, mask, q->have_rotation ? q->rotation : NAN,
                         &d, &e) != QEM_OK) {
        reply_failure(r, &e);
    } else {
        reply_header(r, "X-Qem-Rotation-Degrees", "%.17g", d.rotation_degrees);
        reply_header(r, "X-Qem-Components-Exchanged", "%d", d.components_exchanged);
        reply_image(r, &d.phase);
        qem_dpc_result_free(&d);
    }
    free(mask);
}

static void route_mean(view_server *s, const view_request *q, reply *r)
{
    qem_error e = {0};
    unsigned char *body = NULL;
    size_t n = 0;
    if (mean_npy(&s->files[q->file], &body, &n, &e) != QEM_OK)
        reply_failure(r, &e);
    else
        reply_owned(r, "application/octet-stream", body, n);
}

/* The page's detector moved: the new images of every file, all or none,
 * from its session (signed deltas of the pixels that changed). */
static void route_live(view_server *s, const view_request *q, reply *r)
{
    qem_error e = {0};
    view_client *c = client_acquire(s, q->client, &e);
    if (!c) {
        reply_failure(r, &e);
        return;
    }
    const uint64_t pixels = s->files[0].info.pixels;
    uint8_t *mask = malloc((size_t)pixels);
    qem_image *images = calloc(s->nfiles, sizeof *images);
    resolved_detector res;
    pthread_mutex_lock(&c->lock);
    const double t0 = now_ms();
    qem_status st = mask && images ? QEM_OK
                                   : own_error(&e, QEM_E_NO_MEMORY, "out of memory for an update");
    if (st == QEM_OK)
        st = series_mask(s, (size_t)q->file, &q->det, mask, &res, &e);
    if (st == QEM_OK)
        st = qem_detector_session_set_mask(c->session, mask, &e);
    for (size_t k = 0; st == QEM_OK && k < s->nfiles; k++)
        st = qem_detector_session_image(c->session, k, &images[k], &e);
    qem_session_stats stats = {.struct_size = sizeof stats};
    qem_detector_session_stats(c->session, &stats, NULL);
    const double computed = now_ms() - t0;
    pthread_mutex_unlock(&c->lock);
    client_release(s, c);
    unsigned char *body = NULL;
    size_t used = 0;
    for (size_t k = 0; st == QEM_OK && k < s->nfiles; k++) {
        size_t n = 0;
        unsigned char *one = image_npy(&images[k], &n);
        unsigned char *grown = one ? realloc(body, used + n) : NULL;
        if (!grown) {
            free(one);
            st = own_error(&e, QEM_E_NO_MEMORY, "out of memory for the images");
            break;
        }
        body = grown;
        memcpy(body + used, one, n);
        used += n;
        free(one);
    }
    for (size_t k = 0; images && k < s->nfiles; k++)
        qem_image_free(&images[k]);
    free(images);
    free(mask);
    if (st != QEM_OK) {
        free(body);
        reply_failure(r, &e);
        return;
    }
    atomic_fetch_add(&s->live_updates, 1);
    reply_owned(r, "application/octet-stream", body, used);
    reply_header(r, "X-Qem-Seq", "%llu", (unsigned long long)q->seq);
    reply_header(r, "X-Qem-Compute-Ms", "%.3f", computed);
    reply_header(r, "X-Qem-Images", "%zu", s->nfiles);
    reply_header(r, "X-Qem-Pixels-Changed", "%llu", (unsigned long long)stats.pixels_changed);
    reply_header(r, "X-Qem-Full-Recomputation", "%d", stats.full_recomputation);
    reply_header(r, "X-Qem-Mask-Pixels", "%llu", (unsigned long long)res.pixels);
}

static void route_stats(view_server *s, reply *r)
{
    const union MHD_DaemonInfo *info =
        s->daemon ? MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
    reply_json(r, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I}",
                            "requests",
                            (json_int_t)atomic_load(&s->requests), "live_updates",
                            (json_int_t)atomic_load(&s->live_updates), "refused",
                            (json_int_t)atomic_load(&s->refused), "failed",
                            (json_int_t)atomic_load(&s->failed), "sessions",
                            (json_int_t)sessions_open(s), "sessions_created",
                            (json_int_t)atomic_load(&s->sessions_created), "sessions_evicted",
                            (json_int_t)atomic_load(&s->sessions_evicted), "max_sessions",
                            MAX_SESSIONS, "connections",
                            (json_int_t)(info ? info->num_connections : 0), "pattern_block_hits",
                            (json_int_t)atomic_load(&s->frame_hits), "pattern_block_misses",
                            (json_int_t)atomic_load(&s->frame_misses), "unauthenticated_evicted",
                            (json_int_t)atomic_load(&s->unauth_evicted),
                            "unauthenticated_timed_out",
                            (json_int_t)atomic_load(&s->unauth_timed_out)));
}

static void dispatch(view_server *s, const view_request *q, reply *r)
{
    switch (q->route) {
    case VIEW_ROUTE_PAGE:
        r->status = 200;
        r->type = "text/html; charset=utf-8";
        r->data = s->page;
        r->length = s->page_length;
        return;
    case VIEW_ROUTE_ASSET: {
        const view_asset *a = strcmp(q->asset, "index.html") ? find_asset(q->asset) : NULL;
        if (!a) {
            reply_text(r, 404, "no such page file");
            return;
        }
        r->status = 200;
        r->type = a->content_type;
        r->data = a->data;
        r->length = a->size;
        return;
    }
    case VIEW_ROUTE_INFO:
        r->status = 200;
        r->type = "application/json";
        r->data = s->info_json;
        r->length = s->info_length;
        return;
    case VIEW_ROUTE_STATS: route_stats(s, r); return;
    case VIEW_ROUTE_MEAN: route_mean(s, q, r); return;
    case VIEW_ROUTE_DP: route_dp(s, q, r); return;
    case VIEW_ROUTE_VIRTUAL: route_image(s, q, r); return;
    case VIEW_ROUTE_MASK: route_mask(s, q, r); return;
    case VIEW_ROUTE_DETECTOR: route_detector(s, q, r); return;
    case VIEW_ROUTE_COM: route_image(s, q, r); return;
    case VIEW_ROUTE_DPC: route_dpc(s, q, r); return;
    case VIEW_ROUTE_LIVE: route_live(s, q, r); return;
    case VIEW_ROUTE_NONE: break;
    }
    reply_text(r, 404, "no such path");
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

static enum MHD_Result send_reply(view_server *s, struct MHD_Connection *connection, reply *r)
{
    struct MHD_Response *response;
    if (r->owned)
        response = MHD_create_response_from_buffer_with_free_callback(r->length, r->owned,
                                                                      free_body);
    else
        response = MHD_create_response_from_buffer(r->length, (void *)r->data,
                                                   MHD_RESPMEM_PERSISTENT);
    if (!response) {
        free(r->owned);
        return MHD_NO;
    }
    r->owned = NULL; /* the response frees it now */
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
static void log_line(const view_server *s, const char *text)
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
    log_line(s, line);
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
    for (int k = 0; k < MAX_CONNECTIONS; k++) {
        view_conn *c = &s->conns[k];
        if (!c->used) {
            fresh = fresh ? fresh : c;
        } else if (!c->authenticated && !c->cut) {
            unauthenticated++;
            if (!oldest || c->opened_ms < oldest->opened_ms)
                oldest = c;
        }
    }
    /* libmicrohttpd admits at most MAX_CONNECTIONS, so a slot is free. */
    if (fresh && info) {
        *fresh = (view_conn){1, info->connect_fd, 0, 0, now_ms()};
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
        const double now = now_ms();
        for (int k = 0; k < MAX_CONNECTIONS; k++) {
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
    const double t0 = now_ms();
    atomic_fetch_add(&s->requests, 1);
    reply r;
    memset(&r, 0, sizeof r);
    char why[256] = "";
    /* 1. The token (above); nothing is answered without it, not even "no
     * such path". */
    view_request q;
    if (!call) {
        reply_text(&r, 503, "out of memory");
    } else if (!allowed) {
        reply_text(&r, 403, "forbidden: this server needs its access token (the token query "
                            "parameter or the X-Qem-Token header)");
    } else if (strcmp(method, MHD_HTTP_METHOD_GET)) {
        reply_text(&r, 405, "only GET is served");
    } else if (call->too_long) {
        reply_text(&r, 400, "the request target is too long");
    } else {
        int status = view_parse_target(call->target, call->length, &q, why, sizeof why);
        if (!status)
            status = view_check_request(&q, &s->limits, why, sizeof why);
        if (status)
            reply_text(&r, (unsigned)status, why);
        else
            dispatch(s, &q, &r);
    }
    if (r.status == 403 || r.status == 405 || r.status == 404 || r.status == 400)
        atomic_fetch_add(&s->refused, 1);
    else if (r.status >= 500)
        atomic_fetch_add(&s->failed, 1);
    const unsigned status = r.status;
    const enum MHD_Result result = send_reply(s, connection, &r);
    if (s->config.verbose)
        log_request(s, method, call, status, now_ms() - t0);
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
        log_line(s, text);
    }
    free(text);
    va_end(again);
}

qem_status view_server_start(view_server *s, unsigned *port, qem_error *e)
{
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)s->config.port);
    if (inet_pton(AF_INET, s->config.bind, &address.sin_addr) != 1)
        return own_error(e, QEM_E_INVALID_ARGUMENT, "'%s' is not an IPv4 address", s->config.bind);
    if (pthread_create(&s->guard, NULL, guard_main, s) != 0)
        return own_error(e, QEM_E_NO_MEMORY, "cannot start the connection guard thread");
    s->guard_running = 1;
    s->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)CONNECTION_MEMORY, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        s, MHD_OPTION_END);
    if (!s->daemon) {
        guard_stop(s);
        return own_error(e, QEM_E_IO, "cannot listen on %s port %u (in use, or not an address "
                                      "of this machine)",
                         s->config.bind, s->config.port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : s->config.port;
    return QEM_OK;
}

void view_server_free(view_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1); /* running products cancel at their next window */
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    guard_stop(s); /* after the daemon: no connection is left to guard */
    pthread_mutex_destroy(&s->conns_lock);
    pthread_cond_destroy(&s->guard_wake);
    for (int k = 0; k < MAX_SESSIONS; k++)
        client_free(s->clients[k]);
    for (size_t k = 0; k < s->nfiles; k++)
        file_close(&s->files[k]);
    pthread_mutex_destroy(&s->clients_lock);
    for (int k = 0; k < FRAME_SLOTS; k++)
        free(s->frames[k].data);
    pthread_mutex_destroy(&s->frames_lock);
    free(s->files);
    free(s->products);
    free(s->shapes);
    free(s->page);
    free(s->info_json);
    free(s);
}
