/* A Gatan Digital Micrograph DM3/DM4 file: the tag tree, the image chosen,
 * its checks, reads of every frame. Input: scan rows (u8), scan columns
 * (u8), then the file. */
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *path = fuzz_path("f.dm4");
    if (!fuzz_write(path, data + 2, size - 2))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    memset(&e, 0, sizeof e);
    if (qem_input_open(path, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
