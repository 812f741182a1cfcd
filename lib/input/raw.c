/* Raw binary acquisitions, described entirely by the caller (--raw-shape,
 * --raw-dtype, --raw-offset, --raw-frame-header): `offset` bytes, then
 * every frame in C order, each behind `frame_header` bytes that are
 * skipped. The file must be exactly that long, so a wrong shape or type
 * is refused instead of read as the wrong frames. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/swap.h"

typedef struct raw_state {
    int fd;
    uint64_t frame_bytes; /* samples of one frame */
    uint64_t stride;      /* frame header + samples */
    uint64_t offset;      /* bytes before the first frame */
    int swap;             /* stored in the other byte order than the host's */
    size_t item;          /* bytes per sample */
} raw_state;

static const char *descr_of(qem_dtype d, input_values v, int big_endian)
{
    switch (v) {
    case INPUT_VALUES_INT8:
        return "|i1";
    case INPUT_VALUES_INT16:
        return big_endian ? ">i2" : "<i2";
    case INPUT_VALUES_INT32:
        return big_endian ? ">i4" : "<i4";
    case INPUT_VALUES_FLOAT64:
        return big_endian ? ">f8" : "<f8";
    default:
        break;
    }
    switch (d) {
    case QEM_DTYPE_UINT8:
        return "|u1";
    case QEM_DTYPE_UINT16:
        return big_endian ? ">u2" : "<u2";
    case QEM_DTYPE_UINT32:
        return big_endian ? ">u4" : "<u4";
    case QEM_DTYPE_FLOAT32:
        return big_endian ? ">f4" : "<f4";
    default:
        return NULL;
    }
}

static qem_status raw_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    const input_raw *r = &o->raw;
    const char *descr = descr_of(r->dtype, r->values, r->big_endian);
    if (!descr)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "raw binary samples are uint8, uint16, uint32, float32, int8, int16, "
                        "int32 or float64");
    if (o->dataset || o->scan_shape[0] || o->scan_shape[1])
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "raw binary takes its whole shape from --raw-shape; --scan-shape and "
                        "--dataset do not apply");
    raw_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    memcpy(a->shape, r->shape, sizeof a->shape);
    a->sample_type = r->dtype;
    a->read_values = r->values;
    s->item = r->values ? qem_input_values_size(r->values) : qem_dtype_size(r->dtype);
    QEM_TRY(qem_input_check_shape(a, path, error));
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    QEM_TRY(qem_open_input(path, &s->fd, NULL, error));
    QEM_TRY(qem_file_stamp_check(s->fd, &a->members[0].stamp, path, "described", error));
    const size_t item = s->item;
    const uint64_t frames = a->shape[0] * a->shape[1]; /* qem_input_check_shape: no overflow */
    uint64_t expected = 0, all = 0;
    s->frame_bytes = a->shape[2] * a->shape[3] * item;
    const uint64_t size = a->members[0].bytes;
    const int overflow = qem_add_overflow_u64(s->frame_bytes, r->frame_header, &s->stride) ||
                         qem_mul_overflow_u64(frames, s->stride, &all) ||
                         qem_add_overflow_u64(all, r->offset, &expected);
    s->offset = r->offset;
    if (overflow || size != expected) {
        char need[64];
        if (!overflow)
            snprintf(need, sizeof need, "exactly %llu bytes", (unsigned long long)expected);
        else
            snprintf(need, sizeof need, "more than 2^64 bytes");
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' holds %llu bytes, but %llu x %llu frames of %llu x %llu %s after "
                        "%llu bytes of offset, each behind a %llu-byte header, need %s; check "
                        "--raw-shape, --raw-dtype, --raw-offset and --raw-frame-header",
                        path, (unsigned long long)size, (unsigned long long)a->shape[0],
                        (unsigned long long)a->shape[1], (unsigned long long)a->shape[2],
                        (unsigned long long)a->shape[3], descr, (unsigned long long)r->offset,
                        (unsigned long long)r->frame_header, need);
    }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    s->swap = r->big_endian && item > 1;
#else
    s->swap = !r->big_endian && item > 1;
#endif
    qem_input_fact(a, "descr", json_string(descr));
    qem_input_fact(a, "shape",
                   json_pack("[I,I,I,I]", (json_int_t)a->shape[0], (json_int_t)a->shape[1],
                             (json_int_t)a->shape[2], (json_int_t)a->shape[3]));
    qem_input_fact(a, "offset", json_integer((json_int_t)r->offset));
    qem_input_fact(a, "frame_header", json_integer((json_int_t)r->frame_header));
    qem_input_fact(a, "described_by",
                   json_string("the caller's options (--raw-shape, --raw-dtype, "
                               "--raw-offset, --raw-frame-header)"));
    return qem_input_implicit_mask(a, error);
}

static qem_status raw_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    raw_state *s = a->impl;
    input_member *m = &a->members[0];
    const uint64_t base = s->offset;
    const size_t item = s->item;
    const size_t fb = (size_t)s->frame_bytes;
    if (s->stride == s->frame_bytes) {
        /* No frame headers: the frames are one run of bytes. */
        const uint64_t at = base + first * s->stride;
        const size_t bytes = (size_t)(count * s->frame_bytes);
        QEM_TRY(qem_pread_full(s->fd, out, bytes, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, out, bytes);
    } else {
        for (uint64_t k = 0; k < count; k++) {
            const uint64_t at = base + (first + k) * s->stride + (s->stride - s->frame_bytes);
            uint8_t *dst = (uint8_t *)out + k * fb;
            QEM_TRY(qem_pread_full(s->fd, dst, fb, at, QEM_E_CHANGED, error));
            qem_input_member_read(m, s->fd, at, dst, fb);
        }
    }
    if (s->swap)
        input_swap(out, (size_t)(count * s->frame_bytes / item), item);
    return QEM_OK;
}

static void raw_release(acquisition *a)
{
    raw_state *s = a->impl;
    if (s && s->fd >= 0)
        close(s->fd);
    free(s);
    a->impl = NULL;
}

/* Chosen by the caller's options, never by content. */
const input_family qem_input_family_raw = {"raw",       NULL, raw_describe, raw_read,
                                           raw_release, 1,    NULL};
