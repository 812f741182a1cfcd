/*
 * qem: lossless, compact 4D-STEM data.
 *
 * The one public header. A 4D-STEM array has the C-order shape
 * (scan_row, scan_column, detector_row, detector_column); "scans" are the
 * flattened scan positions and "pixels" the flattened detector pixels.
 *
 * Conventions
 *  - Every fallible call returns a qem_status. QEM_OK is zero.
 *  - Calls that can fail take an optional `qem_error *` (may be NULL) that
 *    receives the status and a sentence saying what is wrong and what the
 *    user can do. There is no global or thread-local error state.
 *  - Handles are opaque; every *_free/close accepts NULL.
 *  - Options structs start with `struct_size`; initialise them with the
 *    matching *_init() so that later fields can be added compatibly.
 *  - Buffers are owned by the caller; *_bound() helpers give the size to
 *    allocate where it is not known in advance.
 *  - A read handle may be used from several threads at once.
 */
#ifndef QEM_H
#define QEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define QEM_API
#elif defined(__GNUC__)
#define QEM_API __attribute__((visibility("default")))
#else
#define QEM_API
#endif

#define QEM_VERSION_MAJOR 0
#define QEM_VERSION_MINOR 1
#define QEM_VERSION_PATCH 0
#define QEM_VERSION_STRING "0.1.0"

/* Returns QEM_VERSION_STRING of the library actually linked. */
QEM_API const char *qem_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes. Values are stable: new codes are only ever appended.       */

typedef enum qem_status {
    QEM_OK = 0,
    QEM_E_INVALID_ARGUMENT = 1, /* the caller passed something unusable */
    QEM_E_NO_MEMORY = 2,
    QEM_E_IO = 3,               /* a read, write, sync or link failed */
    QEM_E_EXISTS = 4,           /* the destination already exists */
    QEM_E_CANCELLED = 5,        /* a progress callback asked to stop */
    QEM_E_NOT_QEM = 6,          /* too short, or not the QEMDATA1 signature */
    QEM_E_RETIRED_FORMAT = 7,   /* QGPUSTRM/QGANS: re-export the original */
    QEM_E_HEADER_LENGTH = 8,    /* header length or body start invalid */
    QEM_E_HEADER_CHECKSUM = 9,  /* header SHA-256 mismatch */
    QEM_E_JSON = 10,            /* header is not one JSON object, or repeats a key */
    QEM_E_HEADER = 11,          /* a required header key is missing or wrong */
    QEM_E_UNSUPPORTED = 12,     /* newer container/codec/version: update qem */
    QEM_E_FILE_LENGTH = 13,     /* file length disagrees with the header */
    QEM_E_BODY_CHECKSUM = 14,   /* a 64 MiB body block SHA-256 mismatch */
    QEM_E_LAYOUT = 15,          /* chunk or array layout invalid */
    QEM_E_METADATA = 16,        /* scientific metadata invalid */
    QEM_E_MODEL = 17,           /* invalid model selector or stream span */
    QEM_E_RANS_STATE = 18,      /* rANS initial state out of range */
    QEM_E_RANS_TRUNCATED = 19,  /* a stream ran out of bytes */
    QEM_E_RANS_FINAL = 20,      /* trailing bytes or final state != 2^23 */
    QEM_E_SPARSE = 21,          /* sparse positions not increasing/in range */
    QEM_E_VALUE_RANGE = 22,     /* decoded value does not fit the dtype */
    QEM_E_SPATIAL = 23,         /* spatial-sum index malformed or wrong */
    QEM_E_NPY = 24,             /* .npy file malformed or not accepted */
    QEM_E_NOT_YET = 25,         /* recognised but not implemented yet */
    QEM_E_WRONG_CODEC = 26,     /* operation not meaningful for this codec */
    QEM_E_CHANGED = 27,         /* the file changed while it was being read */
    QEM_E_LIMIT = 28            /* a size exceeds what qem accepts */
} qem_status;

/* A short, static description of a status (never NULL). */
QEM_API const char *qem_strerror(qem_status status);

typedef struct qem_error {
    qem_status status;
    char message[480]; /* NUL-terminated, one or two sentences */
} qem_error;

/* Progress: `done` of `total` units of work. Return nonzero to cancel;
 * the call then fails with QEM_E_CANCELLED and leaves nothing behind. */
typedef int (*qem_progress_fn)(void *user, uint64_t done, uint64_t total);

/* ------------------------------------------------------------------------ */
/* Types                                                                    */

typedef enum qem_dtype {
    QEM_DTYPE_NONE = 0,
    QEM_DTYPE_UINT8 = 1,
    QEM_DTYPE_UINT16 = 2,
    QEM_DTYPE_FLOAT32 = 3
} qem_dtype;

