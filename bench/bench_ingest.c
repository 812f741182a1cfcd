/* Ingestion benchmark (`--only ingest`): `qem save` from each input family
 * beside `qem save` of a .npy holding the same counts, in one run. Each
 * family's files are written here (the synthetic set, or the family's
 * test builder where the format fixes its own values), saved to .qem, and
 * exported once to the .npy it is compared with; `sha256sum` of the same
 * files shows what reading them costs. The rate that matters is a family's
 * save rate over its .npy's (issues 14 and 30: at least 0.8x). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "blo_build.h"
#include "csr_build.h"
#include "dm_build.h"
#include "k2frms_build.h"
#include "mib_build.h"
#include "mrc_build.h"
#include "synth.h"
#include "tia_build.h"
#include "tvseq_build.h"

/* Around 256 MiB of uint16 counts per family: 64 x 32 scans of 256 x 256. */
#define FRAME_SIDE 256
#define SCAN_ROWS 32
#define SCAN_COLUMNS 64

typedef struct ingest_row {
    const char *name;
    char source[600];       /* what qem save opens */
    char files[2400];       /* every file of it, quoted, for sha256sum and rm */
    uint64_t scan_shape[2]; /* for families that do not state it */
    uint64_t counts;        /* bytes of the exported .npy (its values) */
    double hash_min, save_min, save_med, npy_min, npy_med;
} ingest_row;

static const synth_params set = {{SCAN_ROWS, SCAN_COLUMNS, FRAME_SIDE, FRAME_SIDE},
                                 QEM_DTYPE_UINT16, 2.0, 20261201, 0.0};

static void add_file(ingest_row *row, const char *path)
{
    const size_t n = strlen(row->files);
    snprintf(row->files + n, sizeof row->files - n, "%s'%s'", n ? " " : "", path);
}

/* Every frame of the synthetic set, in memory (the builders that take
 * data want it whole; 256 MiB). */
static uint16_t *synth_all(void)
{
    const uint64_t frames = set.shape[0] * set.shape[1], pixels = set.shape[2] * set.shape[3];
    synth *g = synth_new(&set);
    uint16_t *all = g ? malloc((size_t)(frames * pixels) * 2) : NULL;
    for (uint64_t f = 0; all && f < frames; f++)
        synth_frame(g, f, all + f * pixels);
    synth_free(g);
    return all;
}

typedef struct synth_fill {
    synth *g;
} synth_fill;

static void fill_frame(void *user, uint64_t frame, void *values)
{
    const synth_fill *f = user;
    synth_frame(f->g, frame, values); /* uint16 counts, as a 12-bit Merlin stores them */
}

/* --- each family's files -------------------------------------------------------- */

static int write_npy(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest.npy", dir);
    add_file(row, row->source);
    qem_error e = {0};
    return synth_write_npy(&set, row->source, &e) == QEM_OK ? 0 : die("synthetic set", &e);
}

/* 12-bit counter (U16, big-endian), one header per frame. */
static int write_mib(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest.mib", dir);
    synth_fill f = {synth_new(&set)};
    const mibb_options o = {.depth = 12,
                            .width = set.shape[3],
                            .height = set.shape[2],
                            .frames = set.shape[0] * set.shape[1],
                            .fill = fill_frame,
                            .user = &f,
                            .write_hdr = 1,
                            .frames_per_trigger = set.shape[1],
                            .frames_in_acquisition = set.shape[0] * set.shape[1]};
    const int rc = f.g ? mibb_write(row->source, &o) : -1;
    synth_free(f.g);
    char hdr[600];
    mibb_hdr_path(row->source, hdr, sizeof hdr);
    add_file(row, row->source);
    add_file(row, hdr);
    return rc;
}

/* uint32 frames, one bitshuffle/LZ4 chunk each (h5py + hdf5plugin). */
static int write_arina(const char *dir, ingest_row *row)
{
    char npy[600], cmd[1500];
    snprintf(npy, sizeof npy, "%s/arina_source.npy", dir);
    qem_error e = {0};
    if (synth_write_npy(&set, npy, &e) != QEM_OK)
        return die("synthetic set", &e);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py arina '%s' '%s' >/dev/null",
             QEM_BENCH_DIR, npy, dir);
    const int rc = system(cmd);
    unlink(npy);
    snprintf(row->source, sizeof row->source, "%s/bench_master.h5", dir);
    add_file(row, row->source);
    char data[600];
    snprintf(data, sizeof data, "%s/bench_data_000001.h5", dir);
    add_file(row, data);
    return rc == 0 ? 0 : (fprintf(stderr, "qem-bench: '%s' failed\n", cmd), 1);
}

