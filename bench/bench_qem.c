/* qem-bench: compression ratio, save throughput (the qem command beside
 * HDF5 and zstd writers) and full-decode throughput of the .qem integer
 * codec on a synthetic 4D-STEM set, on 1 and 2 threads, side by side in
 * one run. Prints a table; --markdown FILE also replaces
 * the marked results section of FILE (doc/benchmarks.md). Nothing here
 * asserts: benchmarks measure, tests check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_startup.h"
#include "bench_util.h"
#include "synth.h"





/* Min and median of `n` timings. */



/* Seconds to open (the header, and every body block's SHA-256) and then
 * to decode every scan, one chunk at a time, with `threads`. The caller's
 * buffer asks for 2 MiB pages (madvise), so the figure does not depend on
 * whether the machine's transparent huge pages are "always" or
 * "madvise"; the table says how much memory actually got them. */
static int time_decode(const char *qem, int threads, double *open_sec, double *sec)
{
    return bench_decode_once(qem, threads, QEM_DECODE_AUTO, 1, open_sec, sec, NULL, NULL);
}

/* Replaces the text between the markers in `path` (appends if absent). */

typedef struct set_result {
    const synth_params *data;
    uint64_t raw_bytes, qem_bytes;
    double save_min[2], save_med[2], dec_min[2], dec_med[2], open_min[2], open_med[2];
    double mean_min[2], com_min[2]; /* integer sets: products over every pixel */
    long huge_kib;                  /* of the caller's buffer, after a 1-thread decode */
    size_t buffer_bytes;
    format_row others[4];
    int n_others;
    save_compare save; /* qem save beside the HDF5 and zstd writers */
} set_result;

/* Generates one set, then measures save and full decode on 1 and 2 threads. */
static int run_set(const config *c, const char *dir, const synth_params *data, set_result *out)
{
    char npy[600];
    snprintf(npy, sizeof npy, "%s/set.npy", dir);
    const uint64_t *s = data->shape;
    fprintf(stderr, "generating %llux%llux%llux%llu %s, dose %.3g ...\n", (unsigned long long)s[0],
            (unsigned long long)s[1], (unsigned long long)s[2], (unsigned long long)s[3],
            qem_dtype_name(data->dtype), data->dose);
    qem_error e = {0};
    if (synth_write_npy(data, npy, &e) != QEM_OK)
        return die("generate", &e);
    out->data = data;
    out->raw_bytes = s[0] * s[1] * s[2] * s[3] * qem_dtype_size(data->dtype);
    /* Save: the qem command beside HDF5 and zstd, runs interleaved; it
     * keeps the .qem that the decode rows read. */
    fprintf(stderr, "  save: qem save beside HDF5 bitshuffle/LZ4 and zstd -3 ...\n");
    if (bench_save_compare(c, dir, npy, &out->save))
        return 1;
    const char *qem = out->save.qem_path;
    out->qem_bytes = file_size(qem);
    for (int k = 0; k < 2; k++) {
        out->save_min[k] = out->save.min[SAVE_QEM][k];
        out->save_med[k] = out->save.med[SAVE_QEM][k];
        double t[MAX_RUNS], o[MAX_RUNS];
        for (int r = 0; r < c->runs; r++)
            if (time_decode(qem, c->threads[k], &o[r], &t[r]))
                return 1;
        summarise(t, c->runs, &out->dec_min[k], &out->dec_med[k]);
        summarise(o, c->runs, &out->open_min[k], &out->open_med[k]);
        if (data->dtype != QEM_DTYPE_FLOAT32 &&
            bench_mean_com(c, qem, c->threads[k], &out->mean_min[k], &out->com_min[k]))
            return 1;
    }
    double ignored;
    if (bench_decode_once(qem, 1, QEM_DECODE_AUTO, 1, NULL, &ignored, &out->huge_kib,
                          &out->buffer_bytes))
        return 1;
    unlink(qem);
    fprintf(stderr, "  the same set as packs, HDF5 bitshuffle/LZ4 and zstd ...\n");
    out->n_others = bench_formats(c, dir, npy, data->dtype, &out->save, out->others, 4);
    for (int k = 0; k < out->n_others; k++)
        if (out->others[k].path[0])
            unlink(out->others[k].path);
    unlink(npy);
    return out->n_others < 0;
}