/* Bytes per element, 0 for QEM_DTYPE_NONE. */
QEM_API size_t qem_dtype_size(qem_dtype dtype);
/* "uint8", "uint16", "float32" or "none". */
QEM_API const char *qem_dtype_name(qem_dtype dtype);

typedef enum qem_codec {
    QEM_CODEC_NONE = 0,
    QEM_CODEC_INTEGER = 1, /* runtime-column-rans-spatial-v2 */
    QEM_CODEC_FLOAT32 = 2, /* float32-bit-lanes-rans-v1 */
    QEM_CODEC_SCALED = 3   /* scaled-uint16-column-rans-v1 */
} qem_codec;

/* The codec identifier as written in files. */
QEM_API const char *qem_codec_name(qem_codec codec);

/* ------------------------------------------------------------------------ */
/* Reading .qem files                                                       */

typedef struct qem_file qem_file;

typedef enum qem_body_check {
    /* Check every 64 MiB body block's SHA-256 while opening (default). */
    QEM_BODY_CHECK_ON_OPEN = 0,
    /* Check each block the first time a read touches it; every block is
     * still checked before any decoder sees its bytes. Opening is cheap. */
    QEM_BODY_CHECK_ON_READ = 1
} qem_body_check;

typedef struct qem_open_options {
    size_t struct_size;
    qem_body_check body_check;
    int threads; /* decode threads per call; 0 = OpenMP default */
} qem_open_options;

QEM_API void qem_open_options_init(qem_open_options *options);

typedef struct qem_file_info {
    qem_codec codec;
    qem_dtype dtype;    /* logical dtype of the measurements */
    uint64_t shape[4];  /* scan_row, scan_column, detector_row, detector_column */
    uint64_t scans;     /* shape[0] * shape[1] */
    uint64_t pixels;    /* shape[2] * shape[3] */
    uint64_t file_bytes;
    uint64_t header_bytes;
    uint64_t body_bytes;
    uint64_t logical_bytes; /* scans * pixels * dtype size */
    uint64_t chunk_count;
    uint64_t valid_pixels;  /* detector pixels marked valid */
    uint32_t spatial_fields; /* F: 8x8 then 32x32 tiles (integer codec) */
} qem_file_info;

/* Opens and validates a .qem file: envelope, header checksum, JSON
 * (duplicate keys refused), required keys, codec layout, file length and
 * (by default) every body block checksum. Nothing is decoded. */
QEM_API qem_status qem_open(const char *path, const qem_open_options *options,
                            qem_file **out, qem_error *error);
QEM_API void qem_close(qem_file *file);

QEM_API void qem_get_info(const qem_file *file, qem_file_info *info);

/* The exact header bytes (JSON, not NUL-terminated) and their length. */
QEM_API const char *qem_header_json(const qem_file *file, size_t *length);

/* A JSON object summarising the file for people and scripts: container,
 * codec, shape, dtype, chunks, sizes and compression ratio, validity, and
 * the scientific metadata (schema, coverage, processing, calibrated axes,
 * microscope quantities and calibration overrides, kept apart). Returns a
 * NUL-terminated string to release with qem_free(), or NULL if out of
 * memory. */
QEM_API char *qem_summary_json(const qem_file *file);

/* Releases memory the library returned. */
QEM_API void qem_free(void *pointer);

/* Writes `pixels` bytes, 1 where the detector pixel is valid. */
QEM_API qem_status qem_get_valid_mask(const qem_file *file, uint8_t *mask, size_t mask_size);

/* Chunk `index`: its first flattened scan and scan count. */
QEM_API qem_status qem_get_chunk(const qem_file *file, uint64_t index, uint64_t *first_scan,
                                 uint64_t *scans);

/* Bytes needed for `scans` scan positions in the file's dtype. */
QEM_API uint64_t qem_read_scans_bound(const qem_file *file, uint64_t scans);

/* Decodes scans [first_scan, first_scan + count) into `out`, C order
 * (scan, detector_row, detector_column), in the file's dtype. Integer
 * codec only for now. Memory used beyond `out` is one chunk's arrays plus
 * one 512-scan block of a pixel group per thread. */
QEM_API qem_status qem_read_scans(qem_file *file, uint64_t first_scan, uint64_t count, void *out,
                                  size_t out_size, qem_error *error);

typedef struct qem_verify_options {
    size_t struct_size;
    int threads; /* 0 = OpenMP default */
    qem_progress_fn progress;
    void *progress_user;
} qem_verify_options;

QEM_API void qem_verify_options_init(qem_verify_options *options);

typedef struct qem_verify_report {
    uint64_t body_blocks_checked;
    uint64_t streams_decoded;
    uint64_t spatial_values_checked;
    uint64_t samples_decoded;
} qem_verify_report;

