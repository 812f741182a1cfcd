/* Test-side writers of TVIPS recorder streams (.tvips, split into parts)
 * and Norpix StreamPix sequences (.seq) as Direct Electron cameras write
 * them, Celeritas top/bottom pairs included, from the formats' published
 * descriptions (doc/inputs.md cites them). With nothing but libc; the unit
 * test and the fuzz seeds build their inputs with these. Every function
 * returns 0 on success and -1 on failure (with a line on stderr). */
#ifndef QEM_TEST_TVSEQ_BUILD_H
#define QEM_TEST_TVSEQ_BUILD_H

#include <stddef.h>
#include <stdint.h>

/* The value of pixel (row, column) of frame `frame`, below 2^bits. */
uint32_t tvseqb_value(uint64_t frame, uint64_t row, uint64_t column, unsigned bits);

/* --- TVIPS ------------------------------------------------------------------- */

typedef struct tvipsb_options {
    uint32_t version;       /* 1 or 2; 0: 2 */
    uint32_t width, height; /* samples per row, rows */
    uint32_t bits;          /* 8 or 16 (others written as stated, for refusals) */
    uint32_t frame_header;  /* v2 frame header bytes; 0: 60 */
    uint64_t frames;
    uint64_t frames_per_part; /* 0: all in the first part */
    uint32_t first_rotator;   /* the first frame's rotator index; others + 1 each */
    int time_back_at;         /* > 0: this frame's time goes back one second */
} tvipsb_options;

/* Writes `first` (…_000.tvips) and the parts after it (_001, _002 ...). */
int tvipsb_write(const char *first, const tvipsb_options *o);
/* The path of part `k` of the series whose first part is `first`. */
void tvipsb_part_path(const char *first, unsigned k, char *out, size_t size);

/* --- Norpix .seq ---------------------------------------------------------------- */

typedef struct seqb_options {
    int32_t version;        /* 0: 5 (8192-byte header) */
    uint32_t width, height; /* of a stored image */
    uint32_t bits;          /* 8 or 16 */
    uint32_t frames;        /* images stored */
    uint32_t padding;       /* bytes after the timestamp; 0: up to a multiple of 8192 */
    uint32_t image_format;  /* 0: 100 (monochrome) */
    uint32_t compression;
    int32_t header_size;    /* 0: the version's */
    uint32_t stated_frames; /* 0: frames */
    int ms_out_of_range;    /* the last image's milliseconds 1000 */
    /* Celeritas: the stored images of the half `half` (1 top, 2 bottom) of
     * frames with `prebuffer` blocks each; 0: a plain sequence. */
    int half;
    uint32_t prebuffer;
} seqb_options;

/* Bytes of a stored image's stride (true image size) for `o`. */
uint32_t seqb_true_image_size(const seqb_options *o);
/* Writes a sequence. A plain one stores frame k's pixels as image k; a
 * Celeritas half stores, in image j, block b of logical frame j*prebuffer+b:
 * the top half holds rows 0..h-1 of a frame of 2h rows flipped vertically,
 * the bottom half rows h..2h-1 as they are (h = height / prebuffer). */
int seqb_write(const char *path, const seqb_options *o);
/* Writes <lead>.seq.Config.Metadata.xml stating the SegmentPreBuffer. */
int seqb_write_config_xml(const char *path, uint32_t prebuffer);

#endif
