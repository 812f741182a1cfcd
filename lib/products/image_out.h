/* Product image writers: virtual images, mean diffraction patterns and
 * centre-of-mass maps, written in the format the file extension names.
 *
 *  - .npy: the exact dtype and shape, bit for bit.
 *  - .tif/.tiff: 32-bit IEEE float, one page per component. Every value is
 *    converted to float32 (round to nearest), so integer sums above 2^24
 *    and float64 values lose precision there; .npy keeps them exact.
 *  - .png: 8-bit grayscale for viewing, 2-D only, percentile contrast (the
 *    rule is in image_out.c).
 *
 * Every format is published atomically: the file appears complete or not
 * at all, an existing destination is never replaced (QEM_E_EXISTS), and no
 * temporary file is left behind on any failure. */
#ifndef QEM_PRODUCTS_IMAGE_OUT_H
#define QEM_PRODUCTS_IMAGE_OUT_H

#include <stdint.h>

#include "qem.h"

typedef struct product_array {
    qem_dtype dtype;  /* UINT8, UINT16, UINT32, UINT64, FLOAT32 or FLOAT64 */
    unsigned ndim;    /* 2, or 3 with shape[2] components (pages) */
    uint64_t shape[3];
    const void *data; /* C order */
} product_array;

/* Writes `a` to `path`, format by extension (.npy exact, .tif/.tiff float32,
 * .png 8-bit); never overwrites; nothing is left on failure. Unknown
 * extensions and malformed arrays are QEM_E_INVALID_ARGUMENT; sizes that
 * overflow or exceed a format's limits are QEM_E_LIMIT. */
qem_status qem_product_write_image(const char *path, const product_array *a, qem_error *error);

/* The format the extension selects, for messages/--json: "npy", "tiff",
 * "png", or NULL if unknown. The match ignores case. */
const char *qem_product_image_format(const char *path);

#endif
