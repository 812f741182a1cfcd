/* A LiberTEM raw_csr set: the descriptor (the strict TOML subset, the
 * keys, dtypes, companions' names and containment) and its three files
 * (sizes, row pointers, pixel indices, duplicates adding).
 * Input: scan rows (u8), scan columns (u8), then the descriptor, the
 * indptr file and the indices file each behind its length (u32 LE), then
 * the data file's bytes. They are written as sparse.toml, indptr.raw,
 * coords.raw and values.raw, the names the seeds' descriptors give. */
#include <string.h>

#include "fuzz_input.h"

/* 1 if every integer written in the descriptor is at most 64: a few bytes
 * of descriptor can otherwise ask for frames of 2^26 pixels, whose dense
 * reads are work the fuzzer is not looking for (the limits themselves are
 * unit-tested). Runs of digits and '_' are read as one number. */
static int small_numbers(const uint8_t *text, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] >= '0' && text[i] <= '9') {
            v = v * 10 + (uint64_t)(text[i] - '0');
            if (v > 64)
                return 0;
        } else if (text[i] != '_') {
            v = 0;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t at = 2, lengths[3], starts[3];
    for (int k = 0; k < 3; k++) {
        size_t n = fuzz_u32(data, size, &at);
        if (at > size)
            at = size;
        if (n > size - at)
            n = size - at;
        starts[k] = at;
        lengths[k] = n;
        at += n;
    }
    if (!small_numbers(data + starts[0], lengths[0]))
        return 0;
    static const char *const names[4] = {"sparse.toml", "indptr.raw", "coords.raw", "values.raw"};
    char paths[4][512];
    for (int k = 0; k < 4; k++) {
        snprintf(paths[k], sizeof paths[k], "%s", fuzz_path(names[k]));
        const uint8_t *bytes = k < 3 ? data + starts[k] : data + at;
        const size_t n = k < 3 ? lengths[k] : size - at;
        if (!fuzz_write(paths[k], bytes, n))
            return 0;
    }
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(paths[0], &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
