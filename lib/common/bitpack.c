#include "common/bitpack.h"

#include <string.h>

void qem_bitpack_u32(const uint32_t *values, size_t count, unsigned width, uint32_t *words)
{
    size_t nwords = (size_t)qem_bitpack_words(count, width);
    memset(words, 0, nwords * sizeof *words);
    if (width == 0)
        return;
    uint64_t bit = 0;
    for (size_t i = 0; i < count; i++, bit += width) {
        uint64_t v = values[i];
        size_t w = (size_t)(bit >> 5);
        unsigned shift = (unsigned)(bit & 31);
        words[w] |= (uint32_t)(v << shift);
        if (shift + width > 32)
            words[w + 1] |= (uint32_t)(v >> (32 - shift));
    }
}

void qem_bitunpack_u32(const uint32_t *words, size_t count, unsigned width, uint32_t *values)
{
    if (width == 0) {
        memset(values, 0, count * sizeof *values);
        return;
    }
    uint64_t mask = width == 32 ? 0xffffffffull : ((1ull << width) - 1);
    uint64_t bit = 0;
    size_t nwords = (size_t)qem_bitpack_words(count, width);
    for (size_t i = 0; i < count; i++, bit += width) {
        size_t w = (size_t)(bit >> 5);
        unsigned shift = (unsigned)(bit & 31);
        uint64_t lo = words[w];
        uint64_t hi = (w + 1 < nwords) ? words[w + 1] : 0;
        values[i] = (uint32_t)(((lo | (hi << 32)) >> shift) & mask);
    }
}
