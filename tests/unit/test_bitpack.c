/* LSB-first packing into little-endian u32 words, every width 0..32. */
#include "common/bitpack.h"
#include "test_util.h"

#include <stdlib.h>

int main(void)
{
    uint64_t seed = 7;
    uint32_t values[517], back[517], words[517];
    for (unsigned width = 0; width <= 32; width++) {
        for (size_t count = 0; count <= 517; count += 47) {
            for (size_t i = 0; i < count; i++) {
                uint64_t r = test_rand(&seed);
                values[i] = width == 32 ? (uint32_t)r : (uint32_t)(r & ((1ull << width) - 1));
            }
            qem_bitpack_u32(values, count, width, words);
            qem_bitunpack_u32(words, count, width, back);
            CHECK(memcmp(values, back, count * sizeof *values) == 0);
            CHECK_EQ_U64(qem_bitpack_words(count, width), (count * width + 31) / 32);
        }
    }
    /* Whole groups of 32 (the constant-width code) and their remainders,
     * from words allocated exactly (ASan sees any read past them), by the
     * library call and by the inline form limited to 16 bits as packs use
     * it (wider fields take the general loop there). */
    static const size_t counts[] = {32, 33, 64, 95, 128, 512};
    for (unsigned width = 0; width <= 32; width++) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const size_t count = counts[c];
            for (size_t i = 0; i < count; i++) {
                uint64_t r = test_rand(&seed);
                values[i] = width == 32 ? (uint32_t)r : (uint32_t)(r & ((1ull << width) - 1));
            }
            const size_t nwords = (size_t)qem_bitpack_words(count, width);
            uint32_t *exact = malloc((nwords ? nwords : 1) * sizeof *exact);
            qem_bitpack_u32(values, count, width, exact);
            memset(back, 0xAB, sizeof back);
            qem_bitunpack_u32(exact, count, width, back);
            CHECK(memcmp(values, back, count * sizeof *values) == 0);
            memset(back, 0xAB, sizeof back);
            qem_bitunpack_inline(exact, count, width, back, 16);
            CHECK(memcmp(values, back, count * sizeof *values) == 0);
            free(exact);
        }
    }
    /* Known layout: values 1, 2, 3 of 3 bits pack as 0b011_010_001. */
    uint32_t v3[3] = {1, 2, 3}, w3[1];
    qem_bitpack_u32(v3, 3, 3, w3);
    CHECK_EQ_U64(w3[0], 0x0d1u);
    /* A value straddling two words. */
    uint32_t v2[2] = {0x1ffffffu, 0x1ffu}, w2[2];
    qem_bitpack_u32(v2, 2, 25, w2);
    CHECK_EQ_U64(w2[0], 0xffffffffu);
    CHECK_EQ_U64(w2[1], 0x3u);
    CHECK_EQ_U64(qem_bit_length(0), 0);
    CHECK_EQ_U64(qem_bit_length(1), 1);
    CHECK_EQ_U64(qem_bit_length(1024u * 65535u), 26);
    return test_finish("unit_bitpack");
}
