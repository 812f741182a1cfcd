/* qem-bench-viewer: how fast `qem view` answers, measured from outside as
 * a page would see it (server compute plus loopback transfer):
 *   - the time from starting `qem view FILE` to the first scan image
 *     (files opened and a pack loaded, the default detector resolved, the
 *     first image received), for the file as generated and for a copy
 *     that records its detector calibration;
 *   - 1-pixel detector moves through one page's session (p50, p95);
 *   - the pattern at the cursor along a hover path and at random positions;
 *   - with --more, BF moves to new positions, an ADF ring resized one
 *     detector pixel at a time and a rectangle moved one pixel at a time
 *     (p50, p95, max), and every move series' maximum; each of these
 *     series starts with a request that is not a move (an 11-pixel jump,
 *     a new detector), timed on its own as "switch";
 *   - the server's peak resident memory (VmHWM) once ready, before any
 *     move, and at the end of each run.
 * --json FILE writes every figure for a driver (bench/bench_scale.py);
 * --dense NPY --mask M.u8 times a plain C loop over the mapped .npy (the
 * dense baseline of the same virtual image). Synthetic sets (bench/synth.c) are generated into --workdir, checked
 * against the free disk and memory first, and deleted afterwards unless
 * --keep. Not a test: nothing is asserted. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/fileio.h"
#include "common/sha256.h"
#include "dense.h"
#include "pack/calibrated_copy.h"
#include "pack/encode.h"
#include "synth.h"

extern char **environ;

#define MAX_RUNS 9

static const char *const help =
    "usage: qem-bench-viewer [--sets 256,512] [--runs N] [--moves N] [--workdir DIR]\n"
    "                        [--qem PATH] [--keep] [--shape R,C,H,W] [--more]\n"
    "                        [--json FILE] [--prepare-only]\n"
    "       qem-bench-viewer --dense NPY --mask MASK.u8 [--runs N] [--threads N]\n"
    "\n"
    "Latency of qem view on synthetic uint16 sets: 256 = 256 x 256 scans x\n"
    "128 x 128 detector (2.1 GB raw), 512 = 512 x 512 scans x 192 x 192\n"
    "(19.3 GB raw), each as .qem and as a pack (plus copies recording their\n"
    "detector calibration, and copies recording no prepared values, whose\n"
    "first image is timed on a first and a second open over one fresh cache\n"
    "folder). Prints a markdown section. Defaults: --sets 256\n"
    "--runs 3 --moves 200 --workdir /tmp/qem-bench-viewer.\n"
    "  --shape R,C,H,W  one set of that shape (H, W >= 16) instead of --sets (files\n"
    "                   viewRxCxHxW.*), e.g. a small one for testing\n"
    "  --more           also an ADF ring resize and a rectangle move series\n"
    "  --json FILE      every figure (medians of the runs) as JSON\n"
    "  --prepare-only   generate what is missing, print the paths, stop\n"
    "  --dense NPY      time a virtual image by a plain C loop over the mapped\n"
    "                   uint16 .npy, masked by MASK.u8 (H x W bytes, 0/1);\n"
    "                   prints JSON: milliseconds of each run and the sum\n";

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-quantile (nearest rank) of n values; sorts them. */
static double quantile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)ceil(p * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static double load_average(void)
{
    double one = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &one) != 1)
            one = -1;
        fclose(f);
    }
    return one;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    uint64_t kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib * 1024;
}

static uint64_t disk_available(const char *dir)
{
    struct statvfs v;
    return statvfs(dir, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : 0;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static int die(const char *what, const qem_error *e)
{
    fprintf(stderr, "qem-bench-viewer: %s: %s\n", what,
            e && e->message[0] ? e->message : e ? qem_strerror(e->status) : "failed");
    return 1;
}

/* --- a minimal HTTP/1.1 client (keep-alive, Content-Length bodies) ---------- */

typedef struct http {
    int fd;
    char buf[1 << 16];
    size_t have;
    const char *token;
} http;

static int http_connect(http *h, unsigned port, const char *token)
{
    h->have = 0;
    h->token = token;
    h->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (h->fd < 0)
        return 0;
    int one = 1;
    setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return connect(h->fd, (struct sockaddr *)&a, sizeof a) == 0;
}

typedef struct answer {
    unsigned status;
    double compute_ms; /* X-Qem-Compute-Ms, or -1 */
    int from_kept;     /* X-Qem-From-Kept: 1 when no image was computed */
    char *body;        /* NUL-terminated; caller frees */
    size_t length;
} answer;

static int http_get(http *h, const char *target, answer *out)
{
    memset(out, 0, sizeof *out);
    out->compute_ms = -1;
    char request[4096];
    int n = snprintf(request, sizeof request,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Qem-Token: %s\r\n\r\n", target,
                     h->token);
    if (n <= 0 || (size_t)n >= sizeof request || write(h->fd, request, (size_t)n) != n)
        return 0;
    char *end = NULL;
    for (;;) {
        h->buf[h->have] = '\0';
        end = strstr(h->buf, "\r\n\r\n");
        if (end || h->have + 1 >= sizeof h->buf)
            break;
        ssize_t got = read(h->fd, h->buf + h->have, sizeof h->buf - 1 - h->have);
        if (got <= 0)
            return 0;
        h->have += (size_t)got;
    }
    if (!end || sscanf(h->buf, "HTTP/1.1 %u", &out->status) != 1)
        return 0;
    const size_t head = (size_t)(end + 4 - h->buf);
    size_t length = 0;
    for (char *line = strstr(h->buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        unsigned long long v;
        double ms;
        if (sscanf(line + 2, "Content-Length: %llu", &v) == 1)
            length = (size_t)v;
        else if (sscanf(line + 2, "X-Qem-Compute-Ms: %lf", &ms) == 1)
            out->compute_ms = ms;
        else
            sscanf(line + 2, "X-Qem-From-Kept: %d", &out->from_kept);
    }
    out->body = malloc(length + 1);
    if (!out->body)
        return 0;
    size_t taken = h->have - head < length ? h->have - head : length;
    memcpy(out->body, h->buf + head, taken);
    memmove(h->buf, h->buf + head + taken, h->have - head - taken);
    h->have -= head + taken;
    while (taken < length) {
        ssize_t got = read(h->fd, out->body + taken, length - taken);
        if (got <= 0) {
            free(out->body);
            out->body = NULL;
            return 0;
        }
        taken += (size_t)got;
    }
    out->body[length] = '\0';
    out->length = length;
    return 1;
}

/* --- the server ----------------------------------------------------------------- */

typedef struct server {
    pid_t pid;
    unsigned port;
    char token[33];
} server;

/* Starts `qem view --no-open --port 0 FILE...` (a series when several)
 * and reads its address; `cache_dir` NULL keeps the server's default. */
static int server_start(const char *qem, const char *const *files, int nfiles,
                        const char *cache_dir, int decoding, server *s)
{
    int out[2];
    if (pipe(out))
        return 0;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    char *argv[10 + 4] = {(char *)qem, "view", "--no-open", "--port", "0"};
    int at = 5;
    if (decoding) {
        /* The side-by-side run: no packed copy, every move decodes. */
        argv[at++] = "--packed-copy";
        argv[at++] = "0";
    }
    if (cache_dir) {
        argv[at++] = "--cache-dir";
        argv[at++] = (char *)cache_dir;
    }
    for (int k = 0; k < nfiles && k < 4; k++)
        argv[at++] = (char *)files[k];
    const int rc = posix_spawn(&s->pid, qem, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc) {
        close(out[0]);
        return 0;
    }
    char line[256];
    size_t used = 0;
    struct pollfd p = {out[0], POLLIN, 0};
    while (used + 1 < sizeof line && poll(&p, 1, 600000) > 0) {
        ssize_t got = read(out[0], line + used, 1);
        if (got <= 0 || line[used] == '\n')
            break;
        used++;
    }
    line[used] = '\0';
    close(out[0]);
    return sscanf(line, "http://127.0.0.1:%u/?token=%32s", &s->port, s->token) == 2;
}

static void server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
}

/* --- one measured run -------------------------------------------------------------- */

typedef struct run_result {
    double address_ms, detector_ms, first_ms; /* from the start of qem view */
    double checked_ms; /* every body authenticated (/api/stats bodies_checked) */
    double packed_ms;  /* the .qem packed copies built (/api/stats packed_done) */
    double move_p50, move_p95, compute_p50, compute_p95;
    double hover_p50, hover_p95, jump_p50, jump_p95;
    double load_before, load_after;
    /* every series' maximum; --more: ADF ring resize, rectangle move */
    double move_max, hover_max, jump_max;
    double adf_p50, adf_p95, adf_max, adf_compute_p95;
    double fresh_p50, fresh_p95, fresh_max; /* BF moves, every position new */
    double fresh_compute_p50, fresh_compute_p95;
    double rect_p50, rect_p95, rect_max, rect_compute_p95;
    /* --more: the request that starts a series (an 11-pixel BF jump, the
     * switch to the ADF ring, to the rectangle), timed on its own */
    double fresh_switch, adf_switch, rect_switch;
    /* the moves of the back-and-forth series that were computed: count,
     * p50, max (the others come from kept images) */
    double move_computed, move_cp50, move_cmax, adf_computed, adf_cp50, adf_cmax;
    double rect_computed, rect_cp50, rect_cmax;
    double rss_peak_mib;  /* the server's VmHWM before it stopped */
    double rss_ready_mib; /* its VmHWM once ready, before any move */
    /* a copy recording no prepared values: first image on the first and
     * the second open over one fresh cache folder */
    double bare_first_ms, bare_second_ms;
    double bf_row, bf_col, bf_radius; /* the default BF detector */
    /* .qem with --more: the same moves on a server without the packed copy
     * (BF moves to new positions; the ADF ring's computed moves; RSS) */
    double cc_fresh_p50, cc_fresh_p95, cc_fresh_max, cc_adf_cp50, cc_adf_cmax, cc_rss_peak_mib;
} run_result;

/* The server's peak resident set (VmHWM), MiB, or -1. */
static double peak_rss_mib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double mib = -1;
    unsigned long long kib;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kib) == 1) {
            mib = kib / 1024.0;
            break;
        }
    if (f)
        fclose(f);
    return mib;
}