static int write_mrc(const char *dir, ingest_row *row)
{
    uint16_t *all = synth_all();
    snprintf(row->source, sizeof row->source, "%s/ingest.mrc", dir);
    const mrcb_options o = {.nx = FRAME_SIDE, .ny = FRAME_SIDE,
                            .nz = SCAN_ROWS * SCAN_COLUMNS, .mode = 6, .data = all};
    const int rc = all ? mrcb_write(row->source, &o) : -1;
    free(all);
    add_file(row, row->source);
    row->scan_shape[0] = SCAN_ROWS, row->scan_shape[1] = SCAN_COLUMNS;
    return rc;
}

/* 8-bit patterns, the only depth HyperSpy writes (values of the builder). */
static int write_blo(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest.blo", dir);
    const blob_options o = {.nx = SCAN_COLUMNS, .ny = SCAN_ROWS, .dp = FRAME_SIDE,
                            .sx = 1.0, .sy = 1.0};
    add_file(row, row->source);
    return blob_write(row->source, &o);
}

static int write_tvips(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest_000.tvips", dir);
    const tvipsb_options o = {.version = 2, .width = FRAME_SIDE, .height = FRAME_SIDE,
                              .bits = 16, .frames = SCAN_ROWS * SCAN_COLUMNS,
                              .frames_per_part = SCAN_ROWS * SCAN_COLUMNS / 2};
    const int rc = tvipsb_write(row->source, &o);
    char part[600];
    add_file(row, row->source);
    tvipsb_part_path(row->source, 1, part, sizeof part);
    add_file(row, part);
    row->scan_shape[0] = SCAN_ROWS, row->scan_shape[1] = SCAN_COLUMNS;
    return rc;
}

static int write_seq(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest.seq", dir);
    const seqb_options o = {.width = FRAME_SIDE, .height = FRAME_SIDE, .bits = 16,
                            .frames = SCAN_ROWS * SCAN_COLUMNS};
    add_file(row, row->source);
    row->scan_shape[0] = SCAN_ROWS, row->scan_shape[1] = SCAN_COLUMNS;
    return seqb_write(row->source, &o);
}

/* The detector's own 1860 x 2048 frames (24 of them, 183 MB of counts). */
static int write_k2is(const char *dir, ingest_row *row)
{
    const k2b_options o = {.first_id = 100, .frames = 24, .write_gtg = 1};
    for (unsigned s = 1; s <= K2B_SECTORS; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/ingest_%u.bin", dir, s);
        add_file(row, path);
    }
    char gtg[600];
    snprintf(gtg, sizeof gtg, "%s/ingest_.gtg", dir);
    add_file(row, gtg);
    snprintf(row->source, sizeof row->source, "%s/ingest_1.bin", dir);
    row->scan_shape[0] = 4, row->scan_shape[1] = 6;
    return k2b_write(dir, "ingest_", &o);
}

/* Folded 128 x 512 frames (256 x 256 unfolded) over four data files. */
static int write_frms6(const char *dir, ingest_row *row)
{
    const f6b_options o = {.width = 2 * FRAME_SIDE, .height = FRAME_SIDE / 2, .dark_frames = 4,
                           .frames = {512, 512, 512, 512}, .data_files = 4, .write_hdr = 1,
                           .scan_rows = SCAN_ROWS, .scan_columns = SCAN_COLUMNS,
                           .state_signal = 1};
    char path[600];
    snprintf(path, sizeof path, "%s/ingest.hdr", dir);
    add_file(row, path);
    for (unsigned k = 0; k <= 4; k++) {
        snprintf(path, sizeof path, "%s/ingest_%03u.frms6", dir, k);
        add_file(row, path);
    }
    snprintf(row->source, sizeof row->source, "%s/ingest_000.frms6", dir);
    return f6b_write(dir, "ingest", &o);
}

/* The synthetic counts as LiberTEM raw_csr (u4 row pointers and indices,
 * u2 values). */
static int write_csr(const char *dir, ingest_row *row)
{
    const uint64_t frames = set.shape[0] * set.shape[1], pixels = set.shape[2] * set.shape[3];
    uint16_t *all = synth_all();
    csrb_set s;
    int rc = all ? csrb_from_dense(&s, all, 'u', 2, frames, pixels, 0) : -1;
    free(all);
    snprintf(row->source, sizeof row->source, "%s/ingest.toml", dir);
    char nav[64], sig[64];
    snprintf(nav, sizeof nav, "[%d, %d]", SCAN_ROWS, SCAN_COLUMNS);
    snprintf(sig, sizeof sig, "[%d, %d]", FRAME_SIDE, FRAME_SIDE);
    const csrb_options o = {.indptr_file = "ingest_indptr.raw", .indices_file = "ingest_idx.raw",
                            .data_file = "ingest_values.raw", .indptr_dtype = "<u4",
                            .indices_dtype = "<u4", .data_dtype = "<u2", .nav_shape = nav,
                            .sig_shape = sig};
    if (rc == 0) {
        rc = csrb_write(row->source, &s, &o);
        csrb_free(&s);
    }
    add_file(row, row->source);
    static const char *const parts[] = {"ingest_indptr.raw", "ingest_idx.raw",
                                        "ingest_values.raw"};
    for (size_t k = 0; k < 3; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, parts[k]);
        add_file(row, path);
    }
    return rc;
}

