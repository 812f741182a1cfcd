/* What `qem view` and `qem record --view` share (view/view.c): the server
 * module started on a configuration made from the options, the address
 * printed, the browser opened, the wait for Ctrl-C / SIGTERM. */
#ifndef QEM_VIEW_COMMAND_H
#define QEM_VIEW_COMMAND_H

#include <sys/types.h>

#include "args.h"
#include "view/server.h"

/* The page that sends the browser on to the address (view.c). */
typedef struct view_launcher {
    char folder[4096];
    char file[4096 + sizeof "/open.html"];
} view_launcher;

typedef struct view_running {
    const char *command; /* "view", "record": messages say "qem COMMAND: ..." */
    const view_module *vm;
    view_server *server;
    view_launcher page;
    pid_t browser;
    int quiet;
} view_running;

/* The server's options from the command's (--port, --bind, --no-open,
 * --verbose, --quiet, --threads, --keep-masks, --from-disk, --copy-body,
 * --cache-dir, --no-cache: those the command has); `cache_dir` (4096
 * bytes) holds the cache folder config points to. 0, or the usage
 * error's exit status. */
int view_config_from_args(const args *a, const char *command, view_config *config,
                          char *cache_dir);

/* Loads the server module, creates and starts the server on `config`,
 * prints the address on stdout (and "serving WHAT" on stderr unless
 * quiet), opens the browser unless --no-open. 0, or the failure's exit
 * status (printed). A config.live container is closed on failure too. */
int view_start(const args *a, const char *command, const view_config *config, const char *what,
               view_running *v);

/* Serves until Ctrl-C or SIGTERM. */
void view_wait_signal(view_running *v);

/* Stops the server (running computations cancel), removes the launcher
 * file, frees everything. Accepts one never started. */
void view_stop(view_running *v);

/* --- qem record --view (view/record_view.c) ------------------------------ */

typedef struct record_view record_view;

/* The viewer's options checked before the recording starts: 0, or the
 * usage error's exit status. */
int record_view_check(const args *a);

/* Serves the viewer on the recording's frames as they arrive (the
 * recorder's container, options.live_view). NULL when it could not start:
 * the reason is printed and the recording goes on without it. */
record_view *record_view_start(const args *a, qem_recorder *recorder, const char *dest);

/* The recording is over (after qem_recorder_wait): the data are final. */
void record_view_finished(record_view *v, const qem_record_result *result);

/* Serves on until Ctrl-C / SIGTERM when `serve` (saying so on stdout),
 * then stops the server and frees it; before qem_recorder_free, whose
 * journal the container reads. NULL-safe. */
void record_view_end(record_view *v, int serve);

#endif
