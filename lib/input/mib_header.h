/* The Merlin frame header and acquisition header (.hdr text), shared by
 * the .mib family (mib.c) and the live Merlin receiver (lib/live/merlin.c),
 * which reads the same records from the detector's data port. */
#ifndef QEM_INPUT_MIB_HEADER_H
#define QEM_INPUT_MIB_HEADER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "qem.h"

/* The fields every frame header must repeat, and its number. */
typedef struct mib_header {
    uint64_t number;
    uint64_t header_bytes;
    uint64_t chips;
    uint64_t width, height;
    char type[8];
    size_t item;    /* bytes per sample */
    char layout[16];
    int depth;      /* counter depth of the extended header; 0 when absent */
    size_t fields;  /* how many comma-separated fields the header has */
} mib_header;

/* Parses one frame header ("MQ1,<number>,<header bytes>,...") of frame
 * `frame` (0-based, for messages naming `path`) from `n` bytes; RAW mode
 * (R64) refused. */
qem_status qem_mib_parse_header(const uint8_t *bytes, size_t n, const char *path, uint64_t frame,
                                mib_header *h, qem_error *error);
/* Parses and checks a header against the first frame's, and its number
 * against `prev_number` (when `have_prev`): numbers must increase. */
qem_status qem_mib_check_header(const uint8_t *bytes, size_t n, const char *path,
                                uint64_t frame, const mib_header *first, int have_prev,
                                uint64_t prev_number, mib_header *h, qem_error *error);
/* The "Key:\tValue" lines of an acquisition header (`size` bytes of
 * `text`, NUL-terminated; modified) as a key -> value object; `fpt` gets
 * "Frames per Trigger" when it is a number, else 0. NULL: no memory. */
json_t *qem_mib_hdr_map(char *text, size_t size, uint64_t *fpt);
/* The header's counter depth, when it states one, against the frames'
 * data type and the frame headers' own depth. */
qem_status qem_mib_hdr_depth(const char *hdr, json_t *map, const mib_header *first,
                             qem_error *error);

#endif
