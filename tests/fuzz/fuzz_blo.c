/* A NanoMegas blockfile: its header, note, every per-pattern header, the
 * scan shape, reads of every pattern. Input: scan rows (u8), scan columns
 * (u8), then the .blo. */
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char blo[512];
    snprintf(blo, sizeof blo, "%s", fuzz_path("f.blo"));
    if (!fuzz_write(blo, data + 2, size - 2))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(blo, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
