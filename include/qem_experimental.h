/*
 * qem_experimental.h: test and benchmark hooks of libqem.
 *
 * NOT a stable interface. What is here exists so that qem's own tests and
 * benchmarks can force a decode path, compute products by the dense
 * reference path, and time the phases of loading; any of it may change or
 * disappear in any release, without a version bump. Programs that only
 * read, write and compute need nothing from this header: include/qem.h
 * is the interface to rely on.
 *
 * Fault injection (environment variables the library reads; tests only):
 *   QEM_RANS_PATH=scalar|avx2|avx2-loads|avx512|auto  forces the decode path of every
 *       file opened without an explicit path (an unknown value, or a path
 *       the CPU lacks, makes qem_open fail);
 *   QEM_FAULT_LINK_PAUSE_MS=N  holds the gap between a pack's two final
 *       links open for N ms (the crash-safety test kills it there);
 *   QEM_FAULT_SAVE_PAUSE_MS=N  pauses a save N ms after its first window
 *       (the test rewrites the source there).
 */
#ifndef QEM_EXPERIMENTAL_H
#define QEM_EXPERIMENTAL_H

#include "qem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- forced decode paths ---------------------------------------------------- */

typedef enum qem_decode_path {
    /* QEM_RANS_PATH, else AVX-512 where the CPU has every extension its
     * decoder uses (AVX512F, BW, CD and VBMI2: Zen 4, Ice Lake and later),
     * else AVX2 (avx2-loads on AMD), else scalar. */
    QEM_DECODE_AUTO = 0,
    QEM_DECODE_SCALAR = 1,
    QEM_DECODE_AVX2 = 2,
    QEM_DECODE_AVX512 = 3,
    /* AVX2 with each gather done by eight scalar loads: faster where
     * vpgatherdd is slow (AMD Zen 1-3); AUTO picks it on AMD. */
    QEM_DECODE_AVX2_LOADS = 4
} qem_decode_path;

/* 1 if this CPU can run `path` (AUTO and SCALAR always). The CPU is
 * examined once, when the program starts. */
QEM_API int qem_decode_path_supported(qem_decode_path path);
/* "auto", "scalar", "avx2", "avx512" or "avx2-loads". */
QEM_API const char *qem_decode_path_name(qem_decode_path path);
/* The path named `name` (as qem_decode_path_name spells it, as does
 * QEM_RANS_PATH) in *path; 0 for a name qem does not know. */
QEM_API int qem_decode_path_from_name(const char *name, qem_decode_path *path);
/* The path an open file decodes on. */
QEM_API qem_decode_path qem_file_decode_path(const qem_file *file);

typedef struct qem_experimental_open_options {
    size_t struct_size;
    qem_decode_path decode_path; /* a path the CPU lacks: QEM_E_UNSUPPORTED */
} qem_experimental_open_options;

QEM_API void qem_experimental_open_options_init(qem_experimental_open_options *options);
/* qem_open with the hooks above (`experimental` may be NULL). */
QEM_API qem_status qem_open_experimental(const char *path, const qem_open_options *options,
                                         const qem_experimental_open_options *experimental,
                                         qem_file **out, qem_error *error);

/* --- the dense reference path of products ------------------------------------ */

typedef enum qem_products_path {
    QEM_PATH_FAST = 0,     /* selected streams/tiles, spatial sums (what qem_products_open does) */
    QEM_PATH_REFERENCE = 1 /* decode windows and sum densely: the check of the fast path */
} qem_products_path;

QEM_API qem_status qem_products_open_path(qem_container *source, const qem_products_options *options,
                                          qem_products_path path, qem_products **out,
                                          qem_error *error);

/* --- timing probes of packs ----------------------------------------------------- */

/* Phases of opening and loading, in milliseconds (negative: not run).
 * Where threads load whole shards, each phase is summed over them. */
