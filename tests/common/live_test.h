/* What the live receivers' unit tests share: a sink of their own (the
 * recorder's, record.c, is not linked: nothing in these tests pulls it from
 * libqem.a), a replay simulator started as a child, the receiver run
 * against it, and the frames received against a .npy. */
#ifndef QEM_TEST_LIVE_TEST_H
#define QEM_TEST_LIVE_TEST_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "live/live.h"

struct live_sink {
    const char *protocol; /* the protocol the header must name */
    int header_calls;
    uint64_t rows, columns, frames_announced, flagged_count;
    uint32_t flagged[4];
    qem_dtype type;
    json_t *facts;
    uint8_t *data; /* every frame received, in order */
    size_t frame_bytes;
    uint64_t count;
    uint64_t stop_after; /* > 0: qem_live_sink_stopping once this many came */
};

void live_test_sink_free(live_sink *sink);

/* 1 if the message names `want`; else prints both and returns 0. */
int live_test_names(const qem_error *e, const char *want);

typedef qem_status (*live_test_receiver)(const live_address *address,
                                         const live_receive_options *options, live_sink *sink,
                                         qem_error *error);

/* Runs the simulator `script` with `args` (NULL-terminated; it prints
 * "PORT N"), receives from it with `receive` as `protocol`, then stops it. */
qem_status live_test_receive(const char *script, live_protocol protocol,
                             live_test_receiver receive, const char *const *args,
                             live_sink *sink, int idle_ms, qem_error *e);

/* The sink received exactly `frames` frames, equal to the .npy's data. */
void live_test_frames_equal(const live_sink *sink, const char *npy, uint64_t frames);

/* A simulator run through one file's receive(args, sink, idle_ms, error). */
typedef qem_status (*live_test_run)(const char *const *args, live_sink *sink, int idle_ms,
                                    qem_error *e);

/* What every simulator does alike: a stream cut after 5 frames (no end
 * message) ends by the idle limit with those 5; a sink that asks to stop
 * after 3 frames of a slow replay stops the receiver. */
void live_test_cut_and_stop(live_test_run receive);

#endif
