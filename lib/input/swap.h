/* Byte order: acquisitions stored big-endian (Merlin, some .npy and raw
 * files) are swapped in place after reading. */
#ifndef QEM_INPUT_SWAP_H
#define QEM_INPUT_SWAP_H

#include <stddef.h>
#include <stdint.h>

/* Reverses the bytes of each of `count` items of `item` bytes (1, 2 or 4). */
static inline void input_swap(void *data, size_t count, size_t item)
{
    if (item == 2) {
        uint16_t *v = data;
        for (size_t i = 0; i < count; i++)
            v[i] = (uint16_t)__builtin_bswap16(v[i]);
    } else if (item == 4) {
        uint32_t *v = data;
        for (size_t i = 0; i < count; i++)
            v[i] = __builtin_bswap32(v[i]);
    } else if (item == 8) {
        uint64_t *v = data;
        for (size_t i = 0; i < count; i++)
            v[i] = __builtin_bswap64(v[i]);
    }
}

/* Big-endian samples (a Merlin's) into the host's order. */
static inline void input_from_big_endian(void *data, size_t count, size_t item)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    input_swap(data, count, item);
#else
    (void)data, (void)count, (void)item;
#endif
}

#endif
