/* Test-side writer of MRC2014 files, with nothing but libc, from the
 * format's description (https://www.ccpem.ac.uk/mrc_format/mrc2014.php,
 * "Main header" table): a 1024-byte header of 4-byte words in the byte
 * order the machine stamp states, NSYMBT bytes of extended header, then NZ
 * sections of NY rows of NX columns. The unit test and the fuzz seeds build
 * their MRC files with it. Returns 0 on success, -1 on failure. */
#ifndef QEM_TEST_MRC_BUILD_H
#define QEM_TEST_MRC_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct mrcb_options {
    int32_t nx, ny, nz; /* columns, rows, sections */
    int32_t mode;       /* 0 int8, 1 int16, 2 float32, 6 uint16, 12 float16 */
    int big_endian;
    /* Samples (nz x ny x nx, host order, of the mode's type; float16 as
     * their uint16 bits), else mrcb_value. */
    const void *data;
    int32_t nsymbt;      /* extended header bytes (filled with 0xEE) */
    const char *exttyp;  /* 4 characters, or NULL */
    int32_t map[3];      /* MAPC, MAPR, MAPS; {0, 0, 0}: 1, 2, 3 */
    const uint8_t *stamp; /* 4 bytes; NULL: the byte order's */
    float cell[3];       /* CELLA, angstrom */
    const char *label;   /* the first label, or NULL (NLABL 0) */
} mrcb_options;

/* Bytes per sample of a mode (0 for others). */
size_t mrcb_item(int32_t mode);
/* The sample the builder writes without `data`, as its bytes in host order
 * (item bytes at `out`). */
void mrcb_value(int32_t mode, uint64_t index, void *out);
/* The header's 1024 bytes (no data), for a test to change and write. */
void mrcb_header(const mrcb_options *o, uint8_t header[1024]);
int mrcb_write(const char *path, const mrcb_options *o);

#endif
