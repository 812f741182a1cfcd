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
    if (width > 32) { /* no such field: values are 32-bit */
        memset(values, 0, count * sizeof *values);
        return;
    }
    qem_bitunpack_inline(words, count, width, values, 32);
}
