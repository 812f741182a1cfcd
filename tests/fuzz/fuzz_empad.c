/* An EMPAD acquisition: the XML (expat, the flattened facts, pix_x/pix_y,
 * the raw file's name and containment, calibration) and its raw file.
 * Input: scan rows (u8), scan columns (u8), the XML's length (u32 LE),
 * the XML, then the bytes of "scan.raw" beside it (the name the seeds'
 * XML gives). */
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6)
        return 0;
    size_t at = 2;
    size_t xml_len = fuzz_u32(data, size, &at);
    if (xml_len > size - at)
        xml_len = size - at;
    char xml[512], raw[512];
    snprintf(xml, sizeof xml, "%s", fuzz_path("acq.xml"));
    snprintf(raw, sizeof raw, "%s", fuzz_path("scan.raw"));
    if (!fuzz_write(xml, data + at, xml_len) ||
        !fuzz_write(raw, data + at + xml_len, size - at - xml_len))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(xml, &o, &a, &e) == QEM_OK) {
        fuzz_acquisition_exercise(a);
        if (a->calibration) {
            char *text = json_dumps(a->calibration, JSON_COMPACT);
            free(text);
        }
    }
    qem_input_close(a);
    return 0;
}
