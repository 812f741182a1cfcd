/* DECTRIS SIMPLON stream V1 messages (`dectris_zmq.c` receives them):
 * pure, bounded parsers of a message's parts and the image decoders
 * (raw, LZ4, bitshuffle + LZ4 in the HDF5 filter's framing). No libzmq:
 * a message is an array of (pointer, length) parts. Every refusal is
 * QEM_E_STREAM, naming the frame where an image is concerned. */
#ifndef QEM_LIVE_DECTRIS_MESSAGE_H
#define QEM_LIVE_DECTRIS_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "live/live.h"
#include "qem.h"

#define QEM_DECTRIS_PROTOCOL "dectris-stream-v1"

/* The most parts a message may have: a header's 2 + 2 per appendix. */
#define QEM_DECTRIS_MAX_PARTS 64
/* The largest detector side accepted (rows or columns). */
#define QEM_DECTRIS_MAX_SIDE 65536u

typedef struct qem_dectris_part {
    const void *data;
    size_t size;
} qem_dectris_part;

typedef enum qem_dectris_kind {
    QEM_DECTRIS_HEADER = 1, /* dheader-1.0 */
    QEM_DECTRIS_IMAGE = 2,  /* dimage-1.0 */
    QEM_DECTRIS_END = 3     /* dseries_end-1.0 */
} qem_dectris_kind;

/* One series, from its header to its end. */
typedef struct qem_dectris_series {
    int started;            /* a header was parsed */
    uint64_t series;        /* the header's series number */
    uint64_t rows, columns; /* 0 until the config or the first image states them */
    qem_dtype sample_type;  /* QEM_DTYPE_NONE until known */
    uint64_t frames;        /* nimages * ntrigger; 0 = not stated */
    uint32_t *flagged;      /* ascending, from dpixelmask-1.0 */
    uint64_t flagged_count;
    json_t *facts;          /* header_detail, the config, the appendices' htypes */
    uint64_t next_frame;    /* the frame number the next image must carry */
} qem_dectris_series;

/* An image message whose JSON parts passed every rule. */
typedef struct qem_dectris_image {
    uint64_t frame;
    int encoding;          /* QEM_DECTRIS_ENC_* */
    unsigned element_size; /* bytes per sample */
    const uint8_t *blob;
    size_t blob_size;
    size_t frame_bytes; /* rows * columns * element_size */
} qem_dectris_image;

enum {
    QEM_DECTRIS_ENC_RAW = 1,      /* "<" */
    QEM_DECTRIS_ENC_LZ4 = 2,      /* "lz4<" */
    QEM_DECTRIS_ENC_BSLZ4 = 3     /* "bs32-lz4<", "bs16-lz4<", "bs8-lz4<" */
};

/* Which message `first` (a message's first part) opens; QEM_E_STREAM when
 * it is not a JSON object with a known htype. `next_frame` names the
 * frame expected, for the message. */
qem_status qem_dectris_message_kind(const qem_dectris_part *first, uint64_t next_frame,
                                    qem_dectris_kind *kind, qem_error *error);

/* A series header (dheader-1.0 + config + appendices) into `series`,
 * which must be zeroed (or freed) first. */
qem_status qem_dectris_parse_header(const qem_dectris_part *parts, size_t count,
                                    qem_dectris_series *series, qem_error *error);

/* 1 once the detector's shape and sample type are known (a "none" header
 * leaves them to the first image). */
int qem_dectris_series_known(const qem_dectris_series *series);

/* The sink's view of `series`: pointers into it, and a new reference to
 * its facts (which the sink takes). */
void qem_dectris_series_header(const qem_dectris_series *series, live_header *header);

void qem_dectris_series_free(qem_dectris_series *series);

/* An image message's four parts checked against `series` (which adopts
 * the shape and type of the first image when its header did not state
 * them); on success `series->next_frame` moves past the frame. */
qem_status qem_dectris_parse_image(const qem_dectris_part *parts, size_t count,
                                   qem_dectris_series *series, qem_dectris_image *image,
                                   qem_error *error);

/* The image's samples into `out` (exactly `image->frame_bytes` bytes,
 * native order); `scratch` holds one bitshuffle block (at least
 * `image->frame_bytes` bytes; unused by the other encodings). */
qem_status qem_dectris_decode_image(const qem_dectris_image *image, void *out, size_t out_size,
                                    void *scratch, size_t scratch_size, qem_error *error);

/* dseries_end-1.0 for `series`. */
qem_status qem_dectris_parse_end(const qem_dectris_part *parts, size_t count,
                                 const qem_dectris_series *series, qem_error *error);

/* Bitshuffle's inverse for one block of `elements` (a multiple of 8)
 * samples of `element_size` bytes: bit b of byte k of element e is bit
 * e % 8 of byte e / 8 of row 8k + b, each row elements / 8 bytes long. */
void qem_bitunshuffle(const uint8_t *in, uint8_t *out, size_t elements, unsigned element_size);

#endif
