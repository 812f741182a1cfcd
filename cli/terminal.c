/* Escaping text for the terminal, JSON output, errors, progress and
 * signals: see terminal.h. */
#include "terminal.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* --- escaping ---------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at `p` (0 if none) and its code point. */
static size_t utf8_sequence(const unsigned char *p, uint32_t *cp)
{
    const unsigned char b = p[0];
    size_t n;
    uint32_t v, lo2 = 0x80, hi2 = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2;
        v = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        v = b & 0x0F;
        lo2 = b == 0xE0 ? 0xA0 : 0x80; /* no overlong forms */
        hi2 = b == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        v = b & 0x07;
        lo2 = b == 0xF0 ? 0x90 : 0x80;
        hi2 = b == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    for (size_t k = 1; k < n; k++) {
        const unsigned char c = p[k];
        if (c < (k == 1 ? lo2 : 0x80) || c > (k == 1 ? hi2 : 0xBF))
            return 0;
        v = (v << 6) | (c & 0x3F);
    }
    *cp = v;
    return n;
}

const char *term_safe(const char *s, char *buf, size_t size)
{
    if (!s)
        s = "(null)";
    const unsigned char *p = (const unsigned char *)s;
    size_t used = 0;
    while (*p) {
        char piece[8];
        size_t n;
        uint32_t cp = 0;
        size_t seq = *p >= 0x80 ? utf8_sequence(p, &cp) : 0;
        if (*p < 0x20 || *p == 0x7F) {
            n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
            seq = 1;
        } else if (*p < 0x80) {
            piece[0] = (char)*p;
            n = 1;
            seq = 1;
        } else if (seq == 0) {
            n = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
            seq = 1;
        } else if (cp <= 0x9F) {
            n = (size_t)snprintf(piece, sizeof piece, "\\u%04x", (unsigned)cp);
        } else {
            memcpy(piece, p, seq);
            n = seq;
        }
        if (used + n + 4 > size) { /* room for "..." and the NUL */
            memcpy(buf + used, "...", 3);
            used += 3;
            break;
        }
        memcpy(buf + used, piece, n);
        used += n;
        p += seq;
    }
    buf[used] = '\0';
    return buf;
}

json_t *term_safe_json(const json_t *j)
{
    char buf[SAFE_MAX];
    if (json_is_string(j))
        return json_string(term_safe(json_string_value(j), buf, sizeof buf));
    if (json_is_array(j)) {
        json_t *a = json_array();
        size_t i;
        const json_t *v;
        json_array_foreach(j, i, v) json_array_append_new(a, term_safe_json(v));
        return a;
    }
    if (json_is_object(j)) {
        json_t *o = json_object();
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)j, key, v)
            json_object_set_new(o, term_safe(key, buf, sizeof buf), term_safe_json(v));
        return o;
    }
    return json_deep_copy(j);
}

/* ASCII-only JSON: jansson escapes C0 and non-ASCII; DEL (legal raw in
 * JSON, only ever inside strings) is escaped here. */
static int print_dumped(char *text)
{
    if (!text) {
        fputs("qem: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    for (const char *p = text; *p; p++) {
        if (*p == 0x7F)
            fputs("\\u007F", stdout);
        else
            fputc(*p, stdout);
    }
    fputc('\n', stdout);
    free(text);
    return EXIT_OK;
}

int print_json_value(const json_t *j, int sort_keys)
{
    return print_dumped(json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17) |
                                          (sort_keys ? JSON_SORT_KEYS : 0)));
}

int print_json_text(const char *text)
{
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    const int rc = j ? print_json_value(j, 0) : print_dumped(NULL);
    json_decref(j);
    return rc;
}

int print_summary(const char *command, char *text, const qem_error *e, int json,
                  void (*human)(const json_t *))
{
    if (!text)
        return fail(command, e);
    int rc = EXIT_OK;
    if (json) {
        rc = print_json_text(text);
    } else {
        json_t *s = json_loads(text, 0, NULL);
        json_t *safe = s ? term_safe_json(s) : NULL;
        if (safe)
            human(safe);
        json_decref(safe);
        json_decref(s);
    }
    qem_free(text);
    return rc;
}

/* --- signals ------------------------------------------------------------------- */

/* The signal handler's only state: which signal asked the command to stop.
 * Lock-free atomics, not sig_atomic_t: the library's threads read it too
 * (a recording's progress callback runs on its writer thread). */
static atomic_int interrupt_signal;
/* 1: the first signal gives a grace second, then exits; 0: it only asks
 * (a recording publishes what arrived, however long that takes). */
static atomic_int grace_exit = 1;

static void on_signal(int signal_number)
{
    if (signal_number == SIGALRM || interrupt_signal) {
        /* The grace second is over, or a second signal came: leave now.
         * Only async-signal-safe calls here. */
        static const char message[] = "qem: interrupted\n";
        const int first = interrupt_signal ? interrupt_signal : SIGINT;
        ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
        (void)ignored;
        _exit(128 + first);
    }
    interrupt_signal = signal_number;
    if (grace_exit)
        alarm(1);
}

void signals_no_grace_exit(void)
{
    grace_exit = 0;
}

void signals_setup(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a blocking call returns EINTR, and no SA_RESETHAND:
     * the second signal reaches the handler too. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
}

int interrupted_by(void)
{
    return interrupt_signal;
}

int interrupt_exit_status(void)
{
    return 128 + (interrupt_signal ? interrupt_signal : SIGINT);
}

int fail(const char *command, const qem_error *e)
{
    if (interrupted_by()) {
        fprintf(stderr, "qem %s: interrupted; nothing was written\n", command);
        return interrupt_exit_status();
    }
    fprintf(stderr, "qem %s: %s\n", command,
            SAFE(e->message[0] ? e->message : qem_strerror(e->status)));
    return EXIT_FAILED;
}

/* --- progress ------------------------------------------------------------------ */

static int show_progress(void *user, uint64_t done, uint64_t total)
{
    progress_state *p = user;
    if (interrupted_by()) {
        if (p->active)
            fputc('\n', stderr);
        return 1;
    }
    if (!p->active)
        return 0;
    time_t now = time(NULL);
    if (done < total && now == p->last)
        return 0;
    p->last = now;
    const int percent = total ? (int)(100 * (done > total ? total : done) / total) : 100;
    if (p->unit)
        fprintf(stderr, "\r%s: %3d%% (%llu of %llu %s)", p->label, percent,
                (unsigned long long)done, (unsigned long long)total, p->unit);
    else /* units differ by format (bytes hashed, shards loaded) */
        fprintf(stderr, "\r%s: %3d%%", p->label, percent);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

void progress_setup(progress_state *p, const char *label, const char *unit, int quiet,
                    qem_progress_fn *fn, void **user)
{
    p->label = label;
    p->unit = unit;
    p->last = 0;
    p->active = !quiet && isatty(STDERR_FILENO);
    *fn = show_progress; /* also how an interrupt reaches the library */
    *user = p;
}
