/* Error reporting shared by every layer: a status plus one sentence. */
#ifndef QEM_COMMON_ERROR_H
#define QEM_COMMON_ERROR_H

#include "qem.h"

/* Records `status` and a formatted message in `error` (if non-NULL) unless
 * an earlier, more specific failure is already recorded. Returns `status`
 * so that a failure is one line: `return qem_fail(err, QEM_E_IO, "...");` */
qem_status qem_fail(qem_error *error, qem_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* "; the disk is full or a file-size limit was reached" for ENOSPC,
 * EDQUOT and EFBIG, else "". */
const char *qem_write_advice(int error_number);

/* Names the destination in a write failure recorded without it ("write
 * failed: ...", or libhdf5's "HDF5 could not ..."), so every
 * disk-full error says which file could not be written. */
void qem_error_name_destination(qem_error *error, const char *dest);

/* Public entry points start with a clean error record. */
void qem_error_clear(qem_error *error);

/* Propagates any failure of `expr` to the caller. */
#define QEM_TRY(expr)                                                                              \
    do {                                                                                           \
        qem_status qem_try_status_ = (expr);                                                       \
        if (qem_try_status_ != QEM_OK)                                                             \
            return qem_try_status_;                                                                \
    } while (0)

/* Overflow-checked arithmetic on sizes read from files. */
static inline int qem_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline int qem_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

/* scans * pixels * item bytes, or UINT64_MAX when that does not fit: the
 * *_bound() helpers' answer for a size no buffer can have. */
static inline uint64_t qem_bytes_bound(uint64_t scans, uint64_t pixels, uint64_t item)
{
    uint64_t n;
    if (qem_mul_overflow_u64(scans, pixels, &n) || qem_mul_overflow_u64(n, item, &n))
        return UINT64_MAX;
    return n;
}

#endif
