/* Virtual-image benchmark: a bright-field disk (~5 % of the detector) and
 * an annular dark-field ring (~30 %) on the integer set, computed from the
 * .qem file, from the loaded pack resident, from the dense uint16 cube in
 * RAM with a tight C loop (the cube is built only here, as the baseline),
 * and with numpy on the same cube, in one run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "dense.h"
#include "synth.h"

typedef struct mask_case {
    const char *name;
    double lo, hi; /* radii from the detector centre, px */
    uint8_t *mask;
    uint64_t pixels;
} mask_case;

/* A products session on `threads` over the file at `path`, or NULL. */
static qem_products *open_products(const char *path, int threads, qem_container **src)
{
    qem_error e = {0};
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = threads;
    qem_products_options po;
    qem_products_options_init(&po);
    po.threads = threads;
    qem_products *p = NULL;
    *src = NULL;
    if (qem_container_open(path, &so, src, &e) != QEM_OK ||
        qem_products_open(*src, &po, &p, &e) != QEM_OK) {
        qem_container_close(*src);
        *src = NULL;
        die("open", &e);
        return NULL;
    }
    return p;
}

static int time_products(const config *c, const char *path, const mask_case *m, int threads,
                         uint64_t *check, double *best)
{
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *p = open_products(path, threads, &src);
    if (!p)
        return 1;
    double t[MAX_RUNS];
    int ok = 1;
    for (int r = 0; ok && r < c->runs + 1; r++) {
        qem_image im;
        const double t0 = now();
        ok = qem_products_virtual(p, m->mask, &im, &e) == QEM_OK;
        const double dt = now() - t0;
        if (r > 0)
            t[r - 1] = dt; /* the first run authenticates and warms */
        if (ok) {
            *check = 0;
            const uint64_t n = im.shape[0] * im.shape[1];
            for (uint64_t k = 0; k < n; k++)
                *check += im.dtype == QEM_DTYPE_UINT32 ? ((uint32_t *)im.data)[k]
                                                       : ((uint64_t *)im.data)[k];
        }
        qem_image_free(&im);
    }
    qem_products_close(p);
    qem_container_close(src);
    if (!ok)
        return die("virtual", &e);
    double med;
    summarise(t, c->runs, best, &med);
    return 0;
}

/* Mean pattern and centre of mass from one file, best of the runs. */
int bench_mean_com(const config *c, const char *path, int threads, double *mean_s, double *com_s)
{
    qem_error e = {0};
    qem_container *src = NULL;
    qem_products *p = open_products(path, threads, &src);
    if (!p)
        return 1;
    double tm[MAX_RUNS], tc[MAX_RUNS], med;
    /* The mean pattern's pass over every scan: qem_products_pixel_sums,
     * since qem_products_mean answers at once from the pixel sums a file
     * qem wrote records. */
    qem_container_info info = {.struct_size = sizeof info};
    int ok = qem_container_get_info(src, &info, &e) == QEM_OK;
    uint64_t *sums = ok ? malloc((size_t)info.pixels * sizeof *sums) : NULL;
    ok = ok && sums;
    for (int r = 0; ok && r < c->runs; r++) {
        qem_image im;
        double t0 = now();
        memset(sums, 0, (size_t)info.pixels * sizeof *sums);
        ok = qem_products_pixel_sums(p, 0, info.scans, sums, (size_t)info.pixels * sizeof *sums,
                                     &e) == QEM_OK;
        tm[r] = now() - t0;
        t0 = now();
        ok = ok && qem_products_com(p, NULL, 0, &im, &e) == QEM_OK;
        tc[r] = now() - t0;
        qem_image_free(&im);
    }
    free(sums);
    qem_products_close(p);
    qem_container_close(src);
    if (!ok)
        return die("mean/com", &e);
    summarise(tm, c->runs, mean_s, &med);
    summarise(tc, c->runs, com_s, &med);
    return 0;
}

