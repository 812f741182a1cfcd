/* PNDetector FRMS6: the .hdr's lines, the file headers of the dark frame
 * file and a data file, the unfolding, reads of every frame. Input: scan
 * rows (u8), scan columns (u8), the .hdr's length (u32 LE; 0 or more than
 * is left: no .hdr), the .hdr, the dark file's length (u32 LE, likewise),
 * the dark file (_000), then the data file (_001). */
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10)
        return 0;
    size_t at = 2;
    size_t hdr_len = fuzz_u32(data, size, &at);
    if (hdr_len > size - at)
        hdr_len = 0;
    const uint8_t *hdr_bytes = data + at;
    at += hdr_len;
    size_t dark_len = size - at >= 4 ? fuzz_u32(data, size, &at) : 0;
    if (dark_len > size - at)
        dark_len = 0;
    const uint8_t *dark_bytes = data + at;
    at += dark_len;
    char hdr[512], dark[512], file[512];
    snprintf(hdr, sizeof hdr, "%s", fuzz_path("f.hdr"));
    snprintf(dark, sizeof dark, "%s", fuzz_path("f_000.frms6"));
    snprintf(file, sizeof file, "%s", fuzz_path("f_001.frms6"));
    if (!fuzz_write(file, data + at, size - at))
        return 0;
    if (hdr_len ? !fuzz_write(hdr, hdr_bytes, hdr_len) : (unlink(hdr), 0))
        return 0;
    if (dark_len ? !fuzz_write(dark, dark_bytes, dark_len) : (unlink(dark), 0))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(file, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
