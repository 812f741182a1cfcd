/* A .npy file: header dictionary, dtype, shape, length; what opens is
 * read, and read again as a detector mask of its own shape; then the same
 * file as an acquisition (lib/input/npy.c: the shape rules, refused before
 * any work proportional to the shape, and the reads of a save). */
#include <stdlib.h>

#include "fuzz_input.h"
#include "qem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path("file.npy");
    if (!fuzz_write(path, data, size))
        return 0;
    qem_error e;
    qem_npy *n = NULL;
    if (qem_npy_open(path, &n, &e) != QEM_OK)
        return 0;
    qem_npy_info info = {.struct_size = sizeof info};
    qem_npy_get_info(n, &info, NULL);
    if (info.elements <= FUZZ_MAX_VALUES) {
        void *out = malloc((size_t)info.elements * 4 + 1);
        if (out)
            qem_npy_read(n, 0, info.elements, out, (size_t)info.elements * 4 + 1, &e);
        free(out);
        if (info.ndim == 2 && info.elements) {
            uint8_t *mask = malloc((size_t)info.elements);
            if (mask)
                qem_npy_read_mask(path, info.shape[0], info.shape[1], mask, (size_t)info.elements, &e);
            free(mask);
        }
    }
    qem_npy_close(n);
    acquisition *a = NULL;
    if (qem_input_open(path, NULL, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
