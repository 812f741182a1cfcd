/* A whole .qem file, byte for byte: envelope, header checksum, JSON,
 * header rules, body checksums; what opens is verified and read, then
 * read again through a mapped resident body (arrays at the file's own
 * alignment, each chunk's rules checked once). */
#include <stdlib.h>

#include "fuzz_common.h"
#include "qem.h"

static void read_all(qem_file *f)
{
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    if (info.scans * info.pixels > FUZZ_MAX_VALUES || info.pixels == 0)
        return;
    float *out = malloc((size_t)(info.scans * info.pixels) * sizeof *out);
    qem_error e;
    if (out)
        qem_read_values(f, 0, info.scans, out, (size_t)(info.scans * info.pixels) * 4, &e);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path("file.qem");
    if (!fuzz_write(path, data, size))
        return 0;
    qem_error e;
    qem_file *f = NULL;
    if (qem_open(path, NULL, &f, &e) == QEM_OK) {
        qem_verify_report report = {.struct_size = sizeof report};
        qem_verify(f, NULL, &report, &e);
        read_all(f);
        qem_close(f);
        qem_open_options o;
        qem_open_options_init(&o);
        o.resident = QEM_RESIDENT_MAPPED;
        if (qem_open(path, &o, &f, &e) == QEM_OK) {
            read_all(f);
            read_all(f); /* the second read skips the checked rules */
            qem_close(f);
        }
    }
    return 0;
}
