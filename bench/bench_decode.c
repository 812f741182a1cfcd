/* Full decode of one integer .qem file on every decode path this CPU has,
 * on 1 and 2 threads, beside the products that need every pixel (mean
 * pattern, centre of mass), side by side in one run: `qem-bench --decode
 * FILE`. The caller's buffer is faulted in before the clock, on ordinary
 * pages unless --huge-out asks for 2 MiB ones (madvise), so the effect of
 * transparent huge pages on the row writes can be seen in one run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_util.h"

static void *out_buffer(size_t bytes, int huge)
{
    enum { HUGE = 2u << 20 };
    void *p = NULL;
    if (!huge)
        return malloc(bytes);
    if (posix_memalign(&p, HUGE, bytes) != 0)
        return NULL;
    madvise(p, bytes / HUGE * HUGE, MADV_HUGEPAGE);
    return p;
}

int bench_decode_once(const char *path, int threads, qem_decode_path decode_path, int huge_out,
                      double *open_sec, double *sec, long *huge_kib, size_t *buffer_bytes)
{
    qem_error e = {0};
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.threads = threads;
    qem_experimental_open_options xo;
    qem_experimental_open_options_init(&xo);
    xo.decode_path = decode_path;
    qem_file *f = NULL;
    const double opened = now();
    if (qem_open_experimental(path, &oo, &xo, &f, &e) != QEM_OK)
        return die("open", &e);
    if (open_sec)
        *open_sec = now() - opened;
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    uint64_t most = 0;
    for (uint64_t i = 0; i < info.chunk_count; i++) {
        uint64_t scans = 0;
        qem_get_chunk(f, i, NULL, &scans, NULL);
        most = scans > most ? scans : most;
    }
    const size_t bytes = (size_t)qem_read_scans_bound(f, most);
    if (buffer_bytes)
        *buffer_bytes = bytes;
    void *buf = out_buffer(bytes, huge_out);
    if (!buf) {
        qem_close(f);
        return fputs("qem-bench: out of memory\n", stderr), 1;
    }
    /* Faulted in with a nonzero byte: a zero memset may become calloc. */
    memset(buf, 0xA5, bytes);
    const double t0 = now();
    qem_status st = QEM_OK;
    for (uint64_t i = 0; i < info.chunk_count && st == QEM_OK; i++) {
        uint64_t first = 0, scans = 0;
        qem_get_chunk(f, i, &first, &scans, NULL);
        st = qem_read_scans(f, first, scans, buf, bytes, &e);
    }
    *sec = now() - t0;
    if (huge_kib)
        *huge_kib = bench_buffer_huge_kib(buf, bytes);
    free(buf);
    qem_close(f);
    return st == QEM_OK ? 0 : die("decode", &e);
}

int bench_decode_file(const config *c, const char *path, int huge_out, char *out, size_t size)
{
    qem_error e = {0};
    qem_file *f = NULL;
    if (qem_open(path, NULL, &f, &e) != QEM_OK)
        return die("open", &e), -1;
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    qem_close(f);
    const double counts = (double)(info.scans * info.pixels);
    int n = snprintf(out, size,
                     "Full decode of %s: %llu x %llu scans x %llu x %llu, %.3g G counts; "
                     "caller's buffer on %s pages; G counts/s, min / median of %d.\n\n"
                     "| path | 1 thread | 2 threads | 2-thread speed-up (min) | caller's buffer "
                     "in huge pages, MiB |\n|---|---|---|---|---|\n",
                     path, (unsigned long long)info.shape[0], (unsigned long long)info.shape[1],
                     (unsigned long long)info.shape[2], (unsigned long long)info.shape[3],
                     counts / 1e9, huge_out ? "2 MiB (madvise)" : "ordinary (malloc)", c->runs);
    static const qem_decode_path paths[] = {QEM_DECODE_SCALAR, QEM_DECODE_AVX2,
                                            QEM_DECODE_AVX2_LOADS, QEM_DECODE_AVX512,
                                            QEM_DECODE_AUTO};
    double auto_min[2] = {0, 0};
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        const char *name = qem_decode_path_name(paths[k]);
        if (!qem_decode_path_supported(paths[k])) {
            n += snprintf(out + n, size - (size_t)n, "| %s | not on this CPU | | | |\n", name);
            continue;
        }
        double mins[2], meds[2];
        long huge = 0;
        size_t out_bytes = 0;
        for (int th = 0; th < 2; th++) {
            double t[MAX_RUNS];
            for (int r = 0; r < c->runs; r++)
                if (bench_decode_once(path, c->threads[th], paths[k], huge_out, NULL, &t[r],
                                      &huge, &out_bytes))
                    return -1;
            summarise(t, c->runs, &mins[th], &meds[th]);
        }
        if (paths[k] == QEM_DECODE_AUTO) {
            auto_min[0] = mins[0];
            auto_min[1] = mins[1];
        }
        n += snprintf(out + n, size - (size_t)n,
                      "| %s | %.3f / %.3f | %.3f / %.3f | %.2fx | %.0f of %.0f |\n", name,
                      counts / mins[0] / 1e9, counts / meds[0] / 1e9, counts / mins[1] / 1e9,
                      counts / meds[1] / 1e9, mins[0] / mins[1], (double)huge / 1024.0,
                      (double)out_bytes / 1048576.0);
    }
    double mean_s[2], com_s[2];
    for (int th = 0; th < 2; th++)
        if (bench_mean_com(c, path, c->threads[th], &mean_s[th], &com_s[th]))
            return -1;
    n += snprintf(out + n, size - (size_t)n,
                  "| mean pattern computed, every pixel's sum (auto) | %.3f (%.0f %% of decode) | %.3f (%.0f %%) | %.2fx | |\n"
                  "| centre of mass (auto) | %.3f (%.0f %% of decode) | %.3f (%.0f %%) | %.2fx | |\n\n",
                  counts / mean_s[0] / 1e9, 100 * auto_min[0] / mean_s[0],
                  counts / mean_s[1] / 1e9, 100 * auto_min[1] / mean_s[1],
                  mean_s[0] / mean_s[1], counts / com_s[0] / 1e9, 100 * auto_min[0] / com_s[0],
                  counts / com_s[1] / 1e9, 100 * auto_min[1] / com_s[1], com_s[0] / com_s[1]);
    return n;
}