/* The save table: each writer's MB/s on 1 and 2 threads, and how many
 * times faster `qem save` is in the same run; then cycles per count. */
static int format_save(char *out, size_t size, const config *c, const set_result *r)
{
    const save_compare *v = &r->save;
    const uint64_t *s = r->data->shape;
    const double mb = (double)r->raw_bytes / 1e6, counts = (double)(s[0] * s[1] * s[2] * s[3]);
    int n = snprintf(out, size,
                     "Save, `qem save SRC.npy OUT.qem --threads N` beside the HDF5 and zstd "
                     "writers of the same .npy, runs interleaved (MB/s of source, min / median; "
                     "`qem save` / writer: the ratio of their times, min / median; above 1: "
                     "`qem save` is faster):\n\n"
                     "| writer | %d thread | %d threads | `qem save` / writer, %d thread | "
                     "`qem save` / writer, %d threads | size, MB (ratio) |\n"
                     "|---|---|---|---|---|---|\n",
                     c->threads[0], c->threads[1], c->threads[0], c->threads[1]);
    for (int w = 0; w < SAVE_WRITERS; w++) {
        char cell[2][48], ratio[2][48], sz[64];
        for (int k = 0; k < 2; k++) {
            if (!v->measured[w] || isnan(v->min[w][k])) {
                snprintf(cell[k], sizeof cell[k], "%s", v->measured[w] ? "no threads" : "-");
                snprintf(ratio[k], sizeof ratio[k], "-");
                continue;
            }
            snprintf(cell[k], sizeof cell[k], "%.0f / %.0f", mb / v->min[w][k],
                     mb / v->med[w][k]);
            snprintf(ratio[k], sizeof ratio[k], "%.2fx / %.2fx",
                     v->min[w][k] / v->min[SAVE_QEM][k], v->med[w][k] / v->med[SAVE_QEM][k]);
        }
        const uint64_t b = v->bytes[w][0];
        if (!v->measured[w] || !b)
            snprintf(sz, sizeof sz, "-");
        else if (w == SAVE_ZSTD && v->bytes[w][1] != b)
            snprintf(sz, sizeof sz, "%.2f (%.1fx); -T%d: %.2f", (double)b / 1e6,
                     (double)r->raw_bytes / (double)b, c->threads[1],
                     (double)v->bytes[w][1] / 1e6);
        else
            snprintf(sz, sizeof sz, "%.2f (%.1fx)", (double)b / 1e6,
                     (double)r->raw_bytes / (double)b);
        n += snprintf(out + n, size - (size_t)n, "| %s | %s | %s | %s | %s | %s |\n",
                      v->name[w], cell[0], cell[1], ratio[0], ratio[1], sz);
    }
    const double hz = bench_cpu_mhz() * 1e6;
    n += snprintf(out + n, size - (size_t)n,
                  "\n`qem save`, cycles per count at %.0f MHz (/proc/cpuinfo): %.1f on %d "
                  "thread, %.1f on %d (wall min x threads x Hz / counts); by the process's CPU "
                  "time (user + system, every thread): %.1f and %.1f. "
                  "Files on %d and %d threads byte-identical: %s. HDF5 direct chunks' file "
                  "identical to the filter's: %s.\n\n"
                  "Threads. `qem save --threads N`: N threads; from 2, one of them reads and "
                  "hashes the next chunk and then joins the encoding; on 1, a reading thread "
                  "runs beside the encoder (not counted in N). HDF5 "
                  "filter (`ds[r] = row`, what h5py users run): one thread; Debian's "
                  "libh5bshuf.so has no OpenMP. HDF5 direct chunks: each row bitshuffled and "
                  "LZ4'd as the filter does by bitshuffle's own extension, whose OpenMP loop "
                  "over a row's 8 KiB blocks runs on OMP_NUM_THREADS=N (as a filter built with "
                  "OpenMP would), then written with `write_direct_chunk` (2 worker processes "
                  "of one thread were slower here). `zstd -3 -TN`: "
                  "N compression workers (the command's I/O runs beside them). Times: `qem "
                  "save` and zstd from fork to exit (process start included), HDF5 from file "
                  "creation to close inside Python (interpreter start and imports "
                  "excluded); `qem save` alone fsyncs its file before publishing it.\n\n",
                  hz / 1e6, v->min[SAVE_QEM][0] * c->threads[0] * hz / counts, c->threads[0],
                  v->min[SAVE_QEM][1] * c->threads[1] * hz / counts, c->threads[1],
                  v->qem_cpu_min[0] * hz / counts, v->qem_cpu_min[1] * hz / counts,
                  c->threads[0], c->threads[1], v->qem_identical ? "yes" : "NO",
                  !v->measured[SAVE_H5_DIRECT] ? "not measured" : v->h5_identical ? "yes" : "NO");
    return n;
}

