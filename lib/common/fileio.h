/* File I/O that never half-writes: full pread/pwrite loops, unlinked
 * scratch files, and atomic publication by link(2) without overwrite. */
#ifndef QEM_COMMON_FILEIO_H
#define QEM_COMMON_FILEIO_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "qem.h"

/* Opens `path` for reading without ever blocking: a FIFO or a device
 * could hang open(2) or every read after it, so the path is stat'ed first
 * and opened with O_NONBLOCK, and anything but a regular file is refused
 * by name ("'f' is not a regular file (it is a FIFO)"). The descriptor
 * returned blocks again; `sb` (may be NULL) receives its fstat. Errors are
 * QEM_E_IO. */
qem_status qem_open_input(const char *path, int *fd_out, struct stat *sb, qem_error *error);

/* What identifies one state of a file: a change to its bytes moves its
 * modification and change times (the change time cannot be set back), a
 * replacement moves the inode. One definition for every "did the file
 * change while we read it" check. */
typedef struct qem_file_stamp {
    dev_t dev;
    ino_t ino;
    int64_t size;
    struct timespec mtime, ctime;
} qem_file_stamp;

void qem_file_stamp_from_stat(const struct stat *sb, qem_file_stamp *stamp);
int qem_file_stamp_equal(const qem_file_stamp *a, const qem_file_stamp *b);
/* fstat(fd) compared with `stamp`: QEM_OK, or QEM_E_CHANGED naming `path`
 * and saying "while it was being `doing`". */
qem_status qem_file_stamp_check(int fd, const qem_file_stamp *stamp, const char *path,
                                const char *doing, qem_error *error);

/* Reads exactly `size` bytes at `offset`; a short file is QEM_E_IO unless
 * `short_status` says which status a premature end means. */
qem_status qem_pread_full(int fd, void *buf, size_t size, uint64_t offset, qem_status short_status,
                          qem_error *error);
qem_status qem_write_full(int fd, const void *buf, size_t size, qem_error *error);
qem_status qem_pwrite_full(int fd, const void *buf, size_t size, uint64_t offset,
                           qem_error *error);

/* The folder part of `path` ("." when it has none). Caller frees. */
char *qem_path_dirname(const char *path);

/* An anonymous read-write file in `dir` that no crash can leave behind
 * (O_TMPFILE, else a name unlinked at once). Returns an fd or -1. */
qem_status qem_scratch_open(const char *dir, int *fd_out, qem_error *error);

/* Copies `size` bytes from `src_fd` at `src_offset` to the current end of
 * `dst_fd` (kernel copy where possible). */
qem_status qem_copy_range(int src_fd, uint64_t src_offset, int dst_fd, uint64_t size,
                          qem_error *error);

/* Atomic publication: write into `fd`, then commit links the finished,
 * fsync'ed file to `dest`, refusing to replace anything there. */
typedef struct qem_publish {
    int fd;
    char *dest;
    char *dir;
    char *temp_path; /* named temporary, NULL when O_TMPFILE is used */
} qem_publish;

qem_status qem_publish_begin(qem_publish *publish, const char *dest, qem_error *error);
qem_status qem_publish_commit(qem_publish *publish, qem_error *error);
/* Commits two files as one: `first` is linked, then `second`; if the
 * second link fails the first is removed. A child process makes both
 * links, so killing this process cannot leave one name without the
 * other (a power loss between them still can). */
qem_status qem_publish_commit_pair(qem_publish *first, qem_publish *second, qem_error *error);
/* Discards an uncommitted file and frees; safe after commit and twice. */
void qem_publish_abort(qem_publish *publish);

#endif
