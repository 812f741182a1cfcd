/* The formats users would otherwise pick, measured beside .qem on the same
 * synthetic set in the same run: packs (both profiles, where admissible),
 * HDF5 bitshuffle/LZ4 with one scan row per chunk (h5py + hdf5plugin from
 * Debian, bench/h5_bitshuffle.py) and zstd -3 of the raw .npy bytes; and
 * the save table: `qem save` beside the HDF5 and zstd writers on 1 and 2
 * threads. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

static void row_init(format_row *r, const char *name)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    for (int k = 0; k < 2; k++)
        r->enc_min[k] = r->enc_med[k] = r->dec_min[k] = r->dec_med[k] = NAN;
}

/* Seconds a shell command takes, or -1 (its output goes to `out`). */
static double timed_command(const char *cmd, char *out, size_t size)
{
    const double t0 = now();
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t got = out ? fread(out, 1, size - 1, f) : 0;
    if (out)
        out[got] = '\0';
    const int rc = pclose(f);
    return rc == 0 ? now() - t0 : -1;
}

static double json_seconds(const char *text)
{
    const char *at = strstr(text, "\"seconds\":");
    return at ? atof(at + 10) : -1;
}

/* Runs `argv` without a shell, OMP_NUM_THREADS set to `omp` when given,
 * its stdout into `out` (when given) and its stderr discarded. Returns the
 * wall seconds from fork to reaped exit (process start included), or -1
 * if it failed; `cpu` gets its user + system CPU seconds. */
