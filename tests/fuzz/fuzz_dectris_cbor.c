/* DECTRIS SIMPLON stream V2 messages (lib/live/dectris_cbor.c) as the
 * receiver meets them: each loaded (well-formedness bounds, libcbor), then
 * dispatched by type to the start, image (then decoded) or end parser, in
 * order, on one series. Input: messages, each a length (u32 LE) and its
 * bytes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "live/dectris_cbor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qem_dectris2_series series;
    memset(&series, 0, sizeof series);
    size_t at = 0;
    while (at < size) {
        size_t length = fuzz_u32(data, size, &at);
        if (at > size)
            break; /* the input ended inside the length */
        if (length > size - at)
            length = size - at;
        const uint8_t *bytes = data + at;
        at += length;
        qem_error e;
        qem_dectris2_message m;
        if (qem_dectris2_load(bytes, length, series.s.next_frame, &m, &e) != QEM_OK)
            break;
        qem_status st = QEM_OK;
        if (m.kind == QEM_DECTRIS2_START) {
            st = series.s.started ? QEM_E_STREAM : qem_dectris2_parse_start(&m, &series, &e);
            if (st == QEM_OK && qem_dectris_series_known(&series.s)) {
                live_header h;
                qem_dectris2_series_header(&series, &h);
                const uint64_t pixels = h.detector[0] * h.detector[1];
                if (h.flagged_count && h.flagged[h.flagged_count - 1] >= pixels)
                    __builtin_trap(); /* a flagged pixel lies on the detector */
                json_decref(h.facts);
            }
        } else if (m.kind == QEM_DECTRIS2_END) {
            qem_dectris2_parse_end(&m, &series, &e);
            st = QEM_E_CANCELLED; /* the series is over */
        } else {
            qem_dectris_image im;
            st = qem_dectris2_parse_image(&m, &series, &im, &e);
            if (st == QEM_OK && im.frame_bytes <= 4u * FUZZ_MAX_VALUES) {
                uint8_t *out = malloc(im.frame_bytes + 1), *scratch = malloc(im.frame_bytes + 1);
                if (out && scratch &&
                    qem_dectris2_decode_image(&im, out, im.frame_bytes, scratch, im.frame_bytes,
                                              &e) == QEM_OK &&
                    im.encoding == QEM_DECTRIS_ENC_RAW && memcmp(out, im.blob, im.frame_bytes))
                    __builtin_trap(); /* raw little-endian samples pass through as they are */
                free(out);
                free(scratch);
            }
        }
        qem_dectris2_message_free(&m);
        if (st != QEM_OK)
            break;
    }
    qem_dectris2_series_free(&series);
    return 0;
}