/* A 4D STEMx-style DM4 (Data Order Swapped), `data_type` 10 (uint16) or 1
 * (int16: every value is proved to fit uint16 at open, one pass more). */
static int write_dm(const char *dir, ingest_row *row, int64_t data_type)
{
    uint16_t *all = synth_all(); /* counts below 32768: the same bits as int16 */
    snprintf(row->source, sizeof row->source, "%s/ingest%lld.dm4", dir, (long long)data_type);
    const dmb_options o = {.version = 4, .ndims = 4,
                           .dims = {FRAME_SIDE, FRAME_SIDE, SCAN_COLUMNS, SCAN_ROWS},
                           .data_type = data_type, .data = all, .order_swapped = 1};
    const int rc = all ? dmb_write(row->source, &o) : -1;
    free(all);
    add_file(row, row->source);
    return rc;
}

static int write_dm_u16(const char *dir, ingest_row *row)
{
    return write_dm(dir, row, 10);
}

static int write_dm_i16(const char *dir, ingest_row *row)
{
    return write_dm(dir, row, 1);
}

/* A TIA series of 2D uint16 elements with a 2D scan (the builder's values). */
static int write_tia(const char *dir, ingest_row *row)
{
    snprintf(row->source, sizeof row->source, "%s/ingest_1.ser", dir);
    const tiab_options o = {.data_type = 2, .size_x = FRAME_SIDE, .size_y = FRAME_SIDE,
                            .ndim = 2, .dims = {SCAN_COLUMNS, SCAN_ROWS}};
    add_file(row, row->source);
    row->scan_shape[0] = SCAN_ROWS, row->scan_shape[1] = SCAN_COLUMNS;
    return tiab_write(row->source, &o);
}

/* EMD 1.0 as py4DSTEM writes it (h5py), chunks of one scan row. */
static int write_emd(const char *dir, ingest_row *row)
{
    char npy[600], cmd[1500];
    snprintf(npy, sizeof npy, "%s/emd_source.npy", dir);
    qem_error e = {0};
    if (synth_write_npy(&set, npy, &e) != QEM_OK)
        return die("synthetic set", &e);
    snprintf(row->source, sizeof row->source, "%s/ingest.emd", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py emd '%s' '%s' >/dev/null",
             QEM_BENCH_DIR, npy, row->source);
    const int rc = system(cmd);
    unlink(npy);
    add_file(row, row->source);
    return rc == 0 ? 0 : (fprintf(stderr, "qem-bench: '%s' failed\n", cmd), 1);
}

typedef struct ingest_family {
    const char *name;
    int (*write)(const char *dir, ingest_row *row);
} ingest_family;

static const ingest_family families[] = {
    {".npy (<u2)", write_npy},
    {"Merlin .mib (12-bit, >u2)", write_mib},
    {"Arina (uint32, bitshuffle/LZ4)", write_arina},
    {"MRC (mode 6, uint16)", write_mrc},
    {"NanoMegas .blo (uint8)", write_blo},
    {"TVIPS (16-bit, two parts)", write_tvips},
    {"StreamPix .seq (16-bit)", write_seq},
    {"K2 IS (8 sectors, 12-bit packed)", write_k2is},
    {"FRMS6 (folded pnCCD, 4 files)", write_frms6},
    {"raw_csr (sparse, u4 indices)", write_csr},
    {"DM4 4D (uint16)", write_dm_u16},
    {"DM4 4D (int16, settled to uint16)", write_dm_i16},
    {"TIA .ser (uint16, 2D scan)", write_tia},
    {"EMD 1.0 (py4DSTEM layout, HDF5)", write_emd},
};
#define FAMILIES (sizeof families / sizeof families[0])

