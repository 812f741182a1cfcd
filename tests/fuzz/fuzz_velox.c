/* The Velox EMD metadata qem parses itself (lib/input/velox_meta.c): the
 * /Version document and a frame's Metadata JSON, with the frame count
 * the scan shape is checked against. libhdf5 is not fed random files
 * here (it is not fuzz-safe itself); the HDF5 structure of Velox and
 * Berkeley EMD files is covered by unit_input_velox and unit_input_emd.
 * Input: frames (u16 LE), what (u8: bit 0 set = /Version, else
 * Metadata), then the text (NUL-padded as Velox stores it). */
#include <string.h>

#include "common/error.h"
#include "fuzz_common.h"
#include "input/input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const uint64_t frames = (uint64_t)data[0] | (uint64_t)data[1] << 8;
    const int version = data[2] & 1;
    const char *text = (const char *)data + 3;
    const size_t n = size - 3;
    if (version) {
        json_t *doc = NULL;
        if (qem_input_velox_version(text, n, &doc)) {
            char *dumped = json_dumps(doc, JSON_COMPACT);
            free(dumped);
        }
        json_decref(doc);
        return 0;
    }
    input_velox_meta m;
    qem_error e;
    qem_error_clear(&e);
    if (qem_input_velox_parse_metadata(text, n, frames, "fuzz", &m, &e) == QEM_OK) {
        /* A scan shape stated must be the frames'. */
        if (m.scan[0] && m.scan[0] * m.scan[1] != frames)
            __builtin_trap();
        char *dumped = json_dumps(m.facts, JSON_COMPACT);
        free(dumped);
        qem_input_velox_meta_free(&m);
    }
    return 0;
}
