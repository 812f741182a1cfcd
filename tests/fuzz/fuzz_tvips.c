/* A TVIPS series: the series header, every v2 frame header, the parts,
 * the scan shape, reads of every frame. Input: scan rows (u8), scan
 * columns (u8), how many parts follow the first (u8, at most 3), each
 * part's length (u32 LE) and bytes, then the first part. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const unsigned parts = data[2] % 4;
    size_t at = 3;
    char path[512];
    for (unsigned k = 1; k <= 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "s_%03u.tvips", k);
        snprintf(path, sizeof path, "%s", fuzz_path(name));
        if (k > parts) {
            unlink(path);
            continue;
        }
        size_t n = fuzz_u32(data, size, &at);
        if (at > size)
            at = size;
        if (n > size - at)
            n = size - at;
        if (!fuzz_write(path, data + at, n))
            return 0;
        at += n;
    }
    snprintf(path, sizeof path, "%s", fuzz_path("s_000.tvips"));
    if (!fuzz_write(path, data + at, size - at))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(path, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
