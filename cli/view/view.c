/* `qem view`: options, opening the files, printing the address, opening a
 * browser, and waiting for Ctrl-C or SIGTERM to shut the server down. */
#include "view/view.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "view/request.h"
#include "view/server.h"

extern char **environ;

const char *const view_help =
    "usage: qem view FILE [FILE...] [--port N] [--bind ADDR] [--no-open]\n"
    "                [--threads N] [--verbose]\n"
    "\n"
    "Opens FILE (a .qem file or a pack) in the browser: the scan image of a\n"
    "virtual detector on the left, the mean pattern or the pattern under the\n"
    "cursor on the right with the detector drawn over it; drag the detector and\n"
    "the image follows live. Several files (a tilt or time series) share one\n"
    "detector and update together. The page is served from inside qem; nothing\n"
    "is fetched from elsewhere. The address printed carries a random access\n"
    "token: every request without it is refused. Ctrl-C stops the server.\n"
    "The API the page uses (also for scripts) is in doc/viewer.md.\n"
    "\n"
    "  --port N       TCP port (default 0: any free port, printed)\n"
    "  --bind ADDR    IPv4 address to listen on (default 127.0.0.1); any other\n"
    "                 than a loopback address lets other machines reach the\n"
    "                 server (they still need the token): a warning is printed\n"
    "  --no-open      print the address only; do not start a browser\n"
    "  --threads N    library threads per computation (default: all cores)\n"
    "  --verbose      one line per request on stderr (the token hidden)\n";

static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "qem: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", view_help);
    return 2;
}

/* A decimal in [lo, hi], nothing else. */
static int parse_number(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    if (!text || !*text || text[0] == '-' || text[0] == '+' || text[0] == ' ')
        return 0;
    long v = strtol(text, &end, 10);
    if (errno || !end || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int is_loopback(const char *address)
{
    return !strncmp(address, "127.", 4);
}

/* xdg-open when it exists on PATH; a missing browser is never an error. */
static pid_t open_browser(const char *url)
{
    const char *path = getenv("PATH");
    char candidate[4096];
    int found = 0;
    for (const char *p = path; p && *p && !found;) {
        const char *colon = strchr(p, ':');
        const size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n && n + sizeof "/xdg-open" < sizeof candidate) {
            memcpy(candidate, p, n);
            memcpy(candidate + n, "/xdg-open", sizeof "/xdg-open");
            found = access(candidate, X_OK) == 0;
        }
        p = colon ? colon + 1 : p + n;
    }
    if (!found)
        return 0;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", 0, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", 1, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", 1, 0);
    char *argv[] = {candidate, (char *)url, NULL};
    pid_t pid = 0;
    if (posix_spawn(&pid, candidate, &actions, NULL, argv, environ) != 0)
        pid = 0;
    posix_spawn_file_actions_destroy(&actions);
    return pid;
}

int cmd_view(int argc, char **argv)
{
    const char *paths[VIEW_MAX_FILES];
    size_t files = 0;
    const char *bind = NULL;
    long port = -1, threads = -1;
    int no_open = 0, verbose = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(view_help, stdout);
            return 0;
        } else if (!strcmp(a, "--port")) {
            if (port >= 0)
                return usage("--port is given twice%s", "");
            if (!parse_number(value, 0, 65535, &port))
                return usage("--port needs a number from 0 to 65535%s", "");
            i++;
        } else if (!strcmp(a, "--bind")) {
            if (bind)
                return usage("--bind is given twice%s", "");
            if (!value || !*value)
                return usage("--bind needs an IPv4 address such as 127.0.0.1%s", "");
            bind = !strcmp(value, "localhost") ? "127.0.0.1" : value;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (threads >= 0)
                return usage("--threads is given twice%s", "");
            if (!parse_number(value, 1, 4096, &threads))
                return usage("--threads needs a number from 1 to 4096%s", "");
            i++;
        } else if (!strcmp(a, "--no-open")) {
            if (no_open)
                return usage("--no-open is given twice%s", "");
            no_open = 1;
        } else if (!strcmp(a, "--verbose")) {
            if (verbose)
                return usage("--verbose is given twice%s", "");
            verbose = 1;
        } else if (a[0] == '-' && a[1]) {
            return usage("unknown option '%s' for qem view", a);
        } else {
            if (files == VIEW_MAX_FILES)
                return usage("qem view opens at most 64 files; '%s' is one too many", a);
            paths[files++] = a;
        }
    }
    if (!files)
        return usage("qem view needs at least one FILE%s", "");
    view_config config = {paths, files, bind ? bind : "127.0.0.1", port < 0 ? 0 : (unsigned)port,
                          threads < 0 ? 0 : (int)threads, verbose};
    /* Ctrl-C and SIGTERM are taken by sigwait below: blocked here, before
     * any thread exists, so that every thread inherits the block. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    qem_error e = {0};
    view_server *server = NULL;
    if (view_server_create(&config, &server, &e) != QEM_OK) {
        fprintf(stderr, "qem view: %s\n", e.message[0] ? e.message : qem_strerror(e.status));
        return 1;
    }
    unsigned bound = 0;
    if (view_server_start(server, &bound, &e) != QEM_OK) {
        fprintf(stderr, "qem view: %s\n", e.message[0] ? e.message : qem_strerror(e.status));
        view_server_free(server);
        return 1;
    }
    const char *host = !strcmp(config.bind, "0.0.0.0") ? "127.0.0.1" : config.bind;
    char url[256];
    snprintf(url, sizeof url, "http://%s:%u/?token=%s", host, bound, view_server_token(server));
    if (!is_loopback(config.bind))
        fprintf(stderr,
                "qem view: warning: listening on %s, not a loopback address: other machines "
                "can reach this server (each request still needs the token)\n",
                config.bind);
    printf("%s\n", url);
    fflush(stdout);
    fprintf(stderr, "qem view: serving %zu file%s on %s port %u; Ctrl-C stops\n", files,
            files == 1 ? "" : "s", config.bind, bound);
    pid_t browser = no_open ? 0 : open_browser(url);
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    fprintf(stderr, "qem view: stopping\n");
    view_server_free(server);
    if (browser > 0)
        waitpid(browser, NULL, WNOHANG);
    return 0;
}
