/* An encoded chunk as a distributed save's writer receives it: parsed (the
 * trailing digest recomputed over the fuzzer's bytes, so that mutations
 * reach the structure checks behind it); one the parser accepts and that
 * is a whole small file's only chunk is written, and the file is opened,
 * read and verified. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sha256.h"
#include "fuzz_common.h"
#include "qem/chunk_blob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 32)
        return 0;
    uint8_t *blob = malloc(size);
    if (!blob)
        return 0;
    memcpy(blob, data, size);
    qem_sha256_oneshot(blob, size - 32, blob + size - 32);
    qem_chunk_blob_header h;
    qem_encoded_chunk view;
    const void *bits = NULL;
    uint64_t nbits = 0;
    qem_error e;
    if (qem_chunk_blob_parse(blob, size, &h, &view, &bits, &nbits, &e) == QEM_OK &&
        h.codec != QEM_CODEC_SCALED && h.first_scan == 0 &&
        h.shape[0] * h.shape[1] * h.shape[2] * h.shape[3] <= FUZZ_MAX_VALUES) {
        const char *path = fuzz_path("chunk.qem");
        unlink(path);
        qem_save_options o;
        qem_save_options_init(&o);
        o.threads = 1;
        qem_writer *w = NULL;
        if (qem_writer_create(path, h.dtype, h.shape, &o, &w, &e) == QEM_OK &&
            qem_writer_append_encoded(w, blob, size, &e) == QEM_OK &&
            qem_writer_finish(w, &e) == QEM_OK) {
            qem_file *f = NULL;
            qem_open_options oo;
            qem_open_options_init(&oo);
            oo.threads = 1;
            if (qem_open(path, &oo, &f, &e) == QEM_OK) {
                qem_file_info info = {.struct_size = sizeof info};
                qem_get_info(f, &info, NULL);
                const size_t n = (size_t)qem_read_scans_bound(f, info.scans);
                void *out = malloc(n ? n : 1);
                if (out)
                    qem_read_scans(f, 0, info.scans, out, n, &e);
                free(out);
                qem_verify(f, NULL, NULL, &e);
                qem_close(f);
            }
        }
        qem_writer_free(w);
        unlink(path);
    }
    free(blob);
    return 0;
}