/* HDF5 bitshuffle/LZ4 (one scan row per chunk): decode and sum, h5py. */
static int time_h5_virtual(const config *c, const char *npy, const char *h5, const char *mask,
                           double *best, uint64_t *check)
{
    char cmd[2000], out[512];
    if (access(h5, F_OK) != 0) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py write '%s' '%s'",
                 QEM_BENCH_DIR, npy, h5);
        if (system(cmd) != 0)
            return 1;
    }
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/h5_bitshuffle.py virtual '%s' '%s' %d",
             QEM_BENCH_DIR, h5, mask, c->runs);
    FILE *f = popen(cmd, "r");
    if (!f)
        return 1;
    size_t got = fread(out, 1, sizeof out - 1, f);
    out[got] = '\0';
    if (pclose(f) != 0)
        return 1;
    const char *t = strstr(out, "\"seconds\":"), *total = strstr(out, "\"total\":");
    if (!t || !total)
        return 1;
    *best = atof(t + 10);
    *check = strtoull(total + 8, NULL, 10);
    return 0;
}

/* numpy on the same cube: load it, then time the masked sum alone. */
static int time_numpy(const char *npy, const char *bf_mask, const char *adf_mask, int runs,
                      double best[2], uint64_t check[2])
{
    char script[4096];
    snprintf(script, sizeof script,
             "import numpy as np, time\n"
             "cube = np.load('%s')\n"
             "flat = cube.reshape(cube.shape[0] * cube.shape[1], -1)\n"
             "for path in ['%s', '%s']:\n"
             "    m = np.load(path).astype(bool).ravel()\n"
             "    idx = np.nonzero(m)[0]\n"
             "    best = 1e9\n"
             "    for r in range(%d):\n"
             "        t0 = time.perf_counter()\n"
             "        img = flat[:, idx].sum(axis=1, dtype=np.uint64)\n"
             "        best = min(best, time.perf_counter() - t0)\n"
             "    print(best, int(img.sum()))\n",
             npy, bf_mask, adf_mask, runs);
    char cmd[4700];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"%s\"", script);
    FILE *f = popen(cmd, "r");
    if (!f)
        return 1;
    int got = 0;
    for (int k = 0; k < 2; k++) {
        unsigned long long sum = 0;
        got += fscanf(f, "%lf %llu", &best[k], &sum) == 2;
        check[k] = sum;
    }
    return pclose(f) != 0 || got != 2;
}

static int save_mask(const char *path, const uint8_t *mask, uint64_t rows, uint64_t cols)
{
    qem_error e = {0};
    const uint64_t shape[2] = {rows, cols};
    qem_npy_writer *w = NULL;
    int ok = qem_npy_writer_create(path, QEM_DTYPE_UINT8, 2, shape, &w, &e) == QEM_OK &&
             qem_npy_writer_append(w, mask, rows * cols, &e) == QEM_OK &&
             qem_npy_writer_finish(w, &e) == QEM_OK;
    qem_npy_writer_free(w);
    return ok;
}

