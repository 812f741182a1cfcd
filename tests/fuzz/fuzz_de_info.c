/* Direct Electron's <dataset>_info.txt (lib/input/de_info.c): the parser
 * alone, then beside a small MRC movie (written here: 2 x 2 uint16
 * sections, MRC2014 header words NX, NY, NZ, MODE, MAPC-MAPS, `MAP `, the
 * little-endian stamp) so the companion, its facts and the scan shape are
 * exercised. Input: scan rows (u8), scan columns (u8), sections (u8, 1 to
 * 16), then the info file. */
#include <string.h>

#include "fuzz_input.h"
#include "input/de_info.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    de_info d;
    qem_error e;
    if (qem_de_info_parse((const char *)data + 3, size - 3, "f_info.txt", &d, &e) == QEM_OK &&
        d.scan_stated && (!d.scan[0] || !d.scan[1]))
        __builtin_trap(); /* a stated scan is positive */
    qem_de_info_free(&d);

    const uint32_t sections = (uint32_t)(data[2] % 16) + 1;
    uint8_t mrc[1024 + 16 * 8];
    memset(mrc, 0, sizeof mrc);
    put32(mrc + 0, 2);
    put32(mrc + 4, 2);
    put32(mrc + 8, sections);
    put32(mrc + 12, 6);
    put32(mrc + 64, 1);
    put32(mrc + 68, 2);
    put32(mrc + 72, 3);
    memcpy(mrc + 208, "MAP ", 4);
    mrc[212] = mrc[213] = 0x44;
    for (uint32_t i = 0; i < sections * 8; i++)
        mrc[1024 + i] = (uint8_t)i;
    char movie[512], info[512];
    snprintf(movie, sizeof movie, "%s", fuzz_path("d_movie.mrc"));
    snprintf(info, sizeof info, "%s", fuzz_path("d_info.txt"));
    if (!fuzz_write(movie, mrc, 1024 + sections * 8) || !fuzz_write(info, data + 3, size - 3))
        return 0;
    input_options o;
    memset(&o, 0, sizeof o);
    o.scan_shape[0] = data[0];
    o.scan_shape[1] = data[1];
    acquisition *a = NULL;
    if (qem_input_open(movie, &o, &a, &e) == QEM_OK)
        fuzz_acquisition_exercise(a);
    qem_input_close(a);
    return 0;
}
