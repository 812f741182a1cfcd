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

/* 32 values of a constant width W occupy exactly W words; with W known
 * the compiler turns every shift and mask into constants (and vectorises
 * the group), so there is no per-value branch on the width. */
static inline __attribute__((always_inline)) void qem_bitunpack32(const uint32_t *w,
                                                                  uint32_t *values,
                                                                  const unsigned W)
{
    const uint32_t mask = W == 32 ? 0xffffffffu : (1u << (W & 31)) - 1u;
#pragma GCC unroll 32
    for (unsigned k = 0; k < 32; k++) {
        const unsigned bit = k * W, i = bit >> 5, shift = bit & 31;
        uint32_t v = w[i] >> shift;
        if (shift + W > 32)
            v |= w[i + 1] << ((32 - shift) & 31);
        values[k] = v & mask;
    }
}

/* Value `index` of LSB-first `width`-bit values (0..32) starting at
 * `words`; reads no word past that value's last (none for width 0). */
static inline uint32_t qem_bitunpack_one(const uint32_t *words, uint64_t index, unsigned width)
{
    if (width == 0)
        return 0;
    const uint64_t bit = index * width;
    const uint32_t *w = words + (bit >> 5);
    const unsigned shift = (unsigned)(bit & 31);
    uint32_t v = w[0] >> shift;
    if (shift + width > 32)
        v |= w[1] << (32 - shift);
    return width == 32 ? v : v & ((1u << width) - 1u);
}

#define QEM_BITUNPACK_CASE(W)                                                                      \
    case W:                                                                                        \
        for (size_t g = 0; g < groups; g++)                                                        \
            qem_bitunpack32(words + g * W, values + g * 32, W);                                    \
        break;

/* The inline form: whole groups of 32 by the constant-width code (widths
 * 1..max_width, which callers keep small to bound code size), the rest by
 * the general loop, which reads no word past qem_bitpack_words(). */
static inline __attribute__((always_inline)) void
qem_bitunpack_inline(const uint32_t *words, size_t count, unsigned width, uint32_t *values,
                     const unsigned max_width)
{
    if (width == 0) {
        for (size_t k = 0; k < count; k++)
            values[k] = 0;
        return;
    }
    size_t done = 0;
    if (width <= max_width) {
        const size_t groups = count / 32;
        switch (width) {
            QEM_BITUNPACK_CASE(1) QEM_BITUNPACK_CASE(2) QEM_BITUNPACK_CASE(3)
            QEM_BITUNPACK_CASE(4) QEM_BITUNPACK_CASE(5) QEM_BITUNPACK_CASE(6)
            QEM_BITUNPACK_CASE(7) QEM_BITUNPACK_CASE(8) QEM_BITUNPACK_CASE(9)
            QEM_BITUNPACK_CASE(10) QEM_BITUNPACK_CASE(11) QEM_BITUNPACK_CASE(12)
            QEM_BITUNPACK_CASE(13) QEM_BITUNPACK_CASE(14) QEM_BITUNPACK_CASE(15)
            QEM_BITUNPACK_CASE(16) QEM_BITUNPACK_CASE(17) QEM_BITUNPACK_CASE(18)
            QEM_BITUNPACK_CASE(19) QEM_BITUNPACK_CASE(20) QEM_BITUNPACK_CASE(21)
            QEM_BITUNPACK_CASE(22) QEM_BITUNPACK_CASE(23) QEM_BITUNPACK_CASE(24)
            QEM_BITUNPACK_CASE(25) QEM_BITUNPACK_CASE(26) QEM_BITUNPACK_CASE(27)
            QEM_BITUNPACK_CASE(28) QEM_BITUNPACK_CASE(29) QEM_BITUNPACK_CASE(30)
            QEM_BITUNPACK_CASE(31) QEM_BITUNPACK_CASE(32)
        default: break;
        }
        done = groups * 32;
    }
    const uint32_t *w = words + (done / 32) * width;
    for (size_t k = done; k < count; k++)
        values[k] = qem_bitunpack_one(w, k - done, width);
}

#endif
