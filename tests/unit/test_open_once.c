/* qem_container_open opens its path once: the signature is identified
 * through the descriptor the format then reads, so a file swapped between
 * the two cannot be read as the other (it opened and stat'ed the path up
 * to twice before, once to identify and once to read). This test defines
 * open() itself, which the statically linked library then calls, and
 * counts the opens of each path. */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_util.h"

static const char *watched;
static int watched_opens;

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (watched && strcmp(path, watched) == 0)
        watched_opens++;
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static int opens_of(const char *path, int (*call)(const char *))
{
    watched = path;
    watched_opens = 0;
    const int ok = call(path);
    watched = NULL;
    CHECK(ok);
    return watched_opens;
}

static int open_container(const char *path)
{
    qem_error e = {0};
    qem_container *c = NULL;
    const qem_status st = qem_container_open(path, NULL, &c, &e);
    if (st != QEM_OK)
        fprintf(stderr, "%s: %s\n", path, e.message);
    qem_container_close(c);
    return st == QEM_OK;
}

static int identify(const char *path)
{
    qem_file_kind kind;
    return qem_identify(path, &kind, NULL) == QEM_OK;
}

int main(void)
{
    const uint64_t shape[4] = {4, 6, 10, 12};
    char *npy = strdup(test_path("src.npy")), *qem = strdup(test_path("src.qem")),
         *pack = strdup(test_path("src.h5"));
    CHECK(write_count_sources(shape, 3, 7, 8, npy, qem, pack));
    /* The interposed open() is the one the library calls. */
    CHECK_EQ_U64(opens_of(qem, identify), 1);
    CHECK_EQ_U64(opens_of(qem, open_container), 1);
    CHECK_EQ_U64(opens_of(pack, open_container), 1);
    fprintf(stderr, "qem_container_open: one open of the path for a .qem file and a pack\n");
    free(npy);
    free(qem);
    free(pack);
    return test_finish("unit_open_once");
}
