#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

qem_status qem_pread_full(int fd, void *buf, size_t size, uint64_t offset, qem_status short_status,
                          qem_error *error)
{
    unsigned char *p = buf;
    while (size > 0) {
        if (offset > (uint64_t)INT64_MAX)
            return qem_fail(error, short_status, "read beyond the end of the file");
        size_t want = size > (1u << 30) ? (1u << 30) : size;
        ssize_t got = pread(fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return qem_fail(error, QEM_E_IO, "read failed: %s", strerror(errno));
        }
        if (got == 0)
            return qem_fail(error, short_status, "file ends early; recopy the file");
        p += got;
        size -= (size_t)got;
        offset += (uint64_t)got;
    }
    return QEM_OK;
}

/* Writes all of `buf`, at `offset` or (offset < 0) at the file position. */
static qem_status write_all(int fd, const void *buf, size_t size, int64_t offset, qem_error *error)
{
    const unsigned char *p = buf;
    while (size > 0) {
        size_t want = size > (1u << 30) ? (1u << 30) : size;
        ssize_t put = offset < 0 ? write(fd, p, want) : pwrite(fd, p, want, (off_t)offset);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return qem_fail(error, QEM_E_IO, "write failed: %s", strerror(errno));
        }
        p += put;
        size -= (size_t)put;
        if (offset >= 0)
            offset += put;
    }
    return QEM_OK;
}

qem_status qem_write_full(int fd, const void *buf, size_t size, qem_error *error)
{
    return write_all(fd, buf, size, -1, error);
}

qem_status qem_pwrite_full(int fd, const void *buf, size_t size, uint64_t offset, qem_error *error)
{
    return write_all(fd, buf, size, (int64_t)offset, error);
}

char *qem_path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* A named temporary "<dir>/.qem-XXXXXX" opened exclusively. */
static qem_status open_named_temp(const char *dir, char **path_out, int *fd_out, qem_error *error)
{
    size_t n = strlen(dir) + sizeof "/.qem-XXXXXX";
    char *path = malloc(n);
    if (!path)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    snprintf(path, n, "%s/.qem-XXXXXX", dir);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        qem_status st = qem_fail(error, QEM_E_IO, "cannot create a temporary file in '%s': %s",
                                 dir, strerror(errno));
        free(path);
        return st;
    }
    *path_out = path;
    *fd_out = fd;
    return QEM_OK;
}

qem_status qem_scratch_open(const char *dir, int *fd_out, qem_error *error)
{
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
        *fd_out = fd;
        return QEM_OK;
    }
#endif
    char *path = NULL;
    int named = -1;
    QEM_TRY(open_named_temp(dir, &path, &named, error));
    unlink(path);
    free(path);
    *fd_out = named;
    return QEM_OK;
}

qem_status qem_copy_range(int src_fd, uint64_t src_offset, int dst_fd, uint64_t size,
                          qem_error *error)
{
    off_t in = (off_t)src_offset;
    while (size > 0) {
        size_t want = size > (1u << 30) ? (1u << 30) : (size_t)size;
        ssize_t done = copy_file_range(src_fd, &in, dst_fd, NULL, want, 0);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            break; /* unsupported here, or nothing copied: fall back */
        size -= (uint64_t)done;
    }
    if (size == 0)
        return QEM_OK;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = QEM_OK;
    while (size > 0 && st == QEM_OK) {
        size_t want = size > CHUNK ? CHUNK : (size_t)size;
        st = qem_pread_full(src_fd, buf, want, (uint64_t)in, QEM_E_IO, error);
        if (st == QEM_OK)
            st = qem_write_full(dst_fd, buf, want, error);
        in += (off_t)want;
        size -= want;
    }
    free(buf);
    return st;
}

/* The process umask, read without changing it (umask(2) would race with
 * other threads). */
static mode_t current_umask(void)
{
    mode_t mask = 022;
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return mask;
    char line[128];
    while (fgets(line, sizeof line, f)) {
        unsigned value;
        if (sscanf(line, "Umask: %o", &value) == 1) {
            mask = (mode_t)value;
            break;
        }
    }
    fclose(f);
    return mask;
}

qem_status qem_publish_begin(qem_publish *publish, const char *dest, qem_error *error)
{
    memset(publish, 0, sizeof *publish);
    publish->fd = -1;
    struct stat st;
    if (lstat(dest, &st) == 0)
        return qem_fail(error, QEM_E_EXISTS,
                        "'%s' already exists; qem never overwrites, choose another name", dest);
    publish->dest = strdup(dest);
    publish->dir = qem_path_dirname(dest);
    if (!publish->dest || !publish->dir) {
        qem_publish_abort(publish);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
#ifdef O_TMPFILE
    /* The kernel applies the umask to this mode, as for any new file. */
    publish->fd = open(publish->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
    if (publish->fd >= 0)
        return QEM_OK;
#endif
    qem_status s = open_named_temp(publish->dir, &publish->temp_path, &publish->fd, error);
    if (s != QEM_OK) {
        qem_publish_abort(publish);
        return s;
    }
    fchmod(publish->fd, 0666 & ~current_umask());
    return QEM_OK;
}

static void sync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

qem_status qem_publish_commit(qem_publish *publish, qem_error *error)
{
    if (publish->fd < 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "nothing to publish");
    if (fsync(publish->fd) != 0)
        return qem_fail(error, QEM_E_IO, "cannot flush '%s' to disk: %s", publish->dest,
                        strerror(errno));
    int rc;
    if (publish->temp_path) {
        rc = link(publish->temp_path, publish->dest);
    } else {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", publish->fd);
        rc = linkat(AT_FDCWD, proc, AT_FDCWD, publish->dest, AT_SYMLINK_FOLLOW);
    }
    if (rc != 0) {
        int e = errno;
        if (e == EEXIST)
            return qem_fail(error, QEM_E_EXISTS,
                            "'%s' appeared while writing; it was left untouched", publish->dest);
        return qem_fail(error, QEM_E_IO, "cannot publish '%s': %s", publish->dest, strerror(e));
    }
    if (publish->temp_path) {
        unlink(publish->temp_path);
        free(publish->temp_path);
        publish->temp_path = NULL;
    }
    close(publish->fd);
    publish->fd = -1;
    sync_dir(publish->dir);
    free(publish->dest);
    free(publish->dir);
    publish->dest = publish->dir = NULL;
    return QEM_OK;
}

void qem_publish_abort(qem_publish *publish)
{
    if (publish->fd >= 0)
        close(publish->fd);
    publish->fd = -1;
    if (publish->temp_path)
        unlink(publish->temp_path);
    free(publish->temp_path);
    free(publish->dest);
    free(publish->dir);
    publish->temp_path = publish->dest = publish->dir = NULL;
}