typedef struct qem_pack_timings {
    size_t struct_size;          /* set by the caller */
    double metadata;             /* prelude, manifest, index, every range */
    double whole_file_integrity; /* SHA-256 of the file, when an identity is expected */
    double source_read;          /* reading shard payloads and metadata */
    double header_validation;    /* widths/descriptors or compact headers */
    double payload_integrity;    /* SHA-256 of decoded (uint16) or stored (uint8) payloads */
    double descriptor_preparation;
    double decode;               /* LZ4 blocks (uint16 profile only) */
    double resident_copy;
    double resident_ready;       /* open through a loaded, published source */
    double first_diffraction;    /* first selected pattern after loading */
    double first_detector;       /* first virtual detector image after loading */
    uint64_t peak_transient_bytes; /* staging held at once (one shard per loading thread) */
    uint64_t decoded_digests_checked;
} qem_pack_timings;

QEM_API qem_status qem_pack_get_timings(const qem_pack *pack, qem_pack_timings *timings,
                                        qem_error *error);

/* Times the first selected diffraction pattern (scan 0) and the first
 * detector-ready image (a virtual detector over every admitted pixel) on a
 * loaded pack; the results land in qem_pack_timings. */
QEM_API qem_status qem_pack_time_first_access(qem_pack *pack, qem_error *error);

/* A source's first-access timings: a pack's (qem_pack_time_first_access,
 * on a loaded pack; the phases then appear in its summary JSON).
 * QEM_E_WRONG_CODEC for a format without a load phase. */
QEM_API qem_status qem_container_time_first_access(qem_container *source, qem_error *error);

/* Single-pattern reads of a .qem source served from its kept 512-scan
 * blocks (hits) or by decoding a block (misses); 0 and 0 for a pack, whose
 * resident needs no such cache. For the viewer's statistics and tests. */
QEM_API void qem_container_pattern_cache_stats(const qem_container *source, uint64_t *hits,
                                               uint64_t *misses);

/* A .qem source's decoded-column cache (column_cache_bytes): pixels a
 * reduction read from a kept column (hits) or had to decode (misses),
 * columns listed and the bytes held (listed, being filled, or evicted
 * while still in use). All 0 for a pack or with the cache off. */
typedef struct qem_column_cache_stats {
    size_t struct_size; /* set by the caller */
    uint64_t hits, misses;
    uint64_t columns, bytes, limit;
} qem_column_cache_stats;

QEM_API qem_status qem_container_column_cache_stats(const qem_container *source,
                                                    qem_column_cache_stats *stats,
                                                    qem_error *error);

/* A bit-packed copy of a .qem source's counts (or scaled codes) in memory:
 * each pixel's samples in tiles of 32 scans at the tile's own bit width,
 * built from the authenticated body on `threads` threads (0: the
 * source's). Once built, weighted sums (virtual images, detector moves)
 * and single patterns read it instead of decoding rANS streams, with the
 * same results. Like decoding, it refuses a mapped or per-use file changed
 * since it was opened (QEM_E_CHANGED); a copied body's file may change.
 * Fails with
 * QEM_E_LIMIT when it would take more than `limit_bytes` (0: no limit),
 * keeping nothing; QEM_E_WRONG_CODEC for a pack or a float32 file;
 * QEM_E_CANCELLED when `progress` (parts done of all) returns nonzero.
 * Safe while other threads read the source; building twice is a no-op. */
QEM_API qem_status qem_container_build_packed_copy(qem_container *source, uint64_t limit_bytes,
                                                   int threads, qem_progress_fn progress,
                                                   void *progress_user, qem_error *error);

typedef struct qem_packed_copy_stats {
    size_t struct_size; /* set by the caller */
    int ready;          /* built and answering */
    uint64_t bytes;     /* memory it holds */
    double build_ms;    /* how long the build took */
} qem_packed_copy_stats;

/* All 0 for a pack or while no copy is built. */
QEM_API qem_status qem_container_packed_copy_stats(const qem_container *source,
                                                   qem_packed_copy_stats *stats,
                                                   qem_error *error);

#ifdef __cplusplus
}
#endif

#endif /* QEM_EXPERIMENTAL_H */