static int save_seconds(const char *source, const char *dest, const uint64_t scan_shape[2],
                        int threads, double *seconds)
{
    qem_error e = {0};
    qem_acquisition_options ao;
    qem_acquisition_options_init(&ao);
    ao.scan_shape[0] = scan_shape[0];
    ao.scan_shape[1] = scan_shape[1];
    qem_save_options so;
    qem_save_options_init(&so);
    so.threads = threads;
    so.input = &ao;
    unlink(dest);
    const double t0 = now();
    if (qem_save_file(source, dest, &so, &e) != QEM_OK)
        return die(source, &e);
    *seconds = now() - t0;
    return 0;
}

/* Saves the family and its exported .npy in turn, `runs` times each. */
static int time_row(const config *c, const char *dir, ingest_row *row)
{
    char cmd[3000], dest[600], npy[600];
    const uint64_t none[2] = {0, 0};
    double hash[MAX_RUNS], save[MAX_RUNS], base[MAX_RUNS];
    snprintf(dest, sizeof dest, "%s/ingest.qem", dir);
    snprintf(npy, sizeof npy, "%s/ingest_exported.npy", dir);
    for (int r = 0; r < c->runs; r++) {
        snprintf(cmd, sizeof cmd, "sha256sum %s >/dev/null", row->files);
        double t0 = now();
        if (system(cmd) != 0)
            return fprintf(stderr, "qem-bench: '%s' failed\n", cmd), 1;
        hash[r] = now() - t0;
        if (save_seconds(row->source, dest, row->scan_shape, c->threads[1], &save[r]))
            return 1;
        if (r == 0) {
            snprintf(cmd, sizeof cmd, "'%s' export --quiet '%s' '%s'", QEM_CLI, dest, npy);
            if (system(cmd) != 0)
                return fprintf(stderr, "qem-bench: '%s' failed\n", cmd), 1;
            row->counts = file_size(npy);
        }
        if (save_seconds(npy, dest, none, c->threads[1], &base[r]))
            return 1;
    }
    unlink(dest);
    unlink(npy);
    double unused;
    summarise(hash, c->runs, &row->hash_min, &unused);
    summarise(save, c->runs, &row->save_min, &row->save_med);
    summarise(base, c->runs, &row->npy_min, &row->npy_med);
    return 0;
}

int bench_ingest(const config *c, const char *dir, char *out, size_t size)
{
    ingest_row rows[FAMILIES];
    memset(rows, 0, sizeof rows);
    for (size_t k = 0; k < FAMILIES; k++) {
        rows[k].name = families[k].name;
        fprintf(stderr, "qem-bench: ingest: writing %s\n", rows[k].name);
        int rc = families[k].write(dir, &rows[k]);
        if (rc == 0)
            rc = time_row(c, dir, &rows[k]);
        char cmd[2500];
        snprintf(cmd, sizeof cmd, "rm -f %s", rows[k].files);
        if (system(cmd) != 0 || rc != 0)
            return fprintf(stderr, "qem-bench: ingest of %s failed\n", rows[k].name), -1;
    }
    int n = snprintf(out, size,
                     "### Ingestion: qem save from each detector family (`--only ingest`)\n\n"
                     "Each family's files hold one acquisition (the synthetic set, %llux%llu "
                     "scans x %llux%llu pixels, dose %.0f, where the format takes given "
                     "counts; its test builder's values where the format fixes its own: "
                     ".blo, TVIPS, .seq, K2 IS, FRMS6, TIA). `qem save` to .qem on %d threads, "
                     "then the .npy `qem export` gives of it saved the same way, in turn; "
                     "`sha256sum` of the family's files for scale (page cache warm). MB are "
                     "of the exported values (uint8 for .blo, uint16 otherwise); the last column is the family's save rate over "
                     "its .npy's (target: at least 0.8x).\n\n"
                     "| source | values MB | sha256sum s | save s (min / median) | .npy save s "
                     "(min / median) | save MB/s | vs .npy |\n"
                     "|---|---:|---:|---:|---:|---:|---:|\n",
                     (unsigned long long)set.shape[0], (unsigned long long)set.shape[1],
                     (unsigned long long)set.shape[2], (unsigned long long)set.shape[3],
                     set.dose, c->threads[1]);
    for (size_t k = 0; k < FAMILIES && n >= 0 && (size_t)n < size; k++) {
        const double mb = (double)rows[k].counts / 1e6;
        n += snprintf(out + n, size - (size_t)n,
                      "| %s | %.0f | %.3f | %.3f / %.3f | %.3f / %.3f | %.0f | %.2fx |\n",
                      rows[k].name, mb, rows[k].hash_min, rows[k].save_min, rows[k].save_med,
                      rows[k].npy_min, rows[k].npy_med, mb / rows[k].save_min,
                      rows[k].npy_min / rows[k].save_min);
    }
    if (n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, "\n");
    return n;
}