/* One table per set: ratio, save MB/s and decode in counts/s or GB/s. */
static int format_set(char *out, size_t size, const config *c, const char *title,
                      const set_result *r)
{
    const uint64_t *s = r->data->shape;
    const double mb = (double)r->raw_bytes / 1e6, counts = (double)(s[0] * s[1] * s[2] * s[3]);
    const int is_float = r->data->dtype == QEM_DTYPE_FLOAT32;
    int n = snprintf(out, size,
                     "### %s\n\n"
                     "%llu x %llu scans x %llu x %llu detector, %s, synthetic (dose %.3g counts "
                     "per bright-field pixel%s, seed %llu), %.1f MB raw.\n\n"
                     "| measure | 1 thread | 2 threads | 2-thread speed-up (min) |\n"
                     "|---|---|---|---|\n"
                     "| size: raw %.1f MB -> .qem %.2f MB | ratio %.2fx | | |\n"
                     "| save (MB/s of source) | %.0f / %.0f | %.0f / %.0f | %.2fx |\n"
                     "| open: header and body SHA-256 (ms) | %.1f / %.1f | %.1f / %.1f | %.2fx |\n",
                     title, (unsigned long long)s[0], (unsigned long long)s[1],
                     (unsigned long long)s[2], (unsigned long long)s[3],
                     qem_dtype_name(r->data->dtype), r->data->dose,
                     is_float ? ", Gaussian read noise" : "", (unsigned long long)r->data->seed, mb,
                     mb, (double)r->qem_bytes / 1e6, (double)r->raw_bytes / (double)r->qem_bytes,
                     mb / r->save_min[0], mb / r->save_med[0], mb / r->save_min[1],
                     mb / r->save_med[1], r->save_min[0] / r->save_min[1], r->open_min[0] * 1e3,
                     r->open_med[0] * 1e3, r->open_min[1] * 1e3, r->open_med[1] * 1e3,
                     r->open_min[0] / r->open_min[1]);
    if (is_float)
        n += snprintf(out + n, size - (size_t)n,
                      "| full decode (GB/s of float32) | %.3f / %.3f | %.3f / %.3f | %.2fx |\n\n",
                      mb / 1e3 / r->dec_min[0], mb / 1e3 / r->dec_med[0], mb / 1e3 / r->dec_min[1],
                      mb / 1e3 / r->dec_med[1], r->dec_min[0] / r->dec_min[1]);
    else
        n += snprintf(out + n, size - (size_t)n,
                      "| full decode (G counts/s) | %.3f / %.3f | %.3f / %.3f | %.2fx |\n"
                      "| mean pattern computed: every pixel's sum (G counts/s, min; share of the full-decode rate) | "
                      "%.3f (%.0f %%) | %.3f (%.0f %%) | %.2fx |\n"
                      "| centre of mass (G counts/s, min; share of the full-decode rate) | "
                      "%.3f (%.0f %%) | %.3f (%.0f %%) | %.2fx |\n\n"
                      "Huge pages: %.0f of the caller's %.0f MiB one-chunk buffer (it asks for "
                      "them with madvise).\n\n",
                      counts / r->dec_min[0] / 1e9, counts / r->dec_med[0] / 1e9,
                      counts / r->dec_min[1] / 1e9, counts / r->dec_med[1] / 1e9,
                      r->dec_min[0] / r->dec_min[1], counts / r->mean_min[0] / 1e9,
                      100 * r->dec_min[0] / r->mean_min[0], counts / r->mean_min[1] / 1e9,
                      100 * r->dec_min[1] / r->mean_min[1], r->mean_min[0] / r->mean_min[1],
                      counts / r->com_min[0] / 1e9, 100 * r->dec_min[0] / r->com_min[0],
                      counts / r->com_min[1] / 1e9, 100 * r->dec_min[1] / r->com_min[1],
                      r->com_min[0] / r->com_min[1], (double)r->huge_kib / 1024.0,
                      (double)r->buffer_bytes / 1048576.0);
    n += format_save(out + n, size - (size_t)n, c, r);
    /* The same set in the other formats, .qem first. */
    n += snprintf(out + n, size - (size_t)n,
                  "| format | size, MB | ratio | .qem smaller by | encode MB/s (1 thread) | "
                  "full decode %s (1 thread / 2 threads, min) | note |\n"
                  "|---|---|---|---|---|---|---|\n"
                  "| .qem | %.2f | %.1fx | 1.00x | %.0f | %.3f / %.3f | save on 2 threads: %.0f MB/s |\n",
                  is_float ? "GB/s" : "G counts/s", (double)r->qem_bytes / 1e6,
                  (double)r->raw_bytes / (double)r->qem_bytes, mb / r->save_min[0],
                  (is_float ? mb / 1e3 : counts / 1e9) / r->dec_min[0],
                  (is_float ? mb / 1e3 : counts / 1e9) / r->dec_min[1], mb / r->save_min[1]);
    for (int k = 0; k < r->n_others; k++) {
        const format_row *o = &r->others[k];
        const double unit = is_float ? mb / 1e3 : counts / 1e9;
        if (!o->bytes) {
            n += snprintf(out + n, size - (size_t)n, "| %s | - | - | - | - | - | %s |\n", o->name,
                          o->note);
            continue;
        }
        char dec2[32] = "-";
        if (!isnan(o->dec_min[1]))
            snprintf(dec2, sizeof dec2, "%.3f", unit / o->dec_min[1]);
        n += snprintf(out + n, size - (size_t)n,
                      "| %s | %.2f | %.1fx | %.2fx | %.0f | %.3f / %s | %s |\n", o->name,
                      (double)o->bytes / 1e6, (double)r->raw_bytes / (double)o->bytes,
                      (double)o->bytes / (double)r->qem_bytes, mb / o->enc_min[0],
                      unit / o->dec_min[0], dec2, o->note);
    }
    n += snprintf(out + n, size - (size_t)n, "\n");
    return n;
}

