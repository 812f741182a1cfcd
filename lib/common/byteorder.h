/* Little-endian integers in byte buffers, whatever the host's order: the
 * one definition every format's fixed fields (the .qem prefix, chunk
 * blobs, pack prelude and index, cache entries) are read and written by. */
#ifndef QEM_COMMON_BYTEORDER_H
#define QEM_COMMON_BYTEORDER_H

#include <stdint.h>

static inline uint32_t qem_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t qem_get_le64(const uint8_t *p)
{
    return (uint64_t)qem_get_le32(p) | (uint64_t)qem_get_le32(p + 4) << 32;
}

static inline void qem_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void qem_put_le64(uint8_t *p, uint64_t v)
{
    qem_put_le32(p, (uint32_t)v);
    qem_put_le32(p + 4, (uint32_t)(v >> 32));
}

#endif
