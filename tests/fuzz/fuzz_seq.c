/* A Norpix .seq: the header, every timestamp, the companions, a Celeritas
 * pair and its XML, reads of every frame. Input: scan rows (u8), scan
 * columns (u8), a mode (u8: even, a plain c.seq; odd, the top half
 * c_Top_1.seq of a pair), the XML's length (u32 LE) and bytes (written as
 * the Config.Metadata.xml beside it when not empty), the second file's
 * length (u32 LE) and bytes (the bottom half; for a plain sequence its
 * dark reference when not empty), then the first file. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

/* Writes `n` bytes as `name`, or removes it when `n` is 0. */
static int put(const char *name, const uint8_t *data, size_t n, char *path, size_t size)
{
    snprintf(path, size, "%s", fuzz_path(name));
    if (!n) {
        unlink(path);
        return 1;
    }
    return fuzz_write(path, data, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const int pair = data[2] & 1;
    size_t at = 3;
    size_t xml = fuzz_u32(data, size, &at);
    if (at > size)
        at = size;
    if (xml > size - at)
        xml = size - at;
    const uint8_t *xml_bytes = data + at;
    at += xml;
    size_t second = fuzz_u32(data, size, &at);
    if (at > size)
        at = size;
    if (second > size - at)
        second = size - at;
    const uint8_t *second_bytes = data + at;
    at += second;
    char path[512];
    /* Only the files of this input's mode exist. */
    put("c.seq", NULL, 0, path, sizeof path);
    put("c.seq.dark.mrc", NULL, 0, path, sizeof path);
    put("c.seq.Config.Metadata.xml", NULL, 0, path, sizeof path);
    put("c_Top_1.seq", NULL, 0, path, sizeof path);
    put("c_Bottom_1.seq", NULL, 0, path, sizeof path);
    if (!put("c.seq.Config.Metadata.xml", xml_bytes, xml, path, sizeof path) ||
        !put(pair ? "c_Bottom_1.seq" : "c.seq.dark.mrc", second_bytes, second, path,
             sizeof path) ||
        !put(pair ? "c_Top_1.seq" : "c.seq", data + at, size - at, path, sizeof path))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (size > at && qem_input_open(path, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
