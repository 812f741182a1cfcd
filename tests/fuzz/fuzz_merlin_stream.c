/* The Merlin data port's messages (lib/live/merlin.c) from memory: the
 * "MPX," prefixes, the acquisition header, every frame header against the
 * first, numbers, sizes. The sink here stands in for the recorder's and
 * aborts when the parser breaks its contract (a frame of another size, an
 * index out of turn, a frame before the header). Input: the byte stream
 * as the detector would send it. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "live/live.h"

struct live_sink {
    int have_header;
    size_t frame_bytes;
    uint64_t next;
    uint64_t limit;
};

qem_status qem_live_sink_header(live_sink *s, live_header *h, qem_error *error)
{
    (void)error;
    if (s->have_header || !h->detector[0] || !h->detector[1])
        abort();
    s->have_header = 1;
    s->frame_bytes = (size_t)(h->detector[0] * h->detector[1] * qem_dtype_size(h->sample_type));
    json_decref(h->facts);
    h->facts = NULL;
    return QEM_OK;
}

qem_status qem_live_sink_frame(live_sink *s, uint64_t index, const void *pixels, size_t bytes,
                               qem_error *error)
{
    (void)error;
    if (!s->have_header || index != s->next || bytes != s->frame_bytes)
        abort();
    volatile uint8_t touch = 0;
    for (size_t i = 0; i < bytes; i += 4096)
        touch ^= ((const uint8_t *)pixels)[i];
    (void)touch;
    s->next++;
    return QEM_OK;
}

int qem_live_sink_stopping(const live_sink *s)
{
    return s->next >= s->limit;
}

typedef struct memory_reader {
    const uint8_t *data;
    size_t size, at;
} memory_reader;

static qem_status memory_read(void *arg, void *buf, size_t size, size_t *got, qem_error *error)
{
    (void)error;
    memory_reader *m = arg;
    const size_t left = m->size - m->at, n = size < left ? size : left;
    memcpy(buf, m->data + m->at, n);
    m->at += n;
    *got = n;
    return n == size ? QEM_OK : QEM_E_FILE_LENGTH;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memory_reader m = {data, size, 0};
    live_sink sink = {0, 0, 0, 64};
    qem_error e;
    qem_live_merlin_session(memory_read, &m, "merlin://fuzz", &sink, &e);
    return 0;
}
