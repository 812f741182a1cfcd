/* DECTRIS SIMPLON stream V2 messages (`dectris_zmq.c` receives them): one
 * ZeroMQ message holds one self-described CBOR map (tag 55799) whose
 * "type" is "start", "image" or "end". Pure, bounded parsers from a byte
 * buffer into the V1 parser's structures (qem_dectris_series,
 * qem_dectris_image, live_header); libcbor is opened on first use
 * (cbor_loader.h). Every refusal is QEM_E_STREAM, naming the frame where an
 * image is concerned. */
#ifndef QEM_LIVE_DECTRIS_CBOR_H
#define QEM_LIVE_DECTRIS_CBOR_H

#include <stddef.h>
#include <stdint.h>

#include "live/dectris_message.h"
#include "live/live.h"
#include "qem.h"

#define QEM_DECTRIS2_PROTOCOL "dectris-stream-v2"

/* Bounds checked before libcbor builds its tree: data items in a message
 * (each costs libcbor an allocation) and nesting (its frees recurse). */
#define QEM_DECTRIS2_MAX_ITEMS 65536u
#define QEM_DECTRIS2_MAX_DEPTH 32u
/* Channels in a start's "channels" or an image's "data"; a channel name's
 * bytes; a series_unique_id's bytes. */
#define QEM_DECTRIS2_MAX_CHANNELS 16u
#define QEM_DECTRIS2_MAX_NAME 63u

/* The third encoding of V2 ("lz4": LZ4 blocks in the HDF5 LZ4 filter's
 * framing); raw and "bslz4" are V1's QEM_DECTRIS_ENC_RAW and _BSLZ4. */
#define QEM_DECTRIS2_ENC_LZ4_HDF5 4

typedef enum qem_dectris2_kind {
    QEM_DECTRIS2_START = 1,
    QEM_DECTRIS2_IMAGE = 2,
    QEM_DECTRIS2_END = 3
} qem_dectris2_kind;

/* A loaded message: libcbor's tree, freed by qem_dectris2_message_free. */
typedef struct qem_dectris2_message {
    qem_dectris2_kind kind;
    void *root;      /* cbor_item_t *: the tag 55799 */
    const void *map; /* cbor_item_t *: the message's map, inside root */
} qem_dectris2_message;

/* One series, from its start to its end. */
typedef struct qem_dectris2_series {
    qem_dectris_series s; /* shape, type, frames, mask, facts, next_frame */
    char unique_id[QEM_DECTRIS2_MAX_NAME + 1]; /* "" when the start states none */
    char channel[QEM_DECTRIS2_MAX_NAME + 1];   /* the channel recorded; "" until chosen */
} qem_dectris2_series;

/* `data` checked for nesting and size, loaded by libcbor, its type read;
 * `next_frame` names the frame expected, for the refusal. */
qem_status qem_dectris2_load(const void *data, size_t size, uint64_t next_frame,
                             qem_dectris2_message *message, qem_error *error);

void qem_dectris2_message_free(qem_dectris2_message *message);

/* A start message into `series`, which must be zeroed (or freed) first. */
qem_status qem_dectris2_parse_start(const qem_dectris2_message *message,
                                    qem_dectris2_series *series, qem_error *error);

/* An image message checked against `series` (which adopts the shape, type
 * and channel of the first image where the start did not state them); on
 * success `series->s.next_frame` moves past the frame. `image->blob`
 * points into the message. */
qem_status qem_dectris2_parse_image(const qem_dectris2_message *message,
                                    qem_dectris2_series *series, qem_dectris_image *image,
                                    qem_error *error);

/* The image's samples into `out` (exactly `image->frame_bytes`, native
 * order); `scratch` as qem_dectris_decode_image's. */
qem_status qem_dectris2_decode_image(const qem_dectris_image *image, void *out, size_t out_size,
                                     void *scratch, size_t scratch_size, qem_error *error);

/* An end message for `series`. */
qem_status qem_dectris2_parse_end(const qem_dectris2_message *message,
                                  const qem_dectris2_series *series, qem_error *error);

/* The sink's view of `series` (protocol dectris-stream-v2). */
void qem_dectris2_series_header(const qem_dectris2_series *series, live_header *header);

void qem_dectris2_series_free(qem_dectris2_series *series);

#endif
