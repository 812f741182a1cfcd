/* Live acquisition (`qem record`): a detector's network stream received
 * into a .qem while the scan runs.
 *
 * A protocol receiver (merlin.c: Quantum Detectors Merlin TCP; the live
 * module's dectris_zmq.c: DECTRIS SIMPLON stream V1 and V2 over ZeroMQ) parses the
 * detector's messages and hands a recording's sink first the acquisition
 * header, then every frame in order, as native-order samples. The sink
 * (record.c) checks frame numbers and sizes, queues frames in bounded
 * memory and then a spill file, and feeds them through the input layer's
 * exact narrowing into the same writer as `qem save`. */
#ifndef QEM_LIVE_LIVE_H
#define QEM_LIVE_LIVE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "qem.h"

typedef struct live_sink live_sink;

/* What the stream's acquisition header says. */
typedef struct live_header {
    const char *protocol;   /* "merlin-stream", "dectris-stream-v1" or "dectris-stream-v2" */
    uint64_t detector[2];   /* rows, columns */
    qem_dtype sample_type;  /* UINT8, UINT16 or UINT32 (narrowed exactly to uint16) */
    uint64_t scan_shape[2]; /* stated by the header; {0, 0} = not stated */
    uint64_t frames;        /* frames the header announces; 0 = not stated */
    const uint32_t *flagged; /* flagged detector pixels, ascending (pixel_mask != 0) */
    uint64_t flagged_count;
    json_t *facts;          /* what the header said (source_metadata); the sink takes it */
} live_header;

/* Called once, before any frame. The sink copies what it keeps. */
qem_status qem_live_sink_header(live_sink *sink, live_header *header, qem_error *error);

/* Frame `index` (0-based, in the order received) with `pixels` native
 * samples of the header's type; `number` is the frame number the message
 * stated (for messages). Waits while the sink cannot take it (never
 * drops). A frame whose index is not the next one is QEM_E_STREAM. */
qem_status qem_live_sink_frame(live_sink *sink, uint64_t index, const void *pixels, size_t bytes,
                               qem_error *error);

/* 1 once the recording wants the receiver to stop (Ctrl-C, an error on
 * the writing side, every frame received): the receiver returns QEM_OK. */
int qem_live_sink_stopping(const live_sink *sink);

/* Milliseconds a receiver waits for the next message before checking
 * qem_live_sink_stopping again. */
#define LIVE_POLL_MS 100

/* Where to connect: "merlin://HOST[:PORT]", "dectris://HOST[:PORT]" (stream
 * V1) or "dectris2://HOST[:PORT]" (stream V2, CBOR). */
typedef enum live_protocol { LIVE_MERLIN = 1, LIVE_DECTRIS = 2, LIVE_DECTRIS2 = 3 } live_protocol;

typedef struct live_address {
    live_protocol protocol;
    char host[256];
    unsigned port;
} live_address;

#define LIVE_MERLIN_PORT 6342u
#define LIVE_DECTRIS_PORT 9999u
#define LIVE_DECTRIS2_PORT 31001u

qem_status qem_live_parse_url(const char *url, live_address *out, qem_error *error);

/* A receiver: connects, reads the header and frames into the sink until
 * the acquisition ends (QEM_OK), the sink stops it (QEM_OK), the peer
 * closes early (QEM_OK: the sink knows how many frames came), or a
 * message breaks the protocol (QEM_E_STREAM naming the frame). A failure
 * to connect or of the connection is QEM_E_IO. `idle_ms` > 0: no message
 * for that long ends the stream. */
typedef struct live_receive_options {
    int connect_timeout_ms;
    int idle_ms;
} live_receive_options;

qem_status qem_live_receive_merlin(const live_address *address, const live_receive_options *options,
                                   live_sink *sink, qem_error *error);
qem_status qem_live_receive_dectris(const live_address *address,
                                    const live_receive_options *options, live_sink *sink,
                                    qem_error *error);
qem_status qem_live_receive_dectris2(const live_address *address,
                                     const live_receive_options *options, live_sink *sink,
                                     qem_error *error);

/* Reads exactly `size` bytes of the stream into `buf`: QEM_OK; QEM_E_CANCELLED
 * when the sink stops or the stream stays idle (nothing more is read);
 * QEM_E_FILE_LENGTH when the peer closed (`*got` bytes arrived); QEM_E_IO
 * on a failed connection. The Merlin session reads through it, so the
 * fuzzer drives the same parser from memory. */
typedef qem_status (*live_read_fn)(void *reader, void *buf, size_t size, size_t *got,
                                   qem_error *error);

/* The Merlin data port's messages ("MPX," + ten digits + "," + payload):
 * the acquisition header, then frames, into `sink` (merlin.c). */
qem_status qem_live_merlin_session(live_read_fn read, void *reader, const char *where,
                                   live_sink *sink, qem_error *error);

#endif