/* Checks everything: every body block checksum, every count stream decoded
 * to completion with all rANS rules, every value within the dtype, and every
 * spatial sum recomputed from the decoded counts. Stops at the first failure. */
QEM_API qem_status qem_verify(qem_file *file, const qem_verify_options *options,
                              qem_verify_report *report, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Writing .qem files (integer codec)                                       */

typedef struct qem_writer qem_writer;

typedef struct qem_save_options {
    size_t struct_size;
    /* Scans per chunk; 0 = 512. The source window held in memory is
     * chunk_scans * pixels * dtype size. */
    uint32_t chunk_scans;
    int threads; /* 0 = OpenMP default */
    /* `pixels` bytes, nonzero = valid; NULL = every pixel valid. Validity
     * only changes the spatial sums, never the stored counts. */
    const uint8_t *valid;
    /* Short name of the source format recorded as source_format ("npy"). */
    const char *source_format;
    qem_progress_fn progress;
    void *progress_user;
} qem_save_options;

QEM_API void qem_save_options_init(qem_save_options *options);

/* Starts writing `dest` (must end in .qem and must not exist). Nothing is
 * visible under `dest` until qem_writer_finish succeeds. */
QEM_API qem_status qem_writer_create(const char *dest, qem_dtype dtype, const uint64_t shape[4],
                                     const qem_save_options *options, qem_writer **out,
                                     qem_error *error);

/* Appends `count` scans, C order, in the writer's dtype. */
QEM_API qem_status qem_writer_append(qem_writer *writer, const void *scans, uint64_t count,
                                     qem_error *error);

/* Encodes what remains, writes the file and publishes it atomically: the
 * file appears complete under `dest` or not at all. */
QEM_API qem_status qem_writer_finish(qem_writer *writer, qem_error *error);

/* Frees the writer; an unfinished file is discarded without a trace. */
QEM_API void qem_writer_free(qem_writer *writer);

/* ------------------------------------------------------------------------ */
/* .npy files                                                               */

typedef struct qem_npy qem_npy;

typedef struct qem_npy_info {
    qem_dtype dtype;
    char descr[16];      /* the header's descr, e.g. "<u2" */
    unsigned ndim;
    uint64_t shape[8];
    uint64_t data_offset; /* byte offset of the first element */
    uint64_t elements;
} qem_npy_info;

/* Opens a C-order little-endian .npy of uint8 (|u1, also bool |b1),
 * uint16 (<u2) or float32 (<f4). Fortran order, big-endian and other dtypes
 * are refused with guidance; so is a file shorter than its header says. */
QEM_API qem_status qem_npy_open(const char *path, qem_npy **out, qem_error *error);
QEM_API void qem_npy_close(qem_npy *npy);
QEM_API void qem_npy_get_info(const qem_npy *npy, qem_npy_info *info);
/* Reads `count` elements starting at element `first` (flat C order). */
QEM_API qem_status qem_npy_read(qem_npy *npy, uint64_t first, uint64_t count, void *out,
                                qem_error *error);

/* Reads a 2D detector mask of the given shape (bool or uint8, values 0/1
 * only) into `mask` (rows * columns bytes, 1 = set). */
QEM_API qem_status qem_npy_read_mask(const char *path, uint64_t rows, uint64_t columns,
                                     uint8_t *mask, qem_error *error);

/* Streaming .npy writer, published atomically like .qem files. */
typedef struct qem_npy_writer qem_npy_writer;
QEM_API qem_status qem_npy_writer_create(const char *dest, qem_dtype dtype, unsigned ndim,
                                         const uint64_t *shape, qem_npy_writer **out,
                                         qem_error *error);
QEM_API qem_status qem_npy_writer_append(qem_npy_writer *writer, const void *data, uint64_t count,
                                         qem_error *error);
QEM_API qem_status qem_npy_writer_finish(qem_npy_writer *writer, qem_error *error);
QEM_API void qem_npy_writer_free(qem_npy_writer *writer);

/* ------------------------------------------------------------------------ */
/* Whole-file conveniences (what the CLI uses)                              */

/* Saves a 4D uint8/uint16 .npy as .qem, reading one chunk of scans at a
 * time. Peak memory: about 3 * chunk_scans * pixels * 2 bytes. */
QEM_API qem_status qem_save_npy(const char *source, const char *dest,
                                const qem_save_options *options, qem_error *error);

typedef struct qem_export_options {
    size_t struct_size;
    int threads;
    qem_progress_fn progress;
    void *progress_user;
} qem_export_options;

QEM_API void qem_export_options_init(qem_export_options *options);

/* Writes the decoded array as a 4D .npy, one chunk at a time. */
QEM_API qem_status qem_export_npy(qem_file *file, const char *dest,
                                  const qem_export_options *options, qem_error *error);

#ifdef __cplusplus
}
#endif

#endif /* QEM_H */
