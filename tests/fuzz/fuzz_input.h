/* Shared by the input-family fuzz targets: what opens is described, read
 * frame by frame (hashing as it reads, as a save does), finished, and its
 * source metadata built. */
#ifndef QEM_FUZZ_INPUT_H
#define QEM_FUZZ_INPUT_H

#include <jansson.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "input/input.h"

static inline void fuzz_acquisition_exercise(acquisition *a)
{
    const uint64_t frames = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    if (frames * pixels > FUZZ_MAX_VALUES)
        return;
    qem_error e;
    if (qem_input_stream_begin(a, &e) != QEM_OK)
        return;
    const qem_dtype target = qem_input_stored_dtype(a);
    const size_t frame = (size_t)pixels * qem_dtype_size(target);
    void *out = malloc(frame * 2 + 1);
    int ok = out != NULL;
    /* Two frames at a time, then the last one again (a read out of order). */
    for (uint64_t f = 0; ok && f < frames; f += 2) {
        const uint64_t n = frames - f < 2 ? frames - f : 2;
        ok = qem_input_read(a, f, n, target, out, frame * n, &e) == QEM_OK;
    }
    if (ok && frames)
        qem_input_read(a, frames - 1, 1, target, out, frame, &e);
    free(out);
    if (ok)
        qem_input_stream_finish(a, NULL, NULL, &e);
    json_t *meta = qem_input_source_metadata(a);
    char *text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    free(text);
    json_decref(meta);
}

#endif
