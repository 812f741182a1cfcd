/* The formats users would otherwise pick, measured beside .qem on the same
 * synthetic set in the same run: packs (both profiles, where admissible),
 * HDF5 bitshuffle/LZ4 with one scan row per chunk (h5py + hdf5plugin from
 * Debian, bench/h5_bitshuffle.py) and zstd -3 of the raw .npy bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
                  format_row *rows, int max_rows)
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
        snprintf(r->note, sizeof r->note, "produce is single-threaded; decode = load + read");
        unlink(path);
    }
    /* HDF5 bitshuffle/LZ4, one scan row per chunk. */
    if (n < max_rows) {
        format_row *r = &rows[n++];
        row_init(r, "HDF5 bitshuffle/LZ4");
        snprintf(path, sizeof path, "%s/set_bslz4.h5", dir);
        double t[MAX_RUNS];
        int ok = 1;
        for (int run = 0; ok && run < c->runs; run++) {
            unlink(path);
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py write '%s' '%s'",
                     QEM_BENCH_DIR, npy, path);
            ok = timed_command(cmd, out, sizeof out) >= 0;
            t[run] = json_seconds(out);
        }
        if (ok) {
            summarise(t, c->runs, &r->enc_min[0], &r->enc_med[0]);
            r->bytes = file_size(path);
            for (int k = 0; ok && k < 2; k++) {
                snprintf(cmd, sizeof cmd,
                         "/usr/bin/python3 %s/h5_bitshuffle.py decode '%s' %d %d", QEM_BENCH_DIR,
                         path, c->runs, c->threads[k]);
                ok = timed_command(cmd, out, sizeof out) >= 0;
                r->dec_min[k] = r->dec_med[k] = json_seconds(out);
            }
            snprintf(r->note, sizeof r->note,
                     "h5py + hdf5plugin, chunk = one scan row; 2 threads = rows split over 2 "
                     "processes; decode min only");
        }
        if (!ok)
            snprintf(r->note, sizeof r->note, "not measured: h5py/hdf5plugin unavailable");
        /* Kept for the virtual-image comparison of the integer set. */
        snprintf(r->path, sizeof r->path, "%s", ok ? path : "");
    }
    /* zstd -3 of the raw bytes. */
    if (n < max_rows) {
        format_row *r = &rows[n++];
        row_init(r, "zstd -3 (raw bytes)");
        snprintf(path, sizeof path, "%s/set.zst", dir);
        double t[MAX_RUNS], d[MAX_RUNS];
        int ok = 1;
        for (int run = 0; ok && run < c->runs; run++) {
            unlink(path);
            snprintf(cmd, sizeof cmd, "zstd -3 -T1 -q -f '%s' -o '%s'", npy, path);
            ok = (t[run] = timed_command(cmd, NULL, 0)) >= 0;
            snprintf(cmd, sizeof cmd, "zstd -d -q -c '%s' > /dev/null", path);
            ok = ok && (d[run] = timed_command(cmd, NULL, 0)) >= 0;
        }
        if (ok) {
            summarise(t, c->runs, &r->enc_min[0], &r->enc_med[0]);
            summarise(d, c->runs, &r->dec_min[0], &r->dec_med[0]);
            r->bytes = file_size(path);
            snprintf(r->note, sizeof r->note, "zstd command, one thread");
        } else {
            snprintf(r->note, sizeof r->note, "not measured: zstd unavailable");
        }
        unlink(path);
    }
    return n;
}
