/* Test-side writer of DECTRIS stream V2 messages (self-described CBOR), with
 * nothing but libc and liblz4: the CBOR heads the parsers meet, RFC 8746
 * arrays raw or in DECTRIS's compressed byte string (lz4 in the HDF5
 * framing, bslz4 by the bitshuffle definition), and whole start, image and
 * end messages. unit_live_dectris2 and the fuzz seeds build their inputs
 * with it. */
#ifndef QEM_TEST_CBOR_BUILD_H
#define QEM_TEST_CBOR_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct cbw {
    uint8_t *bytes;
    size_t size, capacity;
} cbw;

void cbw_free(cbw *w);
void cbw_raw(cbw *w, const void *data, size_t size);
/* A head: major type 0-7 and its argument, in the shortest form. */
void cbw_head(cbw *w, unsigned major, uint64_t arg);
void cbw_uint(cbw *w, uint64_t v);
void cbw_text(cbw *w, const char *text);
void cbw_bytes(cbw *w, const void *data, size_t size);
void cbw_array(cbw *w, uint64_t items);
void cbw_map(cbw *w, uint64_t pairs);
void cbw_tag(cbw *w, uint64_t tag);
void cbw_double(cbw *w, double v);
/* d9 d9 f7: tag 55799, what every message starts with. */
void cbw_self_described(cbw *w);

/* Bitshuffle + LZ4 in the HDF5 filter's framing (`block` elements a
 * block, a multiple of 8; the fewer than 8 left stored as they are); LZ4 in
 * the HDF5 LZ4 filter's framing (`block` bytes a block, stored as it is
 * where LZ4 does not shrink it). Malloc'ed; *size set. */
uint8_t *cbw_bslz4(const void *data, size_t elements, unsigned element_size, size_t block,
                   size_t *size);
uint8_t *cbw_lz4_hdf5(const void *data, size_t bytes, size_t block, size_t *size);

/* tag 40 [[rows, columns], tag `typed` (content)], the content the bytes
 * or, with `algorithm`, tag 56500 [algorithm, element, bytes]. */
void cbw_multidim(cbw *w, uint64_t rows, uint64_t columns, uint64_t typed, const char *algorithm,
                  uint64_t element, const void *data, size_t size);

/* A start message of series `series`, "u-1", rows x columns of `dtype`
 * ("uint8", "uint16", "uint32"), `images` images, channel "threshold_1",
 * and, with `mask` (rows x columns uint32), its pixel mask. */
void cbw_start(cbw *w, uint64_t series, uint64_t rows, uint64_t columns, const char *dtype,
               uint64_t images, const uint32_t *mask);

/* An image message: channel "threshold_1" holding a raw array of `rows`
 * x `columns` samples of `element_size` bytes (64, 69 or 70 by size). */
void cbw_image(cbw *w, uint64_t series, uint64_t image_id, uint64_t rows, uint64_t columns,
               unsigned element_size, const void *data);

void cbw_end(cbw *w, uint64_t series);

#endif
