#ifndef QEM_BENCH_STARTUP_H
#define QEM_BENCH_STARTUP_H

#include <stddef.h>

#include "bench_util.h"

#define STARTUP_BEGIN_MARK "<!-- qem-bench-startup:begin -->"
#define STARTUP_END_MARK "<!-- qem-bench-startup:end -->"

/* Start-up of the qem command beside a plain C program (`--only
 * startup`); writes its section to `out`; returns characters written or
 * -1. */
int bench_startup(const char *dir, char *out, size_t size);

/* Replaces the text between the start-up markers of `path` (appends a
 * heading and the markers if absent); 0 on success. */
int bench_startup_markdown(const char *path, const char *section);

#endif
