/* Start-up (issue 28: reading commands within 2x of a plain C program):
 * the qem command's --version, info and virtual on a small .qem, beside a
 * plain C program and the same program linked against libcrypto, run
 * interleaved, with the shared objects each one loads. */
#include "bench_startup.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "synth.h"

extern char **environ;

enum { STARTUP_RUNS = 200, PROGRAMS = 5 };

typedef struct program {
    const char *name;
    const char *argv[10];
    double t[STARTUP_RUNS];
    int at_start, later; /* shared objects loaded before main and after */
    const char *crypto;  /* when libcrypto was loaded */
    const char *output;  /* removed before each run: qem never overwrites */
} program;

/* Runs argv once with stdout (and stderr unless `show_errors`) on
 * /dev/null; wall seconds from spawn to exit, or -1 if it failed. */
static double run_once(const char *const *argv, char *const *envp, int show_errors,
                       pid_t *child)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (!show_errors)
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    const double t0 = now();
    /* posix_spawn's vfork-like clone: the parent's size costs nothing. */
    const int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    if (child)
        *child = pid;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    const double sec = now() - t0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? sec : -1;
}

/* Counts the objects the dynamic linker loads for one run of `p`
 * (LD_DEBUG=files): before control reaches the program, and after
 * (dlopen and what those need). */
static int count_objects(const char *dir, program *p)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof *envp);
    char out[700], opt[720];
    if (!envp)
        return -1;
    snprintf(out, sizeof out, "%s/lddebug", dir);
    snprintf(opt, sizeof opt, "LD_DEBUG_OUTPUT=%s", out);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_DEBUG", 8))
            envp[k++] = environ[i];
    envp[k++] = "LD_DEBUG=files";
    envp[k++] = opt;
    envp[k] = NULL;
    pid_t pid = 0;
    if (p->output)
        unlink(p->output);
    const int rc = run_once(p->argv, envp, 0, &pid) < 0 ? -1 : 0;
    free(envp);
    /* The dynamic linker writes to LD_DEBUG_OUTPUT.<pid>. */
    char path[760];
    snprintf(path, sizeof path, "%s.%ld", out, (long)pid);
    FILE *f = rc == 0 ? fopen(path, "r") : NULL;
    if (!f)
        return -1;
    char line[2048];
    int started = 0;
    p->at_start = p->later = 0;
    p->crypto = "no";
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "transferring control:"))
            started = 1;
        const char *file = strstr(line, "file=");
        if (!file || !(strstr(line, "needed by") || strstr(line, "dynamically loaded by")))
            continue;
        *(started ? &p->later : &p->at_start) += 1;
        if (!strncmp(file, "file=libcrypto.so", 17))
            p->crypto = started ? "loaded later" : "at start";
    }
    fclose(f);
    unlink(path);
    return 0;
}

static double percentile(const double *sorted, int n, double q)
{
    int i = (int)ceil(q * n) - 1;
    return sorted[i < 0 ? 0 : i];
}

/* The source tree's commit, and whether its files differ from it. */
static void source_commit(char *out, size_t size)
{
    snprintf(out, size, "unknown commit");
    FILE *g = popen("git -C '" QEM_BENCH_DIR "/..' describe --always --dirty --abbrev=7 "
                    "2>/dev/null",
                    "r");
    if (!g)
        return;
    char line[128];
    if (fgets(line, sizeof line, g) && line[0] != '\n') {
        line[strcspn(line, "\n")] = '\0';
        snprintf(out, size, "%s", line);
    }
    pclose(g);
}

