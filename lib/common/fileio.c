#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

static const char *file_type_name(mode_t mode)
{
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a plain file";
}

static qem_status not_regular(const char *path, mode_t mode, qem_error *error)
{
    return qem_fail(error, QEM_E_IO, "'%s' is not a regular file (it is %s)", path,
                    file_type_name(mode));
}

qem_status qem_open_input(const char *path, int *fd_out, struct stat *sb, qem_error *error)
{
    *fd_out = -1;
    struct stat before;
    if (stat(path, &before) != 0)
        return qem_fail(error, QEM_E_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(before.st_mode))
        return not_regular(path, before.st_mode, error);
    /* O_NONBLOCK: should the name have become a FIFO since the stat, the
     * open still returns at once and the fstat below refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return qem_fail(error, QEM_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat now;
    if (fstat(fd, &now) != 0 || !S_ISREG(now.st_mode)) {
        const mode_t mode = now.st_mode;
        close(fd);
        return not_regular(path, mode, error);
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(fd);
        return qem_fail(error, QEM_E_IO, "cannot open '%s': %s", path, strerror(e));
    }
    if (sb)
        *sb = now;
    *fd_out = fd;
    return QEM_OK;
}

void qem_file_stamp_from_stat(const struct stat *sb, qem_file_stamp *stamp)
{
    memset(stamp, 0, sizeof *stamp);
    stamp->dev = sb->st_dev;
    stamp->ino = sb->st_ino;
    stamp->size = (int64_t)sb->st_size;
    stamp->mtime = sb->st_mtim;
    stamp->ctime = sb->st_ctim;
}

static int same_time(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

int qem_file_stamp_equal(const qem_file_stamp *a, const qem_file_stamp *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           same_time(a->mtime, b->mtime) && same_time(a->ctime, b->ctime);
}

qem_status qem_file_stamp_check(int fd, const qem_file_stamp *stamp, const char *path,
                                const char *doing, qem_error *error)
{
    struct stat sb;
    qem_file_stamp now;
    if (fstat(fd, &sb) != 0)
        return qem_fail(error, QEM_E_IO, "cannot stat '%s': %s", path, strerror(errno));
    qem_file_stamp_from_stat(&sb, &now);
    if (!qem_file_stamp_equal(stamp, &now))
        return qem_fail(error, QEM_E_CHANGED,
                        "'%s' changed while it was being %s (its size, times or inode moved); "
                        "nothing was written: let whatever writes it finish, then run again",
                        path, doing);
    return QEM_OK;
}

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
            const int e = errno;
            if (e == EINTR)
                continue;
            return qem_fail(error, QEM_E_IO, "write failed: %s%s", strerror(e),
                            qem_write_advice(e));
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

/* The name the finished file is linked from: its temporary name, or the
 * unnamed file through /proc (valid in a forked child too: the
 * descriptor is inherited). */
static void link_source(const qem_publish *publish, char *buf, size_t size)
{
    if (publish->temp_path)
        snprintf(buf, size, "%s", publish->temp_path);
    else
        snprintf(buf, size, "/proc/self/fd/%d", publish->fd);
}

/* Only async-signal-safe calls: it also runs in a forked child. */
static int link_file(const char *source, const char *dest)
{
    return linkat(AT_FDCWD, source, AT_FDCWD, dest, AT_SYMLINK_FOLLOW) == 0 ? 0 : errno;
}

static qem_status link_failure(const qem_publish *publish, int e, qem_error *error)
{
    if (e == EEXIST)
        return qem_fail(error, QEM_E_EXISTS, "'%s' appeared while writing; it was left untouched",
                        publish->dest);
    return qem_fail(error, QEM_E_IO, "cannot publish '%s': %s", publish->dest, strerror(e));
}

/* After the link: the temporary name and descriptor go, the folder is
 * flushed. */
static void publish_finish(qem_publish *publish)
{
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
}

static qem_status publish_flush(const qem_publish *publish, qem_error *error)
{
    if (publish->fd < 0)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "nothing to publish");
    if (fsync(publish->fd) != 0)
        return qem_fail(error, QEM_E_IO, "cannot flush '%s' to disk: %s", publish->dest,
                        strerror(errno));
    return QEM_OK;
}

qem_status qem_publish_commit(qem_publish *publish, qem_error *error)
{
    QEM_TRY(publish_flush(publish, error));
    char source[PATH_MAX + 64];
    link_source(publish, source, sizeof source);
    const int e = link_file(source, publish->dest);
    if (e != 0)
        return link_failure(publish, e, error);
    publish_finish(publish);
    return QEM_OK;
}

/* What the linking child reports: which link failed (0: none) and why. */
typedef struct pair_outcome {
    int failed_link;
    int error_number;
} pair_outcome;

/* Both links, the second undoing the first when it fails. `pause_ms`
 * widens the gap between them for the crash-safety test. */
static pair_outcome link_pair(const char *first_source, const char *first_dest,
                              const char *second_source, const char *second_dest, long pause_ms)
{
    pair_outcome out = {0, 0};
    int e = link_file(first_source, first_dest);
    if (e != 0)
        return (pair_outcome){1, e};
    if (pause_ms > 0) {
        struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    e = link_file(second_source, second_dest);
    if (e != 0) {
        unlink(first_dest);
        out = (pair_outcome){2, e};
    }
    return out;
}

qem_status qem_publish_commit_pair(qem_publish *first, qem_publish *second, qem_error *error)
{
    QEM_TRY(publish_flush(first, error));
    QEM_TRY(publish_flush(second, error));
    char first_source[PATH_MAX + 64], second_source[PATH_MAX + 64];
    link_source(first, first_source, sizeof first_source);
    link_source(second, second_source, sizeof second_source);
    /* Fault injection for tests: hold the gap between the links open. */
    const char *pause_env = getenv("QEM_FAULT_LINK_PAUSE_MS");
    const long pause_ms = pause_env ? strtol(pause_env, NULL, 10) : 0;
    /* A child makes the two links: a SIGKILL of this process between them
     * cannot stop it, so either both names appear or neither. The parent
     * learns the outcome through a pipe. */
    pair_outcome out = {0, 0};
    int pipe_fd[2];
    pid_t child = -1;
    if (pipe2(pipe_fd, O_CLOEXEC) == 0) {
        child = fork();
        if (child == 0) {
            close(pipe_fd[0]);
            const pair_outcome r =
                link_pair(first_source, first->dest, second_source, second->dest, pause_ms);
            const ssize_t n = write(pipe_fd[1], &r, sizeof r);
            _exit(n == (ssize_t)sizeof r ? 0 : 1);
        }
        close(pipe_fd[1]);
        if (child > 0) {
            ssize_t n;
            do
                n = read(pipe_fd[0], &out, sizeof out);
            while (n < 0 && errno == EINTR);
            int status;
            while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
            }
            if (n != (ssize_t)sizeof out)
                out = (pair_outcome){2, EIO};
        }
        close(pipe_fd[0]);
    }
    if (child < 0) /* no child to be had: link here, as a single commit would */
        out = link_pair(first_source, first->dest, second_source, second->dest, pause_ms);
    if (out.failed_link == 1)
        return link_failure(first, out.error_number, error);
    if (out.failed_link == 2)
        return link_failure(second, out.error_number, error);
    publish_finish(first);
    publish_finish(second);
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