int bench_products(const config *c, const char *dir, char *out, size_t size)
{
    static const synth_params set = {{128, 128, 128, 128}, QEM_DTYPE_UINT16, 0.3, 20261129, 0.0};
    const uint64_t R = set.shape[2], C = set.shape[3], P = R * C;
    const uint64_t scans = set.shape[0] * set.shape[1];
    char npy[600], qemf[600], pack[600], bfm[600], adfm[600], h5[600];
    snprintf(h5, sizeof h5, "%s/virtual_bslz4.h5", dir);
    snprintf(npy, sizeof npy, "%s/virtual.npy", dir);
    snprintf(qemf, sizeof qemf, "%s/virtual.qem", dir);
    snprintf(pack, sizeof pack, "%s/virtual.h5", dir);
    snprintf(bfm, sizeof bfm, "%s/bf_mask.npy", dir);
    snprintf(adfm, sizeof adfm, "%s/adf_mask.npy", dir);
    qem_error e = {0};
    fprintf(stderr, "virtual images: writing the integer set as .npy, .qem and a pack ...\n");
    if (synth_write_npy(&set, npy, &e) != QEM_OK || qem_save_file(npy, qemf, NULL, &e) != QEM_OK)
        return die("virtual-image sources", &e), -1;
    qem_pack_inspection *in = NULL;
    if (qem_pack_inspect(npy, NULL, &in, &e) != QEM_OK ||
        qem_pack_produce(in, NULL, pack, NULL, &e) != QEM_OK) {
        qem_pack_inspection_free(in);
        return die("pack produce", &e), -1;
    }
    qem_pack_inspection_free(in);
    /* BF: ~5 % of the pixels; ADF: a ring of ~30 % just outside it. */
    const double r_bf = sqrt(0.05 * (double)P / M_PI);
    const double r_out = sqrt(0.30 * (double)P / M_PI + r_bf * r_bf);
    mask_case masks[2] = {{"BF disk", 0, r_bf, NULL, 0}, {"ADF annulus", r_bf, r_out, NULL, 0}};
    uint32_t *idx[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        masks[k].mask = calloc((size_t)P, 1);
        idx[k] = malloc((size_t)P * sizeof *idx[k]);
        for (uint64_t px = 0; px < P; px++) {
            const double dr = (double)(px / C) - (double)R / 2, dc = (double)(px % C) - (double)C / 2;
            const double d2 = dr * dr + dc * dc;
            if (d2 >= masks[k].lo * masks[k].lo && d2 <= masks[k].hi * masks[k].hi) {
                masks[k].mask[px] = 1;
                idx[k][masks[k].pixels++] = (uint32_t)px;
            }
        }
    }
    if (!save_mask(bfm, masks[0].mask, R, C) || !save_mask(adfm, masks[1].mask, R, C))
        return -1;
    /* The dense baseline: the whole cube in RAM. */
    uint16_t *cube = malloc((size_t)(scans * P) * 2);
    uint64_t *img = malloc((size_t)scans * sizeof *img);
    qem_npy *n = NULL;
    if (!cube || !img || qem_npy_open(npy, &n, &e) != QEM_OK ||
        qem_npy_read(n, 0, scans * P, cube, (size_t)(scans * P) * sizeof *cube, &e) != QEM_OK)
        return die("dense cube", &e), -1;
    qem_npy_close(n);
    double t_qem[2][2], t_pack[2][2], t_dense[2][2], t_np[2];
    uint64_t sum_qem = 0, sum_pack = 0, sum_dense[2] = {0, 0}, sum_np[2];
    int mismatch = 0;
    for (int k = 0; k < 2; k++) {
        for (int th = 0; th < 2; th++) {
            double t[MAX_RUNS], med;
            for (int r = 0; r < c->runs; r++) {
                const double t0 = now();
                bench_dense_virtual(cube, scans, P, idx[k], masks[k].pixels, img, c->threads[th]);
                t[r] = now() - t0;
            }
            summarise(t, c->runs, &t_dense[k][th], &med);
            sum_dense[k] = 0;
            for (uint64_t s = 0; s < scans; s++)
                sum_dense[k] += img[s];
            fprintf(stderr, "  %s: .qem, pack on %d thread(s) ...\n", masks[k].name, c->threads[th]);
            if (time_products(c, qemf, &masks[k], c->threads[th], &sum_qem, &t_qem[k][th]) ||
                time_products(c, pack, &masks[k], c->threads[th], &sum_pack, &t_pack[k][th]))
                return -1;
            mismatch += sum_qem != sum_dense[k] || sum_pack != sum_dense[k];
        }
    }
    free(cube);
    free(img);
    const int have_numpy = time_numpy(npy, bfm, adfm, c->runs, t_np, sum_np) == 0;
    /* The HDF5 file users have today: decode every chunk and sum. */
    double t_h5[2] = {NAN, NAN};
    uint64_t sum_h5[2] = {0, 0};
    const int have_h5 = time_h5_virtual(c, npy, h5, bfm, &t_h5[0], &sum_h5[0]) == 0 &&
                        time_h5_virtual(c, npy, h5, adfm, &t_h5[1], &sum_h5[1]) == 0;
    for (int k = 0; have_h5 && k < 2; k++)
        mismatch += sum_h5[k] != sum_dense[k];
    /* Mean pattern and centre of mass, from each file, 1 and 2 threads. */
    double t_mean[2][2], t_com[2][2];
    const char *files[2] = {qemf, pack};
    for (int f = 0; f < 2; f++)
        for (int th = 0; th < 2; th++)
            if (bench_mean_com(c, files[f], c->threads[th], &t_mean[f][th], &t_com[f][th]))
                return -1;
    unlink(h5);
    for (int k = 0; have_numpy && k < 2; k++)
        mismatch += sum_np[k] != sum_dense[k];
    unlink(npy);
    unlink(qemf);
    unlink(pack);
    char receipt[700];
    snprintf(receipt, sizeof receipt, "%s.receipt.json", pack);
    unlink(receipt);
    unlink(bfm);
    unlink(adfm);
    int len = snprintf(
        out, size,
        "### Virtual images: .qem, pack resident, dense cube in RAM, numpy\n\n"
        "The integer set (128x128 scans x 128x128 uint16, dose 0.3); BF disk radius %.1f px "
        "(%llu pixels, %.1f %%), ADF annulus [%.1f, %.1f] px (%llu pixels, %.1f %%), centred on "
        "the detector. Times are the best of %d runs after one warm-up, for the whole 16384-scan "
        "image, excluding opening (the pack's load) and writing. Dense: the uint16 cube (512 "
        "MiB) in RAM, a loop over the mask's pixel list per scan; numpy: "
        "`flat[:, idx].sum(axis=1, dtype=uint64)` on the same cube, one thread. Every image "
        "sums to the same total%s.\n\n"
        "| source | BF 1 thread, ms | BF 2 threads, ms | ADF 1 thread, ms | ADF 2 threads, ms |\n"
        "|---|---|---|---|---|\n"
        "| .qem (selected streams + spatial tiles) | %.1f | %.1f | %.1f | %.1f |\n"
        "| pack resident (selected pixels' tiles) | %.1f | %.1f | %.1f | %.1f |\n"
        "| dense uint16 cube, C loop | %.1f | %.1f | %.1f | %.1f |\n",
        r_bf, (unsigned long long)masks[0].pixels, 100.0 * (double)masks[0].pixels / (double)P,
        r_bf, r_out, (unsigned long long)masks[1].pixels,
        100.0 * (double)masks[1].pixels / (double)P, c->runs,
        mismatch ? " (MISMATCH: see stderr)" : "", t_qem[0][0] * 1e3, t_qem[0][1] * 1e3,
        t_qem[1][0] * 1e3, t_qem[1][1] * 1e3, t_pack[0][0] * 1e3, t_pack[0][1] * 1e3,
        t_pack[1][0] * 1e3, t_pack[1][1] * 1e3, t_dense[0][0] * 1e3, t_dense[0][1] * 1e3,
        t_dense[1][0] * 1e3, t_dense[1][1] * 1e3);
    if (have_h5)
        len += snprintf(out + len, size - (size_t)len,
                        "| HDF5 bitshuffle/LZ4, row chunks (h5py decode + numpy sum) | %.1f | | %.1f | |\n",
                        t_h5[0] * 1e3, t_h5[1] * 1e3);
    if (have_numpy)
        len += snprintf(out + len, size - (size_t)len, "| numpy on the dense cube | %.1f | | %.1f | |\n",
                        t_np[0] * 1e3, t_np[1] * 1e3);
    len += snprintf(out + len, size - (size_t)len,
                    "| .qem / dense (2 threads) | %.2fx | | %.2fx | |\n"
                    "| pack / dense (2 threads) | %.2fx | | %.2fx | |\n\n",
                    t_qem[0][1] / t_dense[0][1], t_qem[1][1] / t_dense[1][1],
                    t_pack[0][1] / t_dense[0][1], t_pack[1][1] / t_dense[1][1]);
    len += snprintf(out + len, size - (size_t)len,
                    "Mean diffraction pattern (each pixel's sum over every scan, computed) and "
                    "centre of mass (whole scan, best of %d):\n\n"
                    "| source | mean 1 thread, ms | mean 2 threads, ms | CoM 1 thread, ms | CoM 2 "
                    "threads, ms |\n"
                    "|---|---|---|---|---|\n"
                    "| .qem | %.1f | %.1f | %.1f | %.1f |\n"
                    "| pack resident | %.1f | %.1f | %.1f | %.1f |\n\n",
                    c->runs, t_mean[0][0] * 1e3, t_mean[0][1] * 1e3, t_com[0][0] * 1e3,
                    t_com[0][1] * 1e3, t_mean[1][0] * 1e3, t_mean[1][1] * 1e3, t_com[1][0] * 1e3,
                    t_com[1][1] * 1e3);
    for (int k = 0; k < 2; k++)
        free(masks[k].mask), free(idx[k]);
    if (mismatch)
        fprintf(stderr, "qem-bench: virtual images disagree between sources\n");
    return mismatch ? -1 : len;
}