int bench_startup(const char *dir, char *out, size_t size)
{
    static const synth_params set = {{8, 8, 64, 64}, QEM_DTYPE_UINT16, 1.0, 20261203, 0.0};
    char npy[600], qemf[600], image[600];
    snprintf(npy, sizeof npy, "%s/startup.npy", dir);
    snprintf(qemf, sizeof qemf, "%s/startup.qem", dir);
    snprintf(image, sizeof image, "%s/startup_bf.npy", dir);
    qem_error e = {0};
    if (synth_write_npy(&set, npy, &e) != QEM_OK)
        return die("synthetic set", &e), -1;
    qem_save_options so;
    qem_save_options_init(&so);
    if (qem_save_file(npy, qemf, &so, &e) != QEM_OK)
        return die("save", &e), -1;
    unlink(npy);

    static program progs[PROGRAMS] = {
        {.name = "plain C program", .argv = {QEM_BENCH_PLAIN}},
        {.name = "plain C program + libcrypto", .argv = {QEM_BENCH_PLAIN_CRYPTO}},
        {.name = "`qem --version`", .argv = {QEM_CLI, "--version"}},
        {.name = "`qem info small.qem`", .argv = {QEM_CLI, "info"}},
        {.name = "`qem virtual small.qem --detector bf -o bf.npy`",
         .argv = {QEM_CLI, "virtual", NULL, "--detector", "bf", "-o"}},
    };
    progs[3].argv[2] = qemf;
    progs[4].argv[2] = qemf;
    progs[4].argv[6] = progs[4].output = image;
    /* Once each, errors shown: every program runs, and the cache is warm. */
    for (int k = 0; k < PROGRAMS; k++) {
        if (progs[k].output)
            unlink(progs[k].output);
        if (run_once(progs[k].argv, environ, 1, NULL) < 0 || count_objects(dir, &progs[k]) != 0)
            return fprintf(stderr, "qem-bench: %s failed\n", progs[k].argv[0]), -1;
    }
    /* Interleaved: a slow moment of the machine falls on every program. */
    for (int r = 0; r < STARTUP_RUNS; r++)
        for (int k = 0; k < PROGRAMS; k++) {
            if (progs[k].output)
                unlink(progs[k].output);
            if ((progs[k].t[r] = run_once(progs[k].argv, environ, 0, NULL)) < 0)
                return fprintf(stderr, "qem-bench: %s failed\n", progs[k].name), -1;
        }
    unlink(qemf);
    unlink(image);

    char commit[128];
    source_commit(commit, sizeof commit);
    int n = snprintf(
        out, size,
        "### Start-up: the qem command beside a plain C program (`--only startup`)\n\n"
        "Command: `build/bench/qem-bench --only startup --markdown doc/benchmarks.md`, "
        "source at %s. %d runs of each program, interleaved (one of each in turn), each "
        "started with posix_spawn, stdout and stderr on /dev/null, timed from the spawn to "
        "its exit; one run of each first, uncounted. The plain program prints one line "
        "(`bench/startup_plain.c`); \"+ libcrypto\" is the same program linked against "
        "libcrypto.so.3 and calling it once: what libcrypto alone adds. small.qem holds "
        "8x8 scans x 64x64 uint16 counts (synthetic, dose 1). Shared objects: those the "
        "dynamic linker loaded (LD_DEBUG=files), before the program's own code ran and "
        "after (dlopen); libcrypto: whether and when it was loaded. Target (issue 28): "
        "reading commands within 2x of the plain program.\n\n",
        commit, STARTUP_RUNS);
    n += bench_conditions(out + n, size - (size_t)n);
    n += snprintf(out + n, size - (size_t)n,
                  "\n| program | median ms | p90 ms | median / plain | shared objects at "
                  "start | loaded later | libcrypto |\n|---|---:|---:|---:|---:|---:|---|\n");
    double plain = 0;
    for (int k = 0; k < PROGRAMS && n >= 0 && (size_t)n < size; k++) {
        program *p = &progs[k];
        qsort(p->t, STARTUP_RUNS, sizeof *p->t, cmp_double);
        const double med = 0.5 * (p->t[STARTUP_RUNS / 2 - 1] + p->t[STARTUP_RUNS / 2]);
        if (k == 0)
            plain = med;
        n += snprintf(out + n, size - (size_t)n, "| %s | %.2f | %.2f | %.2fx | %d | %d | %s |\n",
                      p->name, 1e3 * med, 1e3 * percentile(p->t, STARTUP_RUNS, 0.9), med / plain,
                      p->at_start, p->later, p->crypto);
    }
    if (n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, "\n");
    return n;
}

int bench_startup_markdown(const char *path, const char *section)
{
    return write_markdown_section(path, STARTUP_BEGIN_MARK, STARTUP_END_MARK,
                                  "## Start-up (`qem-bench --only startup`, issue 28)\n\n",
                                  section);
}
