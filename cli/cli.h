/* What the qem command's parts share: exit statuses, the command tables of
 * each family, and helpers for opening files and checking names. */
#ifndef QEM_CLI_H
#define QEM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "args.h"
#include "qem.h"
#include "terminal.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

/* The commands of each family, ending with an entry whose name is NULL. */
extern const command_spec file_commands[];    /* cmd_files.c: save, info, verify, export */
extern const command_spec product_commands[]; /* cmd_products.c: dp, mean, virtual, ... */
extern const command_spec pack_commands[];    /* cmd_pack.c: pack inspect, plan, produce */
extern const command_spec view_commands[];    /* view/view.c: view */
extern const command_spec record_commands[];  /* cmd_record.c: record */

/* view/view.c: runs `qem view` again as `argv` with OMP_WAIT_POLICY=passive
 * unless the environment sets a wait policy or spin count; returns only when it did not. */
void view_exec_with_passive_wait(char **argv);

/* 1 when `path` ends in ".EXT" for one of `extensions` ("tif|tiff"),
 * ignoring case. */
int has_extension(const char *path, const char *extensions);
/* A command's output: the extension names the format written (else
 * EXIT_USAGE after saying which extensions `what` takes) and nothing is
 * there yet (else EXIT_FAILED: qem never overwrites). 0 when both hold. */
int need_destination(const char *command, const char *path, const char *extensions,
                     const char *what);

/* What `path` is, by signature; prints the failure and returns 0 if it
 * cannot be read. */
int identify(const char *command, const char *path, qem_file_kind *kind);
/* Opens `path` as a container (.qem or pack) with `options` (NULL =
 * defaults); prints the library's failure (which says what the file is
 * instead) and returns NULL. */
qem_container *open_container(const char *command, const char *path,
                              const qem_container_options *options);
/* Opens the first positional argument as any container (.qem or pack). */
qem_container *open_source(const args *a);
/* The acquisition options (--dataset, --scan-shape, --raw-*) as given;
 * progress reports hashing through `ps`. */
void acquisition_options(const args *a, qem_acquisition_options *o, progress_state *ps);
/* 1 if any of those options is given. */
int has_acquisition_options(const args *a);

/* Reads a whole small text file (at most 64 MiB, a regular file); NULL
 * after printing why. */
char *read_text_file(const char *command, const char *what, const char *path);

#endif
