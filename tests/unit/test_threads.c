/* Thread counts: every options struct refuses a count outside 0 to
 * QEM_MAX_THREADS before any work (100000 crashed GNU OpenMP), and a child
 * forked after the parent decoded on several threads reads, computes
 * products and saves (on one thread) instead of hanging in the OpenMP
 * runtime, as a Python multiprocessing worker does. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "qem/qem_internal.h" /* qem_file_export_npy */

static const int bad_counts[] = {-1, -5, QEM_MAX_THREADS + 1, 100000};
#define BAD_COUNTS (sizeof bad_counts / sizeof bad_counts[0])

static void check_refused(qem_status st, const qem_error *e, const char *field)
{
    CHECK_STATUS(st, QEM_E_INVALID_ARGUMENT, e);
    CHECK(strstr(e->message, field) != NULL);
    CHECK(strstr(e->message, "1024") != NULL);
}

static void thread_limits(const char *npy, const char *qem, const char *pack)
{
    for (size_t k = 0; k < BAD_COUNTS; k++) {
        const int t = bad_counts[k];
        qem_error e = {0};
        qem_open_options oo;
        qem_open_options_init(&oo);
        oo.threads = t;
        qem_file *f = NULL;
        check_refused(qem_open(qem, &oo, &f, &e), &e, "qem_open_options.threads");
        CHECK(f == NULL);

        qem_save_options so;
        qem_save_options_init(&so);
        so.threads = t;
        check_refused(qem_save_file(npy, test_path("refused.qem"), &so, &e), &e,
                      "qem_save_options.threads");
        CHECK(!file_exists(test_path("refused.qem")));

        qem_container_options co;
        qem_container_options_init(&co);
        co.threads = t;
        qem_container *c = NULL;
        check_refused(qem_container_open(qem, &co, &c, &e), &e, "qem_container_options.threads");
        CHECK(c == NULL);

        CHECK_OK(qem_open(qem, NULL, &f, &e), &e);
        if (f) {
            qem_verify_options vo;
            qem_verify_options_init(&vo);
            vo.threads = t;
            qem_verify_report report = {.struct_size = sizeof report};
            check_refused(qem_verify(f, &vo, &report, &e), &e, "qem_verify_options.threads");
            qem_export_options xo;
            qem_export_options_init(&xo);
            xo.threads = t;
            check_refused(qem_file_export_npy(f, test_path("refused.npy"), &xo, &e), &e,
                          "qem_export_options.threads");
            CHECK(!file_exists(test_path("refused.npy")));
            qem_close(f);
        }

        CHECK_OK(qem_container_open(qem, NULL, &c, &e), &e);
        if (c) {
            qem_products_options po;
            qem_products_options_init(&po);
            po.threads = t;
            qem_products *p = NULL;
            check_refused(qem_products_open(c, &po, &p, &e), &e, "qem_products_options.threads");
            CHECK(p == NULL);
            qem_container_close(c);
        }

        qem_pack *pk = NULL;
        CHECK_OK(qem_pack_open(pack, NULL, &pk, &e), &e);
        if (pk) {
            qem_pack_options lo;
            qem_pack_options_init(&lo);
            lo.threads = t;
            check_refused(qem_pack_load(pk, &lo, &e), &e, "qem_pack_options.threads");
            qem_pack_close(pk);
        }
    }
    /* The limit itself is accepted and reads exactly. */
    qem_error e = {0};
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.threads = QEM_MAX_THREADS;
    qem_file *f = NULL;
    CHECK_OK(qem_open(qem, &oo, &f, &e), &e);
    if (f) {
        qem_file_info info = {.struct_size = sizeof info};
        CHECK_OK(qem_get_info(f, &info, &e), &e);
        qem_close(f);
    }
}

/* Reads the whole file on `threads` threads and compares it with `want`;
 * computes the mean pattern; loads the pack. 0 when all went right. */
static int read_everything(const char *qem, const char *pack, const uint16_t *want, size_t bytes,
                           int threads)
{
    int bad = 0;
    qem_error e = {0};
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.threads = threads;
    qem_file *f = NULL;
    if (qem_open(qem, &oo, &f, &e) != QEM_OK)
        return fprintf(stderr, "open: %s\n", e.message), 1;
    uint16_t *got = malloc(bytes);
    bad |= !got;
    if (got) {
        uint64_t scans = bytes / qem_read_scans_bound(f, 1);
        if (qem_read_scans(f, 0, scans, got, bytes, &e) != QEM_OK)
            bad |= fprintf(stderr, "read: %s\n", e.message) > 0;
        else
            bad |= memcmp(got, want, bytes) != 0;
    }
    free(got);
    qem_close(f);

    qem_container_options co;
    qem_container_options_init(&co);
    co.threads = threads;
    qem_container *c = NULL;
    qem_products *p = NULL;
    qem_image mean = {0};
    bad |= qem_container_open(pack, &co, &c, &e) != QEM_OK;
    bad |= !c || qem_products_open(c, NULL, &p, &e) != QEM_OK;
    bad |= !p || qem_products_mean(p, &mean, &e) != QEM_OK;
    if (bad)
        fprintf(stderr, "pack products: %s\n", e.message);
    qem_image_free(&mean);
    qem_products_close(p);
    qem_container_close(c);
    return bad;
}

static void fork_after_threads(const char *npy, const char *qem, const char *pack)
{
    qem_error e = {0};
    qem_npy *n = NULL;
    CHECK_OK(qem_npy_open(npy, &n, &e), &e);
    if (!n)
        return;
    qem_npy_info ni = {.struct_size = sizeof ni};
    CHECK_OK(qem_npy_get_info(n, &ni, &e), &e);
    const size_t bytes = npy_read_size(n, ni.elements);
    uint16_t *want = malloc(bytes);
    CHECK_OK(qem_npy_read(n, 0, ni.elements, want, bytes, &e), &e);
    qem_npy_close(n);

    /* The parent runs teams of two threads first: GNU OpenMP keeps their
     * pool, which a forked child does not have. */
    CHECK(read_everything(qem, pack, want, bytes, 2) == 0);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(60); /* a hang ends as SIGALRM, reported below */
        int bad = read_everything(qem, pack, want, bytes, 2);
        bad |= read_everything(qem, pack, want, bytes, 0);
        qem_save_options so;
        qem_save_options_init(&so);
        so.threads = 2;
        so.chunk_scans = 16;
        bad |= qem_save_file(npy, test_path("child.qem"), &so, &e) != QEM_OK;
        _exit(bad ? 1 : 0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (WIFSIGNALED(status))
        fprintf(stderr, "the forked child died of signal %d (SIGALRM: it hung)\n", WTERMSIG(status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(file_exists(test_path("child.qem")));
    /* The parent keeps its threads. */
    CHECK(read_everything(qem, pack, want, bytes, 2) == 0);
    free(want);
}

int main(void)
{
    const uint64_t shape[4] = {8, 16, 24, 20};
    /* test_path's buffers rotate: keep copies. */
    char *npy = strdup(test_path("src.npy")), *qem = strdup(test_path("src.qem")),
         *pack = strdup(test_path("src.h5"));
    /* Several chunks, decoded side by side. */
    CHECK(write_count_sources(shape, 7, 13, 16, npy, qem, pack));

    thread_limits(npy, qem, pack);
    fork_after_threads(npy, qem, pack);
    free(npy);
    free(qem);
    free(pack);
    return test_finish("unit_threads");
}
