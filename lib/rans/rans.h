/* Count models shared by every .qem codec: one stream holds one detector
 * pixel (or float lane) across up to 512 scans, coded by the model its
 * selector byte names:
 *   253 all zeros (no bytes)      255 one u16 constant
 *   254 one raw u16 per sample    252 sparse events (pos << 7 | value - 1)
 *   0..63 byte-renormalised rANS over the normative 64x33 table
 * The decoder enforces every rule of the specification; the encoder picks
 * the smallest model for each stream. */
#ifndef QEM_RANS_RANS_H
#define QEM_RANS_RANS_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"
#include "qem_experimental.h"

#define QEM_RANS_MODELS 64
#define QEM_RANS_SYMBOLS 33
#define QEM_RANS_ESCAPE 32
#define QEM_RANS_SCALE_BITS 10
#define QEM_RANS_SCALE (1u << QEM_RANS_SCALE_BITS)
#define QEM_RANS_LOW (1u << 23)     /* renormalisation bound and final state */
#define QEM_RANS_HIGH (1u << 31)    /* initial states lie in [LOW, HIGH) */
#define QEM_STREAM_MAX_SAMPLES 512  /* one 512-scan block */

enum {
    QEM_MODEL_SPARSE = 252,
    QEM_MODEL_ZERO = 253,
    QEM_MODEL_RAW = 254,
    QEM_MODEL_CONSTANT = 255
};

/* The normative integer frequencies (rans_table.c). */
extern const uint16_t qem_rans_frequencies[QEM_RANS_MODELS][QEM_RANS_SYMBOLS];

/* Tables derived from the frequencies, built once per reader or writer. */
typedef struct qem_rans_tables {
    uint16_t start[QEM_RANS_MODELS][QEM_RANS_SYMBOLS];
    /* Per slot: freq (bits 0-10) | slot - start (bits 11-20) | symbol (21-26). */
    uint32_t slot[QEM_RANS_MODELS][QEM_RANS_SCALE];
    /* Symbols before the row's closing run of frequency-1 symbols (which
     * includes the escape): 2 for the sparsest rows, 33 where the escape's
     * frequency is above 1. */
    uint8_t head[QEM_RANS_MODELS];
    /* Ideal code length of each symbol in 1/65536 bit, escapes' 16 raw bits
     * included: ranks models without encoding. */
    uint32_t cost[QEM_RANS_MODELS][QEM_RANS_SYMBOLS];
    /* The same costs by symbol, so that one histogram ranks all 64 rows in
     * a few vector steps. n <= 512 samples of at most 26 bits * 65536 each
     * stay below 2^32. */
    uint32_t cost_by_symbol[QEM_RANS_SYMBOLS][QEM_RANS_MODELS];
    /* Per row and symbol: freq | start << 16, what an encoder step needs. */
    uint32_t encode[QEM_RANS_MODELS][QEM_RANS_SYMBOLS];
    /* qem_reference_rans_model of 512 samples by their capped sum. */
    uint8_t reference_model_512[QEM_STREAM_MAX_SAMPLES * QEM_RANS_ESCAPE + 1];
} qem_rans_tables;

void qem_rans_tables_init(qem_rans_tables *tables);
/* The tables every reader and writer uses: built on the process's first
 * decode or encode (pthread_once), read-only after. An open that decodes
 * nothing (qem info) never builds them. */
const qem_rans_tables *qem_rans_tables_shared(void);

/* 1 if `model` is a selector the decoder knows. */
static inline int qem_model_is_valid(unsigned model)
{
    return model < QEM_RANS_MODELS || (model >= QEM_MODEL_SPARSE && model <= QEM_MODEL_CONSTANT);
}

/* Decodes one stream of `n` samples from its exact byte span. Fails with
 * QEM_E_MODEL (unknown selector, span length wrong for the model),
 * QEM_E_RANS_STATE, QEM_E_RANS_TRUNCATED, QEM_E_RANS_FINAL, QEM_E_SPARSE or
 * QEM_E_VALUE_RANGE (a value above `max_value`). No message is recorded:
 * the caller knows which stream this was. */
qem_status qem_count_stream_decode(const qem_rans_tables *tables, unsigned model,
                                   const uint8_t *span, size_t span_size, uint32_t n,
                                   uint32_t max_value, uint16_t *out);

/* --- many streams at once ------------------------------------------------ */

/* Readable bytes every buffer of streams must have after its last stream:
 * SIMD lanes load 4 bytes at a time. */
#define QEM_SPAN_PADDING 16

typedef qem_decode_path qem_rans_path;
#define QEM_RANS_PATH_AUTO QEM_DECODE_AUTO
#define QEM_RANS_PATH_SCALAR QEM_DECODE_SCALAR
#define QEM_RANS_PATH_AVX2 QEM_DECODE_AVX2
#define QEM_RANS_PATH_AVX512 QEM_DECODE_AVX512
#define QEM_RANS_PATH_AVX2_LOADS QEM_DECODE_AVX2_LOADS

/* The path to use: `requested`, else QEM_RANS_PATH from the environment
 * (scalar, avx2, avx2-loads, avx512), else AVX-512 where the CPU has the
 * extensions its decoder uses, else AVX2 (avx2-loads on AMD), else
 * scalar. A path the CPU lacks falls back to scalar. */
qem_rans_path qem_rans_path_resolve(qem_rans_path requested);
int qem_rans_path_supported(qem_rans_path path);
const char *qem_rans_path_name(qem_rans_path path);

