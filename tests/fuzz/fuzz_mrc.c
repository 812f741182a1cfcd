/* An MRC file: its header (byte order, mode, axes, extended header), the
 * scan shape, reads of every section (float16 widened, signed samples
 * settled). Input: scan rows (u8), scan columns (u8), then the .mrc. */
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char mrc[512];
    snprintf(mrc, sizeof mrc, "%s", fuzz_path("f.mrc"));
    if (!fuzz_write(mrc, data + 2, size - 2))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(mrc, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
