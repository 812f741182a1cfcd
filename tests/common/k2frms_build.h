/* Test-side writers of two detector formats no public file here holds,
 * with nothing but libc, from their published descriptions (LiberTEM's
 * readers, src/libertem/io/dataset/k2is.py and frms6.py, are the source of
 * every fact; see the tests that cite them): Gatan K2 IS sector files and
 * PNDetector FRMS6 files. The unit tests and the fuzz seeds build their
 * inputs with these. Every function returns 0 on success and -1 on failure
 * (with a line on stderr). */
#ifndef QEM_TEST_K2FRMS_BUILD_H
#define QEM_TEST_K2FRMS_BUILD_H

#include <stddef.h>
#include <stdint.h>

/* --- Gatan K2 IS ----------------------------------------------------------------- */

#define K2B_SECTORS 8
#define K2B_BLOCK_BYTES 22360 /* 0x5758 */
#define K2B_HEADER_BYTES 40
#define K2B_BLOCKS_PER_FRAME 32
#define K2B_ROWS 1860
#define K2B_COLUMNS 2048
#define K2B_SECTOR_FRAME_BYTES ((uint64_t)K2B_BLOCK_BYTES * K2B_BLOCKS_PER_FRAME)

typedef struct k2b_options {
    uint32_t first_id;   /* frame id of the first whole frame written */
    uint64_t before;     /* whole frames first without the shutter-active flag */
    uint64_t frames;     /* whole frames then with the flag */
    /* Per sector: blocks of the frame before first_id at the start (< 32),
     * blocks of the frame after the last at the end, and whole frames left
     * out at the start (the sector begins at a later frame). */
    unsigned lead_blocks[K2B_SECTORS];
    unsigned trail_blocks[K2B_SECTORS];
    unsigned skip_frames[K2B_SECTORS];
    int write_gtg;       /* <stem>.gtg beside the sectors */
    int no_shutter;      /* no block carries the shutter-active flag */
} k2b_options;

/* The 12-bit value of frame `id` at frame row `row`, column `column`. */
uint16_t k2b_value(uint64_t id, uint64_t row, uint64_t column);
/* Writes <dir>/<stem>1.bin ... <stem>8.bin (and <stem>.gtg). */
int k2b_write(const char *dir, const char *stem, const k2b_options *o);
/* The 40-byte header of block `b` (0..31) of frame `id` in sector `s`. */
void k2b_header(uint8_t out[40], unsigned s, unsigned b, uint32_t id, uint32_t count, int shutter);

/* --- PNDetector FRMS6 ------------------------------------------------------------- */

#define F6B_MAX_FILES 8

typedef struct f6b_options {
    uint64_t width, height;   /* the stored (folded) frame */
    uint64_t dark_frames;     /* in _000 */
    uint64_t frames[F6B_MAX_FILES]; /* in _001, _002, ... */
    size_t data_files;
    int omit_count;           /* leave the headers' frame count 0 (older files) */
    int write_hdr;
    uint64_t scan_rows, scan_columns; /* stemimagesize; 0: not stated */
    uint64_t bin;             /* readoutmode's bin; 0: not stated */
    int state_signal;         /* signalframes = the data frames */
} f6b_options;

/* The stored value of signal frame `frame` at stored row `y`, column `x`
 * (dark frames: `frame` = 100000 + their index). */
uint16_t f6b_value(uint64_t frame, uint64_t y, uint64_t x);
/* Writes <dir>/<stem>.hdr and <stem>_000.frms6, <stem>_001.frms6, ... */
int f6b_write(const char *dir, const char *stem, const f6b_options *o);
/* The 1024-byte file header. */
void f6b_file_header(uint8_t out[1024], uint64_t width, uint64_t height, uint64_t frames);

#endif