static const char *const help =
    "usage: qem-bench [--runs N] [--small]\n"
    "                 [--only integer|medium|high|pack|produce|virtual|ingest|float|startup]\n"
    "                 [--workdir DIR] [--markdown FILE]\n"
    "       qem-bench --decode FILE.qem [--runs N] [--huge-out]\n"
    "       qem-bench --kernel\n"
    "\n"
    "Generates synthetic 4D-STEM sets (fixed seeds) and measures, on 1 and 2\n"
    "threads, min and median of N runs (default 3): compression ratio, save\n"
    "throughput (MB/s of source) and full-decode throughput of .qem. Save is\n"
    "the command, `qem save SRC.npy OUT.qem --threads N`, timed beside HDF5\n"
    "bitshuffle/LZ4 (h5py's filter; the same file by direct chunk writes,\n"
    "bitshuffle on N OpenMP threads) and zstd -3 -TN, runs interleaved, with\n"
    "the ratios of their times and qem save's cycles per count.\n"
    "  integer: set A, 128x128 scans x 128x128 uint16, dose 0.3 (G counts/s),\n"
    "           beside packs, HDF5 bitshuffle/LZ4 (row chunks) and zstd -3\n"
    "  medium:  set B, 256x256 scans x 128x128 uint16, dose 4 (2 GiB raw), the same\n"
    "  high:    set H, 128x128 scans x 128x128 uint16, dose 20, the same\n"
    "  pack:    the integer set as a uint16/LZ4 pack: load phases vs SHA-256\n"
    "  produce: the integer set produced as a pack in both profiles, beside\n"
    "           h5repack to HDF5 bitshuffle/LZ4 (needs h5repack, h5diff)\n"
    "  ingest:  qem save from every family (.npy, Merlin, Arina, MRC, .blo, TVIPS,\n"
    "           .seq, K2 IS, FRMS6, raw_csr, DM4, TIA, EMD) beside qem save of the .npy\n"
    "           it exports to, and sha256sum of the same files\n"
    "  float:   set C, 64x64 scans x 128x128 float32, dose 20, read noise 1 (GB/s)\n"
    "  virtual: BF/ADF virtual images (and mean, CoM) from .qem, the pack, HDF5\n"
    "           bitshuffle/LZ4, the dense cube in RAM (C loop) and numpy\n"
    "  startup: qem --version, info and virtual on a small .qem beside a plain C\n"
    "           program (median and p90 of 200 runs, shared objects loaded)\n"
    "--small divides the scan shape of sets A, B, H and C by 4 each way (a check\n"
    "that the tables print; not for the record).\n"
    "--markdown replaces the results section of FILE (the start-up section has\n"
    "its own markers: --only startup leaves the rest alone).\n"
    "--decode times the full decode of an existing integer .qem on every decode\n"
    "path this CPU has (1 and 2 threads) beside its mean pattern and centre of\n"
    "mass; --huge-out puts the caller's buffer on 2 MiB pages (madvise).\n"
    "--kernel times the stream decoder alone, in cache, on every path.\n"
    "Every run prints first the conditions that change its figures.\n";

