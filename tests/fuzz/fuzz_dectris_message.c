/* DECTRIS SIMPLON stream V1 messages (lib/live/dectris_message.c) as the
 * receiver meets them: each message dispatched by its first part's htype
 * to the header, image (then decoded) or series-end parser, in order, on
 * one series. Input: messages, each a part count (u8, 1 to 64) and its
 * parts, each a length (u32 LE) and its bytes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "live/dectris_message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    qem_dectris_series series;
    memset(&series, 0, sizeof series);
    qem_dectris_part parts[QEM_DECTRIS_MAX_PARTS];
    size_t at = 0;
    while (at < size) {
        const size_t count = data[at++];
        if (count == 0 || count > QEM_DECTRIS_MAX_PARTS)
            break;
        size_t n = 0;
        for (; n < count && at < size; n++) {
            size_t length = fuzz_u32(data, size, &at);
            if (at > size) /* the input ended inside the length */
                at = size;
            if (length > size - at)
                length = size - at;
            parts[n].data = data + at;
            parts[n].size = length;
            at += length;
        }
        if (n == 0)
            break; /* the input ended at the part count */
        qem_error e;
        qem_dectris_kind kind;
        if (qem_dectris_message_kind(&parts[0], series.next_frame, &kind, &e) != QEM_OK)
            break;
        if (kind == QEM_DECTRIS_HEADER) {
            if (series.started || qem_dectris_parse_header(parts, n, &series, &e) != QEM_OK)
                break;
            if (qem_dectris_series_known(&series)) {
                live_header h;
                qem_dectris_series_header(&series, &h);
                const uint64_t pixels = h.detector[0] * h.detector[1];
                if (h.flagged_count && h.flagged[h.flagged_count - 1] >= pixels)
                    __builtin_trap(); /* a flagged pixel lies on the detector */
                json_decref(h.facts);
            }
        } else if (kind == QEM_DECTRIS_END) {
            qem_dectris_parse_end(parts, n, &series, &e);
            break;
        } else {
            qem_dectris_image im;
            if (qem_dectris_parse_image(parts, n, &series, &im, &e) != QEM_OK)
                break;
            if (im.frame_bytes > 4u * FUZZ_MAX_VALUES)
                continue; /* a large valid frame: its size, not its decision, costs */
            uint8_t *out = malloc(im.frame_bytes + 1), *scratch = malloc(im.frame_bytes + 1);
            if (out && scratch &&
                qem_dectris_decode_image(&im, out, im.frame_bytes, scratch, im.frame_bytes, &e) ==
                    QEM_OK &&
                im.encoding == QEM_DECTRIS_ENC_RAW && memcmp(out, im.blob, im.frame_bytes))
                __builtin_trap(); /* raw little-endian samples pass through as they are */
            free(out);
            free(scratch);
        }
    }
    qem_dectris_series_free(&series);
    return 0;
}