typedef struct series {
    double p50, p95, max, compute_p50, compute_p95;
    double switch_ms; /* the untimed start, when asked for */
    /* the moves the server computed (not served from kept images) */
    int computed;
    double computed_p50, computed_max;
} series;

/* Times `moves` /api/live requests, the k-th (0-based) made by `target`;
 * *seq numbers them as the page does. With `start`, target 0 is first
 * sent on its own (a jump or a detector switch, not a move: its time is
 * switch_ms) and the moves are targets 1 to `moves`. */
static int time_moves(http *h, int moves, int start, int *seq, double *rt, double *cm,
                      void (*target)(char *, size_t, int, int, const void *), const void *ctx,
                      series *out)
{
    int ok = 1;
    char t[512];
    answer a;
    double *computed = malloc((size_t)moves * sizeof *computed);
    if (!computed)
        return 0;
    memset(out, 0, sizeof *out);
    out->computed = 0;
    if (start) {
        target(t, sizeof t, ++*seq, 0, ctx);
        const double m0 = now_ms();
        ok = http_get(h, t, &a) && a.status == 200;
        out->switch_ms = now_ms() - m0;
        free(a.body);
    }
    for (int k = 0; ok && k < moves; k++) {
        target(t, sizeof t, ++*seq, k + start, ctx);
        const double m0 = now_ms();
        ok = http_get(h, t, &a) && a.status == 200;
        rt[k] = now_ms() - m0;
        cm[k] = a.compute_ms;
        if (ok && !a.from_kept)
            computed[out->computed++] = rt[k];
        free(a.body);
    }
    if (ok) {
        out->p50 = quantile(rt, moves, 0.5);
        out->p95 = quantile(rt, moves, 0.95);
        out->max = rt[moves - 1]; /* sorted by quantile */
        out->compute_p50 = quantile(cm, moves, 0.5);
        out->compute_p95 = quantile(cm, moves, 0.95);
        if (out->computed) {
            out->computed_p50 = quantile(computed, out->computed, 0.5);
            out->computed_max = computed[out->computed - 1];
        }
    }
    free(computed);
    return ok;
}

typedef struct move_ctx {
    double cr, cc, radius;
    uint64_t rect[4]; /* --more: the rectangle's start */
} move_ctx;

/* A slow drag: right 10, left 10, and so on. */
static int drag(int k)
{
    const int phase = (k / 10) % 2, step = k % 10 + 1;
    return phase ? 10 - step : step;
}

static void bf_move(char *t, size_t n, int seq, int k, const void *ctx)
{
    const move_ctx *m = ctx;
    snprintf(t, n,
             "/api/live?client=0123456789abcdef&seq=%d&file=0&detector=bf&center=%.2f,%.2f"
             "&radius=%.2f",
             seq, m->cr, m->cc + drag(k), m->radius);
}

/* The page's ADF ring has edges r and 2r; its outer edge dragged one
 * detector pixel at a time is r in steps of 0.5. */
static void adf_resize(char *t, size_t n, int seq, int k, const void *ctx)
{
    const move_ctx *m = ctx;
    snprintf(t, n,
             "/api/live?client=0123456789abcdef&seq=%d&file=0&detector=adf&center=%.2f,%.2f"
             "&radius=%.2f",
             seq, m->cr, m->cc, m->radius + 0.5 * drag(k));
}

static void rect_move(char *t, size_t n, int seq, int k, const void *ctx)
{
    const move_ctx *m = ctx;
    const int dx = drag(k);
    snprintf(t, n,
             "/api/live?client=0123456789abcdef&seq=%d&file=0&detector=rect&rect=%llu,%llu,%llu,%llu",
             seq, (unsigned long long)m->rect[0], (unsigned long long)m->rect[1],
             (unsigned long long)(m->rect[2] + (uint64_t)dx),
             (unsigned long long)(m->rect[3] + (uint64_t)dx));
}