int main(int argc, char **argv)
{
    config c = {3, {1, 2}, NULL, NULL, NULL};
    const char *decode_file = NULL;
    int huge_out = 0, kernel = 0, small = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--runs") && v) {
            c.runs = atoi(v);
            if (c.runs < 1 || c.runs > MAX_RUNS)
                return fputs("qem-bench: --runs is 1..16\n", stderr), 2;
            i++;
        } else if (!strcmp(a, "--only") && v) {
            c.only = v;
            i++;
        } else if (!strcmp(a, "--workdir") && v) {
            c.workdir = v;
            i++;
        } else if (!strcmp(a, "--decode") && v) {
            decode_file = v;
            i++;
        } else if (!strcmp(a, "--small")) {
            small = 1;
        } else if (!strcmp(a, "--kernel")) {
            kernel = 1;
        } else if (!strcmp(a, "--huge-out")) {
            huge_out = 1;
        } else if (!strcmp(a, "--markdown") && v) {
            c.markdown = v;
            i++;
        } else {
            fprintf(stderr, "qem-bench: unexpected argument '%s'\n\n%s", a, help);
            return 2;
        }
    }
    if (kernel) {
        static char text[8192];
        int m = bench_conditions(text, sizeof text);
        m += snprintf(text + m, sizeof text - (size_t)m, "\n");
        bench_kernel(text + m, sizeof text - (size_t)m);
        fputs(text, stdout);
        return 0;
    }
    if (decode_file) {
        static char text[8192];
        int m = bench_conditions(text, sizeof text);
        m += snprintf(text + m, sizeof text - (size_t)m, "\n");
        const int d = bench_decode_file(&c, decode_file, huge_out, text + m, sizeof text - (size_t)m);
        if (d < 0)
            return 1;
        fputs(text, stdout);
        return 0;
    }
    char dir[512];
    const char *base = c.workdir ? c.workdir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(dir, sizeof dir, "%s/qem-bench-XXXXXX", base);
    if (!mkdtemp(dir))
        return perror("mkdtemp"), 1;

    /* Start-up first, on a quiet machine, into its own section. */
    static char startup[8192];
    if (!c.only || !strcmp(c.only, "startup")) {
        if (bench_startup(dir, startup, sizeof startup) < 0)
            return 1;
        fputs(startup, stdout);
        if (c.markdown && bench_startup_markdown(c.markdown, startup) != 0) {
            fprintf(stderr, "qem-bench: cannot write %s\n", c.markdown);
            return 1;
        }
        if (c.only) {
            rmdir(dir);
            return 0;
        }
    }

    synth_params integer_set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 0.3,
                                             20261129, 0.0};
    synth_params medium_set = {{256, 256, 128, 128}, QEM_DTYPE_UINT16, 4.0,
                                            20261131, 0.0};
    synth_params high_set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 20.0,
                                          20261201, 0.0};
    synth_params float_set = {{64, 64, 128, 128}, QEM_DTYPE_FLOAT32, 20.0,
                                           20261130, 1.0};
    synth_params *const sets[] = {&integer_set, &medium_set, &high_set, &float_set};
    for (size_t k = 0; small && k < sizeof sets / sizeof *sets; k++) {
        sets[k]->shape[0] /= 4;
        sets[k]->shape[1] /= 4;
    }
    char section[32768];
    char cpu[160];
    cpu_model(cpu, sizeof cpu);
    struct utsname u;
    uname(&u);
    time_t t = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t));
    const double copy1 = memcpy_gbs(c.threads[0]), copy2 = memcpy_gbs(c.threads[1]);
    int n = snprintf(section, sizeof section,
                     "Machine: %s, %ld cores online, %s %s; compiler %s; %s.\n"
                     "Memory copy (memcpy of 256 MiB): %.1f GB/s on %d thread, %.1f GB/s on %d "
                     "(%.2fx): the most a memory-bound path can gain from the second thread.\n"
                     "Runs: %d per cell; times are min / median.\n",
                     cpu, sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, __VERSION__, date,
                     copy1, c.threads[0], copy2, c.threads[1], copy2 / copy1, c.runs);
    n += bench_conditions(section + n, sizeof section - (size_t)n);
    n += snprintf(section + n, sizeof section - (size_t)n, "\n");
    set_result r;
    if (!c.only || !strcmp(c.only, "integer")) {
        if (run_set(&c, dir, &integer_set, &r))
            return 1;
        n += format_set(section + n, sizeof section - (size_t)n, &c,
                        "Set A: integer codec (runtime-column-rans-spatial-v2), low dose", &r);
    }
    if (!c.only || !strcmp(c.only, "medium")) {
        if (run_set(&c, dir, &medium_set, &r))
            return 1;
        n += format_set(section + n, sizeof section - (size_t)n, &c,
                        "Set B: integer codec, medium dose", &r);
    }
    if (!c.only || !strcmp(c.only, "high")) {
        if (run_set(&c, dir, &high_set, &r))
            return 1;
        n += format_set(section + n, sizeof section - (size_t)n, &c,
                        "Set H: integer codec, high dose", &r);
    }
    if (!c.only || !strcmp(c.only, "pack")) {
        int m = bench_pack_load(&c, dir, section + n, sizeof section - (size_t)n);
        if (m < 0)
            return 1;
        n += m;
    }
    if (!c.only || !strcmp(c.only, "produce")) {
        int m = bench_pack_produce(&c, dir, section + n, sizeof section - (size_t)n);
        if (m < 0)
            return 1;
        n += m;
    }
    if (!c.only || !strcmp(c.only, "virtual")) {
        int m = bench_products(&c, dir, section + n, sizeof section - (size_t)n);
        if (m < 0)
            return 1;
        n += m;
    }
    if (!c.only || !strcmp(c.only, "ingest")) {
        int m = bench_ingest(&c, dir, section + n, sizeof section - (size_t)n);
        if (m < 0)
            return 1;
        n += m;
    }
    if (!c.only || !strcmp(c.only, "float")) {
        if (run_set(&c, dir, &float_set, &r))
            return 1;
        n += format_set(section + n, sizeof section - (size_t)n, &c,
                        "Set C: float codec (float32-bit-lanes-rans-v1), read noise", &r);
    }
    rmdir(dir);
    fputs(section, stdout);
    if (c.markdown && write_markdown(c.markdown, section) != 0) {
        fprintf(stderr, "qem-bench: cannot write %s\n", c.markdown);
        return 1;
    }
    return 0;
}
