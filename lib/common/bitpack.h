/* Fixed-width bit packing, least-significant bit first into little-endian
 * 32-bit words (the .qem spatial-sum layout). */
#ifndef QEM_COMMON_BITPACK_H
#define QEM_COMMON_BITPACK_H

#include <stddef.h>
#include <stdint.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "qem reads little-endian words in place; port the loads for big-endian hosts");

/* Words needed for `count` values of `width` bits (0..32). */
static inline uint64_t qem_bitpack_words(uint64_t count, unsigned width)
{
    return (count * width + 31) / 32;
}

/* Bit length of v: 0 for 0, else floor(log2 v) + 1. */
static inline unsigned qem_bit_length(uint64_t v)
{
    return v ? 64u - (unsigned)__builtin_clzll(v) : 0u;
}

/* Packs `count` values (each < 2^width) into qem_bitpack_words() words. */
void qem_bitpack_u32(const uint32_t *values, size_t count, unsigned width, uint32_t *words);

/* Unpacks `count` values of `width` bits from `words`. */
void qem_bitunpack_u32(const uint32_t *words, size_t count, unsigned width, uint32_t *values);

#endif