/* 1-pixel BF moves that never come back: a snake over a 20-wide grid of
 * centres, one pixel at a time, so no page keeps an image to reuse. */
static void bf_fresh(char *t, size_t n, int seq, int k, const void *ctx)
{
    const move_ctx *m = ctx;
    const int row = k / 20, step = k % 20, col = row % 2 ? 19 - step : step;
    snprintf(t, n,
             "/api/live?client=0123456789abcdef&seq=%d&file=0&detector=bf&center=%.2f,%.2f"
             "&radius=%.2f",
             seq, m->cr - 5 + row, m->cc - 10 + col, m->radius);
}

static double json_number_after(const char *json, const char *key)
{
    const char *at = strstr(json, key);
    return at ? strtod(at + strlen(key), NULL) : NAN;
}

/* Starts the server on `files` (several: a series, every image updated
 * together), measures the first image and (unless first_only) the moves
 * and patterns, stops it. */
static int measure_files(const char *qem, const char *const *files, int nfiles,
                         const char *cache_dir, int decoding, const uint64_t shape[4],
                         int moves, int first_only, int more, run_result *r)
{
    memset(r, 0, sizeof *r);
    r->load_before = load_average();
    server s;
    const double t0 = now_ms();
    if (!server_start(qem, files, nfiles, cache_dir, decoding, &s)) {
        fprintf(stderr, "qem-bench-viewer: qem view did not start on %s\n", files[0]);
        return 0;
    }
    r->address_ms = now_ms() - t0;
    http h;
    answer a;
    int ok = http_connect(&h, s.port, s.token) && http_get(&h, "/api/info", &a) && a.status == 200;
    free(a.body);
    /* The page's first requests: the default detector, then its image. */
    ok = ok && http_get(&h, "/api/detector?file=0&detector=bf", &a) && a.status == 200;
    double cr = NAN, cc = NAN, radius = NAN;
    if (ok) {
        const char *c = strstr(a.body, "\"center\":[");
        cr = c ? strtod(c + 10, NULL) : NAN;
        const char *comma = c ? strchr(c + 10, ',') : NULL;
        cc = comma ? strtod(comma + 1, NULL) : NAN;
        radius = json_number_after(a.body, "\"radius\":");
    }
    free(a.body);
    r->detector_ms = now_ms() - t0;
    /* The default detector exactly as the server resolved it, as the page
     * sends it until it is changed. */
    char target[512];
    snprintf(target, sizeof target,
             "/api/live?client=0123456789abcdef&seq=0&file=0&detector=bf&center=%.17g,%.17g&radius="
             "%.17g",
             cr, cc, radius);
    ok = ok && isfinite(cr) && isfinite(cc) && isfinite(radius) && http_get(&h, target, &a) &&
         a.status == 200;
    free(a.body);
    r->first_ms = now_ms() - t0;
    /* The server authenticates .qem bodies after it starts, then builds
     * their packed copies; a move made before that waits for the blocks it
     * reads, then decodes. The moves are measured once both are done, as
     * a person looks at the first image before dragging. */
    for (int polls = 0; ok && polls < 120000; polls++) {
        ok = http_get(&h, "/api/stats", &a) && a.status == 200;
        const int checked = ok && strstr(a.body, "\"bodies_checked\":true") != NULL;
        const int packed = ok && strstr(a.body, "\"packed_done\":true") != NULL;
        free(a.body);
        if (checked && !r->checked_ms)
            r->checked_ms = now_ms() - t0;
        if (checked && (packed || first_only))
            break;
        usleep(1000);
    }
    r->packed_ms = now_ms() - t0;
    r->rss_ready_mib = peak_rss_mib(s.pid);
    /* Moves: two decimals, as the page sends a changed detector. */
    cr = round(cr * 100) / 100;
    cc = round(cc * 100) / 100;
    radius = round(radius * 100) / 100;
    r->bf_row = cr;
    r->bf_col = cc;
    r->bf_radius = radius;
    if (ok && !first_only) {
        double *rt = malloc((size_t)moves * sizeof *rt), *cm = malloc((size_t)moves * sizeof *cm);
        int seq = 0;
        move_ctx m = {cr, cc, radius, {0, 0, 0, 0}};
        series v;
        /* 1-pixel moves: right 10, left 10, and so on, as a slow drag. */
        ok = time_moves(&h, moves, 0, &seq, rt, cm, bf_move, &m, &v);
        if (ok) {
            r->move_computed = v.computed;
            r->move_cp50 = v.computed_p50;
            r->move_cmax = v.computed_max;
            r->move_p50 = v.p50;
            r->move_p95 = v.p95;
            r->move_max = v.max;
            r->compute_p50 = v.compute_p50;
            r->compute_p95 = v.compute_p95;
        }
        if (ok && more) {
            ok = time_moves(&h, moves, 1, &seq, rt, cm, bf_fresh, &m, &v);
            r->fresh_switch = v.switch_ms;
            r->fresh_p50 = v.p50;
            r->fresh_p95 = v.p95;
            r->fresh_max = v.max;
            r->fresh_compute_p50 = v.compute_p50;
            r->fresh_compute_p95 = v.compute_p95;
            ok = ok && time_moves(&h, moves, 1, &seq, rt, cm, adf_resize, &m, &v);
            r->adf_switch = v.switch_ms;
            r->adf_computed = v.computed;
            r->adf_cp50 = v.computed_p50;
            r->adf_cmax = v.computed_max;
            r->adf_p50 = v.p50;
            r->adf_p95 = v.p95;
            r->adf_max = v.max;
            r->adf_compute_p95 = v.compute_p95;
            /* A square of side 2r about the BF centre, kept inside the
             * detector with room for the 10-pixel drag. */
            const uint64_t side = radius >= 1 ? (uint64_t)(2 * radius) : 2;
            const uint64_t sq = side + 10 < shape[3] && side < shape[2] ? side : 1;
            const double r0 = fmin(fmax(cr - sq / 2.0, 0), (double)(shape[2] - sq));
            const double c0 = fmin(fmax(cc - sq / 2.0, 0), (double)(shape[3] - sq - 10));
            m.rect[0] = (uint64_t)r0;
            m.rect[1] = m.rect[0] + sq;
            m.rect[2] = (uint64_t)c0;
            m.rect[3] = m.rect[2] + sq;
            ok = ok && time_moves(&h, moves, 1, &seq, rt, cm, rect_move, &m, &v);
            r->rect_switch = v.switch_ms;
            r->rect_computed = v.computed;
            r->rect_cp50 = v.computed_p50;
            r->rect_cmax = v.computed_max;
            r->rect_p50 = v.p50;
            r->rect_p95 = v.p95;
            r->rect_max = v.max;
            r->rect_compute_p95 = v.compute_p95;
        }
        /* The pattern at the cursor: a hover path (neighbouring positions
         * along a row, as a mouse sweeps), then random positions. */
        const uint64_t row0 = shape[0] / 2, col0 = shape[1] / 8;
        for (int k = 0; ok && k < moves; k++) {
            snprintf(target, sizeof target, "/api/dp.npy?file=0&scan=%llu,%llu",
                     (unsigned long long)row0,
                     (unsigned long long)((col0 + (uint64_t)k) % shape[1]));
            const double m0 = now_ms();
            ok = http_get(&h, target, &a) && a.status == 200;
            rt[k] = now_ms() - m0;
            free(a.body);
        }
        if (ok) {
            r->hover_p50 = quantile(rt, moves, 0.5);
            r->hover_p95 = quantile(rt, moves, 0.95);
            r->hover_max = rt[moves - 1];
        }
        uint64_t state = 88172645463325252ull;
        const int jumps = moves / 4 > 0 ? moves / 4 : 1;
        for (int k = 0; ok && k < jumps; k++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            snprintf(target, sizeof target, "/api/dp.npy?file=0&scan=%llu,%llu",
                     (unsigned long long)(state % shape[0]),
                     (unsigned long long)((state >> 32) % shape[1]));
            const double m0 = now_ms();
            ok = http_get(&h, target, &a) && a.status == 200;
            rt[k] = now_ms() - m0;
            free(a.body);
        }
        if (ok) {
            r->jump_p50 = quantile(rt, jumps, 0.5);
            r->jump_p95 = quantile(rt, jumps, 0.95);
            r->jump_max = rt[jumps - 1];
        }
        free(rt);
        free(cm);
    }
    close(h.fd);
    r->rss_peak_mib = peak_rss_mib(s.pid);
    server_stop(&s);
    r->load_after = load_average();
    if (!ok)
        fprintf(stderr, "qem-bench-viewer: a request to qem view on %s failed\n", files[0]);
    return ok;
}

