/* A TIA series: the .ser's header, dimension arrays, offset arrays,
 * element headers and tags, the scan shape, reads of every frame; the
 * .emi beside it (its <ObjectInfo> XML through expat), or opened itself.
 * Input: scan rows (u8), scan columns (u8), flags (u8: bit 0 opens the
 * .emi), the .emi's length (u32 LE; 0 or more than is left: no .emi), the
 * .emi, then the .ser ("f_1.ser" beside "f.emi"). */
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 7)
        return 0;
    size_t at = 3;
    size_t emi_len = fuzz_u32(data, size, &at);
    if (emi_len > size - at)
        emi_len = 0;
    char ser[512], emi[512];
    snprintf(ser, sizeof ser, "%s", fuzz_path("f_1.ser"));
    snprintf(emi, sizeof emi, "%s", fuzz_path("f.emi"));
    if (!fuzz_write(ser, data + at + emi_len, size - at - emi_len))
        return 0;
    if (emi_len) {
        if (!fuzz_write(emi, data + at, emi_len))
            return 0;
    } else {
        unlink(emi);
    }
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open((data[2] & 1) && emi_len ? emi : ser, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
