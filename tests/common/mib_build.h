/* Test-side writers of detector files, with nothing but libc: Quantum
 * Detectors Merlin .mib (+ .hdr) of any counter depth, single chip or quad;
 * EMPAD acquisition XML + raw; raw binary with an offset and frame headers.
 * The tests, the fuzz seeds and the benchmark build their inputs with
 * these. Every function returns 0 on success and -1 on failure (with a line
 * on stderr saying what failed). */
#ifndef QEM_TEST_MIB_BUILD_H
#define QEM_TEST_MIB_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"

/* --- Merlin .mib ------------------------------------------------------------ */

typedef struct mibb_options {
    int depth;              /* counter depth: 1 or 6 (U08), 12 (U16), 24 (U32) */
    int quad;               /* 4 chips in a 2x2 layout, 768-byte headers */
    uint64_t width, height; /* 0: 256 x 256, or 512 x 512 for a quad */
    uint64_t frames;
    uint64_t first_number;  /* the first frame's number; 0: 1 */
    /* The samples: `data` (frames x height x width values of the depth's
     * type: uint8, uint16 or uint32, in the host's order, rows as stored),
     * else `fill` once per frame, else mibb_pattern up to `max_value`. */
    const void *data;
    void (*fill)(void *user, uint64_t frame, void *values);
    void *user;
    uint32_t max_value;     /* for the pattern; 0: the counter's largest */
    /* The .hdr beside it (name: .mib replaced by .hdr). */
    int write_hdr;
    uint64_t frames_per_trigger;    /* 0: 1 */
    uint64_t frames_in_acquisition; /* 0: frames */
    /* Variations, for the refusals. */
    const char *data_type;  /* NULL: the depth's ("U08", "U16", "U32"); e.g. "R64" */
    int omit_extended;      /* no "MQ1A,..." extension (older headers: no counter depth) */
    int stated_depth;       /* the extension's counter depth; 0: depth */
} mibb_options;

/* Bytes per sample of a counter depth (1, 2 or 4); 0 if unknown. */
size_t mibb_item(int depth);
/* Frame header bytes (384, or 768 for a quad), frame width and height, and
 * bytes of one record (header + samples). */
uint64_t mibb_header_bytes(const mibb_options *o);
uint64_t mibb_width(const mibb_options *o);
uint64_t mibb_height(const mibb_options *o);
uint64_t mibb_record_bytes(const mibb_options *o);
/* The pattern's value at `pixel` of `frame`: deterministic, in [0, max]. */
uint32_t mibb_pattern(uint64_t frame, uint64_t pixel, uint32_t max);
/* The header of frame `frame` (0-based) into `out` (mibb_header_bytes). */
int mibb_frame_header(const mibb_options *o, uint64_t frame, char *out);
/* Writes `path` (the .mib) and, when asked, its .hdr. */
int mibb_write(const char *path, const mibb_options *o);
/* The .hdr's path for `path` (".mib" replaced, else ".hdr" appended). */
void mibb_hdr_path(const char *path, char *out, size_t size);

/* --- EMPAD ------------------------------------------------------------------- */

#define EMPADB_COLUMNS 128
#define EMPADB_ROWS 128
#define EMPADB_ROWS_STORED 130

typedef struct empadb_options {
    uint64_t scan_rows, scan_columns;
    int state_scan;          /* write <pix_x> and <pix_y> */
    const char *raw_name;    /* as the XML names it; NULL: "scan_x<C>_y<R>.raw" */
    const char *raw_path;    /* where the raw is written; NULL: beside the XML under raw_name;
                                "" : not written */
    const float *frames;     /* rows x columns x 128 x 128; NULL: empadb_value */
    int calibration;         /* write the <iom_measurements> quantities below */
    double voltage_v, camera_length_m, pixel_size_m, diffraction_angle_rad;
} empadb_options;

/* The value the raw file holds at stored row `row` (0..129) of `frame`
 * when no frames are given: frame * 16640 + row * 128 + column, as the
 * arange of RosettaSciIO's test (rows 128 and 129 are the metadata). */
float empadb_value(uint64_t frame, uint64_t row, uint64_t column);
int empadb_write(const char *xml_path, const empadb_options *o);

/* --- raw binary --------------------------------------------------------------- */

typedef struct rawb_options {
    uint64_t shape[4]; /* scan rows, scan columns, detector rows, detector columns */
    qem_dtype dtype;   /* UINT8, UINT16, UINT32, FLOAT32 */
    int big_endian;
    uint64_t offset;       /* bytes before the first frame (filled with 0xD5) */
    uint64_t frame_header; /* bytes before each frame (filled with 0xE7) */
    const void *data;      /* every value in the host's order */
} rawb_options;

int rawb_write(const char *path, const rawb_options *o);

#endif
