/* Pack production benchmark: the low-dose integer set with its hot and dead
 * pixels masked as a Dectris detector writes them (raw 65535, constant, and
 * excluded), produced in both pack profiles, beside h5repack compressing an
 * HDF5 copy of the same array with bitshuffle/LZ4 (Debian's plugin), in the
 * same run. Production at 1 and 2 threads (h5repack has one); the packs of
 * both counts are compared byte for byte. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "synth.h"

#define MASKED_RAW 65535u

/* The source: SRC.npy and an unfiltered contiguous HDF5 copy at /data. */
static int write_sources(const synth_params *set, const char *npy, const char *h5,
                         uint8_t *exclude)
{
    const uint64_t P = set->shape[2] * set->shape[3], scans = set->shape[0] * set->shape[1];
    synth *g = synth_new(set);
    uint16_t *frame = malloc((size_t)P * 2);
    qem_error e = {0};
    qem_npy_writer *w = NULL;
    const hsize_t dims[4] = {set->shape[0], set->shape[1], set->shape[2], set->shape[3]};
    hid_t f = H5Fcreate(h5, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(4, dims, NULL);
    hid_t d = f >= 0 ? H5Dcreate2(f, "/data", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT)
                     : -1;
    const hsize_t one[4] = {1, 1, dims[2], dims[3]};
    hid_t mem = H5Screate_simple(4, one, NULL);
    int ok = g && frame && d >= 0 &&
             qem_npy_writer_create(npy, QEM_DTYPE_UINT16, 4, set->shape, &w, &e) == QEM_OK;
    const uint8_t *defects = g ? synth_defects(g) : NULL;
    for (uint64_t p = 0; ok && p < P; p++)
        exclude[p] = defects[p] != 0;
    for (uint64_t s = 0; ok && s < scans; s++) {
        synth_frame(g, s, frame);
        for (uint64_t p = 0; p < P; p++)
            if (exclude[p])
                frame[p] = MASKED_RAW;
        const hsize_t at[4] = {s / dims[1], s % dims[1], 0, 0};
        ok = qem_npy_writer_append(w, frame, P, &e) == QEM_OK &&
             H5Sselect_hyperslab(space, H5S_SELECT_SET, at, NULL, one, NULL) >= 0 &&
             H5Dwrite(d, H5T_NATIVE_UINT16, mem, space, H5P_DEFAULT, frame) >= 0;
    }
    if (ok)
        ok = qem_npy_writer_finish(w, &e) == QEM_OK;
    qem_npy_writer_free(w);
    H5Sclose(mem);
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(space);
    if (f >= 0)
        H5Fclose(f);
    free(frame);
    synth_free(g);
    if (!ok)
        fprintf(stderr, "qem-bench: cannot write the produce sources (%s)\n", e.message);
    return ok;
}

/* Runs argv, returns its wall time in seconds or -1. */
static double run_timed(char *const argv[])
{
    const double t0 = now();
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "qem-bench: %s failed (status %d)\n", argv[0], status);
        return -1;
    }
    return now() - t0;
}

typedef struct produce_row {
    const char *name;
    int threads;
    double min, med;
    uint64_t bytes;
} produce_row;

/* Leaves the last run's pack as dir/produced_PROFILE_THREADS.h5. */
static int time_produce(const config *c, const char *src, const char *dir, const uint8_t *exclude,
                        qem_pack_profile profile, produce_row *row, double *inspect_s)
{
    double t[MAX_RUNS], it[MAX_RUNS];
    for (int r = 0; r < c->runs; r++) {
        char dest[700];
        snprintf(dest, sizeof dest, "%s/produced_%d_%d.h5", dir, (int)profile, row->threads);
        unlink(dest);
        qem_error e = {0};
        qem_pack_inspection *in = NULL;
        double t0 = now();
        if (qem_pack_inspect(src, NULL, &in, &e) != QEM_OK)
            return die("pack inspect", &e);
        it[r] = now() - t0;
        qem_pack_plan_options po;
        qem_pack_plan_options_init(&po);
        po.profile = profile;
        po.exclude = exclude;
        qem_pack_produce_options o;
        qem_pack_produce_options_init(&o);
        o.threads = row->threads;
        t0 = now();
        qem_status st = qem_pack_produce(in, &po, dest, &o, &e);
        t[r] = now() - t0;
        qem_pack_inspection_free(in);
        if (st != QEM_OK)
            return die("pack produce", &e);
        row->bytes = file_size(dest);
        char receipt[800];
        snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
        unlink(receipt);
    }
    summarise(t, c->runs, &row->min, &row->med);
    double imed;
    summarise(it, c->runs, inspect_s, &imed);
    return 0;
}

