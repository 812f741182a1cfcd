/* One products handle serving 8 threads at once (each computing virtual
 * images, mean patterns, centres of mass and patterns) gives exactly what
 * one thread gives, for a .qem file and a pack. Built also under
 * ThreadSanitizer (make test-tsan). Library threads are set to 1 so that
 * only the callers' threads share the handle. */
#include <pthread.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS 6

typedef struct job {
    qem_products *p;
    const uint8_t *masks[2];
    qem_image want[5];
    int wrong, failed;
} job;

static int same(const qem_image *a, const qem_image *b)
{
    uint64_t n = a->shape[0] * a->shape[1] * (a->ndim == 3 ? a->shape[2] : 1);
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, sizeof a->shape) &&
           !memcmp(a->data, b->data, (size_t)(n * qem_dtype_size(a->dtype)));
}

/* The five products, in a fixed order. */
static int compute(qem_products *p, const uint8_t *const masks[2], qem_image out[5])
{
    qem_error e;
    return qem_products_virtual(p, masks[0], &out[0], &e) == QEM_OK &&
           qem_products_virtual(p, masks[1], &out[1], &e) == QEM_OK &&
           qem_products_mean(p, &out[2], &e) == QEM_OK &&
           qem_products_com(p, NULL, 1, &out[3], &e) == QEM_OK &&
           qem_products_frame(p, 5, &out[4], &e) == QEM_OK;
}

static void *worker(void *arg)
{
    job *j = arg;
    for (int r = 0; r < ROUNDS; r++) {
        qem_image got[5] = {{0}};
        if (!compute(j->p, j->masks, got))
            __atomic_add_fetch(&j->failed, 1, __ATOMIC_RELAXED);
        for (int k = 0; k < 5; k++) {
            if (got[k].data && !same(&got[k], &j->want[k]))
                __atomic_add_fetch(&j->wrong, 1, __ATOMIC_RELAXED);
            qem_image_free(&got[k]);
        }
    }
    return NULL;
}

static void check_file(const char *path)
{
    qem_error e = {0};
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = 1;
    qem_container *src = NULL;
    CHECK_OK(qem_container_open(path, &so, &src, &e), &e);
    qem_products_options po;
    qem_products_options_init(&po);
    po.threads = 1;
    qem_products *p = NULL;
    if (src)
        CHECK_OK(qem_products_open(src, &po, &p, &e), &e);
    if (!p) {
        qem_container_close(src);
        return;
    }
    qem_container_info info = {.struct_size = sizeof info};
    qem_container_get_info(src, &info, NULL);
    uint8_t *disk = calloc((size_t)info.pixels, 1), *ring = calloc((size_t)info.pixels, 1);
    qem_detector_request g;
    qem_detector_request_init(&g);
    g.center_row = (double)info.shape[2] / 2;
    g.center_column = (double)info.shape[3] / 2;
    g.radius = 9;
    CHECK_OK(qem_products_detector_mask(p, &g, 0, disk, (size_t)info.pixels, &e), &e);
    g.detector = QEM_DETECTOR_ADF;
    CHECK_OK(qem_products_detector_mask(p, &g, 0, ring, (size_t)info.pixels, &e), &e);
    job j = {p, {disk, ring}, {{0}}, 0, 0};
    CHECK(compute(p, j.masks, j.want));
    pthread_t t[THREADS];
    for (int k = 0; k < THREADS; k++)
        CHECK(pthread_create(&t[k], NULL, worker, &j) == 0);
    for (int k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    CHECK_EQ_U64(j.failed, 0);
    CHECK_EQ_U64(j.wrong, 0);
    fprintf(stderr, "%s: %d threads x %d rounds x 5 products, all identical to one thread\n",
            path, THREADS, ROUNDS);
    for (int k = 0; k < 5; k++)
        qem_image_free(&j.want[k]);
    free(disk);
    free(ring);
    qem_products_close(p);
    qem_container_close(src);
}

int main(void)
{
    const uint64_t shape[4] = {8, 16, 40, 36};
    char *npy = strdup(test_path("src.npy")), *qem = strdup(test_path("src.qem")),
         *pack = strdup(test_path("src.h5"));
    CHECK(write_count_sources(shape, 42, 9, 40, npy, qem, pack)); /* several chunks */
    check_file(qem);
    check_file(pack);
    free(npy);
    free(qem);
    free(pack);
    return test_finish("unit_concurrency");
}
