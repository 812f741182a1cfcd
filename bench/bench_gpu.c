/* qem-bench-gpu FILE.h5...: a pack's products on the CPU (every core)
 * beside the same products on an NVIDIA GPU (qem_products_options.device
 * = QEM_DEVICE_CUDA), in one run: the load (page cache as found; the
 * caller says how warm), the copy of the resident to the device, the
 * virtual images of a disk and an annulus, a pattern sum over the scans
 * and CoM (median of 5 after
 * one untimed call each), with each GPU result compared to the CPU's.
 * Prints a markdown table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qem.h"

#define RUNS 5

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef enum { DO_BF, DO_ADF, DO_MEAN, DO_COM, DO_COUNT } product;
static const char *names[DO_COUNT] = {"virtual image, disk (r = side/6)",
                                      "virtual image, annulus (side/6 to side/3)",
                                      "pattern sum over all scans but the last row",
                                      "CoM over the disk"};

typedef struct masks {
    const uint8_t *bf, *adf;
    uint64_t scan_rows, scan_cols;
} masks;

static qem_status run(qem_products *p, product what, const masks *m, qem_image *out, qem_error *e)
{
    switch (what) {
    case DO_BF:
        return qem_products_virtual(p, m->bf, out, e);
    case DO_ADF:
        return qem_products_virtual(p, m->adf, out, e);
    case DO_MEAN:
        /* Not every scan: the file's recorded pixel sums answer that. */
        return qem_products_region(p, 0, m->scan_rows - 1, 0, m->scan_cols, QEM_REDUCE_SUM, out,
                                   e);
    default:
        return qem_products_com(p, m->bf, 0, out, e);
    }
}

static size_t image_bytes(const qem_image *m)
{
    size_t n = qem_dtype_size(m->dtype) * m->shape[0] * m->shape[1];
    return m->ndim == 3 ? n * m->shape[2] : n;
}

static double timed(qem_products *p, product what, const masks *m, qem_image *keep,
                    qem_error *e)
{
    double t[RUNS];
    if (run(p, what, m, keep, e) != QEM_OK)
        return -1;
    for (int r = 0; r < RUNS; r++) {
        qem_image img;
        const double t0 = now_ms();
        if (run(p, what, m, &img, e) != QEM_OK)
            return -1;
        t[r] = now_ms() - t0;
        qem_image_free(&img);
    }
    qsort(t, RUNS, sizeof *t, by_value);
    return t[RUNS / 2];
}

static int bench(const char *path)
{
    qem_error e = {0};
    qem_container_options co;
    qem_container_options_init(&co);
    double t0 = now_ms();
    qem_container *c = NULL;
    if (qem_container_open(path, &co, &c, &e) != QEM_OK) {
        fprintf(stderr, "%s: %s\n", path, e.message);
        return 0;
    }
    const double load = now_ms() - t0;
    qem_products_options po;
    qem_products_options_init(&po);
    qem_products *cpu = NULL, *gpu = NULL;
    if (qem_products_open(c, &po, &cpu, &e) != QEM_OK) {
        fprintf(stderr, "%s: %s\n", path, e.message);
        qem_container_close(c);
        return 0;
    }
    po.device = QEM_DEVICE_CUDA;
    t0 = now_ms();
    if (qem_products_open(c, &po, &gpu, &e) != QEM_OK) {
        fprintf(stderr, "%s: cuda: %s\n", path, e.message);
        qem_products_close(cpu);
        qem_container_close(c);
        return 0;
    }
    const double upload = now_ms() - t0;
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(c, &info, &e);
    uint8_t *bf = malloc((size_t)info.pixels), *adf = malloc((size_t)info.pixels);
    /* Annuli about the file's centre whose images the file cannot record
     * (its prepared BF/ADF are about its calibrated radius): computed. */
    const double side = (double)(info.shape[2] < info.shape[3] ? info.shape[2] : info.shape[3]);
    qem_detector_request rq;
    qem_detector_request_init(&rq);
    rq.detector = QEM_DETECTOR_ANNULUS;
    rq.inner = 0;
    rq.outer = side / 6 + 0.25;
    int ok = bf && adf &&
             qem_products_resolve_detector(cpu, &rq, bf, (size_t)info.pixels, NULL, &e) == QEM_OK;
    rq.inner = side / 6 + 0.25;
    rq.outer = side / 3 + 0.25;
    ok = ok && qem_products_resolve_detector(cpu, &rq, adf, (size_t)info.pixels, NULL, &e) ==
                   QEM_OK;
    printf("\n%s: %llu x %llu scans of %llu x %llu; load %.0f ms (CPU), resident to the GPU "
           "%.0f ms\n\n",
           path, (unsigned long long)info.shape[0], (unsigned long long)info.shape[1],
           (unsigned long long)info.shape[2], (unsigned long long)info.shape[3], load, upload);
    printf("| product | CPU, ms | GPU, ms | CPU / GPU | results |\n|---|---|---|---|---|\n");
    const masks m = {bf, adf, info.shape[0], info.shape[1]};
    for (int w = 0; ok && w < DO_COUNT; w++) {
        qem_image a, b;
        const double tc = timed(cpu, (product)w, &m, &a, &e);
        const double tg = timed(gpu, (product)w, &m, &b, &e);
        if (tc < 0 || tg < 0) {
            fprintf(stderr, "%s: %s: %s\n", path, names[w], e.message);
            ok = 0;
            break;
        }
        const int same = image_bytes(&a) == image_bytes(&b) &&
                         !memcmp(a.data, b.data, image_bytes(&a));
        printf("| %s | %.2f | %.2f | %.1fx | %s |\n", names[w], tc, tg, tc / tg,
               same ? "equal" : "DIFFER");
        ok = ok && same;
        qem_image_free(&a);
        qem_image_free(&b);
    }
    free(bf);
    free(adf);
    qem_products_close(gpu);
    qem_products_close(cpu);
    qem_container_close(c);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: qem-bench-gpu PACK.h5...\n");
        return 2;
    }
    char name[256];
    qem_error e = {0};
    if (qem_device_probe(QEM_DEVICE_CUDA, name, sizeof name, &e) != QEM_OK) {
        fprintf(stderr, "qem-bench-gpu: %s\n", e.message);
        return 1;
    }
    printf("qem-bench-gpu: GPU %s; medians of %d after one untimed call each\n", name, RUNS);
    int ok = 1;
    for (int i = 1; i < argc; i++)
        ok &= bench(argv[i]);
    return ok ? 0 : 1;
}