int bench_pack_produce(const config *c, const char *dir, char *out, size_t size)
{
    static const synth_params set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 0.3, 20261129, 0.0};
    const uint64_t P = set.shape[2] * set.shape[3];
    const uint64_t logical = set.shape[0] * set.shape[1] * P * 2;
    char npy[600], h5[600], repacked[600];
    snprintf(npy, sizeof npy, "%s/produce_src.npy", dir);
    snprintf(h5, sizeof h5, "%s/produce_src.h5", dir);
    snprintf(repacked, sizeof repacked, "%s/bitshuffle_lz4.h5", dir);
    uint8_t *exclude = calloc((size_t)P, 1);
    fprintf(stderr, "writing the produce sources (.npy and HDF5, 512 MiB each) ...\n");
    if (!exclude || !write_sources(&set, npy, h5, exclude))
        return -1;
    uint64_t excluded = 0;
    for (uint64_t p = 0; p < P; p++)
        excluded += exclude[p];

    produce_row rows[5] = {{"pack uint16/LZ4 (qem pack produce)", 1, 0, 0, 0},
                           {"pack uint16/LZ4 (qem pack produce)", 2, 0, 0, 0},
                           {"pack uint8/bitpacked (qem pack produce)", 1, 0, 0, 0},
                           {"pack uint8/bitpacked (qem pack produce)", 2, 0, 0, 0},
                           {"HDF5 bitshuffle/LZ4, 1-frame chunks (h5repack)", 1, 0, 0, 0}};
    double inspect_s = 0, unused_s = 0;
    int same = 1;
    fprintf(stderr, "producing packs ...\n");
    for (int k = 0; k < 4; k++) {
        const qem_pack_profile profile = k < 2 ? QEM_PACK_UINT16_LZ4 : QEM_PACK_UINT8_BITPACKED;
        if (time_produce(c, npy, dir, exclude, profile, &rows[k], k ? &unused_s : &inspect_s))
            return -1;
        if (k % 2) {
            char one[700], two[700];
            snprintf(one, sizeof one, "%s/produced_%d_1.h5", dir, (int)profile);
            snprintf(two, sizeof two, "%s/produced_%d_2.h5", dir, (int)profile);
            if (!bench_same_bytes(one, two)) {
                fprintf(stderr, "qem-bench: the %s packs of 1 and 2 threads differ\n",
                        rows[k].name);
                same = 0;
            }
            unlink(one);
            unlink(two);
        }
    }
    /* bitshuffle's filter takes (block size, compressor) and prepends its
     * version and element size itself: block size 0 = its default, 2 = LZ4. */
    char layout[64], filter[] = "/data:UD=32008,0,2,0,2";
    snprintf(layout, sizeof layout, "/data:CHUNK=1x1x%llux%llu",
             (unsigned long long)set.shape[2], (unsigned long long)set.shape[3]);
    double t[MAX_RUNS];
    fprintf(stderr, "h5repack to bitshuffle/LZ4 ...\n");
    for (int r = 0; r < c->runs; r++) {
        unlink(repacked);
        char *argv[] = {"h5repack", "-l", layout, "-f", filter, h5, repacked, NULL};
        if ((t[r] = run_timed(argv)) < 0)
            return -1;
    }
    summarise(t, c->runs, &rows[4].min, &rows[4].med);
    rows[4].bytes = file_size(repacked);
    if (rows[4].bytes >= logical) {
        fprintf(stderr, "qem-bench: h5repack did not compress: is the bitshuffle HDF5 plugin "
                        "installed (scripts/install-deps)?\n");
        return -1;
    }
    /* The HDF5 copy is lossless too: h5diff compares it with its input. */
    char *diff[] = {"h5diff", "-q", h5, repacked, NULL};
    const int identical = run_timed(diff) >= 0;
    unlink(repacked);
    unlink(h5);
    unlink(npy);
    free(exclude);

    int n = snprintf(out, size,
                     "### Pack production beside HDF5 bitshuffle/LZ4\n\n"
                     "The integer set (128x128 scans x 128x128 uint16, dose 0.3, %.0f MiB) with "
                     "its %llu hot and dead pixels holding raw %u and excluded, as a Dectris "
                     "detector masks them. Produce = re-authenticate the source (SHA-256 of the "
                     "whole .npy), read, encode, write the HDF5 pack, hash the output, publish, "
                     "on 1 and 2 threads (the packs of both counts: %s); inspect (one more "
                     "SHA-256 pass over the source) takes %.2f s and is not included. h5repack "
                     "converts an unfiltered contiguous HDF5 copy of the same array (filter "
                     "32008, LZ4, default block size) on one thread; h5diff: %s. Warm page "
                     "cache.\n\n"
                     "| output | threads | source GB/s (min / median) | time, s (min) | "
                     "ratio vs uint16 | time vs h5repack | 2-thread speed-up |\n"
                     "|---|---|---|---|---|---|---|\n",
                     (double)logical / 1048576.0, (unsigned long long)excluded, MASKED_RAW,
                     same ? "byte-identical" : "DIFFER (see stderr)", inspect_s,
                     identical ? "identical to its input" : "DIFFERS (see stderr)");
    for (int k = 0; k < 5 && n > 0 && (size_t)n < size; k++) {
        char speedup[32] = "";
        if (k < 4 && rows[k].threads == 2)
            snprintf(speedup, sizeof speedup, "%.2fx", rows[k - 1].min / rows[k].min);
        n += snprintf(out + n, size - (size_t)n,
                      "| %s | %d | %.3f / %.3f | %.2f | %.1fx | %.2fx | %s |\n", rows[k].name,
                      rows[k].threads, (double)logical / 1e9 / rows[k].min,
                      (double)logical / 1e9 / rows[k].med, rows[k].min,
                      (double)logical / (double)rows[k].bytes, rows[k].min / rows[4].min,
                      speedup);
    }
    if (n > 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, "\n");
    return identical && same ? n : -1;
}
