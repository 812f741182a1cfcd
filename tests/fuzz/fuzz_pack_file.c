/* A whole pack file, byte for byte: prelude, manifest CRC, manifest,
 * index, ranges; what opens is loaded (both profiles) and read. */
#include "fuzz_common.h"
#include "qem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path("file.h5");
    if (fuzz_write(path, data, size))
        fuzz_pack_exercise(path);
    return 0;
}
