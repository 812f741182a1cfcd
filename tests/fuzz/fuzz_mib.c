/* A Merlin .mib and its .hdr: every frame header, the .hdr's lines, the
 * scan shape, reads of every frame. Input: scan rows (u8), scan columns
 * (u8), the .hdr's length (u32 LE; 0 or more than is left: no .hdr), the
 * .hdr, then the .mib. */
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6)
        return 0;
    size_t at = 2;
    size_t hdr_len = fuzz_u32(data, size, &at);
    if (hdr_len > size - at)
        hdr_len = 0;
    char mib[512], hdr[512];
    snprintf(mib, sizeof mib, "%s", fuzz_path("f.mib"));
    snprintf(hdr, sizeof hdr, "%s", fuzz_path("f.hdr"));
    if (!fuzz_write(mib, data + at + hdr_len, size - at - hdr_len))
        return 0;
    if (hdr_len) {
        if (!fuzz_write(hdr, data + at, hdr_len))
            return 0;
    } else {
        unlink(hdr);
    }
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(mib, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
