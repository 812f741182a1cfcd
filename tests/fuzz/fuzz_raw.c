/* Raw binary through the public options (qem_acquisition_open parses the
 * sample type and checks the combination): shape, type, byte order,
 * offset, frame header, and the file's exact length. Input: scan rows and
 * columns (u8 each), detector rows and columns (u16 LE each), the type's
 * index (u8), the offset and frame header (u32 LE each), then the file. */
#include <string.h>

#include "fuzz_input.h"
#include "qem.h"

static const char *const dtypes[] = {"uint8", "u1",  "|u1", "uint16",  "<u2", ">u2",
                                     "uint32", "<u4", ">u4", "float32", "<f4", ">f4",
                                     "float64", "",   ">u1", "u2"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 15)
        return 0;
    qem_acquisition_options o;
    qem_acquisition_options_init(&o);
    o.raw_shape[0] = data[0];
    o.raw_shape[1] = data[1];
    o.raw_shape[2] = (uint64_t)data[2] | (uint64_t)data[3] << 8;
    o.raw_shape[3] = (uint64_t)data[4] | (uint64_t)data[5] << 8;
    o.raw_dtype = dtypes[data[6] % (sizeof dtypes / sizeof dtypes[0])];
    size_t at = 7;
    o.raw_offset = fuzz_u32(data, size, &at);
    o.raw_frame_header = fuzz_u32(data, size, &at);
    const char *path = fuzz_path("frames.raw");
    if (!fuzz_write(path, data + at, size - at))
        return 0;
    qem_acquisition *q = NULL;
    qem_error e;
    if (qem_acquisition_open(path, &o, &q, &e) == QEM_OK) {
        fuzz_acquisition_exercise(qem_acquisition_input(q));
        char *json = qem_acquisition_json(q, &e);
        qem_free(json);
    }
    qem_acquisition_close(q);
    return 0;
}
