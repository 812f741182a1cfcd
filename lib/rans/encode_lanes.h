/* What the paths of qem_count_streams_encode share (encode_many.c): the
 * workspace, a lane's plan (the model chosen, the rows still to try), and
 * the non-rANS streams written from the rows. Internal to lib/rans. */
#ifndef QEM_RANS_ENCODE_LANES_H
#define QEM_RANS_ENCODE_LANES_H

#include "rans/rans.h"

/* x86-64 only, so the rows' uint16 view is little-endian there. */
#if defined(__x86_64__) && defined(__GNUC__)
#define QEM_HAVE_ENCODE_AVX512 1
#endif

/* Room below and above each lane's backwards rANS output: a stream takes
 * at most 4n + 4 bytes (escape and two renormalisation bytes a sample,
 * the final state), and vector stores write 4 bytes below the cursor. */
#define QEM_ENCODE_VECTOR_LANES 32

#define LANE_SCRATCH_BYTES (4 * QEM_STREAM_MAX_SAMPLES + 64)

struct qem_encode_workspace {
    uint16_t column[QEM_STREAM_MAX_SAMPLES];
    uint8_t scratch[4 * QEM_STREAM_MAX_SAMPLES + 8];
    /* Fast path: each lane's histogram of min(value, 32) (zeros counted
     * last, from the others), largest and smallest value ... */
    uint16_t hist[QEM_ENCODE_LANES][QEM_RANS_SYMBOLS + 3];
    uint16_t vmax[QEM_ENCODE_LANES], vmin[QEM_ENCODE_LANES];
    uint32_t sum[QEM_ENCODE_LANES];
    /* ... and the backwards output of a group's encodings (a lane's two
     * tries are two). */
    uint8_t lane_out[2 * QEM_ENCODE_VECTOR_LANES][LANE_SCRATCH_BYTES];
};

/* One lane's choice: the best stream known so far (`bytes` of `model`)
 * and the rANS rows still to try, in order. */
typedef struct lane_plan {
    uint32_t bytes;
    uint8_t model;
    uint8_t attempts; /* 0, 1 or 2 entries of tried[] */
    uint8_t tried[2];
} lane_plan;

/* Writes lane `lane`'s zero, constant, raw or sparse stream from the rows,
 * as its plan's model says (nothing for a rANS model). */
void qem_lane_write_plain(const qem_lane_source *src, size_t lane, uint32_t n,
                          const lane_plan *plan, uint8_t *dst);

#ifdef QEM_HAVE_ENCODE_AVX512
int qem_encode_avx512_supported(void);
void qem_count_streams_encode_avx512(const qem_rans_tables *t, const qem_lane_source *src,
                                     size_t first, unsigned count, uint32_t n,
                                     uint8_t *const *dst, uint32_t *lengths, uint8_t *models,
                                     uint32_t *sums, qem_encode_workspace *ws);
#endif

#endif
