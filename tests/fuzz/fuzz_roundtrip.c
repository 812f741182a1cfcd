/* Random small arrays of every codec's dtype: save, then read back bit
 * for bit; saving the same array twice gives identical files. Layout:
 * dtype byte, four shape bytes, chunk byte, a validity byte, then values
 * (repeated to fill the array). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "qem.h"

static int save(const char *path, qem_dtype dtype, const uint64_t shape[4], uint32_t chunk,
                const uint8_t *valid, const void *values, uint64_t scans)
{
    unlink(path);
    qem_save_options o;
    qem_save_options_init(&o);
    o.chunk_scans = chunk;
    o.valid = valid;
    o.threads = 1;
    qem_error e;
    qem_writer *w = NULL;
    const int ok = qem_writer_create(path, dtype, shape, &o, &w, &e) == QEM_OK &&
                   qem_writer_append(w, values, scans, &e) == QEM_OK &&
                   qem_writer_finish(w, &e) == QEM_OK;
    qem_writer_free(w);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    static const qem_dtype dtypes[3] = {QEM_DTYPE_UINT8, QEM_DTYPE_UINT16, QEM_DTYPE_FLOAT32};
    const qem_dtype dtype = dtypes[data[0] % 3];
    const uint64_t shape[4] = {1u + data[1] % 4, 1u + data[2] % 5, 1u + data[3] % 24,
                               1u + data[4] % 20};
    const uint32_t chunk = 1u + data[5] % 7;
    const uint64_t scans = shape[0] * shape[1], pixels = shape[2] * shape[3];
    const size_t item = qem_dtype_size(dtype), bytes = (size_t)(scans * pixels) * item;
    uint8_t *values = malloc(bytes), *back = malloc(bytes);
    uint8_t *valid = dtype == QEM_DTYPE_FLOAT32 ? NULL : malloc((size_t)pixels);
    const uint8_t *src = data + 7;
    const size_t n = size - 7;
    for (size_t k = 0; k < bytes; k++)
        values[k] = src[k % n];
    for (uint64_t p = 0; valid && p < pixels; p++)
        valid[p] = (uint8_t)((data[6] >> (p % 8)) & 1 || p == 0);
    const char *a = fuzz_path("a.qem");
    char b[512];
    snprintf(b, sizeof b, "%s", fuzz_path("b.qem"));
    if (!save(a, dtype, shape, chunk, valid, values, scans) ||
        !save(b, dtype, shape, chunk, valid, values, scans))
        abort(); /* every array of these dtypes must save */
    qem_error e;
    qem_file *f = NULL;
    if (qem_open(a, NULL, &f, &e) != QEM_OK ||
        qem_read_scans(f, 0, scans, back, bytes, &e) != QEM_OK || memcmp(back, values, bytes))
        abort();
    qem_close(f);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        const int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    if (!same)
        abort(); /* saving is deterministic */
    free(values);
    free(back);
    free(valid);
    return 0;
}
