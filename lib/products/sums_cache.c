/* Values kept between opens (qem_products_options.cache_dir) for files
 * that do not record them, one file each per content identity, written
 * whole under a temporary name and renamed into place, and checked
 * entirely before use; anything else is ignored and replaced. Keeping is
 * best effort: a folder that cannot be written only costs the next open
 * the computation.
 *
 * Whole-file pixel sums (the mean pattern, the detector estimate), checked
 * for their own digest, the identity, scans and pixels, zeros at invalid
 * pixels and every sum within scans times the dtype's maximum:
 *   "QEMSUMS1" | identity (32) | scans u64 | pixels u64 | sums u64 x pixels
 *   | SHA-256 of everything before it (32)
 * The default detector's image (the first image a viewer shows), checked
 * for its digest, the identity, the mask's digest and pixel count, scans,
 * and every value within the mask's pixels times the dtype's maximum:
 *   "QEMIMG01" | identity (32) | mask digest (32) | scans u64 | pixels u64
 *   | mask pixels u64 | values u64 x scans | SHA-256 (32)
 * all little-endian. */
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

#define SUMS_MAGIC "QEMSUMS1"
#define SUMS_FIXED (8u + 32u + 8u + 8u)
#define IMAGE_MAGIC "QEMIMG01"
#define IMAGE_FIXED (8u + 32u + 32u + 8u + 8u + 8u)

static int entry_path(const qem_products *p, const char *kind, const uint8_t id[32], char *path,
                      size_t size)
{
    char hex[65];
    qem_sha256_hex(id, hex);
    const int n = snprintf(path, size, "%s/%s-%s.bin", p->cache_dir, kind, hex);
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

/* The entry `kind` of `id`, exactly `size` bytes whose last 32 are the
 * SHA-256 of the rest and whose first 8 are `magic` followed by `id`, or
 * NULL. */
static uint8_t *entry_read(const qem_products *p, const char *kind, const char *magic,
                           const uint8_t id[32], uint64_t size)
{
    char path[4200];
    if (!entry_path(p, kind, id, path, sizeof path))
        return NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat sb;
    uint8_t *data = NULL;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == size &&
             size > 72 && (data = malloc((size_t)size)) != NULL;
    for (uint64_t at = 0; ok && at < size;) {
        const ssize_t got = pread(fd, data + at, (size_t)(size - at), (off_t)at);
        ok = got > 0;
        at += ok ? (uint64_t)got : 0;
    }
    close(fd);
    uint8_t digest[32];
    ok = ok && qem_sha256_oneshot(data, (size_t)(size - 32), digest) == 0 &&
         memcmp(digest, data + size - 32, 32) == 0 && memcmp(data, magic, 8) == 0 &&
         memcmp(data + 8, id, 32) == 0;
    if (!ok) {
        free(data);
        return NULL;
    }
    return data;
}

/* Writes `data` (its last 32 bytes filled here with the digest) as the
 * entry `kind` of `id`; takes `data`. */
static void entry_write(const qem_products *p, const char *kind, const uint8_t id[32],
                        uint8_t *data, uint64_t size)
{
    char path[4200], temporary[4200];
    int ok = entry_path(p, kind, id, path, sizeof path) && make_folder(p->cache_dir);
    const int n = snprintf(temporary, sizeof temporary, "%s/.%s-XXXXXX", p->cache_dir, kind);
    ok = ok && n > 0 && (size_t)n < sizeof temporary &&
         qem_sha256_oneshot(data, (size_t)(size - 32), data + size - 32) == 0;
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

int qem_prod_sums_cache_load(const qem_products *p, const uint8_t id[32], uint64_t *sums)
{
    const uint64_t size = SUMS_FIXED + 8 * p->pixels + 32;
    uint8_t *data = entry_read(p, "pixel-sums", SUMS_MAGIC, id, size);
    int ok = data && qem_get_le64(data + 40) == p->scans && qem_get_le64(data + 48) == p->pixels;
    uint64_t bound;
    if (__builtin_mul_overflow(p->scans, (uint64_t)qem_prod_max_value(p), &bound))
        bound = UINT64_MAX;
    for (uint64_t px = 0; ok && px < p->pixels; px++) {
        sums[px] = qem_get_le64(data + SUMS_FIXED + 8 * px);
        ok = sums[px] <= bound && (p->valid[px] || sums[px] == 0);
    }
    free(data);
    return ok;
}

void qem_prod_sums_cache_store(const qem_products *p, const uint8_t id[32], const uint64_t *sums)
{
    const uint64_t size = SUMS_FIXED + 8 * p->pixels + 32;
    uint8_t *data = malloc((size_t)size);
    if (!data)
        return;
    memcpy(data, SUMS_MAGIC, 8);
    memcpy(data + 8, id, 32);
    qem_put_le64(data + 40, p->scans);
    qem_put_le64(data + 48, p->pixels);
    for (uint64_t px = 0; px < p->pixels; px++)
        qem_put_le64(data + SUMS_FIXED + 8 * px, sums[px]);
    entry_write(p, "pixel-sums", id, data, size);
}

int qem_prod_image_cache_load(const qem_products *p, const uint8_t id[32],
                              const uint8_t mask_digest[32], uint64_t mask_pixels, int64_t *out)
{
    const uint64_t size = IMAGE_FIXED + 8 * p->scans + 32;
    uint8_t *data = entry_read(p, "detector-image", IMAGE_MAGIC, id, size);
    int ok = data && memcmp(data + 40, mask_digest, 32) == 0 &&
             qem_get_le64(data + 72) == p->scans && qem_get_le64(data + 80) == p->pixels &&
             qem_get_le64(data + 88) == mask_pixels;
    uint64_t bound;
    if (__builtin_mul_overflow(mask_pixels, (uint64_t)qem_prod_max_value(p), &bound) ||
        bound > INT64_MAX)
        bound = INT64_MAX;
    for (uint64_t s = 0; ok && s < p->scans; s++) {
        const uint64_t v = qem_get_le64(data + IMAGE_FIXED + 8 * s);
        ok = v <= bound;
        out[s] = (int64_t)v;
    }
    free(data);
    return ok;
}

void qem_prod_image_cache_store(const qem_products *p, const uint8_t id[32],
                                const uint8_t mask_digest[32], uint64_t mask_pixels,
                                const int64_t *values)
{
    const uint64_t size = IMAGE_FIXED + 8 * p->scans + 32;
    uint8_t *data = malloc((size_t)size);
    if (!data)
        return;
    memcpy(data, IMAGE_MAGIC, 8);
    memcpy(data + 8, id, 32);
    memcpy(data + 40, mask_digest, 32);
    qem_put_le64(data + 72, p->scans);
    qem_put_le64(data + 80, p->pixels);
    qem_put_le64(data + 88, mask_pixels);
    for (uint64_t s = 0; s < p->scans; s++)
        qem_put_le64(data + IMAGE_FIXED + 8 * s, (uint64_t)values[s]);
    entry_write(p, "detector-image", id, data, size);
}
