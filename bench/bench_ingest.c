/* Ingestion benchmark: `qem save` of one synthetic acquisition (512 MiB of
 * counts) from each input family that holds it, side by side with reading
 * the same files (sha256sum), in one run: a .npy, a Merlin .mib (12-bit
 * counter, big-endian uint16 frames behind their headers) and a Dectris
 * Arina-style family (uint32 frames, bitshuffle/LZ4 per frame). The rate
 * that matters is a family's save rate beside the .npy's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "mib_build.h"
#include "synth.h"

typedef struct ingest_row {
    const char *name;
    char source[600];  /* what qem save opens */
    char files[1300];  /* every file of it, for sha256sum */
    uint64_t bytes;    /* of those files */
    double hash_min, hash_med, save_min, save_med;
} ingest_row;

typedef struct synth_fill {
    synth *g;
    uint64_t pixels;
} synth_fill;

static void fill_frame(void *user, uint64_t frame, void *values)
{
    const synth_fill *f = user;
    synth_frame(f->g, frame, values); /* uint16 counts, as a 12-bit Merlin stores them */
    (void)f->pixels;
}

/* The Merlin copy of the set: 12-bit counter (U16, big-endian), one
 * header per frame, written frame by frame. */
static int write_mib(const synth_params *set, const char *mib)
{
    synth_fill f = {synth_new(set), set->shape[2] * set->shape[3]};
    const mibb_options o = {.depth = 12,
                            .width = set->shape[3],
                            .height = set->shape[2],
                            .frames = set->shape[0] * set->shape[1],
                            .fill = fill_frame,
                            .user = &f,
                            .write_hdr = 1,
                            .frames_per_trigger = set->shape[1],
                            .frames_in_acquisition = set->shape[0] * set->shape[1]};
    const int rc = f.g ? mibb_write(mib, &o) : -1;
    synth_free(f.g);
    return rc == 0 ? 0 : (fprintf(stderr, "qem-bench: cannot write %s\n", mib), 1);
}

static double run_seconds(const char *cmd)
{
    const double t0 = now();
    if (system(cmd) != 0)
        return -1;
    return now() - t0;
}

static int time_row(const config *c, const char *dir, ingest_row *row)
{
    char cmd[1500], dest[600];
    double hash[MAX_RUNS], save[MAX_RUNS];
    snprintf(cmd, sizeof cmd, "sha256sum %s >/dev/null", row->files);
    snprintf(dest, sizeof dest, "%s/ingest.qem", dir);
    for (int r = 0; r < c->runs; r++) {
        if ((hash[r] = run_seconds(cmd)) < 0)
            return fprintf(stderr, "qem-bench: '%s' failed\n", cmd), 1;
        qem_error e = {0};
        qem_save_options so;
        qem_save_options_init(&so);
        so.threads = c->threads[1];
        unlink(dest);
        const double t0 = now();
        if (qem_save_file(row->source, dest, &so, &e) != QEM_OK)
            return die(row->name, &e);
        save[r] = now() - t0;
    }
    unlink(dest);
    summarise(hash, c->runs, &row->hash_min, &row->hash_med);
    summarise(save, c->runs, &row->save_min, &row->save_med);
    return 0;
}

int bench_ingest(const config *c, const char *dir, char *out, size_t size)
{
    static const synth_params set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 2.0, 20261201, 0.0};
    const uint64_t counts_bytes =
        set.shape[0] * set.shape[1] * set.shape[2] * set.shape[3] * 2;
    ingest_row rows[3] = {{.name = ".npy (<u2)"},
                          {.name = "Merlin .mib (12-bit, >u2)"},
                          {.name = "Arina (uint32, bitshuffle/LZ4)"}};
    char npy[600], mib[600], master[600], data[600], cmd[1500];
    snprintf(npy, sizeof npy, "%s/ingest.npy", dir);
    snprintf(mib, sizeof mib, "%s/ingest.mib", dir);
    snprintf(master, sizeof master, "%s/bench_master.h5", dir);
    snprintf(data, sizeof data, "%s/bench_data_000001.h5", dir);
    qem_error e = {0};
    if (synth_write_npy(&set, npy, &e) != QEM_OK)
        return die("synthetic set", &e), -1;
    if (write_mib(&set, mib))
        return -1;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py arina '%s' '%s' >/dev/null",
             QEM_BENCH_DIR, npy, dir);
    if (system(cmd) != 0)
        return fprintf(stderr, "qem-bench: '%s' failed\n", cmd), -1;
    snprintf(rows[0].source, sizeof rows[0].source, "%s", npy);
    snprintf(rows[0].files, sizeof rows[0].files, "'%s'", npy);
    snprintf(rows[1].source, sizeof rows[1].source, "%s", mib);
    char hdr[600];
    mibb_hdr_path(mib, hdr, sizeof hdr);
    snprintf(rows[1].files, sizeof rows[1].files, "'%s' '%s'", mib, hdr);
    snprintf(rows[2].source, sizeof rows[2].source, "%s", master);
    snprintf(rows[2].files, sizeof rows[2].files, "'%s' '%s'", master, data);
    rows[0].bytes = file_size(npy);
    rows[1].bytes = file_size(mib) + file_size(hdr);
    rows[2].bytes = file_size(master) + file_size(data);
    for (int k = 0; k < 3; k++)
        if (time_row(c, dir, &rows[k]))
            return -1;
    unlink(npy);
    unlink(mib);
    unlink(hdr);
    unlink(master);
    unlink(data);

    const double mb = (double)counts_bytes / 1e6;
    int n = snprintf(out, size,
                     "### Ingestion: qem save from each detector family (`--only ingest`)\n\n"
                     "One synthetic acquisition (128x128 scans x 128x128 pixels, dose %.0f, "
                     "%.0f MB of uint16 counts) stored as a .npy, a Merlin .mib and an "
                     "Arina-style master + data file; `qem save` to .qem on %d threads beside "
                     "`sha256sum` of the same files (page cache warm). Rates are MB/s of "
                     "counts; the last column is the family's save rate over the .npy's "
                     "(target: at least 0.8x).\n\n"
                     "| source | file bytes | sha256sum s (min / median) | save s (min / median) "
                     "| save MB/s | vs .npy |\n|---|---:|---:|---:|---:|---:|\n",
                     set.dose, mb, c->threads[1]);
    for (int k = 0; k < 3 && n >= 0 && (size_t)n < size; k++)
        n += snprintf(out + n, size - (size_t)n,
                      "| %s | %llu | %.3f / %.3f | %.3f / %.3f | %.0f | %.2fx |\n", rows[k].name,
                      (unsigned long long)rows[k].bytes, rows[k].hash_min, rows[k].hash_med,
                      rows[k].save_min, rows[k].save_med, mb / rows[k].save_min,
                      rows[0].save_min / rows[k].save_min);
    if (n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, "\n");
    return n;
}
