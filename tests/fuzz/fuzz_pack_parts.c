/* Manifest and index rules and the shard loader of both profiles: the
 * input is a manifest JSON, a binary index and the ranges after a 64 KiB
 * user block, assembled with the manifest CRC-32 the format requires so
 * that the fuzzer reaches past it. Layout: u32 manifest length, manifest,
 * u32 index length, index, ranges. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "pack/encode.h"

#define BLOCK 65536u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;
    size_t m_len = fuzz_u32(data, size, &at);
    if (m_len > (size > at ? size - at : 0))
        m_len = size > at ? size - at : 0;
    const char *manifest = (const char *)data + (at < size ? at : size);
    at += m_len;
    size_t i_len = fuzz_u32(data, size, &at);
    if (i_len > (size > at ? size - at : 0))
        i_len = size > at ? size - at : 0;
    const uint8_t *index = data + (at < size ? at : size);
    at += i_len;
    const uint8_t *ranges = data + (at < size ? at : size);
    const size_t r_len = size > at ? size - at : 0;
    uint8_t *block = NULL;
    qem_error e;
    if (qem_pack_user_block(manifest, m_len, index, i_len, BLOCK, &block, &e) != QEM_OK)
        return 0;
    uint8_t *file = malloc(BLOCK + r_len);
    if (file) {
        memcpy(file, block, BLOCK);
        memcpy(file + BLOCK, ranges, r_len);
        const char *path = fuzz_path("parts.h5");
        if (fuzz_write(path, file, BLOCK + r_len))
            fuzz_pack_exercise(path);
    }
    free(file);
    free(block);
    return 0;
}
