/* A Gatan Digital Micrograph DM3/DM4 file: the tag tree, the image chosen,
 * its checks, reads of every frame; then the same file as a tag file (a
 * K2 IS .gtg, qem_input_dm_tags). Input: scan rows (u8), scan columns
 * (u8), then the file. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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
    static const char *const names[] = {"SI Dimensions/Size X", "SI Dimensions/Size Y"};
    const int fd = open(path, O_RDONLY);
    input_dm_tags t;
    if (fd >= 0 && qem_input_dm_tags(fd, size - 2, path, names, 2, &t, &e) == QEM_OK) {
        char *text = json_dumps(t.tags, JSON_COMPACT);
        free(text);
        qem_input_dm_tags_free(&t);
    }
    if (fd >= 0)
        close(fd);
    return 0;
}
