/* Shared by the benchmark drivers: timing, summaries, the machine line
 * and the markdown results section. */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <omp.h>

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void summarise(double *t, int n, double *min, double *median)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    *min = t[0];
    *median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

uint64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

int die(const char *what, const qem_error *e)
{
    fprintf(stderr, "qem-bench: %s: %s\n", what, e->message[0] ? e->message : qem_strerror(e->status));
    return 1;
}

void cpu_model(char *out, size_t size)
{
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, size, "%s", colon + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

int write_markdown_section(const char *path, const char *begin, const char *end,
                           const char *heading, const char *section)
{
    FILE *f = fopen(path, "r");
    char *old = NULL;
    size_t n = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        const long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        old = len >= 0 ? calloc(1, (size_t)len + 1) : NULL;
        n = old ? fread(old, 1, (size_t)len, f) : 0;
        fclose(f);
    }
    FILE *o = fopen(path, "w");
    if (!o) {
        free(old);
        return 1;
    }
    char *b = old ? strstr(old, begin) : NULL;
    char *e = b ? strstr(b, end) : NULL;
    if (b && e) {
        fwrite(old, 1, (size_t)(b - old), o);
        fprintf(o, "%s\n%s%s", begin, section, end);
        fputs(e + strlen(end), o);
    } else {
        if (old)
            fwrite(old, 1, n, o);
        fprintf(o, "\n%s%s\n%s%s\n", heading ? heading : "", begin, section, end);
    }
    const int bad = ferror(o);
    free(old);
    return fclose(o) != 0 || bad;
}

int write_markdown(const char *path, const char *section)
{
    return write_markdown_section(path, BEGIN_MARK, END_MARK, NULL, section);
}

double memcpy_gbs(int threads)
{
    const size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        const double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            const size_t part = n / (size_t)omp_get_num_threads();
            const size_t at = part * (size_t)omp_get_thread_num();
            memcpy(b + at, a + at, part);
        }
        const double t = now() - t0;
        best = t < best ? t : best;
    }
    free(a);
    free(b);
    return (double)n / best / 1e9;
}

double bench_cpu_mhz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7)) {
            const char *colon = strchr(line, ':');
            mhz = colon ? atof(colon + 1) : 0;
            break;
        }
    if (f)
        fclose(f);
    return mhz;
}

/* Whether two files hold the same bytes (both readable). */
int bench_same_bytes(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    static char bx[1 << 16], by[1 << 16];
    while (same) {
        const size_t nx = fread(bx, 1, sizeof bx, x), ny = fread(by, 1, sizeof by, y);
        same = nx == ny && !memcmp(bx, by, nx);
        if (nx < sizeof bx)
            break;
    }
    if (x)
        fclose(x);
    if (y)
        fclose(y);
    return same;
}
