/* Gatan K2 IS: eight sector files and a .gtg, the block headers, finding
 * the first frame complete in all sectors, reads of every frame. Input:
 * scan rows (u8), scan columns (u8), eight bytes (sector k's file starts
 * that many blocks, modulo 4, into the body; bit 7 of the first: a .gtg
 * follows, as a little-endian u32 length and its bytes: a DM tag file the
 * DM family's tag walk parses), then the body every sector file is cut
 * from. */
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"

#define BLOCK_BYTES 22360u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10)
        return 0;
    const uint8_t *body = data + 10, *gtg_bytes = NULL;
    size_t body_size = size - 10, gtg_size = 0;
    if (data[2] & 0x80) {
        if (body_size < 4)
            return 0;
        gtg_size = (size_t)body[0] | (size_t)body[1] << 8 | (size_t)body[2] << 16 |
                   (size_t)body[3] << 24;
        if (gtg_size > body_size - 4)
            gtg_size = body_size - 4;
        gtg_bytes = body + 4;
        body += 4 + gtg_size;
        body_size -= 4 + gtg_size;
    }
    char sector[8][512], gtg[512];
    for (unsigned k = 0; k < 8; k++) {
        char name[32];
        snprintf(name, sizeof name, "k_%u.bin", k + 1);
        snprintf(sector[k], sizeof sector[k], "%s", fuzz_path(name));
        size_t skip = (size_t)(data[2 + k] % 4) * BLOCK_BYTES;
        if (skip > body_size)
            skip = body_size;
        if (!fuzz_write(sector[k], body + skip, body_size - skip))
            return 0;
    }
    snprintf(gtg, sizeof gtg, "%s", fuzz_path("k_.gtg"));
    if (gtg_bytes) {
        if (!fuzz_write(gtg, gtg_bytes, gtg_size))
            return 0;
    } else {
        unlink(gtg);
    }
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    qem_error e;
    if (qem_input_open(sector[data[3] % 8], &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
