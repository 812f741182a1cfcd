/* Whole-file pixel sums kept between opens (qem_products_options.cache_dir):
 * one file per content identity, written whole under a temporary name and
 * renamed into place, and checked entirely before use (its own digest, the
 * identity, scans and pixels, zeros at invalid pixels, every sum within
 * scans times the dtype's maximum); anything else is ignored and replaced.
 * Keeping is best effort: a folder that cannot be written only costs the
 * next open its pass over the scans.
 *
 *   "QEMSUMS1" | identity (32) | scans u64 | pixels u64 | sums u64 x pixels
 *   | SHA-256 of everything before it (32), little-endian */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "common/sha256.h"
#include "products/products.h"

#define MAGIC "QEMSUMS1"
#define FIXED (8u + 32u + 8u + 8u)

static int entry_path(const qem_products *p, const uint8_t id[32], char *path, size_t size)
{
    char hex[65];
    qem_sha256_hex(id, hex);
    const int n = snprintf(path, size, "%s/pixel-sums-%s.bin", p->cache_dir, hex);
    return n > 0 && (size_t)n < size;
}

/* The folder and its missing parents, private to the user. */
static int make_folder(const char *dir)
{
    char path[4096];
    const size_t n = strlen(dir);
    if (!n || n >= sizeof path)
        return 0;
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        const char keep = path[i];
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return 0;
        path[i] = keep;
    }
    return 1;
}

int qem_prod_sums_cache_load(const qem_products *p, const uint8_t id[32], uint64_t *sums)
{
    char path[4200];
    if (!entry_path(p, id, path, sizeof path))
        return 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat sb;
    const uint64_t size = FIXED + 8 * p->pixels + 32;
    uint8_t *data = NULL;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == size &&
             (data = malloc((size_t)size)) != NULL;
    for (uint64_t at = 0; ok && at < size;) {
        const ssize_t got = pread(fd, data + at, (size_t)(size - at), (off_t)at);
        ok = got > 0;
        at += ok ? (uint64_t)got : 0;
    }
    close(fd);
    uint8_t digest[32];
    ok = ok && qem_sha256_oneshot(data, (size_t)(size - 32), digest) == 0 &&
         memcmp(digest, data + size - 32, 32) == 0 && memcmp(data, MAGIC, 8) == 0 &&
         memcmp(data + 8, id, 32) == 0 && qem_get_le64(data + 40) == p->scans &&
         qem_get_le64(data + 48) == p->pixels;
    uint64_t bound;
    if (__builtin_mul_overflow(p->scans, (uint64_t)qem_prod_max_value(p), &bound))
        bound = UINT64_MAX;
    for (uint64_t px = 0; ok && px < p->pixels; px++) {
        sums[px] = qem_get_le64(data + FIXED + 8 * px);
        ok = sums[px] <= bound && (p->valid[px] || sums[px] == 0);
    }
    free(data);
    return ok;
}

void qem_prod_sums_cache_store(const qem_products *p, const uint8_t id[32], const uint64_t *sums)
{
    char path[4200], temporary[4200];
    if (!entry_path(p, id, path, sizeof path) || !make_folder(p->cache_dir))
        return;
    const int n = snprintf(temporary, sizeof temporary, "%s/.pixel-sums-XXXXXX", p->cache_dir);
    if (n <= 0 || (size_t)n >= sizeof temporary)
        return;
    const uint64_t size = FIXED + 8 * p->pixels + 32;
    uint8_t *data = malloc((size_t)size);
    if (!data)
        return;
    memcpy(data, MAGIC, 8);
    memcpy(data + 8, id, 32);
    qem_put_le64(data + 40, p->scans);
    qem_put_le64(data + 48, p->pixels);
    for (uint64_t px = 0; px < p->pixels; px++)
        qem_put_le64(data + FIXED + 8 * px, sums[px]);
    int ok = qem_sha256_oneshot(data, (size_t)(size - 32), data + size - 32) == 0;
    const int fd = ok ? mkstemp(temporary) : -1;
    ok = fd >= 0;
    for (uint64_t at = 0; ok && at < size;) {
        const ssize_t put = write(fd, data + at, (size_t)(size - at));
        ok = put > 0;
        at += ok ? (uint64_t)put : 0;
    }
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (fd >= 0 && (!ok || rename(temporary, path) != 0))
        unlink(temporary);
    free(data);
}
