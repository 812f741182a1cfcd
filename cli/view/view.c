/* `qem view FILE [FILE...]`: the browser viewer as a command of the
 * options table. It opens the files, prints the address, opens a browser,
 * and serves until Ctrl-C or SIGTERM, which reach it as every command's
 * do (cli/terminal.c): the signal is noted, the wait below sees it, the
 * server stops (running computations cancel at their next window) and the
 * exit status is 128 + the signal; a shutdown that takes longer than the
 * one-second alarm, or a second signal, exits at once. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "terminal.h"
#include "view/request.h"
#include "view/server.h"
#include "view/view_command.h"

extern char **environ;

_Static_assert(VIEW_MAX_FILES <= ARGS_MAX_POSITIONAL, "qem view's files are positional arguments");

static int is_loopback(const char *address)
{
    return !strncmp(address, "127.", 4);
}

/* The page that sends the browser on to the address. The address never
 * goes on a command line (any local user reads /proc/PID/cmdline): the
 * browser is given this file's path instead, in a fresh folder only the
 * owner can enter (mkdtemp, 0700), the file itself 0600. */
typedef view_launcher launcher;

static int write_all(int fd, const char *text)
{
    for (size_t left = strlen(text); left;) {
        const ssize_t n = write(fd, text, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        text += n;
        left -= (size_t)n;
    }
    return 1;
}

/* $XDG_RUNTIME_DIR (the user's own, on tmpfs), else $TMPDIR, else /tmp. */
static int launcher_create(launcher *l, const char *url)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (!base || base[0] != '/' || stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
        base = getenv("TMPDIR");
    if (!base || base[0] != '/' || stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
        base = "/tmp";
    const int n = snprintf(l->folder, sizeof l->folder, "%s/qem-view-XXXXXX", base);
    if (n < 0 || (size_t)n >= sizeof l->folder || !mkdtemp(l->folder)) {
        l->folder[0] = '\0';
        return 0;
    }
    snprintf(l->file, sizeof l->file, "%s/open.html", l->folder);
    const int fd = open(l->file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    /* The address holds only an IPv4 address, a port and hex digits:
     * nothing to escape in HTML. */
    char page[1024];
    snprintf(page, sizeof page,
             "<!doctype html>\n<meta charset=\"utf-8\">\n"
             "<meta name=\"referrer\" content=\"no-referrer\">\n"
             "<meta http-equiv=\"refresh\" content=\"0; url=%s\">\n"
             "<title>qem view</title>\n<p><a href=\"%s\">Open qem view</a></p>\n",
             url, url);
    const int ok = fd >= 0 && fchmod(fd, 0600) == 0 && write_all(fd, page);
    if (fd >= 0 && close(fd) != 0)
        return 0;
    return ok;
}

/* Removes the file and its folder; accepts one never created. */
static void launcher_remove(launcher *l)
{
    if (!l->folder[0])
        return;
    unlink(l->file);
    rmdir(l->folder);
    l->folder[0] = '\0';
}

/* xdg-open when it exists on PATH, given `target` (the launcher file);
 * a missing browser is never an error. */
static pid_t open_browser(const char *target)
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
    char *argv[] = {candidate, (char *)target, NULL};
    pid_t pid = 0;
    if (posix_spawn(&pid, candidate, &actions, NULL, argv, environ) != 0)
        pid = 0;
    posix_spawn_file_actions_destroy(&actions);
    return pid;
}

/* The server module (view/server.h), from <folder of libqem.so>/qem-modules/
 * as the library finds its own modules, else the install-time folder.
 * Loaded once, for this command only, and kept until exit. */
static const view_module *load_server(qem_error *e)
{
    static const char file[] = "qem-view.so";
    char path[4096] = "";
    Dl_info info;
    /* qem_version lives in libqem.so: its folder holds qem-modules/. */
    if (dladdr((const void *)&qem_version, &info) && info.dli_fname && info.dli_fname[0] == '/') {
        const char *slash = strrchr(info.dli_fname, '/');
        const int n = snprintf(path, sizeof path, "%.*s/qem-modules/%s",
                               (int)(slash - info.dli_fname), info.dli_fname, file);
        if (n < 0 || (size_t)n >= sizeof path)
            path[0] = '\0';
    }
#ifdef QEM_MODULE_INSTALL_DIR
    /* The install-time folder, for a libqem.so copied elsewhere; the first
     * path is the one reported when that has no module either. */
    char installed[4096];
    const int n = snprintf(installed, sizeof installed, "%s/%s", QEM_MODULE_INSTALL_DIR, file);
    if ((!path[0] || access(path, F_OK) != 0) && n > 0 && (size_t)n < sizeof installed &&
        access(installed, F_OK) == 0)
        memcpy(path, installed, (size_t)n + 1);
#endif
    if (!path[0]) {
        e->status = QEM_E_IO;
        snprintf(e->message, sizeof e->message,
                 "cannot load the viewer module: the folder of libqem is unknown; reinstall qem");
        return NULL;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *symbol = handle ? dlsym(handle, "qem_module_view_v1") : NULL;
    const void *(*entry)(void) = NULL;
    if (symbol)
        memcpy(&entry, &symbol, sizeof entry); /* object to function pointer, as POSIX allows */
    const view_module *m = entry ? entry() : NULL;
    if (m && m->struct_size >= sizeof *m && m->abi == VIEW_MODULE_ABI && m->version &&
        !strcmp(m->version, QEM_VERSION_STRING))
        return m;
    const char *why = handle ? "it is not the viewer of this qem (a different build)" : dlerror();
    e->status = QEM_E_IO;
    snprintf(e->message, sizeof e->message,
             "cannot load the viewer module '%.300s': %.120s; reinstall qem", path,
             why ? why : "unknown reason");
    if (handle)
        dlclose(handle);
    return NULL;
}

int view_config_from_args(const args *a, const char *command, view_config *config,
                          char *cache_dir)
{
    const char *bind = given(a, OPT_BIND) ? text_of(a, OPT_BIND) : "127.0.0.1";
    if (!strcmp(bind, "localhost"))
        bind = "127.0.0.1";
    struct in_addr address;
    if (inet_pton(AF_INET, bind, &address) != 1)
        return usage_fail(command, "--bind needs an IPv4 address such as 127.0.0.1, not '%s'",
                          SAFE(bind));
    if (given(a, OPT_QUIET) && given(a, OPT_VERBOSE))
        return usage_fail(command, "give --quiet or --verbose, not both");
    if (given(a, OPT_FROM_DISK) && given(a, OPT_COPY_BODY))
        return usage_fail(command, "give --from-disk or --copy-body, not both");
    if (given(a, OPT_CACHE_DIR) && given(a, OPT_NO_CACHE))
        return usage_fail(command, "give --cache-dir or --no-cache, not both");
    *config = (view_config){a->positional,
                            (size_t)a->npositional,
                            bind,
                            (unsigned)a->v[OPT_PORT].i[0],
                            (int)a->v[OPT_THREADS].i[0],
                            given(a, OPT_VERBOSE),
                            given(a, OPT_QUIET),
                            given(a, OPT_FROM_DISK)   ? QEM_RESIDENT_NONE
                            : given(a, OPT_COPY_BODY) ? QEM_RESIDENT_COPY
                                                      : QEM_RESIDENT_MAPPED,
                            given(a, OPT_KEEP_MASKS) ? (uint64_t)a->v[OPT_KEEP_MASKS].i[0] : 128,
                            given(a, OPT_COLUMN_CACHE) ? (uint64_t)a->v[OPT_COLUMN_CACHE].i[0]
                                                       : 0,
                            given(a, OPT_PACKED_COPY) ? (uint64_t)a->v[OPT_PACKED_COPY].i[0]
                                                      : 2560,
                            NULL,
                            NULL,
                            NULL,
                            NULL};
    cache_dir[0] = '\0';
    if (given(a, OPT_CACHE_DIR)) {
        snprintf(cache_dir, 4096, "%s", text_of(a, OPT_CACHE_DIR));
    } else if (!given(a, OPT_NO_CACHE)) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && xdg[0] == '/')
            snprintf(cache_dir, 4096, "%s/qem", xdg);
        else if (home && home[0] == '/')
            snprintf(cache_dir, 4096, "%s/.cache/qem", home);
    }
    config->cache_dir = cache_dir[0] ? cache_dir : NULL;
    return 0;
}

int view_start(const args *a, const char *command, const view_config *config, const char *what,
               view_running *v)
{
    memset(v, 0, sizeof *v);
    v->command = command;
    v->quiet = config->quiet;
    /* Each move allocates a few MiB (sums, images, replies) and frees the
     * last ones: kept in the heap rather than returned to the kernel and
     * faulted in again, zeroed, on the next move (a page fault costs
     * several microseconds in a virtual machine: about 1.5 ms per MiB). */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    qem_error e = {0};
    v->vm = load_server(&e);
    if (!v->vm) {
        qem_container_close(config->live);
        return fail(command, &e);
    }
    if (v->vm->create(config, &v->server, &e) != QEM_OK)
        return fail(command, &e);
    unsigned bound = 0;
    if (v->vm->start(v->server, &bound, &e) != QEM_OK) {
        v->vm->free(v->server);
        v->server = NULL;
        return fail(command, &e);
    }
    const char *bind = config->bind;
    const char *host = !strcmp(bind, "0.0.0.0") ? "127.0.0.1" : bind;
    char url[256];
    snprintf(url, sizeof url, "http://%s:%u/?token=%s", host, bound, v->vm->token(v->server));
    if (!is_loopback(bind))
        fprintf(stderr,
                "qem %s: warning: listening on %s, not a loopback address: other machines "
                "can reach this server (each request still needs the token)\n",
                command, bind);
    printf("%s\n", url);
    fflush(stdout);
    if (!v->quiet)
        fprintf(stderr, "qem %s: serving %s on %s port %u; Ctrl-C stops\n", command, what, bind,
                bound);
    if (!given(a, OPT_NO_OPEN)) {
        if (launcher_create(&v->page, url))
            v->browser = open_browser(v->page.file);
        else if (!v->quiet)
            fprintf(stderr, "qem %s: no private place for the browser's launcher file (%s); "
                            "open the address above by hand\n",
                    command, strerror(errno));
    }
    return 0;
}

void view_wait_signal(view_running *v)
{
    /* Whichever thread the signal lands on, its handler only notes it;
     * this loop looks often enough that stopping feels immediate. */
    while (!interrupted_by()) {
        const struct timespec tick = {0, 50 * 1000 * 1000};
        nanosleep(&tick, NULL);
        if (v->browser > 0)
            waitpid(v->browser, NULL, WNOHANG);
    }
}

void view_stop(view_running *v)
{
    if (!v->server)
        return;
    if (!v->quiet)
        fprintf(stderr, "qem %s: stopping\n", v->command);
    launcher_remove(&v->page);
    v->vm->free(v->server);
    v->server = NULL;
    if (v->browser > 0)
        waitpid(v->browser, NULL, WNOHANG);
}

/* libgomp's idle workers spin after each parallel region (its default),
 * which suits batch work. A server's updates are short regions on cores
 * shared with the browser and the server's other threads, and the spinning
 * took the core the next update needed: a series of three 512 files
 * answered 1-px moves in 26 ms (p50) spinning, 15 ms sleeping, beside a
 * Python client (doc/benchmarks.md). libgomp reads the policy only when it
 * loads, hence the second start. A caller who set it or libgomp's spin
 * count keeps that, and the server stays in the first process (one that
 * valgrind started, say). */
void view_exec_with_passive_wait(char **argv)
{
    /* The program's own path as /proc names it (valgrind answers with its
     * client's), not the link itself. */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1 || getenv("OMP_WAIT_POLICY") ||
        getenv("GOMP_SPINCOUNT") || setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    self[n] = '\0';
    execv(self, argv);
    unsetenv("OMP_WAIT_POLICY"); /* not run again (the program moved?): serve as started */
}

static int run_view(const args *a)
{
    view_config config;
    char cache_dir[4096];
    int rc = view_config_from_args(a, "view", &config, cache_dir);
    if (rc)
        return rc;
    char what[64];
    snprintf(what, sizeof what, "%d file%s", a->npositional, a->npositional == 1 ? "" : "s");
    view_running v;
    rc = view_start(a, "view", &config, what, &v);
    if (rc)
        return rc;
    view_wait_signal(&v);
    view_stop(&v);
    return interrupt_exit_status();
}

static const command_option view_options[] = {{OPT_PORT, NULL},
                                              {OPT_BIND, NULL},
                                              {OPT_NO_OPEN, NULL},
                                              {OPT_VERBOSE, NULL},
                                              {OPT_KEEP_MASKS, NULL},
                                              {OPT_COLUMN_CACHE, NULL},
                                              {OPT_PACKED_COPY, NULL},
                                              {OPT_FROM_DISK, NULL},
                                              {OPT_COPY_BODY, NULL},
                                              {OPT_CACHE_DIR, NULL},
                                              {OPT_NO_CACHE, NULL},
                                              {OPT_NONE, NULL}};

const command_spec view_commands[] = {
    {"view", "FILE [FILE...] [options]",
     "open in the browser: a live virtual detector over the scan image",
     "Opens FILE (a .qem file or a pack) in the browser: the scan image of a\n"
     "virtual detector on the left, the mean pattern or the pattern under the\n"
     "cursor on the right with the detector drawn over it; drag the detector and\n"
     "the image follows live. Several files (a tilt or time series, at most 64,\n"
     "with one detector shape) share one detector and update together. The page\n"
     "is served from inside qem; nothing is fetched from elsewhere. The address\n"
     "printed on stdout carries a random access token: every request without it\n"
     "is refused. Ctrl-C or SIGTERM stops the server (exit status 128 + the\n"
     "signal). A .qem file's encoded body is mapped read-only (the page cache's\n"
     "pages; packs are held whole anyway), so detector moves decode from memory;\n"
     "a file rewritten in place while served is refused (--copy-body allows it).\n"
     "Files are served at once and authenticated after the start (a pack loads\n"
     "then): what a file records, such as the default detector's image of a file\n"
     "qem wrote, is shown first; a request needing the data checks the .qem\n"
     "blocks it reads, or waits for the pack's load, and once a damaged block or\n"
     "shard is found every data request fails. Each page keeps the images of its\n"
     "recent detectors (--keep-masks), so a detector dragged back is a copy, and\n"
     "once the bodies are checked the server builds a bit-packed copy of each\n"
     ".qem file's counts while they fit in --packed-copy, which detector moves\n"
     "and patterns then read instead of decoding. Its OpenMP threads sleep\n"
     "between computations (OMP_WAIT_POLICY=passive, unless the environment sets\n"
     "a policy). The API the page uses (also for scripts) is in doc/viewer.md.\n",
     1, VIEW_MAX_FILES, "at least one FILE", view_options, run_view},
    {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL}};
