/* The conditions that change qem-bench's figures, printed with them: the
 * CPU and the SIMD extensions it offers, the decode path in force,
 * transparent huge pages (mode, and how much of this process's memory
 * actually got them), frequency where the kernel shows it, load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

/* The first line of `path` without its newline, or "" if unreadable. */
static void read_line(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)size, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* The bracketed choice of a sysfs mode line ("always [madvise] never"). */
static void selected_mode(const char *path, char *out, size_t size)
{
    char line[256];
    read_line(path, line, sizeof line);
    const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    if (a && b)
        snprintf(out, size, "%.*s", (int)(b - a - 1), a + 1);
    else
        snprintf(out, size, "%s", line[0] ? line : "unknown");
}

static long meminfo_kib(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    const size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') {
            v = atol(line + k + 1);
            break;
        }
    fclose(f);
    return v;
}

long bench_anon_huge_kib(void)
{
    return meminfo_kib("/proc/self/smaps_rollup", "AnonHugePages");
}

long bench_buffer_huge_kib(const void *p, size_t size)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    const uintptr_t lo = (uintptr_t)p, hi = lo + size;
    char line[512];
    long total = 0;
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && b > lo; /* a mapping that overlaps the buffer */
            continue;
        }
        if (inside && !strncmp(line, "AnonHugePages:", 14))
            total += atol(line + 14);
    }
    fclose(f);
    return total;
}

/* Which of the extensions the decoders use /proc/cpuinfo lists. */
static void cpu_flags(char *out, size_t size)
{
    static const char *const wanted[] = {"sse2",     "avx2",     "bmi2",        "avx512f",
                                         "avx512bw", "avx512cd", "avx512_vbmi2"};
    char *line = malloc(8192);
    out[0] = '\0';
    FILE *f = line ? fopen("/proc/cpuinfo", "r") : NULL;
    if (!f) {
        free(line);
        snprintf(out, size, "unknown");
        return;
    }
    while (fgets(line, 8192, f)) {
        if (strncmp(line, "flags", 5))
            continue;
        size_t n = 0;
        for (size_t k = 0; k < sizeof wanted / sizeof *wanted; k++) {
            char pat[32];
            snprintf(pat, sizeof pat, " %s", wanted[k]);
            const char *at = strstr(line, pat);
            const int has = at && (at[strlen(pat)] == ' ' || at[strlen(pat)] == '\n');
            if (has)
                n += (size_t)snprintf(out + n, size - n, "%s%s", n ? " " : "", wanted[k]);
        }
        break;
    }
    fclose(f);
    free(line);
}

static void frequency(char *out, size_t size)
{
    char gov[64], cur[64], max[64];
    read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", gov, sizeof gov);
    read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", cur, sizeof cur);
    read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", max, sizeof max);
    if (gov[0] || cur[0]) {
        snprintf(out, size, "governor %s, cpu0 at %.0f MHz (max %.0f)", gov[0] ? gov : "?",
                 atof(cur) / 1e3, atof(max) / 1e3);
        return;
    }
    /* A guest without cpufreq: the MHz the kernel reports (often nominal). */
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(out, size, "no cpufreq");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7)) {
            const char *c = strchr(line, ':');
            snprintf(out, size, "no cpufreq (a guest?); /proc/cpuinfo says %.0f MHz",
                     c ? atof(c + 1) : 0.0);
            break;
        }
    if (f)
        fclose(f);
}

int bench_conditions(char *out, size_t size)
{
    char cpu[160], flags[160], thp[256], defrag[256], freq[256], load[256];
    cpu_model(cpu, sizeof cpu);
    cpu_flags(flags, sizeof flags);
    selected_mode("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp);
    selected_mode("/sys/kernel/mm/transparent_hugepage/defrag", defrag, sizeof defrag);
    frequency(freq, sizeof freq);
    read_line("/proc/loadavg", load, sizeof load);
    const char *forced = getenv("QEM_RANS_PATH");
    const char *wait = getenv("OMP_WAIT_POLICY"), *omp_threads = getenv("OMP_NUM_THREADS");
    const qem_decode_path paths[] = {QEM_DECODE_SCALAR, QEM_DECODE_AVX2, QEM_DECODE_AVX512,
                                     QEM_DECODE_AVX2_LOADS};
    char supported[64] = "";
    size_t n = 0;
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++)
        if (qem_decode_path_supported(paths[k]))
            n += (size_t)snprintf(supported + n, sizeof supported - n, "%s%s", n ? ", " : "",
                                  qem_decode_path_name(paths[k]));
    return snprintf(out, size,
                    "Conditions: CPU %s (flags used: %s); decode paths on this CPU: %s; "
                    "QEM_RANS_PATH %s; OMP_WAIT_POLICY %s, OMP_NUM_THREADS %s; transparent "
                    "huge pages %s (defrag %s), machine AnonHugePages %ld kB at start; %s; "
                    "load average %s.\n",
                    cpu, flags[0] ? flags : "none", supported, forced ? forced : "unset",
                    wait ? wait : "unset", omp_threads ? omp_threads : "unset", thp, defrag,
                    meminfo_kib("/proc/meminfo", "AnonHugePages"), freq, load);
}
