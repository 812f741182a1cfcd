/* The viewer server's state (see server_internal.h): the open files and
 * what is kept of each (the mean pattern, the default detector), the
 * per-page detector sessions and their least-recently-used recycling, and
 * the pattern block cache. Products come from the public API only. */
#include "view/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qem_experimental.h"
#include "terminal.h"

/* Long computations ask this between windows: a stopping server, or
 * Ctrl-C / SIGTERM on its way to stopping it, cancels them. */
static int cancel_when_stopping(void *user, uint64_t done, uint64_t total)
{
    (void)done;
    (void)total;
    return atomic_load(&((view_server *)user)->stopping) || interrupted_by();
}

/* The packed copies' build gives way to requests being computed: it
 * waits between chunks while any is, so that a first image or a move is
 * not slowed by work in the background. */
static int build_gives_way(void *user, uint64_t done, uint64_t total)
{
    view_server *s = user;
    while (atomic_load(&s->computing) && !cancel_when_stopping(user, done, total))
        usleep(1000);
    return cancel_when_stopping(user, done, total);
}

/* --- files ----------------------------------------------------------------- */

/* Opening's progress on the terminal, cancelled by a stopping server too
 * (a body checked after the start must not hold the stop up). */
static int open_progress(void *user, uint64_t done, uint64_t total)
{
    view_file *f = user;
    return atomic_load(&f->server->stopping) || f->loading_fn(f->loading_user, done, total);
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

qem_status view_state_open(view_server *s, qem_error *error)
{
    const view_config *config = &s->config;
    s->files = calloc(config->files, sizeof *s->files);
    s->products = calloc(config->files, sizeof *s->products);
    s->shapes = calloc(config->files, sizeof *s->shapes);
    pthread_mutex_init(&s->clients_lock, NULL);
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
        f->server = s;
        if (config->live) {
            f->source = config->live; /* the recording's, now the server's */
            f->live = 1;
        } else {
            qem_container_options so;
            qem_container_options_init(&so);
            so.threads = config->threads;
            so.resident = config->resident;
            /* An equal share each (a pack does not use its share). */
            so.column_cache_bytes = (config->column_cache_mib << 20) / config->files;
            /* Every block is still checked before it is decoded, and all
             * of them right after the start (view_body_check_start); a
             * pack loads then too, and what needs its data waits for it. */
            so.body_check = QEM_BODY_CHECK_ON_READ;
            so.load = QEM_LOAD_AWAITED;
            progress_setup(&f->loading, "loading shards", "shards", config->quiet, &f->loading_fn,
                           &f->loading_user);
            so.progress = open_progress;
            so.progress_user = f;
            st = qem_container_open(f->path, &so, &f->source, error);
            if (st != QEM_OK)
                break;
        }
        qem_products_options po;
        qem_products_options_init(&po);
        po.threads = config->threads;
        po.cache_dir = config->cache_dir;
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
    /* The recording's container is the server's even when it was not
     * reached (out of memory before it). */
    if (config->live && !(s->nfiles && s->files[0].source))
        qem_container_close(config->live);
    if (st == QEM_OK) {
        /* The same checks a session makes (no file twice), up front. */
        qem_detector_session *probe = NULL;
        st = qem_detector_session_create(s->products, s->nfiles, &probe, error);
        qem_detector_session_free(probe);
    }
    s->limits.files = s->nfiles;
    s->limits.shapes = (const uint64_t(*)[4])s->shapes;
    return st;
}

static void *body_check_main(void *arg)
{
    view_server *s = arg;
    for (size_t k = 0; k < s->nfiles && !atomic_load(&s->stopping); k++) {
        view_file *f = &s->files[k];
        if (f->live)
            continue;
        qem_error e = {0};
        const qem_status st = qem_container_load(f->source, &e);
        if (st != QEM_OK && st != QEM_E_CANCELLED) {
            f->body_error = e;
            atomic_store(&f->body_failed, 1);
            char line[sizeof e.message + 4200];
            snprintf(line, sizeof line, "'%s' %s: %s", f->path, view_body_failure_words(st),
                     e.message);
            view_log_line(s, line);
        }
    }
    atomic_store(&s->bodies_checked, !atomic_load(&s->stopping));
    /* Then the packed copies, file by file while the budget lasts: a file
     * that does not fit keeps decoding, and a later smaller one may fit. */
    uint64_t left = s->config.packed_copy_mib << 20;
    for (size_t k = 0; k < s->nfiles && left && !atomic_load(&s->stopping); k++) {
        view_file *f = &s->files[k];
        if (f->live || atomic_load(&f->body_failed))
            continue;
        qem_error e = {0};
        const qem_status st =
            qem_container_build_packed_copy(f->source, left, s->config.threads,
                                            build_gives_way, s, &e);
        qem_packed_copy_stats stats = {sizeof stats, 0, 0, 0};
        if (st == QEM_OK &&
            qem_container_packed_copy_stats(f->source, &stats, NULL) == QEM_OK && stats.ready)
            left = stats.bytes < left ? left - stats.bytes : 0;
        else if (st != QEM_OK && st != QEM_E_LIMIT && st != QEM_E_WRONG_CODEC &&
                 st != QEM_E_CANCELLED) {
            char line[sizeof e.message + 4200];
            snprintf(line, sizeof line, "'%s': no packed copy: %s", f->path, e.message);
            view_log_line(s, line);
        }
    }
    atomic_store(&s->packed_done, !atomic_load(&s->stopping));
    return NULL;
}

void view_body_check_start(view_server *s)
{
    s->body_checker_running = pthread_create(&s->body_checker, NULL, body_check_main, s) == 0;
    if (!s->body_checker_running)
        body_check_main(s); /* no thread: checked before serving */
}

void view_body_check_stop(view_server *s)
{
    if (!s->body_checker_running)
        return;
    atomic_store(&s->stopping, 1);
    pthread_join(s->body_checker, NULL);
    s->body_checker_running = 0;
}

const char *view_body_failure_words(qem_status status)
{
    switch (status) {
    case QEM_E_NO_MEMORY:
    case QEM_E_INSUFFICIENT_MEMORY:
    case QEM_E_IO:
    case QEM_E_CHANGED:
    case QEM_E_LIMIT: return "could not be loaded";
    default: return "is damaged";
    }
}

const view_file *view_body_failure(view_server *s)
{
    for (size_t k = 0; k < s->nfiles; k++)
        if (atomic_load(&s->files[k].body_failed))
            return &s->files[k];
    return NULL;
}

static void client_free(view_client *c);

void view_state_close(view_server *s)
{
    for (int k = 0; k < VIEW_MAX_SESSIONS; k++)
        client_free(s->clients[k]);
    for (size_t k = 0; k < s->nfiles; k++)
        file_close(&s->files[k]);
    pthread_mutex_destroy(&s->clients_lock);
    free(s->files);
    free(s->products);
    free(s->shapes);
}

/* --- a recording in progress ------------------------------------------------- */

void view_live_poll(view_server *s, view_live_state *out)
{
    memset(out, 0, sizeof *out);
    if (s->config.live && s->config.live_state) {
        s->config.live_state(s->config.live_user, out);
        return;
    }
    out->received = out->expected = s->files[0].info.scans;
    out->finished = out->complete = 1;
}

int view_data_changing(view_server *s)
{
    if (!s->config.live || atomic_load(&s->live_settled))
        return 0;
    view_live_state now;
    view_live_poll(s, &now);
    if (!now.finished)
        return 1;
    atomic_store(&s->live_settled, 1); /* the journal is final: caching may resume */
    return 0;
}

/* --- bodies and per-file caches ---------------------------------------------- */

/* One .npy's header (into `header`, `*head` bytes) and data bytes; 0 when
 * too large. */
static int npy_sizes(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                     unsigned char header[QEM_NPY_HEADER_MAX], size_t *head, size_t *data)
{
    if (qem_npy_header(dtype, ndim, shape, header, QEM_NPY_HEADER_MAX, head, NULL) != QEM_OK)
        return 0;
    const size_t item = qem_dtype_size(dtype);
    size_t elements = 1;
    for (unsigned k = 0; k < ndim; k++) {
        if (shape[k] && elements > SIZE_MAX / shape[k])
            return 0;
        elements *= (size_t)shape[k];
    }
    if (elements > (SIZE_MAX - *head) / item)
        return 0;
    *data = elements * item;
    return 1;
}

unsigned char *view_npy_body(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                             const void *data, size_t *length)
{
    qem_image im = {.dtype = dtype, .ndim = ndim, .data = (void *)data};
    if (ndim > sizeof im.shape / sizeof im.shape[0])
        return NULL;
    memcpy(im.shape, shape, ndim * sizeof *shape);
    return view_images_npy(&im, 1, length);
}

/* Sized first and written once: growing the body image by image copied
 * it again at each step and took fresh pages for it (a series of three
 * 512 images: up to 10 ms an update on the benchmark's machine). */
size_t view_images_npy_size(const qem_image *images, size_t count)
{
    unsigned char header[QEM_NPY_HEADER_MAX];
    size_t total = 0, head, data;
    for (size_t k = 0; k < count; k++) {
        const qem_image *im = &images[k];
        if (!npy_sizes(im->dtype, im->ndim, im->shape, header, &head, &data) ||
            head + data > SIZE_MAX - total)
            return 0;
        total += head + data;
    }
    return total;
}

void view_images_npy_write(const qem_image *images, size_t count, unsigned char *out)
{
    unsigned char header[QEM_NPY_HEADER_MAX];
    size_t at = 0, head, data;
    for (size_t k = 0; k < count; k++) {
        const qem_image *im = &images[k];
        npy_sizes(im->dtype, im->ndim, im->shape, header, &head, &data);
        memcpy(out + at, header, head);
        if (data)
            memcpy(out + at + head, im->data, data);
        at += head + data;
    }
}

unsigned char *view_images_npy(const qem_image *images, size_t count, size_t *length)
{
    const size_t total = view_images_npy_size(images, count);
    unsigned char *out = total || !count ? malloc(total ? total : 1) : NULL;
    if (!out)
        return NULL;
    view_images_npy_write(images, count, out);
    *length = total;
    return out;
}

unsigned char *view_image_npy(const qem_image *im, size_t *length)
{
    return view_images_npy(im, 1, length);
}

/* What the library takes from the file's detector calibration, else the
 * estimate (a pass over every scan), resolved once through the library
 * for a plain BF request and kept. */
qem_status view_file_defaults(view_file *f, view_default_detector *out, qem_error *e)
{
    qem_status st = QEM_OK;
    const int changing = view_data_changing(f->server);
    pthread_mutex_lock(&f->lock);
    if (!f->have_default || changing) {
        uint8_t *scratch = malloc((size_t)f->info.pixels);
        qem_detector_request q;
        qem_detector_request_init(&q);
        qem_detector_resolution r = {.struct_size = sizeof r};
        st = scratch ? qem_products_resolve_detector(f->products, &q, scratch,
                                                     (size_t)f->info.pixels, &r, e)
                     : view_fail(e, QEM_E_NO_MEMORY, "out of memory for a detector mask");
        free(scratch);
        if (st == QEM_OK) {
            f->defaults.center_row = r.center_row;
            f->defaults.center_column = r.center_column;
            f->defaults.radius = r.radius;
            memcpy(f->defaults.origin, r.origin, sizeof f->defaults.origin);
            f->have_default = !changing;
        }
    }
    *out = f->defaults;
    pthread_mutex_unlock(&f->lock);
    return st;
}

qem_status view_mean_npy(view_file *f, unsigned char **body, size_t *length, qem_error *e)
{
    if (view_data_changing(f->server)) {
        /* The frames received so far: computed for this request alone. */
        qem_image now;
        qem_status st = qem_products_mean(f->products, &now, e);
        if (st == QEM_OK) {
            *body = view_image_npy(&now, length);
            qem_image_free(&now);
            if (!*body)
                st = view_fail(e, QEM_E_NO_MEMORY, "out of memory for the mean pattern's body");
        }
        return st;
    }
    qem_status st = QEM_OK;
    pthread_mutex_lock(&f->lock);
    if (!f->have_mean) {
        st = qem_products_mean(f->products, &f->mean, e);
        f->have_mean = st == QEM_OK;
    }
    if (st == QEM_OK) {
        *body = view_image_npy(&f->mean, length);
        if (!*body)
            st = view_fail(e, QEM_E_NO_MEMORY, "out of memory for the mean pattern's body");
    }
    pthread_mutex_unlock(&f->lock);
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

/* The least recently used idle session makes room when VIEW_MAX_SESSIONS
 * pages are open. */
view_client *view_client_acquire(view_server *s, const char *id, qem_error *e)
{
    pthread_mutex_lock(&s->clients_lock);
    view_client *found = NULL;
    int free_slot = -1, idle = -1;
    for (int k = 0; k < VIEW_MAX_SESSIONS; k++) {
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
        if (found &&
            qem_detector_session_create(s->products, s->nfiles, &found->session, e) == QEM_OK &&
            qem_detector_session_keep(found->session, s->config.keep_masks_mib << 20, e) ==
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
                view_fail(e, QEM_E_LIMIT,
                          "%d pages are updating at once; close one or wait for it",
                          VIEW_MAX_SESSIONS);
            else
                view_fail(e, QEM_E_NO_MEMORY, "out of memory for a detector session");
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

void view_client_release(view_server *s, view_client *c)
{
    pthread_mutex_lock(&s->clients_lock);
    c->refs--;
    pthread_mutex_unlock(&s->clients_lock);
}

size_t view_sessions_open(view_server *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->clients_lock);
    for (int k = 0; k < VIEW_MAX_SESSIONS; k++)
        n += s->clients[k] != NULL;
    pthread_mutex_unlock(&s->clients_lock);
    return n;
}

