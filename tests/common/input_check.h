/* Checks shared by the input-family unit tests of issue 30: open or
 * refuse, read everything, hash while reading, files patched in place. */
#ifndef QEM_TEST_INPUT_CHECK_H
#define QEM_TEST_INPUT_CHECK_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sha256.h"
#include "input/input.h"
#include "test_util.h"

static inline uint64_t ic_frames(const acquisition *a)
{
    return a->shape[0] * a->shape[1];
}

static inline uint64_t ic_pixels(const acquisition *a)
{
    return a->shape[2] * a->shape[3];
}

static inline acquisition *ic_open(const char *path, const input_options *o)
{
    acquisition *a = NULL;
    qem_error e = {0};
    CHECK_OK(qem_input_open(path, o, &a, &e), &e);
    return a;
}

/* Refused with `status`, the message naming `needle` (when given). */
static inline void ic_refused(const char *path, const input_options *o, qem_status status,
                              const char *needle)
{
    acquisition *a = NULL;
    qem_error e = {0};
    CHECK_STATUS(qem_input_open(path, o, &a, &e), status, &e);
    CHECK(a == NULL);
    if (needle && !strstr(e.message, needle)) {
        CHECK(!"the refusal names what is wrong");
        fprintf(stderr, "  missing '%s' in: %s\n", needle, e.message);
    }
    qem_input_close(a);
}

/* Every frame in windows of `per` frames (native sample type). */
static inline void *ic_read_all(acquisition *a, uint64_t per, size_t *size)
{
    const size_t frame = (size_t)(ic_pixels(a) * qem_dtype_size(a->sample_type));
    *size = frame * (size_t)ic_frames(a);
    uint8_t *out = malloc(*size ? *size : 1);
    qem_error e = {0};
    for (uint64_t f = 0; out && f < ic_frames(a); f += per) {
        const uint64_t n = ic_frames(a) - f < per ? ic_frames(a) - f : per;
        qem_status st = qem_input_read(a, f, n, a->sample_type, out + f * frame, frame * n, &e);
        CHECK_OK(st, &e);
        if (st != QEM_OK) {
            free(out);
            return NULL;
        }
    }
    return out;
}

static inline void ic_file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

/* Hashing while reading every frame in order, as a save does, gives each
 * member the SHA-256 of its bytes. */
static inline void ic_check_streamed(acquisition *a)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    size_t size = 0;
    free(ic_read_all(a, 2, &size));
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    CHECK(a->authenticated);
    for (size_t i = 0; i < a->member_count; i++) {
        uint8_t d[32];
        ic_file_sha256(a->members[i].path, d);
        CHECK(a->members[i].hashed && memcmp(a->members[i].sha256, d, 32) == 0);
    }
}

static inline int ic_member_named(const acquisition *a, size_t i, const char *name)
{
    if (i >= a->member_count)
        return 0;
    const char *slash = strrchr(a->members[i].path, '/');
    return strcmp(slash ? slash + 1 : a->members[i].path, name) == 0;
}

/* Options with only a scan shape. */
static inline input_options ic_scan(uint64_t rows, uint64_t columns)
{
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = rows;
    o.scan_shape[1] = columns;
    return o;
}

/* `dir`/`name` in one of 64 rotating buffers (several alive at once). */
static inline const char *ic_in(const char *dir, const char *name)
{
    static char paths[64][1024];
    static int next;
    char *p = paths[next++ % 64];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

static inline const char *ic_fresh_dir(const char *name)
{
    const char *d = test_path(name);
    CHECK(mkdir(d, 0755) == 0);
    return d;
}

/* Overwrites `n` bytes of `path` at `offset`. */
static inline void ic_patch(const char *path, uint64_t offset, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fseek(f, (long)offset, SEEK_SET) == 0);
    CHECK(fwrite(bytes, 1, n, f) == n);
    fclose(f);
}

#endif