typedef struct qem_stream_job {
    unsigned model;
    const uint8_t *span;
    size_t size;
    uint16_t *out; /* sample i goes to out[i * stride] */
    size_t stride; /* 0 or 1: a column of n samples; more: a tile of scan rows */
    int out_zeroed; /* 1: out already holds zeros, so zero streams write nothing
                       and sparse streams only their events */
} qem_stream_job;

/* Decodes `count` streams of `n` samples each (one block), rANS streams
 * side by side in SIMD lanes on the given path. Every span lies in one
 * buffer starting at `base` followed by QEM_SPAN_PADDING readable bytes.
 * Returns the status of the first failing job (its index in *failed, else
 * count), exactly as qem_count_stream_decode would. Jobs whose outputs sit
 * side by side in one tile (out[k + 1] == out[k] + 1, one stride) are
 * written a row of lanes at a time. A failing job's output is undefined. */
qem_status qem_count_streams_decode(const qem_rans_tables *tables, qem_rans_path path,
                                    const uint8_t *base, const qem_stream_job *jobs, size_t count,
                                    uint32_t n, uint32_t max_value, size_t *failed);

/* The same, also counting in *redone the SIMD lanes the scalar decoder had
 * to decode again (a broken rule, or a SIMD decoder's mistake: sound
 * streams must give 0). */
qem_status qem_count_streams_decode_counted(const qem_rans_tables *tables, qem_rans_path path,
                                            const uint8_t *base, const qem_stream_job *jobs,
                                            size_t count, uint32_t n, uint32_t max_value,
                                            size_t *failed, size_t *redone);

/* Scratch bytes qem_rans_encode and qem_count_stream_encode need. */
static inline size_t qem_stream_scratch_bound(uint32_t n)
{
    return 4 * (size_t)n + 8;
}

/* rANS-encodes `n` values with table row `model`, writing backwards into
 * `scratch`. Returns the stream length; the stream starts at *stream. */
size_t qem_rans_encode(const qem_rans_tables *tables, unsigned model, const uint16_t *values,
                       uint32_t n, uint8_t *scratch, size_t scratch_size, const uint8_t **stream);

/* The rANS model the reference heuristic picks (notes §3.4 step 2). */
unsigned qem_reference_rans_model(const uint16_t *values, uint32_t n);
/* The same from the sum of min(value, 32) over the n samples. */
unsigned qem_reference_rans_model_of_sum(uint64_t capped, uint32_t n);

/* Encodes `n` (1..512) values with the model that gives the fewest bytes,
 * never more than the reference heuristic would. Writes at most 2n bytes
 * to `dst` and returns the length; `scratch` holds
 * qem_stream_scratch_bound(n) bytes. */
size_t qem_count_stream_encode(const qem_rans_tables *tables, const uint16_t *values, uint32_t n,
                               uint8_t *dst, uint8_t *model, uint8_t *scratch);

/* --- many streams at once ------------------------------------------------ */

/* Where the lanes of one block come from: sample i of lane l is element
 * i * stride + l of `rows` (uint8 or host-order uint16; the float codec's
 * lanes are the uint16 halves of its bits, low half first, so stride is
 * 2P there). */
typedef struct qem_lane_source {
    const void *rows;
    size_t stride;
    unsigned width; /* bytes per element: 1 or 2 */
    int float_halves; /* rows hold float32 bits; lane 2p + h is half h of pixel p */
} qem_lane_source;

/* The most lanes one call encodes: a band whose rows' pieces (512 bytes
 * of uint16) are read whole, then encoded 32 lanes at a time. */
#define QEM_ENCODE_LANES 256

typedef enum qem_encode_path {
    QEM_ENCODE_AUTO = 0,
    QEM_ENCODE_SCALAR = 1, /* the reference: qem_count_stream_encode per lane */
    QEM_ENCODE_AVX512 = 3
} qem_encode_path;

/* `requested`, else QEM_ENCODE_PATH from the environment (scalar,
 * avx512), else AVX-512 where the CPU has it, else scalar (also for a
 * path the CPU lacks; the writer refuses those and unknown names). */
qem_encode_path qem_encode_path_resolve(qem_encode_path requested);
int qem_encode_path_supported(qem_encode_path path);
const char *qem_encode_path_name(qem_encode_path path);
int qem_encode_path_from_name(const char *name, qem_encode_path *path);

/* Per-thread working memory of qem_count_streams_encode. */
typedef struct qem_encode_workspace qem_encode_workspace;
qem_encode_workspace *qem_encode_workspace_new(void);
void qem_encode_workspace_free(qem_encode_workspace *ws);

/* Encodes lanes first .. first + count - 1 (count <= QEM_ENCODE_LANES) of
 * n (1..512) samples each, lane k's stream to dst[k] (room for 2n bytes),
 * its length to lengths[k] and selector to models[k], and, when `sums` is
 * not NULL, the sum of its samples to sums[k]. Every path writes the bytes
 * qem_count_stream_encode writes for that lane's column. */
void qem_count_streams_encode(const qem_rans_tables *tables, qem_encode_path path,
                              const qem_lane_source *src, size_t first, unsigned count,
                              uint32_t n, uint8_t *const *dst, uint32_t *lengths,
                              uint8_t *models, uint32_t *sums, qem_encode_workspace *ws);

#endif
