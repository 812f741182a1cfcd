/* What the qem command shows on a terminal, and how it is stopped: text
 * from files escaped before printing, progress on stderr, Ctrl-C and
 * SIGTERM, write limits. */
#ifndef QEM_CLI_TERMINAL_H
#define QEM_CLI_TERMINAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "qem.h"

/* Copies `s` into `buf` with every byte that could drive a terminal made
 * visible: C0 controls (LF, CR and ESC among them) and DEL as \xHH, the C1
 * controls U+0080..U+009F as \u00HH, bytes that are not UTF-8 as \xHH.
 * Everything else, including non-ASCII text, is kept. Truncates with
 * "..." to fit `size` (>= 8). Returns buf. */
const char *term_safe(const char *s, char *buf, size_t size);

/* For printf arguments that come from files or the command line. The
 * buffer lives until the end of the enclosing full expression's block. */
#define SAFE_MAX 2048
#define SAFE(s) term_safe((s), (char[SAFE_MAX]){0}, SAFE_MAX)

/* A deep copy of `j` whose strings and keys are term_safe, for the human
 * printers of summaries. */
json_t *term_safe_json(const json_t *j);

/* Writes `j` (or the JSON `text`) to stdout as indented, ASCII-only JSON
 * (every control character and non-ASCII character escaped, DEL too). */
int print_json_value(const json_t *j, int sort_keys);
int print_json_text(const char *text);
/* A library summary `text` (freed here; NULL: `command` failed with `e`):
 * with `json` as ASCII JSON, else `human` prints an escaped copy. */
int print_summary(const char *command, char *text, const qem_error *e, int json,
                  void (*human)(const json_t *));

/* Prints "qem COMMAND: message" (escaped) and returns EXIT_FAILED, or the
 * interrupt's exit status after Ctrl-C / SIGTERM. */
int fail(const char *command, const qem_error *e);

/* --- signals --------------------------------------------------------------- */

/* Ctrl-C and SIGTERM: the first one asks long work to stop through the
 * progress callback; whatever has not stopped a second later (a blocking
 * call, work without progress) exits then, and a second signal exits at
 * once. Outputs are unnamed files until their final link, so an exit at
 * any point leaves nothing behind (as a SIGKILL does). SIGXFSZ is ignored,
 * so a file-size limit shows as a write error naming the file. */
void signals_setup(void);
/* The first signal then only asks work to stop (no exit a second later):
 * for a command that must finish what it has (a recording publishing the
 * frames received). A second signal still exits at once. */
void signals_no_grace_exit(void);
/* 0, or the signal that interrupted the command. */
int interrupted_by(void);
/* The exit status for an interrupted command: 128 + the signal. */
int interrupt_exit_status(void);

/* --- progress -------------------------------------------------------------- */

typedef struct progress_state {
    const char *label, *unit;
    int active;
    time_t last;
} progress_state;

/* Progress on stderr when it is a terminal and not quiet; always the
 * cancellation hook. `unit` names what is counted ("scan positions"). */
void progress_setup(progress_state *p, const char *label, const char *unit, int quiet,
                    qem_progress_fn *fn, void **user);

#endif
