/* Test-side writer of NanoMegas blockfiles (.blo), with nothing but libc,
 * in the layout HyperSpy and LiberTEM read (lib/input/blo.c): a 240-byte
 * little-endian header ("IMGBLO", magic, Data_offset_1, Data_offset_2, DP_SZ,
 * NX, NY, SX, SY, ...), a note, the virtual bright field (NX x NY bytes),
 * then per pattern 0xAA 0x55, the u32 LE pattern number and DP_SZ^2 pixels.
 * The unit test and the fuzz seeds build their blockfiles with it. Returns 0
 * on success, -1 on failure (with a line on stderr). */
#ifndef QEM_TEST_BLO_BUILD_H
#define QEM_TEST_BLO_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct blob_options {
    uint16_t nx, ny, dp; /* scan columns, scan rows, detector side */
    int bits;            /* 8 (0 too), 16 or 32: LE samples */
    unsigned magic;      /* 0: 0x0102 */
    const char *note;    /* after the header; NULL: none */
    double sx, sy;       /* scan step, nm */
    uint32_t offset1;    /* 0: 4096 */
    uint32_t offset2;    /* 0: offset1 + NX x NY, rounded up to 16 */
    /* Pixel values (frames x dp x dp, host order, of the bit depth's
     * type), else blob_value. */
    const void *data;
} blob_options;

/* The pixel value the builder writes without `data`. */
uint32_t blob_value(uint64_t frame, uint64_t pixel, int bits);
/* Bytes the file will hold, and where pattern k's 6-byte header starts. */
uint64_t blob_size(const blob_options *o);
uint64_t blob_record_at(const blob_options *o, uint64_t frame);
int blob_write(const char *path, const blob_options *o);

#endif