static double spawn_timed(char *const argv[], const char *omp, char *out, size_t size,
                          double *cpu)
{
    int fds[2] = {-1, -1};
    if (out && pipe(fds) != 0)
        return -1;
    const double t0 = now();
    const pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        dup2(out ? fds[1] : null, 1);
        dup2(null, 2);
        if (out)
            close(fds[0]);
        if (omp)
            setenv("OMP_NUM_THREADS", omp, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    size_t got = 0;
    if (out) {
        close(fds[1]);
        ssize_t r;
        while (got < size - 1 && (r = read(fds[0], out + got, size - 1 - got)) > 0)
            got += (size_t)r;
        char rest[256]; /* drained, so that the child never blocks on a full pipe */
        while (read(fds[0], rest, sizeof rest) > 0)
            ;
        close(fds[0]);
        out[got] = '\0';
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid)
        return -1;
    const double wall = now() - t0;
    if (cpu)
        *cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? wall : -1;
}

int bench_save_compare(const config *c, const char *dir, const char *npy, save_compare *out)
{
    memset(out, 0, sizeof *out);
    static const char *const names[SAVE_WRITERS] = {
        "`qem save` (.qem)", "HDF5 bitshuffle/LZ4 write, h5py filter",
        "HDF5 bitshuffle/LZ4 write, direct chunks", "zstd -3 (raw bytes)"};
    double t[SAVE_WRITERS][2][MAX_RUNS], qem_cpu[2][MAX_RUNS];
    char qem[2][600], h5[2][600], zst[2][600], script[600], text[512], th[2][8];
    snprintf(script, sizeof script, "%s/h5_bitshuffle.py", QEM_BENCH_DIR);
    for (int k = 0; k < 2; k++) {
        snprintf(qem[k], sizeof qem[k], "%.500s/save_%d.qem", dir, k);
        snprintf(h5[k], sizeof h5[k], "%.500s/save_%s.h5", dir, k ? "direct" : "filter");
        snprintf(zst[k], sizeof zst[k], "%.500s/save_%d.zst", dir, k);
        snprintf(th[k], sizeof th[k], "%d", c->threads[k]);
    }
    for (int w = 0; w < SAVE_WRITERS; w++) {
        out->name[w] = names[w];
        out->measured[w] = 1;
        for (int k = 0; k < 2; k++)
            out->min[w][k] = out->med[w][k] = NAN;
    }
    out->measured[SAVE_H5_FILTER] = out->measured[SAVE_H5_DIRECT] =
        access("/usr/bin/python3", X_OK) == 0;
    for (int r = 0; r < c->runs; r++) {
        for (int k = 0; k < 2; k++) {
            /* Exactly the command a user runs. */
            char *qem_argv[] = {QEM_CLI, "save", (char *)npy, qem[k], "--threads", th[k], NULL};
            unlink(qem[k]);
            t[SAVE_QEM][k][r] = spawn_timed(qem_argv, NULL, NULL, 0, &qem_cpu[k][r]);
            if (t[SAVE_QEM][k][r] < 0) {
                fprintf(stderr, "qem-bench: %s save %s %s --threads %s failed\n", QEM_CLI, npy,
                        qem[k], th[k]);
                return 1;
            }
            /* The filter has no threads: it runs once, on the 1-thread pass. */
            if (k == 0 && out->measured[SAVE_H5_FILTER]) {
                char *argv[] = {"/usr/bin/python3", script, "write", (char *)npy, h5[0], NULL};
                unlink(h5[0]);
                const int ok = spawn_timed(argv, NULL, text, sizeof text, NULL) >= 0;
                t[SAVE_H5_FILTER][0][r] = json_seconds(text);
                out->measured[SAVE_H5_FILTER] = ok && t[SAVE_H5_FILTER][0][r] > 0;
            }
            if (out->measured[SAVE_H5_DIRECT]) {
                char *argv[] = {"/usr/bin/python3", script, "write-direct", (char *)npy, h5[1],
                                NULL};
                unlink(h5[1]);
                const int ok = spawn_timed(argv, th[k], text, sizeof text, NULL) >= 0;
                t[SAVE_H5_DIRECT][k][r] = json_seconds(text);
                out->measured[SAVE_H5_DIRECT] = ok && t[SAVE_H5_DIRECT][k][r] > 0;
                out->bytes[SAVE_H5_DIRECT][k] = file_size(h5[1]);
                if (ok && out->measured[SAVE_H5_FILTER] && r == 0 && k == 1)
                    out->h5_identical = bench_same_bytes(h5[0], h5[1]);
            }
            if (out->measured[SAVE_ZSTD]) {
                char level[8] = "-3", threads[16];
                snprintf(threads, sizeof threads, "-T%d", c->threads[k]);
                char *argv[] = {"zstd", level, threads, "-q", "-f", (char *)npy,
                                "-o", zst[k], NULL};
                unlink(zst[k]);
                t[SAVE_ZSTD][k][r] = spawn_timed(argv, NULL, NULL, 0, NULL);
                out->measured[SAVE_ZSTD] = t[SAVE_ZSTD][k][r] > 0;
                out->bytes[SAVE_ZSTD][k] = file_size(zst[k]);
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        out->bytes[SAVE_QEM][k] = file_size(qem[k]);
        summarise(t[SAVE_QEM][k], c->runs, &out->min[SAVE_QEM][k], &out->med[SAVE_QEM][k]);
        double ignored;
        summarise(qem_cpu[k], c->runs, &out->qem_cpu_min[k], &ignored);
        for (int w = SAVE_H5_FILTER; w < SAVE_WRITERS; w++)
            if (out->measured[w] && (w != SAVE_H5_FILTER || k == 0))
                summarise(t[w][k], c->runs, &out->min[w][k], &out->med[w][k]);
    }
    out->bytes[SAVE_H5_FILTER][0] = file_size(h5[0]);
    out->qem_identical = bench_same_bytes(qem[0], qem[1]);
    /* One of each kept: the .qem, the filter's HDF5 file, zstd -T1's. */
    unlink(qem[1]);
    unlink(h5[1]);
    unlink(zst[1]);
    snprintf(out->qem_path, sizeof out->qem_path, "%s", qem[0]);
    snprintf(out->h5_path, sizeof out->h5_path, "%s", out->measured[SAVE_H5_FILTER] ? h5[0] : "");
    snprintf(out->zst_path, sizeof out->zst_path, "%s", out->measured[SAVE_ZSTD] ? zst[0] : "");
    if (!out->measured[SAVE_H5_FILTER])
        unlink(h5[0]);
    if (!out->measured[SAVE_ZSTD])
        unlink(zst[0]);
    return 0;
}

/* Load (every shard authenticated) plus reading every scan, bounded. */
static int pack_decode(const char *path, int threads, double *sec)
{
    qem_error e = {0};
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = threads;
    const double t0 = now();
    qem_container *s = NULL;
    if (qem_container_open(path, &so, &s, &e) != QEM_OK)
        return die("pack open", &e);
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(s, &info, NULL);
    const uint64_t window = 512;
    const size_t bytes = (size_t)qem_container_read_bound(s, QEM_VALUES_WORKING, window);
    /* The caller's buffer, faulted in (nonzero: a zero memset may become
     * calloc), is not part of the decode: its time is taken out. */
    const double a0 = now();
    void *buf = malloc(bytes);
    if (buf)
        memset(buf, 0xA5, bytes);
    const double allocating = now() - a0;
    qem_status st = buf ? QEM_OK : QEM_E_NO_MEMORY;
    for (uint64_t at = 0; st == QEM_OK && at < info.scans; at += window) {
        const uint64_t n = info.scans - at < window ? info.scans - at : window;
        st = qem_container_read(s, at, n, QEM_VALUES_WORKING, buf, bytes, &e);
    }
    *sec = now() - t0 - allocating;
    free(buf);
    qem_container_close(s);
    return st == QEM_OK ? 0 : die("pack decode", &e);
}

/* Produces a pack; 1 with the reason when the profile cannot take the set. */
static int pack_produce(const char *npy, const char *dest, qem_pack_profile profile, double *sec,
                        char *why, size_t why_size)
{
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = profile;
    const double t0 = now();
    qem_status st = qem_pack_inspect(npy, NULL, &in, &e);
    if (st == QEM_OK)
        st = qem_pack_produce(in, &po, dest, NULL, &e);
    *sec = now() - t0;
    qem_pack_inspection_free(in);
    char receipt[1100];
    snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
    unlink(receipt);
    if (st != QEM_OK)
        snprintf(why, why_size, "%.150s", e.message);
    return st != QEM_OK;
}

int bench_formats(const config *c, const char *dir, const char *npy, qem_dtype dtype,
                  const save_compare *saved, format_row *rows, int max_rows)
{
    int n = 0;
    if (strlen(dir) > 500)
        return -1;
    char path[590], cmd[2400], out[512];
    /* Packs: uint16 counts only. */
    static const struct {
        const char *name;
        qem_pack_profile profile;
    } packs[2] = {{"pack u16-LZ4", QEM_PACK_UINT16_LZ4}, {"pack u8-bitpacked", QEM_PACK_UINT8_BITPACKED}};
    for (int k = 0; dtype == QEM_DTYPE_UINT16 && k < 2 && n < max_rows; k++) {
        format_row *r = &rows[n++];
        row_init(r, packs[k].name);
        snprintf(path, sizeof path, "%s/set_%d.h5", dir, k);
        double t[MAX_RUNS];
        int refused = 0;
        for (int run = 0; run < c->runs && !refused; run++) {
            unlink(path);
            refused = pack_produce(npy, path, packs[k].profile, &t[run], r->note, sizeof r->note);
        }
        if (refused) {
            r->bytes = 0;
            continue;
        }
        summarise(t, c->runs, &r->enc_min[0], &r->enc_med[0]);
        r->bytes = file_size(path);
        for (int th = 0; th < 2; th++) {
            for (int run = 0; run < c->runs; run++)
                if (pack_decode(path, c->threads[th], &t[run]))
                    return -1;
            summarise(t, c->runs, &r->dec_min[th], &r->dec_med[th]);
        }
        snprintf(r->note, sizeof r->note, "produce on 1 thread; decode = load + read");
        unlink(path);
    }
    /* HDF5 bitshuffle/LZ4, one scan row per chunk: written by the save
     * table (the filter's file). */
    if (n < max_rows) {
        format_row *r = &rows[n++];
        row_init(r, "HDF5 bitshuffle/LZ4");
        int ok = saved->h5_path[0] != '\0';
        if (ok) {
            r->enc_min[0] = saved->min[SAVE_H5_FILTER][0];
            r->enc_med[0] = saved->med[SAVE_H5_FILTER][0];
            r->bytes = file_size(saved->h5_path);
            for (int k = 0; ok && k < 2; k++) {
                snprintf(cmd, sizeof cmd,
                         "/usr/bin/python3 %s/h5_bitshuffle.py decode '%s' %d %d", QEM_BENCH_DIR,
                         saved->h5_path, c->runs, c->threads[k]);
                ok = timed_command(cmd, out, sizeof out) >= 0;
                r->dec_min[k] = r->dec_med[k] = json_seconds(out);
            }
            snprintf(r->note, sizeof r->note,
                     "h5py + hdf5plugin, chunk = one scan row; encode = the filter; 2 threads = "
                     "rows split over 2 processes; decode min only");
        }
        if (!ok)
            snprintf(r->note, sizeof r->note, "not measured: h5py/hdf5plugin unavailable");
        /* Kept for the virtual-image comparison of the integer set. */
        snprintf(r->path, sizeof r->path, "%s", ok ? saved->h5_path : "");
    }
    /* zstd -3 of the raw bytes: the save table's -T1 file. */
    if (n < max_rows) {
        format_row *r = &rows[n++];
        row_init(r, "zstd -3 (raw bytes)");
        double d[MAX_RUNS];
        int ok = saved->zst_path[0] != '\0';
        for (int run = 0; ok && run < c->runs; run++) {
            snprintf(cmd, sizeof cmd, "zstd -d -q -c '%s' > /dev/null", saved->zst_path);
            ok = (d[run] = timed_command(cmd, NULL, 0)) >= 0;
        }
        if (ok) {
            r->enc_min[0] = saved->min[SAVE_ZSTD][0];
            r->enc_med[0] = saved->med[SAVE_ZSTD][0];
            summarise(d, c->runs, &r->dec_min[0], &r->dec_med[0]);
            r->bytes = file_size(saved->zst_path);
            snprintf(r->note, sizeof r->note, "zstd command, one thread (-T1)");
        } else {
            snprintf(r->note, sizeof r->note, "not measured: zstd unavailable");
        }
        if (saved->zst_path[0])
            unlink(saved->zst_path);
    }
    return n;
}