static int measure(const char *qem, const char *file, const uint64_t shape[4], int moves,
                   int first_only, int more, run_result *r)
{
    return measure_files(qem, &file, 1, NULL, 0, shape, moves, first_only, more, r);
}

/* --- files that record no prepared values ---------------------------------------- */

/* A copy of the .qem file `src` without what qem's writer records (pixel
 * sums, the default detector's image, a calibration), as an upstream
 * writer makes it: the header rewritten with its checksum, the body as is. */
static int bare_qem(const char *src, const char *dest)
{
    qem_error e = {0};
    uint8_t prefix[56];
    const int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0 || qem_pread_full(in, prefix, sizeof prefix, 0, QEM_E_IO, &e) != QEM_OK) {
        if (in >= 0)
            close(in);
        return 0;
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = (len << 8) | prefix[8 + i];
    char *text = malloc((size_t)len);
    json_t *header = NULL;
    if (text && qem_pread_full(in, text, (size_t)len, 56, QEM_E_IO, &e) == QEM_OK)
        header = json_loadb(text, (size_t)len, 0, NULL);
    free(text);
    json_t *ext = json_object_get(json_object_get(header, "scientific_metadata"), "extensions");
    json_object_del(ext, "qem.pixel_sums");
    json_object_del(ext, "qem.detector_image");
    json_object_del(ext, "qem.detector_calibration");
    char *out_text = header ? json_dumps(header, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(header);
    const int out = out_text ? open(dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    int ok = out >= 0;
    if (ok) {
        const uint64_t n = strlen(out_text);
        for (int i = 0; i < 8; i++) {
            prefix[8 + i] = (uint8_t)(n >> (8 * i));
            prefix[16 + i] = (uint8_t)((56 + n) >> (8 * i));
        }
        struct stat sb;
        ok = qem_sha256_oneshot(out_text, (size_t)n, prefix + 24) == 0 && fstat(in, &sb) == 0 &&
             qem_write_full(out, prefix, sizeof prefix, &e) == QEM_OK &&
             qem_write_full(out, out_text, (size_t)n, &e) == QEM_OK &&
             qem_copy_range(in, 56 + len, out, (uint64_t)sb.st_size - 56 - len, &e) == QEM_OK;
        ok = close(out) == 0 && ok;
    }
    free(out_text);
    close(in);
    return ok;
}

/* A copy of the pack `src` without its detector calibration and prepared
 * values, as a producer that writes none makes it: the user block's
 * manifest without those members, everything else as is. */
static int bare_pack(const char *src, const char *dest)
{
    qem_error e = {0};
    const int in = open(src, O_RDONLY | O_CLOEXEC);
    uint8_t prelude[24];
    if (in < 0 || qem_pread_full(in, prelude, sizeof prelude, 0, QEM_E_IO, &e) != QEM_OK) {
        if (in >= 0)
            close(in);
        return 0;
    }
    struct stat sb;
    uint64_t block_bytes = 512;
    uint8_t sig[8];
    int ok = fstat(in, &sb) == 0;
    while (ok && block_bytes < (uint64_t)sb.st_size &&
           (qem_pread_full(in, sig, 8, block_bytes, QEM_E_IO, &e) != QEM_OK ||
            memcmp(sig, "\x89HDF\r\n\x1a\n", 8) != 0))
        block_bytes *= 2;
    uint8_t *block = ok ? malloc((size_t)block_bytes) : NULL;
    ok = block && qem_pread_full(in, block, (size_t)block_bytes, 0, QEM_E_IO, &e) == QEM_OK;
    const uint32_t manifest_bytes = ok ? (uint32_t)block[8] | (uint32_t)block[9] << 8 |
                                             (uint32_t)block[10] << 16 | (uint32_t)block[11] << 24
                                       : 0;
    const uint32_t index_at = ok ? (uint32_t)block[16] | (uint32_t)block[17] << 8 |
                                       (uint32_t)block[18] << 16 | (uint32_t)block[19] << 24
                                 : 0;
    const uint32_t index_bytes = ok ? (uint32_t)block[20] | (uint32_t)block[21] << 8 |
                                          (uint32_t)block[22] << 16 | (uint32_t)block[23] << 24
                                    : 0;
    ok = ok && 24 + (uint64_t)manifest_bytes <= block_bytes &&
         (uint64_t)index_at + index_bytes <= block_bytes;
    char *manifest = ok ? malloc(manifest_bytes) : NULL;
    size_t n = manifest_bytes;
    if (manifest)
        memcpy(manifest, block + 24, manifest_bytes);
    static const char *const members[] = {"detector_calibration", "prepared_dpc_moments",
                                          "prepared_detector_products",
                                          "qem_prepared_detector_products"};
    for (size_t k = 0; manifest && k < sizeof members / sizeof members[0]; k++) {
        char *without = NULL;
        if (qem_pack_manifest_splice(manifest, n, members[k], NULL, &without, &n, &e) != QEM_OK)
            without = NULL;
        free(manifest);
        manifest = without;
    }
    uint8_t *rebuilt = NULL;
    ok = manifest && qem_pack_user_block(manifest, n, block + index_at, index_bytes, block_bytes,
                                         &rebuilt, &e) == QEM_OK;
    const int out = ok ? open(dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    ok = out >= 0 && qem_write_full(out, rebuilt, (size_t)block_bytes, &e) == QEM_OK &&
         qem_copy_range(in, block_bytes, out, (uint64_t)sb.st_size - block_bytes, &e) == QEM_OK;
    if (out >= 0)
        ok = close(out) == 0 && ok;
    free(manifest);
    free(rebuilt);
    free(block);
    close(in);
    return ok;
}

/* The first image of `path` (a file recording no prepared values) on its
 * first open and on a second open over the same fresh cache folder: ms. */
static int measure_reopen(const char *qem, const char *path, const char *workdir,
                          const uint64_t shape[4], double ms[2])
{
    char cache[700];
    snprintf(cache, sizeof cache, "%s/bench-cache-XXXXXX", workdir);
    if (!mkdtemp(cache))
        return 0;
    run_result r;
    int ok = 1;
    for (int k = 0; ok && k < 2; k++) {
        ok = measure_files(qem, &path, 1, cache, 0, shape, 0, 1, 0, &r);
        ms[k] = r.first_ms;
    }
    char command[800];
    snprintf(command, sizeof command, "rm -rf '%s'", cache);
    if (system(command) != 0)
        ok = 0;
    return ok;
}

/* --- the data ------------------------------------------------------------------------ */

typedef struct set {
    const char *name;
    uint64_t shape[4];
    char npy[600], qem[600], pack[600], qem_cal[600], pack_cal[600];
    char qem_bare[600], pack_bare[600]; /* copies recording no prepared values */
    char pack_refused[480]; /* why the producer refused this set, or "" */
} set;

/* A pack copy an older qem wrote lacks the prepared values this one adds. */
static int stale_pack_copy(const char *path)
{
    qem_file_kind kind;
    qem_pack *p = NULL;
    qem_pack_info info = {.struct_size = sizeof info};
    if (qem_identify(path, &kind, NULL) != QEM_OK || kind != QEM_KIND_PACK)
        return 0;
    const int stale = qem_pack_open(path, NULL, &p, NULL) != QEM_OK ||
                      qem_pack_get_info(p, &info, NULL) != QEM_OK ||
                      !info.has_prepared_dpc_moments;
    qem_pack_close(p);
    return stale;
}

static int calibrated_copy(const char *src, const char *dest)
{
    if (exists(dest) && stale_pack_copy(dest))
        unlink(dest);
    if (exists(dest))
        return 1;
    qem_error e = {0};
    qem_container *s = NULL;
    qem_products *p = NULL;
    qem_detector_calibration cal = {.struct_size = sizeof cal};
    int ok = qem_container_open(src, NULL, &s, &e) == QEM_OK &&
             qem_products_open(s, NULL, &p, &e) == QEM_OK &&
             qem_products_estimate_calibration(p, &cal, &e) == QEM_OK;
    qem_products_close(p);
    qem_container_close(s);
    ok = ok && qem_write_calibrated_copy(src, dest, &cal, &e) == QEM_OK;
    if (!ok)
        die("calibrated copy", &e);
    return ok;
}

/* Generates what is missing, checking disk and memory first. */
static int prepare(set *t, int keep)
{
    const uint64_t raw = t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3] * 2;
    qem_error e = {0};
    /* A refusal is remembered beside the set: producing again would take
     * minutes to be refused again. */
    char refused[700];
    snprintf(refused, sizeof refused, "%s.refused", t->pack);
    FILE *mark = fopen(refused, "r");
    if (mark) {
        if (!fgets(t->pack_refused, sizeof t->pack_refused, mark))
            t->pack_refused[0] = '\0';
        fclose(mark);
    }
    if (!exists(t->qem) || (!exists(t->pack) && !t->pack_refused[0])) {
        if (!exists(t->npy)) {
            const char *slash = strrchr(t->npy, '/');
            char dir[600];
            snprintf(dir, sizeof dir, "%.*s", (int)(slash - t->npy), t->npy);
            /* the .npy, then the .qem and pack (about 1/8 of it together) */
            const uint64_t need = raw + raw / 4;
            if (disk_available(dir) < need) {
                fprintf(stderr,
                        "qem-bench-viewer: set %s needs %.1f GB of disk in %s, %.1f GB free\n",
                        t->name, need / 1e9, dir, disk_available(dir) / 1e9);
                return 0;
            }
            fprintf(stderr, "generating %s (%.1f GB)\n", t->npy, raw / 1e9);
            synth_params sp = {{t->shape[0], t->shape[1], t->shape[2], t->shape[3]},
                               QEM_DTYPE_UINT16, 4.0, 20261131, 1.0};
            if (synth_write_npy(&sp, t->npy, &e) != QEM_OK)
                return !die("synthesising", &e);
        }
        if (!exists(t->qem)) {
            fprintf(stderr, "saving %s\n", t->qem);
            if (qem_save_file(t->npy, t->qem, NULL, &e) != QEM_OK)
                return !die("saving", &e);
        }
        if (!exists(t->pack)) {
            fprintf(stderr, "producing %s\n", t->pack);
            qem_pack_inspection *in = NULL;
            qem_pack_plan_options po;
            qem_pack_plan_options_init(&po);
            po.destination = t->pack;
            qem_pack_plan plan = {.struct_size = sizeof plan};
            int ok = qem_pack_inspect(t->npy, NULL, &in, &e) == QEM_OK &&
                     qem_pack_plan_make(in, &po, &plan, &e) == QEM_OK &&
                     qem_pack_produce(in, &po, t->pack, NULL, &e) == QEM_OK;
            qem_pack_inspection_free(in);
            if (!ok) {
                /* Reported in the table: a fact about the producer. */
                snprintf(t->pack_refused, sizeof t->pack_refused, "%s", e.message);
                fprintf(stderr, "qem-bench-viewer: no pack of set %s: %s\n", t->name, e.message);
                mark = fopen(refused, "w");
                if (mark) {
                    fputs(t->pack_refused, mark);
                    fclose(mark);
                }
            }
        }
    }
    if (!keep && exists(t->npy))
        unlink(t->npy);
    /* Loading the pack holds its resident; the server and this process
     * must fit beside what else runs. */
    const uint64_t need = file_size(t->pack) * 2 + ((uint64_t)1 << 30);
    if (mem_available() < need) {
        fprintf(stderr, "qem-bench-viewer: set %s needs about %.1f GB of memory, %.1f GB available\n",
                t->name, need / 1e9, mem_available() / 1e9);
        return 0;
    }
    fprintf(stderr, "calibrated copies of %s\n", t->name);
    if (!calibrated_copy(t->qem, t->qem_cal) ||
        (!t->pack_refused[0] && !calibrated_copy(t->pack, t->pack_cal)))
        return 0;
    const int qem_ok = exists(t->qem_bare) || bare_qem(t->qem, t->qem_bare);
    const int pack_ok = t->pack_refused[0] || exists(t->pack_bare) ||
                        bare_pack(t->pack, t->pack_bare);
    if (!qem_ok || !pack_ok)
        fprintf(stderr, "qem-bench-viewer: cannot write %s\n",
                qem_ok ? t->pack_bare : t->qem_bare);
    return qem_ok && pack_ok;
}

static void cleanup(set *t)
{
    char extra[700];
    const char *all[] = {t->npy, t->qem, t->pack, t->qem_cal, t->pack_cal, t->qem_bare,
                         t->pack_bare};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        unlink(all[k]);
    snprintf(extra, sizeof extra, "%s.receipt.json", t->pack);
    unlink(extra);
    snprintf(extra, sizeof extra, "%s.refused", t->pack);
    unlink(extra);
    snprintf(extra, sizeof extra, "%s.receipt.json", t->pack_cal);
    unlink(extra);
}

/* --- report --------------------------------------------------------------------------- */

static double median_of(const run_result *r, int n, size_t offset)
{
    double v[MAX_RUNS];
    for (int k = 0; k < n; k++)
        v[k] = *(const double *)((const char *)&r[k] + offset);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define MED(field) median_of(r, runs, offsetof(run_result, field))

static void print_runs(FILE *out, const char *label, const run_result *r, int runs,
                       int first_only)
{
    fprintf(out, "- %s, each run (load average before/after):", label);
    for (int k = 0; k < runs; k++) {
        if (first_only)
            fprintf(out, " first image %.0f ms (%.2f/%.2f);", r[k].first_ms, r[k].load_before,
                    r[k].load_after);
        else
            fprintf(out,
                    " move %.1f/%.1f, hover %.2f/%.2f, random %.1f/%.1f, first %.0f ms, bodies "
                    "checked at %.0f ms (%.2f/%.2f);",
                    r[k].move_p50, r[k].move_p95, r[k].hover_p50, r[k].hover_p95, r[k].jump_p50,
                    r[k].jump_p95, r[k].first_ms, r[k].checked_ms, r[k].load_before,
                    r[k].load_after);
        if (!first_only && r[k].adf_p50 > 0)
            fprintf(out,
                    " (--more: BF move to new positions %.1f/%.1f (server compute %.1f/%.1f), ADF "
                    "resize %.1f/%.1f, rect move %.1f/%.1f, server peak %.0f MiB);",
                    r[k].fresh_p50, r[k].fresh_p95, r[k].fresh_compute_p50,
                    r[k].fresh_compute_p95, r[k].adf_p50, r[k].adf_p95, r[k].rect_p50,
                    r[k].rect_p95, r[k].rss_peak_mib);
    }
    fprintf(out, "\n");
}

/* --- the dense baseline: a plain C loop over the mapped .npy ------------------------- */

/* The data offset and shape of a C-order little-endian uint16 .npy, or 0. */
static size_t npy_layout(const unsigned char *m, size_t size, uint64_t shape[4])
{
    if (size < 12 || memcmp(m, "\x93NUMPY", 6))
        return 0;
    const size_t hl = m[6] == 1 ? (size_t)m[8] | (size_t)m[9] << 8
                                : (size_t)m[8] | (size_t)m[9] << 8 | (size_t)m[10] << 16 |
                                      (size_t)m[11] << 24;
    const size_t start = m[6] == 1 ? 10 : 12;
    if (start + hl > size || hl > 4096)
        return 0;
    char head[4097];
    memcpy(head, m + start, hl);
    head[hl] = '\0';
    const char *sh = strstr(head, "'shape': (");
    unsigned long long v[4];
    if (!strstr(head, "'<u2'") || !strstr(head, "'fortran_order': False") || !sh ||
        sscanf(sh + 10, "%llu, %llu, %llu, %llu", &v[0], &v[1], &v[2], &v[3]) != 4)
        return 0;
    for (int k = 0; k < 4; k++)
        shape[k] = v[k];
    return start + hl;
}

static int dense(const char *npy, const char *mask_path, int runs, int threads)
{
    const int fd = open(npy, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        fprintf(stderr, "qem-bench-viewer: cannot open %s\n", npy);
        return 1;
    }
    const size_t size = (size_t)st.st_size;
    const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    uint64_t shape[4];
    const size_t offset = m == MAP_FAILED ? 0 : npy_layout(m, size, shape);
    if (!offset || offset % 2 || offset + shape[0] * shape[1] * shape[2] * shape[3] * 2 > size) {
        fprintf(stderr, "qem-bench-viewer: %s is not a C-order uint16 4D .npy\n", npy);
        return 1;
    }
    const uint64_t scans = shape[0] * shape[1], P = shape[2] * shape[3];
    unsigned char *mask = malloc(P);
    FILE *f = fopen(mask_path, "rb");
    if (!mask || !f || fread(mask, 1, P, f) != P || fgetc(f) != EOF) {
        fprintf(stderr, "qem-bench-viewer: %s is not %llu mask bytes\n", mask_path,
                (unsigned long long)P);
        return 1;
    }
    fclose(f);
    uint32_t *idx = malloc(P * sizeof *idx);
    uint64_t n = 0, *img = malloc(scans * sizeof *img);
    for (uint64_t p = 0; p < P; p++)
        if (mask[p])
            idx[n++] = (uint32_t)p;
    double *ms = malloc((size_t)runs * sizeof *ms);
    uint64_t sum = 0;
    for (int k = 0; k < runs; k++) {
        const double t0 = now_ms();
        bench_dense_virtual((const uint16_t *)(m + offset), scans, P, idx, n, img, threads);
        ms[k] = now_ms() - t0;
        sum = 0;
        for (uint64_t s = 0; s < scans; s++)
            sum += img[s];
    }
    printf("{\"ms\": [");
    for (int k = 0; k < runs; k++)
        printf("%s%.3f", k ? ", " : "", ms[k]);
    printf("], \"sum\": %llu, \"mask_pixels\": %llu, \"threads\": %d}\n",
           (unsigned long long)sum, (unsigned long long)n, threads);
    munmap((void *)m, size);
    free(mask);
    free(idx);
    free(img);
    free(ms);
    return 0;
}

/* --- JSON for a driver ------------------------------------------------------------ */

#define JF(field) fprintf(j, ", \"" #field "\": %.3f", MEDJ(field))

static void json_file(FILE *j, int first, const char *set_name, const uint64_t shape[4],
                      const char *kind, const char *path, const char *cal_path,
                      const run_result *r, const run_result *c, int runs)
{
#define MEDJ(field) median_of(r, runs, offsetof(run_result, field))
    fprintf(j, "%s\n  {\"set\": \"%s\", \"shape\": [%llu, %llu, %llu, %llu], \"kind\": \"%s\", "
               "\"path\": \"%s\", \"calibrated_path\": \"%s\", \"bytes\": %llu, \"runs\": %d",
            first ? "" : ",", set_name, (unsigned long long)shape[0], (unsigned long long)shape[1],
            (unsigned long long)shape[2], (unsigned long long)shape[3], kind, path, cal_path,
            (unsigned long long)file_size(path), runs);
    JF(address_ms);
    JF(detector_ms);
    JF(first_ms);
    JF(checked_ms);
    JF(packed_ms);
    JF(move_p50);
    JF(move_p95);
    JF(move_max);
    JF(compute_p50);
    JF(compute_p95);
    JF(fresh_p50);
    JF(fresh_p95);
    JF(fresh_compute_p50);
    JF(fresh_compute_p95);
    JF(fresh_max);
    JF(adf_p50);
    JF(adf_p95);
    JF(adf_max);
    JF(adf_compute_p95);
    JF(rect_p50);
    JF(rect_p95);
    JF(rect_max);
    JF(rect_compute_p95);
    JF(fresh_switch);
    JF(move_computed);
    JF(move_cp50);
    JF(move_cmax);
    JF(adf_computed);
    JF(adf_cp50);
    JF(adf_cmax);
    JF(rect_computed);
    JF(rect_cp50);
    JF(rect_cmax);
    JF(adf_switch);
    JF(cc_fresh_p50);
    JF(cc_fresh_p95);
    JF(cc_fresh_max);
    JF(cc_adf_cp50);
    JF(cc_adf_cmax);
    JF(cc_rss_peak_mib);
    JF(rect_switch);
    JF(hover_p50);
    JF(hover_p95);
    JF(hover_max);
    JF(jump_p50);
    JF(jump_p95);
    JF(jump_max);
    JF(rss_peak_mib);
    JF(rss_ready_mib);
    JF(bf_row);
    JF(bf_col);
    JF(bf_radius);
    JF(bare_first_ms);
    JF(bare_second_ms);
    fprintf(j, ", \"calibrated_first_ms\": %.3f, \"calibrated_rss_peak_mib\": %.3f",
            median_of(c, runs, offsetof(run_result, first_ms)),
            median_of(c, runs, offsetof(run_result, rss_peak_mib)));
    /* the worst of the runs, for "never above" */
    double worst[6] = {0, 0, 0, 0, 0, 0};
    for (int k = 0; k < runs; k++) {
        worst[5] = fmax(worst[5], r[k].fresh_max);
        worst[0] = fmax(worst[0], r[k].move_max);
        worst[1] = fmax(worst[1], r[k].adf_max);
        worst[2] = fmax(worst[2], r[k].rect_max);
        worst[3] = fmax(worst[3], r[k].hover_max);
        worst[4] = fmax(worst[4], r[k].jump_max);
    }
    fprintf(j,
            ", \"move_max_all\": %.3f, \"adf_max_all\": %.3f, \"rect_max_all\": %.3f, "
            "\"hover_max_all\": %.3f, \"jump_max_all\": %.3f, \"fresh_max_all\": %.3f}",
            worst[0], worst[1], worst[2], worst[3], worst[4], worst[5]);
#undef MEDJ
}

int main(int argc, char **argv)
{
    const char *sets_arg = "256", *workdir = "/tmp/qem-bench-viewer", *qem = QEM_CLI;
    const char *json_path = NULL, *dense_npy = NULL, *mask_path = NULL, *shape_arg = NULL;
    int runs = 3, moves = 200, keep = 0, more = 0, prepare_only = 0, threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape") && v) {
            shape_arg = v;
            i++;
        } else if (!strcmp(a, "--json") && v) {
            json_path = v;
            i++;
        } else if (!strcmp(a, "--dense") && v) {
            dense_npy = v;
            i++;
        } else if (!strcmp(a, "--mask") && v) {
            mask_path = v;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            threads = atoi(v);
            i++;
        } else if (!strcmp(a, "--more")) {
            more = 1;
        } else if (!strcmp(a, "--prepare-only")) {
            prepare_only = 1;
        } else if (!strcmp(a, "--sets") && v) {
            sets_arg = v;
            i++;
        } else if (!strcmp(a, "--runs") && v) {
            runs = atoi(v);
            i++;
        } else if (!strcmp(a, "--moves") && v) {
            moves = atoi(v);
            i++;
        } else if (!strcmp(a, "--workdir") && v) {
            workdir = v;
            i++;
        } else if (!strcmp(a, "--qem") && v) {
            qem = v;
            i++;
        } else if (!strcmp(a, "--keep")) {
            keep = 1;
        } else {
            fputs(help, strcmp(a, "--help") ? stderr : stdout);
            return strcmp(a, "--help") ? 2 : 0;
        }
    }
    if (dense_npy) {
        if (!mask_path || runs < 1 || threads < 1) {
            fputs(help, stderr);
            return 2;
        }
        return dense(dense_npy, mask_path, runs, threads);
    }
    if (runs < 1 || runs > MAX_RUNS || moves < 4) {
        fputs(help, stderr);
        return 2;
    }
    mkdir(workdir, 0755);
    set all[3] = {{"256", {256, 256, 128, 128}, "", "", "", "", "", "", "", ""},
                  {"512", {512, 512, 192, 192}, "", "", "", "", "", "", "", ""},
                  {"", {0, 0, 0, 0}, "", "", "", "", "", "", "", ""}};
    char custom[128] = "";
    if (shape_arg) {
        unsigned long long v[4];
        char tail;
        if (sscanf(shape_arg, "%llu,%llu,%llu,%llu%c", &v[0], &v[1], &v[2], &v[3], &tail) != 4 ||
            !v[0] || !v[1] || v[2] < 16 || v[3] < 16) {
            fputs(help, stderr);
            return 2;
        }
        snprintf(custom, sizeof custom, "%llux%llux%llux%llu", v[0], v[1], v[2], v[3]);
        all[2].name = custom;
        for (int k = 0; k < 4; k++)
            all[2].shape[k] = v[k];
        sets_arg = custom;
    }
    FILE *json = NULL;
    int json_first = 1;
    if (json_path && !prepare_only) {
        json = fopen(json_path, "w");
        if (!json) {
            fprintf(stderr, "qem-bench-viewer: cannot write %s\n", json_path);
            return 1;
        }
        fprintf(json, "{\"cores\": %d, \"moves\": %d, \"more\": %d, \"files\": [",
                (int)sysconf(_SC_NPROCESSORS_ONLN), moves, more);
    }
    if (!prepare_only)
        printf("Command: `build/bench/qem-bench-viewer --%s %s --runs %d --moves %d%s`; %d cores "
               "online, load average %.2f at the start.\n\n",
               shape_arg ? "shape" : "sets", shape_arg ? shape_arg : sets_arg, runs, moves,
               more ? " --more" : "", (int)sysconf(_SC_NPROCESSORS_ONLN), load_average());
    if (!prepare_only)
        printf("| set | file | size | first image, ms (address / detector / image) | "
               "first image, calibrated copy, ms | 1-px move p50 / p95, ms | "
               "of which server compute p50 / p95 | pattern, hover p50 / p95, ms | "
               "pattern, random p50 / p95, ms |\n|---|---|---|---|---|---|---|---|---|\n");
    char details[8192] = "";
    size_t details_used = 0;
    for (int k = 0; k < 3; k++) {
        set *t = &all[k];
        if (!t->name[0] || (shape_arg ? k != 2 : !strstr(sets_arg, t->name)))
            continue;
        snprintf(t->npy, sizeof t->npy, "%s/view%s.npy", workdir, t->name);
        snprintf(t->qem, sizeof t->qem, "%s/view%s.qem", workdir, t->name);
        snprintf(t->pack, sizeof t->pack, "%s/view%s.h5", workdir, t->name);
        snprintf(t->qem_cal, sizeof t->qem_cal, "%s/view%s-calibrated.qem", workdir, t->name);
        snprintf(t->pack_cal, sizeof t->pack_cal, "%s/view%s-calibrated.h5", workdir, t->name);
        snprintf(t->qem_bare, sizeof t->qem_bare, "%s/view%s-bare.qem", workdir, t->name);
        snprintf(t->pack_bare, sizeof t->pack_bare, "%s/view%s-bare.h5", workdir, t->name);
        if (!prepare(t, keep || prepare_only))
            return 1;
        if (prepare_only) {
            printf("%s\n%s\n%s\n%s\n%s\n%s\n%s\n", t->npy, t->qem, t->pack, t->qem_cal,
                   t->pack_cal, t->qem_bare, t->pack_bare);
            continue;
        }
        const char *files[2][2] = {{t->qem, t->qem_cal}, {t->pack, t->pack_cal}};
        const char *bare[2] = {t->qem_bare, t->pack_bare};
        for (int f = 0; f < 2; f++) {
            if (f == 1 && t->pack_refused[0]) {
                printf("| %llu x %llu x %llu x %llu | pack (u16-LZ4) | not produced: %s | | | | "
                       "| | |\n",
                       (unsigned long long)t->shape[0], (unsigned long long)t->shape[1],
                       (unsigned long long)t->shape[2], (unsigned long long)t->shape[3],
                       t->pack_refused);
                if (json) {
                    fprintf(json, "%s\n  {\"set\": \"%s\", \"kind\": \"pack\", \"refused\": \"",
                            json_first ? "" : ",", t->name);
                    for (const char *q = t->pack_refused; *q; q++)
                        if (*q == '"' || *q == '\\')
                            fprintf(json, "\\%c", *q);
                        else if ((unsigned char)*q >= 0x20)
                            fputc(*q, json);
                    fprintf(json, "\"}");
                    json_first = 0;
                }
                continue;
            }
            run_result r[MAX_RUNS], c[MAX_RUNS];
            for (int n = 0; n < runs; n++) {
                fprintf(stderr, "set %s, %s, run %d\n", t->name, files[f][0], n + 1);
                double reopen[2];
                if (!measure(qem, files[f][0], t->shape, moves, 0, more, &r[n]) ||
                    !measure(qem, files[f][1], t->shape, moves, 1, 0, &c[n]) ||
                    !measure_reopen(qem, bare[f], workdir, t->shape, reopen))
                    return 1;
                r[n].bare_first_ms = reopen[0];
                r[n].bare_second_ms = reopen[1];
                if (more && !f) {
                    /* Side by side: the same moves decoding, no packed copy. */
                    run_result kept;
                    if (!measure_files(qem, &files[f][0], 1, NULL, 1, t->shape, moves, 0, 1, &kept))
                        return 1;
                    r[n].cc_fresh_p50 = kept.fresh_p50;
                    r[n].cc_fresh_p95 = kept.fresh_p95;
                    r[n].cc_fresh_max = kept.fresh_max;
                    r[n].cc_adf_cp50 = kept.adf_cp50;
                    r[n].cc_adf_cmax = kept.adf_cmax;
                    r[n].cc_rss_peak_mib = kept.rss_peak_mib;
                }
            }
            if (json) {
                json_file(json, json_first, t->name, t->shape, f ? "pack" : "qem", files[f][0],
                          files[f][1], r, c, runs);
                json_first = 0;
            }
            printf("| %llu x %llu x %llu x %llu | %s | %.1f MB | %.0f (%.0f / %.0f / %.0f) | %.0f | "
                   "%.1f / %.1f | %.1f / %.1f | %.2f / %.2f | %.1f / %.1f |\n",
                   (unsigned long long)t->shape[0], (unsigned long long)t->shape[1],
                   (unsigned long long)t->shape[2], (unsigned long long)t->shape[3],
                   f ? "pack (u16-LZ4)" : ".qem",
                   file_size(files[f][0]) / 1e6, MED(first_ms), MED(address_ms),
                   MED(detector_ms) - MED(address_ms), MED(first_ms) - MED(detector_ms),
                   median_of(c, runs, offsetof(run_result, first_ms)), MED(move_p50),
                   MED(move_p95), MED(compute_p50), MED(compute_p95), MED(hover_p50),
                   MED(hover_p95), MED(jump_p50), MED(jump_p95));
            fflush(stdout);
            char label[128];
            snprintf(label, sizeof label, "set %s %s", t->name, f ? "pack" : ".qem");
            /* Per-run figures, printed after the table. */
            FILE *mem = fmemopen(details + details_used, sizeof details - details_used, "w");
            if (mem) {
                print_runs(mem, label, r, runs, 0);
                snprintf(label, sizeof label, "set %s %s, calibrated copy", t->name,
                         f ? "pack" : ".qem");
                print_runs(mem, label, c, runs, 1);
                fflush(mem);
                details_used += (size_t)ftell(mem);
                fclose(mem);
            }
        }
        /* --more: a tilt series of three files of the set (the .qem, its
         * calibrated copy and the pack), one detector over all three. */
        if (more && !t->pack_refused[0]) {
            const char *three[3] = {t->qem, t->qem_cal, t->pack};
            run_result r[MAX_RUNS];
            for (int n = 0; n < runs; n++) {
                fprintf(stderr, "set %s, series of three, run %d\n", t->name, n + 1);
                if (!measure_files(qem, three, 3, NULL, 0, t->shape, moves, 0, 1, &r[n]))
                    return 1;
            }
            if (json) {
                json_file(json, json_first, t->name, t->shape, "series", t->qem, t->pack, r, r,
                          runs);
                json_first = 0;
            }
            printf("| %llu x %llu x %llu x %llu | series: .qem, its copy, pack | %.1f MB | %.0f "
                   "(%.0f / %.0f / %.0f) | | %.1f / %.1f | %.1f / %.1f | %.2f / %.2f | %.1f / "
                   "%.1f |\n",
                   (unsigned long long)t->shape[0], (unsigned long long)t->shape[1],
                   (unsigned long long)t->shape[2], (unsigned long long)t->shape[3],
                   (2 * file_size(t->qem) + file_size(t->pack)) / 1e6, MED(first_ms),
                   MED(address_ms), MED(detector_ms) - MED(address_ms),
                   MED(first_ms) - MED(detector_ms), MED(move_p50), MED(move_p95),
                   MED(compute_p50), MED(compute_p95), MED(hover_p50), MED(hover_p95),
                   MED(jump_p50), MED(jump_p95));
            fflush(stdout);
            char label[128];
            snprintf(label, sizeof label, "set %s series of three", t->name);
            FILE *mem = fmemopen(details + details_used, sizeof details - details_used, "w");
            if (mem) {
                print_runs(mem, label, r, runs, 0);
                fflush(mem);
                details_used += (size_t)ftell(mem);
                fclose(mem);
            }
        }
        if (!keep)
            cleanup(t);
    }
    if (prepare_only)
        return 0;
    if (json) {
        fprintf(json, "\n]}\n");
        fclose(json);
    }
    printf("\nEvery run, p50/p95 in ms (medians of the runs in the table):\n\n%s", details);
    printf("\nLoad average at the end %.2f.\n", load_average());
    return 0;
}
