/* What the qem command's parts share: options, parsing, progress and
 * Ctrl-C, error printing, opening sources. */
#ifndef QEM_CLI_H
#define QEM_CLI_H

#include <stdint.h>
#include <time.h>

#include "qem.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

typedef struct options {
    const char *positional[3];
    int npositional;
    int quiet;
    int json;
    int threads;
    long chunk_scans;
    const char *valid;
    const char *dark;
    const char *calibration;
    int codes;
    int raw;
    int timings;
    const char *expect_sha256;
    const char *output;
    long scan_row, scan_column;
    int have_scan;
    const char *dataset;
    uint64_t scan_shape[2];
    const char *profile;
    const char *exclude;
    const char *dest;
    uint64_t available_disk, available_memory;
    /* products */
    const char *mask;
    const char *detector;
    double center[2];
    int have_center;
    double radius, inner, outer, semiangle, rotation;
    int have_radius, have_inner, have_outer, have_rotation;
    const char *unit;
    int subtract_mean;
    uint64_t region[4];
    int have_region;
    const char *reduce;
    const char *reference_path;
} options;

typedef struct progress_state {
    const char *label, *unit;
    int active;
    time_t last;
} progress_state;

/* Ctrl-C and SIGTERM reach long work through the progress callback. */
void catch_interrupts(void);
/* Progress on stderr when it is a terminal; also the cancellation hook. */
void progress_setup(progress_state *p, const char *label, const options *o, qem_progress_fn *fn,
                    void **user);
/* Prints "qem COMMAND: message" and returns EXIT_FAILED. */
int fail(const char *command, const qem_error *e);
int usage_error(const char *help, const char *fmt, const char *arg);
int parse_long(const char *text, long lo, long hi, long *out);
/* Parses options common to all commands plus those `allowed` names; 0 on
 * success, -1 after printing help, else an exit status. */
int parse_args(int argc, char **argv, const char *help, int max_positional, const char *allowed,
               options *o);
/* Opens a .qem file without hashing the body up front. */
qem_file *open_deferred(const char *command, const char *path);
/* Reads a whole (small) text file. */
char *slurp(const char *path);
/* Opens the first positional argument as any source. */
qem_source *open_source(const char *command, const options *o);

/* The product commands and their help (cli/products.c). */
extern const char *const dp_help, *const mean_help, *const virtual_help, *const com_help,
    *const dpc_help, *const calibrate_help;
int cmd_dp(int argc, char **argv);
int cmd_mean(int argc, char **argv);
int cmd_virtual(int argc, char **argv);
int cmd_com(int argc, char **argv);
int cmd_dpc(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* The viewer, self-contained (cli/view/): cmd_view and view_help. */
#include "view/view.h"

#endif
