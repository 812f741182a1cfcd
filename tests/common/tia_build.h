/* Test-side writer of Thermo Fisher/FEI TIA series files (.ser) and their
 * .emi, with nothing but libc, from the format's published description
 * (C. Boothroyd, "TIA file format", www.er-c.org/cbb/info/TIAformat/):
 *
 *   header: byte order 0x4949 (u16), series id 0x0197 (u16), version
 *   (u16: 0x0210 with 4-byte offsets, 0x0220 with 8-byte), data type id
 *   (u32: 0x4120 spectra, 0x4122 images), tag type id (u32: 0x4152 time,
 *   0x4142 time and position), total and valid number of elements (u32),
 *   the offset array's offset (u32 or u64), number of dimensions (u32);
 *   each dimension array: size (u32), calibration offset and delta (f64),
 *   calibration element (u32), description length (u32) and text, units
 *   length (u32) and text; the offset array: `total` data offsets, then
 *   `total` tag offsets; each 2D element: calibration offset, delta (f64)
 *   and element (u32) for X then Y, data type (u16: 1 uint8, 2 uint16,
 *   3 uint32, 4 int8, 5 int16, 6 int32, 7 float32, 8 float64, 9/10
 *   complex), array size X and Y (u32), then Y rows of X samples; each tag:
 *   tag type (u16), 2 bytes, time (u32), and for 0x4142 the X and Y
 *   positions (f64). Little-endian throughout.
 *
 * The .emi is the bytes "JK\0\2", binary filler, and <ObjectInfo> XML
 * documents. Every function returns 0 on success, -1 on failure. */
#ifndef QEM_TEST_TIA_BUILD_H
#define QEM_TEST_TIA_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct tiab_options {
    uint16_t version;      /* 0: 0x0220 */
    uint32_t data_type_id; /* 0: 0x4122 */
    uint32_t tag_type;     /* 0: 0x4142 */
    uint16_t data_type;    /* 0: 2 (uint16) */
    uint32_t size_x, size_y; /* 0: 8 x 6 */
    uint32_t ndim;         /* dimension arrays written (0, 1 or 2) */
    uint32_t dims[2];      /* their sizes (dimension 1 the fastest) */
    uint32_t total;        /* 0: the product of dims (1 when ndim is 0) */
    uint32_t valid;        /* 0: total */
    int y_first;           /* the tags' positions move in Y first */
    int negative;          /* the pattern minus 500 (signed and float types) */
    int fractional;        /* the pattern plus 0.1 (float64: no float32 holds it) */
    uint32_t gap;          /* filler bytes after each element's tag */
} tiab_options;

/* Bytes per sample of a TIA data type code (0 if unknown). */
size_t tiab_item(uint16_t data_type);
/* The value stored at pixel `pixel` (row * size_x + column, rows as
 * stored) of element `frame`: p = (131 frame + 7 pixel) mod 1000, as
 * uint8 p mod 251, as int8 p mod 120 (- 60 when negative), else p (- 500
 * when negative, + 0.1 when fractional). */
double tiab_value(const tiab_options *o, uint64_t frame, uint64_t pixel);
/* The file's bytes: header, dimension arrays, offset arrays, elements. */
int tiab_write(const char *path, const tiab_options *o);
/* Byte offsets in a file tiab_write made: of the offset array, and of
 * element `k`. */
uint64_t tiab_offsets_at(const tiab_options *o);
uint64_t tiab_element_at(const tiab_options *o, uint64_t k);
/* An .emi holding `count` <ObjectInfo> documents (each the whole
 * "<ObjectInfo>...</ObjectInfo>" text). */
int tiab_write_emi(const char *path, const char *const *documents, size_t count);
/* An <ObjectInfo> document stating the high tension (kV), camera length
 * (m) and microscope, into `out`. */
void tiab_object_info(char *out, size_t size, const char *microscope, const char *kv,
                      const char *camera_m);

#endif
