/*
 * qem: lossless, compact 4D-STEM data.
 *
 * The stable public header (qem_experimental.h holds the hooks that may
 * change). A 4D-STEM array has the C-order shape
 * (scan_row, scan_column, detector_row, detector_column); "scans" are the
 * flattened scan positions and "pixels" the flattened detector pixels.
 *
 * Conventions (every call follows them; exceptions are named where they are)
 *  - Every fallible call returns a qem_status (QEM_OK is zero) and takes a
 *    last `qem_error *` (may be NULL) that receives the status and one or
 *    two sentences saying what is wrong and what the user can do. There is
 *    no global or thread-local error state. qem_status_group_of() sorts
 *    statuses into families for bindings.
 *  - Handles are opaque; every close and free function accepts NULL.
 *  - Structs that can grow start with `size_t struct_size`:
 *      options the caller fills: initialise them with the matching *_init();
 *      results the library fills (infos, reports, plans, calibrations,
 *      stats): set struct_size to sizeof the struct you compiled against,
 *      e.g. `qem_file_info info = {.struct_size = sizeof info};`. The library writes at
 *      most struct_size bytes and sets struct_size to the bytes it wrote,
 *      so a caller built against an older, smaller struct is never
 *      overrun, and a newer caller sees which fields an older library
 *      filled. A struct_size of 0 is QEM_E_INVALID_ARGUMENT.
 *    Three small value structs never grow and have no struct_size:
 *    qem_error, qem_quantity and qem_image.
 *  - Buffers are owned by the caller, and every call that writes into one
 *    takes its size in bytes; *_bound() helpers give that size where it is
 *    not obvious (UINT64_MAX where the size does not fit in 64 bits). A
 *    buffer too small is QEM_E_BUFFER_TOO_SMALL, and nothing is written.
 *  - What a file may lack has a `has_*` flag in its info struct, and the
 *    call that gets it returns QEM_E_NOT_RECORDED where the file lacks it
 *    (one calibrated quantity a file does not state is
 *    QEM_CALIBRATION_ABSENT inside a qem_calibration).
 *  - A read handle may be used from several threads at once.
 *  - Test and benchmark hooks (forced decode paths, the dense reference
 *    path, timing probes, fault injection) are not here: they are in
 *    qem_experimental.h, which may change in any release.
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
#define QEM_VERSION_MINOR 2
#define QEM_VERSION_PATCH 0
#define QEM_VERSION_STRING "0.2.0"
/* One comparable number: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define QEM_VERSION_NUMBER (QEM_VERSION_MAJOR * 10000 + QEM_VERSION_MINOR * 100 + QEM_VERSION_PATCH)

/* Returns QEM_VERSION_STRING of the library actually linked. */
QEM_API const char *qem_version(void);
/* Returns QEM_VERSION_NUMBER of the library actually linked, to compare
 * with the header a program was built against. */
QEM_API unsigned qem_version_number(void);

/* ------------------------------------------------------------------------ */
/* Status codes. Values are stable: new codes are only ever appended. The   */
/* [group] after each is what qem_status_group_of() returns for it.         */

typedef enum qem_status {
    QEM_OK = 0,
    QEM_E_INVALID_ARGUMENT = 1, /* the caller passed something unusable [usage] */
    QEM_E_NO_MEMORY = 2, /* [limit] */
    QEM_E_IO = 3, /* a read, write, sync or link failed [io] */
    QEM_E_EXISTS = 4, /* the destination already exists [io] */
    QEM_E_CANCELLED = 5, /* a progress callback asked to stop [cancelled] */
    QEM_E_NOT_QEM = 6, /* too short, or not the QEMDATA1 signature [format] */
    QEM_E_RETIRED_FORMAT = 7, /* QGPUSTRM/QGANS: re-export the original [unsupported] */
    QEM_E_HEADER_LENGTH = 8, /* header length or body start invalid [format] */
    QEM_E_HEADER_CHECKSUM = 9, /* header SHA-256 mismatch [checksum] */
    QEM_E_JSON = 10, /* header is not one JSON object, or repeats a key [format] */
    QEM_E_HEADER = 11, /* a required header key is missing or wrong [format] */
    QEM_E_UNSUPPORTED = 12, /* newer container/codec/version: update qem [unsupported] */
    QEM_E_FILE_LENGTH = 13, /* file length disagrees with the header [format] */
    QEM_E_BODY_CHECKSUM = 14, /* a 64 MiB body block SHA-256 mismatch [checksum] */
    QEM_E_LAYOUT = 15, /* chunk or array layout invalid [format] */
    QEM_E_METADATA = 16, /* scientific metadata invalid [format] */
    QEM_E_MODEL = 17, /* invalid model selector or stream span [format] */
    QEM_E_RANS_STATE = 18, /* rANS initial state out of range [format] */
    QEM_E_RANS_TRUNCATED = 19, /* a stream ran out of bytes [format] */
    QEM_E_RANS_FINAL = 20, /* trailing bytes or final state != 2^23 [format] */
    QEM_E_SPARSE = 21, /* sparse positions not increasing/in range [format] */
    QEM_E_VALUE_RANGE = 22, /* decoded value does not fit the dtype [format] */
    QEM_E_SPATIAL = 23, /* spatial-sum index malformed or wrong [format] */
    QEM_E_NPY = 24, /* .npy file malformed or not accepted [format] */
    QEM_E_NOT_YET = 25, /* recognised but not implemented yet [unsupported] */
    QEM_E_WRONG_CODEC = 26, /* operation not meaningful for this codec [unsupported] */
    QEM_E_CHANGED = 27, /* the file changed while it was being read [io] */
    QEM_E_LIMIT = 28, /* a size exceeds what qem accepts [limit] */
    QEM_E_LOGICAL_CHECKSUM = 29, /* decoded float bits differ from logical_sha256 [checksum] */
    QEM_E_PACK_PRELUDE = 30, /* pack: magic, lengths or index range invalid [format] */
    QEM_E_PACK_CRC = 31, /* pack: manifest CRC-32 mismatch [checksum] */
    QEM_E_PACK_MANIFEST = 32, /* pack: manifest invalid or disagrees with the index [format] */
    QEM_E_PACK_INDEX = 33, /* pack: binary index invalid [format] */
    QEM_E_PACK_RANGE = 34, /* pack: a byte range leaves the file or overlaps [format] */
    QEM_E_PACK_DESCRIPTOR = 35, /* pack: widths, descriptors or compact headers invalid [format] */
    QEM_E_PACK_LZ4 = 36, /* pack: an LZ4 block does not decode exactly [format] */
    QEM_E_PACK_DIGEST = 37, /* pack: a shard digest mismatch [checksum] */
    QEM_E_NOT_RECORDED = 38, /* the file does not record this: raw values, a dark plane, a
                              * detector calibration, a semi-angle [unsupported] */
    QEM_E_PACK_CALIBRATION = 39, /* pack: detector_calibration invalid [format] */
    QEM_E_FILE_DIGEST = 40, /* whole-file SHA-256 differs from the expected identity [checksum] */
    QEM_E_INSUFFICIENT_MEMORY = 41, /* the plan needs more memory than is available [limit] */
    QEM_E_INSUFFICIENT_DISK = 42, /* the plan needs more disk than is available [limit] */
    QEM_E_NONCONSTANT_EXCLUDED = 43, /* an excluded pixel's raw value varies (uint8 profile) [unsupported] */
    QEM_E_BUFFER_TOO_SMALL = 44, /* a caller's buffer is smaller than the call needs [usage] */
    QEM_E_PACK_PREPARED = 45, /* pack: a prepared extension (DPC moments, detector products) invalid [format] */
    QEM_E_STREAM = 46 /* a detector stream message is malformed, out of order or of the wrong size [format] */
} qem_status;

/* A short, static description of a status (never NULL). */
QEM_API const char *qem_strerror(qem_status status);

/* Families of statuses, for bindings that map them onto their own errors. */
typedef enum qem_status_group {
    QEM_GROUP_OK = 0,
    QEM_GROUP_USAGE = 1,       /* the caller asked for something invalid, or
                                * gave a buffer too small */
    QEM_GROUP_IO = 2,          /* the system: read, write, link failed; the file
                                * exists or changed while being read */
    QEM_GROUP_FORMAT = 3,      /* the file is malformed or corrupt */
    QEM_GROUP_CHECKSUM = 4,    /* corruption proven by a checksum or digest */
    QEM_GROUP_UNSUPPORTED = 5, /* valid, but not something qem does (newer
                                * version, retired format, wrong codec, raw
                                * values not kept, ...) */
    QEM_GROUP_LIMIT = 6,       /* memory, disk or a size limit */
    QEM_GROUP_CANCELLED = 7    /* a progress callback asked to stop */
} qem_status_group;

/* The group of `status` (QEM_GROUP_USAGE for a value qem does not know). */
QEM_API qem_status_group qem_status_group_of(qem_status status);
/* "ok", "usage", "io", "format", "checksum", "unsupported", "limit" or
 * "cancelled". */
QEM_API const char *qem_status_group_name(qem_status_group group);

/* Never grows (no struct_size). */
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
    QEM_DTYPE_FLOAT32 = 3,
    /* Product outputs only (exact sums, moments); never a source dtype. */
    QEM_DTYPE_UINT32 = 4,
    QEM_DTYPE_UINT64 = 5,
    QEM_DTYPE_FLOAT64 = 6
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

typedef enum qem_body_check {
    /* Check every 64 MiB body block's SHA-256 while opening (default). */
    QEM_BODY_CHECK_ON_OPEN = 0,
    /* Check each block the first time a read touches it; every block is
     * still checked before any decoder sees its bytes. Opening is cheap,
     * resident QEM_RESIDENT_MAPPED too; qem_container_load checks every
     * block left (a viewer does so after its first image). */
    QEM_BODY_CHECK_ON_READ = 1
} qem_body_check;

/* Threads: every options struct's `threads` is 0 (the OpenMP default:
 * every core, or OMP_NUM_THREADS) or 1 to QEM_MAX_THREADS; any other value
 * is QEM_E_INVALID_ARGUMENT before any work. In a child forked after the
 * process ran parallel work, the library runs on one thread (GNU OpenMP
 * cannot start threads there); exec'd programs and spawned processes are
 * unaffected. */
#define QEM_MAX_THREADS 1024

/* Releases memory the library returned. */
QEM_API void qem_free(void *pointer);

/* Calibration, as the file's scientific metadata gives it: a recorded
 * value (axes sampling, electron_microscope) or a user override, which
 * takes precedence in calculations but never replaces the record. Values
 * are in canonical units; quantities a file does not state are ABSENT,
 * never zero, and units qem does not know are never used. */
typedef enum qem_calibration_source {
    QEM_CALIBRATION_ABSENT = 0,
    QEM_CALIBRATION_RECORDED = 1,
    QEM_CALIBRATION_OVERRIDE = 2
} qem_calibration_source;

/* Never grows (no struct_size). */
typedef struct qem_quantity {
    double value;
    char unit[16]; /* "angstrom", "mrad", "1/angstrom", "kV", "us", "mm" */
    qem_calibration_source source;
} qem_quantity;

typedef struct qem_calibration {
    size_t struct_size;            /* set by the caller */
    qem_quantity scan_step[2];     /* row, column: angstrom */
    qem_quantity detector_step[2]; /* row, column: mrad or 1/angstrom */
    qem_quantity voltage;          /* accelerating voltage, kV */
    qem_quantity semiangle;        /* convergence semi-angle, mrad */
    qem_quantity dwell;            /* dwell time per scan position, us */
    qem_quantity camera_length;    /* mm */
} qem_calibration;

/* When a source's load phase runs (a pack's bounded lifecycle: every
 * shard read, decoded and authenticated into the compact resident). */
typedef enum qem_load {
    QEM_LOAD_ON_OPEN = 0, /* ready to read when open returns */
    QEM_LOAD_LATER = 1,   /* nothing decoded yet; reads refused until loaded */
    /* Nothing decoded yet; the caller runs qem_container_load (typically on
     * another thread), and reads issued meanwhile wait for it, failing with
     * its error if it fails. What needs no decoded data (the recorded
     * calibration, prepared values) answers at once. A .qem file opens as
     * with QEM_LOAD_ON_OPEN. */
    QEM_LOAD_AWAITED = 2
} qem_load;

/* ------------------------------------------------------------------------ */
/* Reading any file: the container (.qem files and packs alike)           */
/*                                                                          */
/* The main reading handle: every front-end (the qem command, its viewer,   */
/* the Python package) reads through it alone. What only one format has is  */
/* in that format's section further down.                                   */

typedef struct qem_container qem_container;
/* The format handles, for what only one format has (sections below). */
typedef struct qem_file qem_file;
typedef struct qem_pack qem_pack;

typedef enum qem_values {
    /* Scientific working values: .qem counts, float32 bits or restored
     * scaled intensities; pack mask-applied working array. */
    QEM_VALUES_WORKING = 0,
    /* Raw values: .qem counts, float32 bits or stored scaled codes; pack
     * raw uint16 reconstruction (refused where the file does not admit it). */
    QEM_VALUES_RAW = 1
} qem_values;

/* What a file is, from its signature (never its name). */
typedef enum qem_file_kind {
    QEM_KIND_UNKNOWN = 0,
    QEM_KIND_QEM = 1,
    QEM_KIND_PACK = 2,
    QEM_KIND_NPY = 3,
    QEM_KIND_HDF5 = 4 /* an HDF5 file that is not a pack */
} qem_file_kind;

QEM_API qem_status qem_identify(const char *path, qem_file_kind *kind, qem_error *error);
/* "qem", "pack", "npy", "hdf5" or "unknown". */
QEM_API const char *qem_file_kind_name(qem_file_kind kind);
/* 1 for the kinds qem_container_open reads (.qem files and packs). */
QEM_API int qem_file_kind_is_container(qem_file_kind kind);
/* The file-name extensions of a kind, '|'-separated ("qem", "h5|hdf5",
 * "npy"); "" for QEM_KIND_UNKNOWN. A calibrated copy keeps its source's. */
QEM_API const char *qem_file_kind_extensions(qem_file_kind kind);

typedef struct qem_container_info {
    size_t struct_size; /* set by the caller */
    qem_file_kind kind; /* QEM_KIND_QEM or QEM_KIND_PACK */
    uint64_t shape[4];
    uint64_t scans, pixels;
    qem_dtype working_dtype;
    qem_dtype raw_dtype;
    int has_raw;
    /* The file records microscope calibration (a .qem file's scientific
     * metadata); a pack records none. */
    int has_calibration;
    /* The format has a load phase (packs) and whether it has run: reads
     * need loaded = 1. */
    int has_load_phase;
    int loaded;
} qem_container_info;

typedef struct qem_container_options {
    size_t struct_size;
    int threads;               /* 0 = OpenMP default */
    const char *expect_sha256; /* required whole-file identity (both formats), or NULL */
    /* Packs: per loaded shard (0 done while expect_sha256 is hashed); .qem:
     * as qem_open_options.progress. Nonzero cancels. */
    qem_progress_fn progress;
    void *progress_user;
    /* .qem: when body blocks are checked (default: while opening). A pack
     * authenticates every shard while it loads, whatever this says. */
    qem_body_check body_check;
    /* When a format with a load phase (packs) loads: default while
     * opening; QEM_LOAD_LATER opens cheaply for describing, summarising
     * and verifying, and qem_container_load makes the source readable;
     * QEM_LOAD_AWAITED opens as cheaply and lets reads wait for that load. */
    qem_load load;
    /* .qem: as qem_open_options.resident (a pack is always resident). */
    int resident;
    /* .qem: as qem_open_options.column_cache_bytes (a pack's resident is
     * its own faster store). */
    uint64_t column_cache_bytes;
} qem_container_options;

QEM_API void qem_container_options_init(qem_container_options *options);

typedef struct qem_verify_options {
    size_t struct_size;
    int threads; /* 0 = OpenMP default */
    qem_progress_fn progress;
    void *progress_user;
} qem_verify_options;

QEM_API void qem_verify_options_init(qem_verify_options *options);

typedef struct qem_verify_report {
    size_t struct_size; /* set by the caller */
    /* .qem files */
    uint64_t body_blocks_checked;
    uint64_t streams_decoded;
    uint64_t spatial_values_checked;
    uint64_t samples_decoded;
    /* packs: shards loaded, shard payload digests verified */
    uint64_t shards_loaded;
    uint64_t digests_checked;
    /* The whole-file SHA-256 was checked against the expected identity;
     * or, not checked, it is needed to qualify the file (a uint8 pack's
     * index does not hash its compact headers). */
    int identity_checked;
    int identity_needed;
    /* One line saying what was verified (qem_container_verify), e.g.
     * "4 body blocks, 96 streams (...), 640 spatial sums verified". */
    char summary[256];
} qem_verify_report;

/* Key of the detector calibration `qem calibrate` records in a .qem file's
 * scientific_metadata.extensions. */
#define QEM_DETECTOR_CALIBRATION_KEY "qem.detector_calibration"

/* Detector calibration bound to the source (manifest detector_calibration). */
typedef struct qem_detector_calibration {
    size_t struct_size;               /* set by the caller */
    double center_row, center_column; /* pixels, (row, column) */
    double bright_field_radius;       /* pixels */
    char method[128];
    int has_dpc;                      /* rotation and exchange both present */
    double dpc_rotation_degrees;
    int dpc_component_order_exchanged;
} qem_detector_calibration;

/* Opens a .qem file or a pack, recognised by signature. A pack is loaded
 * (the whole bounded lifecycle) before this returns. */
QEM_API qem_status qem_container_open(const char *path, const qem_container_options *options,
                                   qem_container **out, qem_error *error);
QEM_API void qem_container_close(qem_container *source);
QEM_API qem_status qem_container_get_info(const qem_container *source, qem_container_info *info,
                                       qem_error *error);
/* The calibration the source records (qem_get_calibration for a .qem
 * file; quantities it does not state are QEM_CALIBRATION_ABSENT);
 * QEM_E_NOT_RECORDED where has_calibration is 0 (a pack). */
QEM_API qem_status qem_container_get_calibration(const qem_container *source,
                                                 qem_calibration *calibration, qem_error *error);
/* The file's own JSON description, NUL-terminated and valid while the
 * source is open: a .qem file's header, a pack's manifest. `length`, if
 * not NULL, gets its length. */
QEM_API const char *qem_container_header_json(const qem_container *source, size_t *length);
/* The file's summary as JSON (what `qem info --json` prints for it), to be
 * released with qem_free; NULL on failure. */
QEM_API char *qem_container_summary_json(const qem_container *source, qem_error *error);
/* What only the source's format has, as one JSON object, to be released
 * with qem_free (NULL on failure). Both formats give "file_bytes",
 * "logical_bytes" and "chunks" ([first, end) scans of each chunk or shard,
 * the windows reads are cheapest in); a .qem file adds "codec",
 * "valid_pixels", "chunk_count", "has_dark" (0/1) and "spatial_fields"; a
 * pack "profile", "resident_bytes", "shard_count", "excluded_count",
 * "raw_access" and "source_identity_sha256". */
QEM_API char *qem_container_details_json(const qem_container *source, qem_error *error);
/* Runs the load phase of a source opened with QEM_LOAD_LATER (with the
 * open's threads, expect_sha256 and progress); nothing to do for a loaded
 * source or a format without one. On failure nothing is kept and the
 * source stays unloaded. A .qem file opened with QEM_BODY_CHECK_ON_READ
 * has every body block not yet checked checked now (QEM_E_BODY_CHECKSUM
 * naming the first that fails); safe beside reads on other threads. */
QEM_API qem_status qem_container_load(qem_container *source, qem_error *error);
/* Checks everything the format can prove and says what in `report` (may
 * be NULL): a .qem file's body checksums, every stream decoded under every
 * rule, values within the dtype, spatial sums recomputed, float bits
 * against logical_sha256; a pack's full load with every digest, including
 * those that only repeat the decoded ones. A pack is verified by loading
 * it: open it with QEM_LOAD_LATER (a loaded pack is refused,
 * QEM_E_INVALID_ARGUMENT). The open's expect_sha256 counts as checked. */
QEM_API qem_status qem_container_verify(qem_container *source, const qem_verify_options *options,
                                        qem_verify_report *report, qem_error *error);
/* The underlying handle, or NULL when the source is of the other kind. */
QEM_API qem_file *qem_container_file(qem_container *source);
QEM_API qem_pack *qem_container_pack(qem_container *source);

QEM_API uint64_t qem_container_read_bound(const qem_container *source, qem_values values,
                                       uint64_t scans);
/* Reads scans [first, first + count) of `values`, C order. */
QEM_API qem_status qem_container_read(qem_container *source, uint64_t first, uint64_t count,
                                   qem_values values, void *out, size_t out_size,
                                   qem_error *error);
typedef struct qem_export_options {
    size_t struct_size;
    int threads;       /* 0 = the open's */
    qem_values values; /* what to write (raw: a scaled file's stored codes) */
    qem_progress_fn progress;
    void *progress_user;
} qem_export_options;

QEM_API void qem_export_options_init(qem_export_options *options);

/* Writes `values` of every scan as a 4D .npy, one chunk or shard at a
 * time: .qem counts, original float32 bits (proven against logical_sha256
 * before the file appears), restored float32 values or stored codes of a
 * scaled file; a pack's working array or raw reconstruction. Nothing
 * appears on failure or cancellation. */
QEM_API qem_status qem_container_export_npy(qem_container *source, const char *dest,
                                            const qem_export_options *options, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Products: computed from the encoded data, never from a dense cube        */

/* A product session over one open source (which must outlive it). It
 * holds the detector validity, the dark plane of float data and nothing
 * of the scans. Rules: doc/products.md. */
typedef struct qem_products qem_products;

/* Where products compute. QEM_DEVICE_CUDA (qem built with nvcc found,
 * an NVIDIA driver and GPU): a loaded pack's resident is copied to the
 * GPU as it is stored, still bit-packed, and the integer reductions
 * behind virtual images, CoM/DPC and the mean pattern run there, equal
 * to the CPU's bit for bit; one pattern and what follows the reductions
 * stay on the CPU. Asking for a device that cannot be used is an error
 * saying why, never a quiet fallback to the CPU. */
typedef enum qem_device {
    QEM_DEVICE_CPU = 0,
    QEM_DEVICE_CUDA = 1
} qem_device;

/* "cpu", "cuda" ("unknown" otherwise). */
QEM_API const char *qem_device_name(qem_device device);
/* QEM_OK when `device` can run products here, its name written to `name`
 * (size bytes, may be 0); QEM_E_UNSUPPORTED saying why not. */
QEM_API qem_status qem_device_probe(qem_device device, char *name, size_t size, qem_error *error);

typedef struct qem_products_options {
    size_t struct_size;
    int threads;               /* 0 = the source's */
    qem_progress_fn progress;  /* per window of scans */
    void *progress_user;
    /* Folder where whole-file results of a file that does not record them
     * (each pixel's sum over every scan, behind the mean pattern and the
     * calibration estimate) are kept between opens, keyed by the file's
     * content identity (a .qem header's SHA-256; a uint16 pack's manifest
     * and shard digests): a changed file has another key. Made (mode 0700)
     * when missing; an entry that fails any check is ignored and replaced;
     * a folder that cannot be written costs only the next open's pass.
     * NULL keeps nothing. */
    const char *cache_dir;
    /* Where the reductions run (default QEM_DEVICE_CPU). CUDA takes
     * packs; a .qem file on CUDA is QEM_E_UNSUPPORTED (not yet). */
    qem_device device;
} qem_products_options;

/* Where a products handle's whole-file pixel sums came from. */
typedef enum qem_origin {
    QEM_ORIGIN_NONE = 0,     /* not needed yet */
    QEM_ORIGIN_COMPUTED = 1, /* a pass over every scan */
    QEM_ORIGIN_RECORDED = 2, /* recorded in the file by its writer */
    QEM_ORIGIN_CACHED = 3    /* kept by an earlier open (cache_dir) */
} qem_origin;

QEM_API void qem_products_options_init(qem_products_options *options);
QEM_API qem_status qem_products_open(qem_container *source, const qem_products_options *options,
                                     qem_products **out, qem_error *error);
QEM_API void qem_products_close(qem_products *products);
/* The origin of the last whole-file pixel sums (qem_products_mean, the
 * calibration estimate); "computed", "recorded", "cached" or "none" by
 * qem_origin_name. */
QEM_API qem_origin qem_products_sums_origin(const qem_products *products);
QEM_API const char *qem_origin_name(qem_origin origin);
/* Where the exact sums behind the last virtual image, CoM or DPC came
 * from: QEM_ORIGIN_RECORDED when values the file records answered without
 * decoding (a pack's prepared DPC moments or BF/ABF/ADF products, whose
 * masks must match exactly), QEM_ORIGIN_COMPUTED after a pass over the
 * encoded data, QEM_ORIGIN_NONE before the first. */
QEM_API qem_origin qem_products_last_origin(const qem_products *products);

/* A product array owned by the caller after a successful call; release
 * with qem_image_free. Never grows (no struct_size). */
typedef struct qem_image {
    qem_dtype dtype;
    unsigned ndim;       /* 2, or 3 with shape[2] components */
    uint64_t shape[3];
    void *data;
} qem_image;

QEM_API void qem_image_free(qem_image *image);

/* Detector pixels that take part (1) or never do (0): mask_size >= pixels. */
QEM_API qem_status qem_products_valid(const qem_products *products, uint8_t *mask,
                                      size_t mask_size, qem_error *error);

/* --- masks ---------------------------------------------------------------- */

typedef enum qem_detector {
    QEM_DETECTOR_BF = 1,      /* [0, r] */
    QEM_DETECTOR_ABF = 2,     /* [r/2, r] */
    QEM_DETECTOR_ADF = 3,     /* [r, 2r], or [inner, outer] */
    QEM_DETECTOR_HAADF = 4,   /* [2r, 4r] */
    QEM_DETECTOR_DF = 5,      /* [r, infinity) */
    QEM_DETECTOR_ANNULUS = 6  /* [inner, outer] */
} qem_detector;

/* A named detector as a user asks for it: the one description both mask
 * calls take. Resolved (qem_products_resolve_detector) as `qem virtual`
 * resolves it: a centre or radius left NaN comes from the file's detector
 * calibration, else from the mean-diffraction-half-maximum estimate; with
 * unit_mrad a NaN radius is the convergence semi-angle (the bright-field
 * disk edge) and the bright-field radius in pixels converts mrad to
 * pixels. inner and outer (both, or both NaN) bound adf and annulus. */
typedef struct qem_detector_request {
    size_t struct_size;
    qem_detector detector;
    double center_row, center_column; /* detector pixels; NaN = resolved */
    double radius;                    /* NaN = resolved */
    double inner, outer;              /* NaN = none */
    int unit_mrad;                    /* radius/inner/outer in mrad */
    double semiangle_mrad;            /* NaN or 0 = the file's */
} qem_detector_request;

QEM_API void qem_detector_request_init(qem_detector_request *request);

/* The mask of a detector given in full (mask_size >= pixels bytes): the
 * centre must be given (QEM_E_INVALID_ARGUMENT otherwise), a NaN radius is
 * none (bounds alone); pixels whose squared distance from the centre, in
 * double precision, lies in [lo^2, hi^2], both ends inclusive;
 * invalid/excluded pixels cleared. mrad radii are converted with
 * px = mrad * radius_px / semiangle, radius_px the bright-field radius in
 * pixels. */
QEM_API qem_status qem_products_detector_mask(const qem_products *products,
                                              const qem_detector_request *request,
                                              double radius_px, uint8_t *mask,
                                              size_t mask_size, qem_error *error);

typedef struct qem_detector_resolution {
    size_t struct_size;               /* set by the caller */
    double center_row, center_column; /* used */
    double radius;                    /* used (NaN: bounds in pixels made it unused) */
    int unit_mrad;
    /* "given", "file detector calibration" or
     * "estimate (mean-diffraction-half-maximum)" */
    char origin[48];
    uint64_t mask_pixels;             /* pixels selected */
} qem_detector_resolution;

/* The named detector's mask (mask_size >= pixels), invalid pixels
 * cleared; `resolution` (may be NULL) says what was used. */
QEM_API qem_status qem_products_resolve_detector(qem_products *products,
                                                 const qem_detector_request *request,
                                                 uint8_t *mask, size_t mask_size,
                                                 qem_detector_resolution *resolution,
                                                 qem_error *error);
/* A 0/1 .npy mask of the detector's shape, invalid pixels cleared. */
QEM_API qem_status qem_products_mask_from_npy(const qem_products *products, const char *path,
                                              uint8_t *mask, size_t mask_size, qem_error *error);

/* --- exact primitives (partition scans, merge by addition) --------------- */

/* Integer data (counts, or scaled codes): out[k * count + i] = sum over
 * valid pixels p of weights[k][p] * value(first + i, p), exact
 * (out_size >= 8 * planes * count bytes). */
QEM_API qem_status qem_products_weighted_sums(qem_products *products, uint64_t first,
                                              uint64_t count, const int32_t *const *weights,
                                              unsigned planes, int64_t *out, size_t out_size,
                                              qem_error *error);
/* Integer data: adds sum over scans [first, first + count) of each valid
 * pixel's value into sums[p] (sums_size >= 8 * pixels bytes); invalid
 * pixels add 0. */
QEM_API qem_status qem_products_pixel_sums(qem_products *products, uint64_t first,
                                           uint64_t count, uint64_t *sums, size_t sums_size,
                                           qem_error *error);

/* --- products -------------------------------------------------------------- */

/* Virtual image (scan rows x columns) over a 0/1 mask: counts give exact
 * uint32 (or uint64 when mask pixels x dtype maximum exceeds 2^32 - 1);
 * float data a Neumaier-compensated float32 sum of (value - dark); scaled
 * codes float32(scale * sum(codes) + offset * n). */
QEM_API qem_status qem_products_virtual(qem_products *products, const uint8_t *mask,
                                        qem_image *image, qem_error *error);
/* Mean diffraction pattern, float32: counts exact total / N in float64,
 * rounded once; float data compensated; invalid pixels 0. */
QEM_API qem_status qem_products_mean(qem_products *products, qem_image *image,
                                     qem_error *error);
/* The pattern at flat scan `scan`: counts in their dtype, float data as
 * float32 (value - dark), scaled data restored; invalid pixels 0. */
QEM_API qem_status qem_products_frame(qem_products *products, uint64_t scan, qem_image *image,
                                      qem_error *error);

typedef enum qem_reduce {
    QEM_REDUCE_SUM = 0,  /* counts: uint64 exact; float: float32 */
    QEM_REDUCE_MEAN = 1, /* float32 */
    QEM_REDUCE_MAX = 2   /* counts: uint64 exact; float: float32 */
} qem_reduce;

/* Reduction over the scan rectangle [row0, row1) x [col0, col1). */
QEM_API qem_status qem_products_region(qem_products *products, uint64_t row0, uint64_t row1,
                                       uint64_t col0, uint64_t col1, qem_reduce reduce,
                                       qem_image *image, qem_error *error);

/* Centre of mass per scan in absolute detector coordinates (rows x cols x
 * 2 float32, row component first) over `mask` (NULL: every valid pixel):
 * exact integer moments / total in float64, rounded once; a zero-total or
 * non-finite frame is NaN and left out of the scan mean that
 * `subtract_mean` removes (the DPC components). */
QEM_API qem_status qem_products_com(qem_products *products, const uint8_t *mask,
                                    int subtract_mean, qem_image *image, qem_error *error);

typedef struct qem_dpc_result {
    size_t struct_size;   /* set by the caller */
    double rotation_degrees;
    int components_exchanged;
    uint64_t ffts;        /* 2-D FFTs performed */
    qem_image com;        /* mean-subtracted CoM, rows x cols x 2 */
    qem_image aligned;    /* rotated (and exchanged) components */
    qem_image phase;      /* iDPC, rows x cols float32 */
} qem_dpc_result;

/* Rotation search (180 angles over [0, pi], with and without exchange,
 * minimum mean squared interior curl, first minimum wins) unless
 * `fixed_rotation_degrees` is finite, then iDPC by an FFT Poisson solve. */
QEM_API qem_status qem_products_dpc(qem_products *products, const uint8_t *mask,
                                    double fixed_rotation_degrees, qem_dpc_result *result,
                                    qem_error *error);
QEM_API void qem_dpc_result_free(qem_dpc_result *result);

/* --- partitioned products (a cluster's tasks; see doc/distributed.md) ---- */

/* Each covers scans [first, first + count) only; partitions of the scan
 * merge into the whole-scan product.
 *
 * The virtual image of those scans (1 x count, the dtype qem_products_virtual
 * gives): per-scan values, so concatenating partitions is bit for bit the
 * whole image for every kind of data. */
QEM_API qem_status qem_products_virtual_part(qem_products *products, const uint8_t *mask,
                                             uint64_t first, uint64_t count, qem_image *image,
                                             qem_error *error);
/* The absolute centre of mass of those scans (1 x count x 2 float32), as
 * qem_products_com computes it per scan; subtracting the scan mean is the
 * caller's, over the whole scan. */
QEM_API qem_status qem_products_com_part(qem_products *products, const uint8_t *mask,
                                         uint64_t first, uint64_t count, qem_image *image,
                                         qem_error *error);
/* The sum (and, when `max` is not NULL, the maximum) of those scans'
 * patterns per detector pixel, invalid pixels 0: counts as exact uint64
 * (merge by addition and max); float data as float64 (sum, compensation)
 * pairs of a Neumaier sum (rows x cols x 2; scaled data: compensation 0)
 * and a float32 max. */
QEM_API qem_status qem_products_patterns_part(qem_products *products, uint64_t first,
                                              uint64_t count, qem_image *sum, qem_image *max,
                                              qem_error *error);

/* "mean-diffraction-half-maximum": pixels at or above half the maximum of
 * the mean pattern; centre = their intensity-weighted centroid; radius =
 * sqrt(count / pi). */
QEM_API qem_status qem_products_estimate_calibration(qem_products *products,
                                                     qem_detector_calibration *calibration,
                                                     qem_error *error);
/* The detector calibration the file records (QEM_E_NOT_RECORDED where it
 * records none). */
QEM_API qem_status qem_products_file_calibration(const qem_products *products,
                                                 qem_detector_calibration *calibration,
                                                 qem_error *error);
/* The convergence semi-angle the file states, in mrad (QEM_E_NOT_RECORDED
 * where it states none). */
QEM_API qem_status qem_products_semiangle(const qem_products *products, double *mrad,
                                          qem_error *error);

/* --- writing products ------------------------------------------------------ */

/* Writes an image by the path's extension: .npy (exact dtype), .tif/.tiff
 * (32-bit float; 3-D arrays one page per component), .png (8-bit, 2-D,
 * 0.5/99.5 percentile contrast). Atomic; never overwrites. */
QEM_API qem_status qem_image_write(const qem_image *image, const char *path, qem_error *error);
/* "npy", "tiff", "png", or NULL for an extension qem does not write. */
QEM_API const char *qem_image_format(const char *path);

/* A new copy of `src` recording `calibration`: a pack gets its manifest's
 * source-bound detector_calibration (payload bytes unchanged), a .qem file
 * is re-saved with scientific_metadata.extensions["qem.detector_calibration"].
 * The original is never modified; `dest` must not exist. */
QEM_API qem_status qem_write_calibrated_copy(const char *src, const char *dest,
                                             const qem_detector_calibration *calibration,
                                             qem_error *error);

/* --- detector sessions --------------------------------------------------- */

/* One mask applied to one or more sources (a tilt series): all sources
 * change together or none does. */
typedef struct qem_detector_session qem_detector_session;

typedef struct qem_session_stats {
    size_t struct_size;          /* set by the caller */
    uint64_t sources;
    uint64_t resident_bytes;     /* summed over the sources */
    uint64_t pixels_changed;     /* last update: pixels whose membership changed */
    int full_recomputation;      /* last update recomputed everything */
    uint64_t ffts;               /* FFTs performed by the last update (0 here) */
    int from_kept;               /* last update: a kept mask's images (no computation) */
    /* Last update: every source answered from values its file records (a
     * pack's prepared BF/ABF/ADF or DPC totals), no decoding. */
    int from_recorded;
    /* Last update: sources that summed the pixels left out of the mask and
     * took them from the recorded totals (fewer pixels to decode). */
    uint64_t complement_sources;
    /* Last update: every source answered without decoding, at least one
     * from its default detector's image kept by an earlier open of the
     * same content (qem_products_options.cache_dir). */
    int from_cached;
} qem_session_stats;

/* Refuses duplicate sources (the same file twice) and differing detector
 * shapes. The products handles must outlive the session. */
QEM_API qem_status qem_detector_session_create(qem_products *const *products, size_t count,
                                               qem_detector_session **out, qem_error *error);
QEM_API void qem_detector_session_free(qem_detector_session *session);
/* Keeps the images (and, for scaled codes, their exact sums; a count
 * image is its sums) of up to `bytes` of the session's
 * recent masks, least recently used replaced: setting a kept mask again (a
 * detector dragged back over where it was) swaps its images in without
 * computing; stats.from_kept says so. A count image whose values all fit
 * 16 bits counts (and is held) as uint16; it comes back as it was made.
 * 0 (the default) keeps none. */
QEM_API qem_status qem_detector_session_keep(qem_detector_session *session, uint64_t bytes,
                                             qem_error *error);
/* Sets the mask: full computation (first time), or an update that adds and
 * subtracts only the pixels whose membership changed (integer data; float
 * data recompute). The new images replace the old only when every source
 * succeeded. */
QEM_API qem_status qem_detector_session_set_mask(qem_detector_session *session,
                                                 const uint8_t *mask, qem_error *error);
/* A copy of source `index`'s current image. */
QEM_API qem_status qem_detector_session_image(const qem_detector_session *session, size_t index,
                                              qem_image *image, qem_error *error);
/* Source `index`'s current image where the session holds it, not copied
 * (a viewer sends it on at once): valid until the session's next set_mask
 * or free; never pass it to qem_image_free. */
QEM_API qem_status qem_detector_session_image_view(const qem_detector_session *session,
                                                   size_t index, const qem_image **image,
                                                   qem_error *error);
QEM_API qem_status qem_detector_session_stats(const qem_detector_session *session,
                                              qem_session_stats *stats, qem_error *error);

/* ------------------------------------------------------------------------ */
/* .npy files                                                               */

typedef struct qem_npy qem_npy;

typedef struct qem_npy_info {
    size_t struct_size;  /* set by the caller */
    qem_dtype dtype;
    char descr[16];      /* the header's descr, e.g. "<u2" */
    unsigned ndim;
    uint64_t shape[8];
    uint64_t data_offset; /* byte offset of the first element */
    uint64_t elements;
    unsigned version_major, version_minor; /* .npy format version */
} qem_npy_info;

/* Opens a C-order little-endian .npy of uint8 (|u1, also bool |b1),
 * uint16 (<u2) or float32 (<f4). Fortran order, big-endian and other dtypes
 * are refused with guidance; so is a file shorter than its header says. */
QEM_API qem_status qem_npy_open(const char *path, qem_npy **out, qem_error *error);
QEM_API void qem_npy_close(qem_npy *npy);
QEM_API qem_status qem_npy_get_info(const qem_npy *npy, qem_npy_info *info, qem_error *error);
/* Reads `count` elements starting at element `first` (flat C order) into
 * `out` (out_size bytes, at least count * the element size). */
QEM_API qem_status qem_npy_read(qem_npy *npy, uint64_t first, uint64_t count, void *out,
                                size_t out_size, qem_error *error);

/* Reads a 2D detector mask of the given shape (bool or uint8, values 0/1
 * only) into `mask` (mask_size >= rows * columns bytes, 1 = set). */
QEM_API qem_status qem_npy_read_mask(const char *path, uint64_t rows, uint64_t columns,
                                     uint8_t *mask, size_t mask_size, qem_error *error);

/* The header qem's .npy writers put before an array of `dtype` and `shape`
 * (magic, version 1.0, the dictionary, spaces up to a 64-byte boundary and
 * '\n'), for .npy bodies built in memory: written into `header`
 * (header_size bytes; QEM_NPY_HEADER_MAX holds any shape), its length in
 * *length. The array's C-order bytes follow it. */
#define QEM_NPY_HEADER_MAX 640
QEM_API qem_status qem_npy_header(qem_dtype dtype, unsigned ndim, const uint64_t *shape,
                                  void *header, size_t header_size, size_t *length,
                                  qem_error *error);

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
/* .qem files: what only they have (open them as containers to read)     */

/* Count streams decode side by side in SIMD lanes on the widest path the
 * CPU has (AVX-512, AVX2, else scalar); every path gives the same values
 * and errors. Forcing one is a test hook: qem_experimental.h. */
typedef struct qem_open_options {
    size_t struct_size;
    qem_body_check body_check;
    int threads; /* decode threads per call; 0 = OpenMP default */
    /* Whole-file SHA-256 (64 hex digits) the file must have, or NULL:
     * checked while opening (QEM_E_FILE_DIGEST on a mismatch). */
    const char *expect_sha256;
    /* While opening hashes the file (expect_sha256, then the body blocks):
     * bytes hashed of the bytes to hash, from the calling thread; nonzero
     * cancels (QEM_E_CANCELLED). */
    qem_progress_fn progress;
    void *progress_user;
    /* Hold the encoded body in memory, authenticated once while opening
     * (whatever body_check says, but for MAPPED, below); reads and products then decode from
     * memory with no copy per read. A qem_resident value:
     * QEM_RESIDENT_COPY (1) reads the body into memory of its own (its
     * size): the file may then change or go without affecting anything.
     * QEM_RESIDENT_MAPPED maps the file read-only instead: nothing is
     * copied or allocated, the pages are the page cache's, so the open
     * costs only hashing (none with QEM_BODY_CHECK_ON_READ: each block is
     * hashed where it lies before its first read); the file must not be rewritten in place while
     * open (each chunk read checks its size and times first, and a
     * change is refused with QEM_E_CHANGED; truncating it during a read
     * ends the process with SIGBUS). Where the file cannot be mapped,
     * MAPPED copies. */
    int resident;
    /* Bytes of decoded pixel columns kept for later detector reductions
     * (integer counts and scaled codes; 0, the default, keeps none): a
     * reduction reads a kept pixel's samples over every scan instead of
     * decoding its streams, so a detector moved back over pixels it has
     * crossed (an edge that entered and now leaves) decodes only new
     * ones. A column costs one byte a scan (two once a sample passes 255);
     * the least recently used ones make room. Columns are filled by
     * reductions over the scans in order and listed once complete; a
     * mapped or per-use file found changed clears them. */
    uint64_t column_cache_bytes;
} qem_open_options;

typedef enum qem_resident {
    QEM_RESIDENT_NONE = 0,
    QEM_RESIDENT_COPY = 1,
    QEM_RESIDENT_MAPPED = 2
} qem_resident;

QEM_API void qem_open_options_init(qem_open_options *options);

typedef struct qem_file_info {
    size_t struct_size; /* set by the caller: sizeof(qem_file_info) */
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
    int has_dark;            /* float codec: a mean-dark plane is recorded */
    uint64_t region_count;   /* scaled codec: regions of the precision report */
} qem_file_info;

/* Opens and validates a .qem file: envelope, header checksum, JSON
 * (duplicate keys refused), required keys, codec layout, file length and
 * (by default) every body block checksum. Nothing is decoded. */
QEM_API qem_status qem_open(const char *path, const qem_open_options *options,
                            qem_file **out, qem_error *error);
QEM_API void qem_close(qem_file *file);

QEM_API qem_status qem_get_info(const qem_file *file, qem_file_info *info, qem_error *error);

/* The exact header bytes (JSON, not NUL-terminated) and their length. */
QEM_API const char *qem_header_json(const qem_file *file, size_t *length);

/* A JSON object summarising the file for people and scripts: container,
 * codec, shape, dtype, chunks, sizes and compression ratio, validity, and
 * the scientific metadata (schema, coverage, source facts, processing,
 * calibrated axes, microscope quantities and calibration overrides, kept
 * apart). Returns a NUL-terminated string to release with qem_free(), or
 * NULL (QEM_E_NO_MEMORY in `error`). */
QEM_API char *qem_summary_json(const qem_file *file, qem_error *error);

/* Effective calibration of an open file (overrides applied). */
QEM_API qem_status qem_get_calibration(const qem_file *file, qem_calibration *calibration,
                                       qem_error *error);

/* Writes `pixels` bytes, 1 where the detector pixel is valid. */
QEM_API qem_status qem_get_valid_mask(const qem_file *file, uint8_t *mask, size_t mask_size,
                                      qem_error *error);

/* Chunk `index`: its first flattened scan and scan count. */
QEM_API qem_status qem_get_chunk(const qem_file *file, uint64_t index, uint64_t *first_scan,
                                 uint64_t *scans, qem_error *error);

/* Bytes needed for `scans` scan positions in the file's dtype. */
QEM_API uint64_t qem_read_scans_bound(const qem_file *file, uint64_t scans);

/* Decodes scans [first_scan, first_scan + count) into `out`, C order
 * (scan, detector_row, detector_column), in the file's dtype: exact
 * uint8/uint16 counts, or float32 with every original bit. Scaled files
 * hold calibrated codes, not counts, and are refused (QEM_E_WRONG_CODEC):
 * use qem_read_values. Reading a float file whole also checks its bits
 * against logical_sha256. Memory used beyond `out` is one chunk's arrays
 * plus one 512-scan block of a pixel group per thread. */
QEM_API qem_status qem_read_scans(qem_file *file, uint64_t first_scan, uint64_t count, void *out,
                                  size_t out_size, qem_error *error);

/* As qem_read_scans, as float32 values for every codec: counts converted
 * exactly, float bits unchanged, scaled codes restored as
 * float32(code * scale + offset) with their region. `out_size` in bytes. */
QEM_API qem_status qem_read_values(qem_file *file, uint64_t first_scan, uint64_t count,
                                   float *out, size_t out_size, qem_error *error);

/* The stored uint16 codes of a scaled file (QEM_E_WRONG_CODEC otherwise). */
QEM_API qem_status qem_read_codes(qem_file *file, uint64_t first_scan, uint64_t count,
                                  uint16_t *out, size_t out_size, qem_error *error);

/* The float codec's recorded mean-dark plane (pixels floats: plane_size
 * is at least 4 * pixels bytes). Raw reads never subtract it; products do,
 * once. QEM_E_NOT_RECORDED where has_dark is 0. */
QEM_API qem_status qem_get_dark(const qem_file *file, float *plane, size_t plane_size,
                                qem_error *error);

/* Checks everything: every body block checksum, every count stream decoded
 * to completion with all rANS rules, every value within the dtype, and every
 * spatial sum recomputed from the decoded counts. Stops at the first failure.
 * `report` may be NULL. */
QEM_API qem_status qem_verify(qem_file *file, const qem_verify_options *options,
                              qem_verify_report *report, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Packs (Lossless Pack Format v1): what only they have                    */

typedef enum qem_pack_profile {
    QEM_PACK_UINT16_LZ4 = 1,      /* exact uint16, 128-scan tiles, raw LZ4 blocks */
    QEM_PACK_UINT8_BITPACKED = 3  /* exact uint8, 32-scan tiles, direct bit-packing */
} qem_pack_profile;

/* How raw (unmasked) values of excluded detector pixels can be recovered. */
typedef enum qem_raw_access {
    QEM_RAW_EXACT_NO_EXCLUSIONS = 1,   /* nothing is excluded */
    QEM_RAW_RETAINED_PAYLOAD = 2,      /* uint16/LZ4: retained_exactly_in_payload */
    QEM_RAW_EXCLUSION_CONSTANTS = 3,   /* uint8: authenticated constant raw values */
    QEM_RAW_MASK_APPLIED_ONLY = 4      /* legacy: raw reconstruction refused */
} qem_raw_access;

typedef struct qem_pack_info {
    size_t struct_size; /* set by the caller */
    qem_pack_profile profile;
    uint64_t shape[4];
    uint64_t scans, pixels;
    uint64_t shard_count, scans_per_shard;
    qem_dtype working_dtype; /* what mask-applied reads return */
    uint64_t excluded_count;
    qem_raw_access raw_access;
    uint64_t file_bytes;
    uint64_t resident_bytes; /* payload + tile widths and pixel starts (uint16) or
                              * compact headers (uint8) once loaded */
    int loaded;
    int has_detector_calibration;
    char source_identity_sha256[65];
    uint64_t digests_checked; /* once loaded: shard payload digests verified */
    /* The upstream's prepared extensions (pack notes 2.7), authenticated
     * while opening: exact per-scan detector moments, and BF/ABF/ADF masks
     * with their per-scan sums (uint8 profile). */
    int has_prepared_dpc_moments;
    int has_prepared_detector_products;
} qem_pack_info;

typedef struct qem_pack_options {
    size_t struct_size;
    int threads; /* 0 = OpenMP default */
    /* Whole-file SHA-256 (64 hex digits) the file must have, or NULL. The
     * uint8/bitpacked index does not hash its compact headers, so
     * qualifying such a file needs this identity. */
    const char *expect_sha256;
    /* Per shard, called one at a time (from a loading thread); cancel =
     * nothing is loaded. */
    qem_progress_fn progress;
    void *progress_user;
    /* Also check digests that only repeat what the decoded digests prove
     * (the uint16 profile's payload_compressed_sha256); qem verify does. */
    int check_stored_digests;
    /* qem_pack_open: load before returning (default), or open only. */
    qem_load load;
} qem_pack_options;

QEM_API void qem_pack_options_init(qem_pack_options *options);

/* Opens a pack: prelude, manifest CRC before parsing, manifest agreement
 * with the binary index, every byte range inside the file and disjoint,
 * raw access mode and detector calibration; then, as `options` say, the
 * load (qem_pack_load with these options). `options` NULL opens only,
 * cheaply: nothing is decoded. */
QEM_API qem_status qem_pack_open(const char *path, const qem_pack_options *options,
                                 qem_pack **out, qem_error *error);

/* The bounded resident lifecycle: one shard at a time per thread (whole
 * shards per thread when there are enough, else one shard's blocks across
 * the threads), read, check descriptors or compact headers, decode,
 * authenticate, keep only the compact payload. The source becomes loaded
 * only after every shard passed; on failure or cancellation nothing is
 * kept, and the error names the first failing shard. */
QEM_API qem_status qem_pack_load(qem_pack *pack, const qem_pack_options *options,
                                 qem_error *error);
QEM_API void qem_pack_close(qem_pack *pack);

QEM_API qem_status qem_pack_get_info(const qem_pack *pack, qem_pack_info *info, qem_error *error);
/* Excluded detector pixels, row-major indices, ascending (excluded_count
 * values: pixels_size is at least 4 * excluded_count bytes). */
QEM_API qem_status qem_pack_get_excluded(const qem_pack *pack, uint32_t *pixels,
                                         size_t pixels_size, qem_error *error);
/* QEM_E_NOT_RECORDED where has_detector_calibration is 0. */
QEM_API qem_status qem_pack_get_detector_calibration(const qem_pack *pack,
                                                     qem_detector_calibration *calibration,
                                                     qem_error *error);
/* The exact manifest bytes (JSON). */
QEM_API const char *qem_pack_manifest_json(const qem_pack *pack, size_t *length);

/* Bytes for `scans` scan positions of `values`: QEM_VALUES_WORKING, the
 * mask-applied working array (excluded pixels read 0, in the working
 * dtype); QEM_VALUES_RAW, the raw uint16 reconstruction from retained
 * samples or exclusion constants (QEM_E_NOT_RECORDED where the file does
 * not admit it). */
QEM_API uint64_t qem_pack_read_bound(const qem_pack *pack, qem_values values, uint64_t scans);

/* Reads scans [first, first + count) of a loaded pack, C order. */
QEM_API qem_status qem_pack_read_scans(qem_pack *pack, uint64_t first, uint64_t count,
                                       qem_values values, void *out, size_t out_size,
                                       qem_error *error);

/* A JSON summary of a pack (prelude, profile, schema, shape, shards,
 * working dtype, exclusions, raw access, sizes, identity, calibration and,
 * once loaded, the phase timings). Release with qem_free(); NULL with
 * QEM_E_NO_MEMORY in `error`. */
QEM_API char *qem_pack_summary_json(const qem_pack *pack, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Writing .qem files (all three codecs; the codec follows from the data)  */

typedef struct qem_writer qem_writer;

typedef struct qem_save_options {
    size_t struct_size;
    /* Scans per chunk; 0 = 512. The source window held in memory is
     * chunk_scans * pixels * dtype size. The float codec caps chunks at
     * min(512, 32 MiB / (4 * pixels)) scans. */
    uint32_t chunk_scans;
    int threads; /* 0 = OpenMP default */
    /* `pixels` bytes, nonzero = valid; NULL = every pixel valid. Validity
     * only changes the spatial sums, never the stored counts; only the
     * integer codec can store it. */
    const uint8_t *valid;
    /* Short name of the source format recorded as source_format ("npy"). */
    const char *source_format;
    qem_progress_fn progress;
    void *progress_user;

    /* Metadata (JSON text, all optional):
     * scientific_metadata_json: the complete scientific_metadata object to
     *   write (re-saving keeps a file's own); validated before writing.
     * source_metadata_json: source facts kept under source_metadata when
     *   qem builds scientific_metadata itself.
     * metadata_json: the header's free-form "metadata" object, kept as is.
     * calibration_json: a calibration file (doc/metadata.md) applied on
     *   top: recorded quantities and user overrides. */
    const char *scientific_metadata_json;
    const char *source_metadata_json;
    const char *metadata_json;
    const char *calibration_json;

    /* float32 data (float32-bit-lanes-rans-v1): an optional mean-dark plane
     * (pixels floats, finite) recorded as empad-mean-dark/v1, never
     * subtracted from the stored bits; its identity (64 hex digits; NULL =
     * computed from the plane); an empad block to keep (JSON object). */
    const float *dark;
    const char *dark_identity;
    const char *empad_json;

    /* uint16 codes plus their precision report (JSON object, version 2):
     * selects scaled-uint16-column-rans-v1; chunks never cross a region.
     * attributes_json: producer provenance strings kept unchanged. */
    const char *intensity_calibration_json;
    const char *attributes_json;

    /* How qem_save_file reads an acquisition (dataset, scan shape, raw
     * binary, hashing progress); NULL = from the file alone. */
    const struct qem_acquisition_options *input;
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

/* Distributed saves: chunks encoded in other processes (Dask workers) and
 * written in order by one writer, giving the same bytes as appending the
 * scans. Every process passes the same dtype, shape and options (validity
 * included; metadata and the destination matter only to the writer).
 *
 * qem_save_chunks: the first scan of every chunk the writer cuts, in order
 * (*count of them; with capacity 0 only the count). Chunk k holds scans
 * [first[k], first[k + 1]). */
QEM_API qem_status qem_save_chunks(qem_dtype dtype, const uint64_t shape[4],
                                   const qem_save_options *options, uint64_t *first_scans,
                                   size_t capacity, size_t *count, qem_error *error);
/* Encodes the chunk starting at `first_scan` (`count` scans, C order, in
 * `dtype`) into one self-contained byte string (*blob, release with
 * qem_free). Float32 chunks carry their source bits as well, for the
 * file's logical_sha256: about twice the encoded size. */
QEM_API qem_status qem_encode_scans(qem_dtype dtype, const uint64_t shape[4],
                                    const qem_save_options *options, uint64_t first_scan,
                                    const void *scans, uint64_t count, void **blob,
                                    size_t *blob_size, qem_error *error);
/* Appends an encoded chunk: it must be the writer's next chunk, made for
 * the same dtype, shape and validity, and intact (its SHA-256); anything
 * else is refused without changing the writer, except a write failure,
 * after which only qem_writer_free remains. */
QEM_API qem_status qem_writer_append_encoded(qem_writer *writer, const void *blob,
                                             size_t blob_size, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Acquisitions: the detector files both writers read                       */

/* An acquisition (a "source") being read, recognised by content, never by
 * name: a 4D .npy (or a 3D stack with a scan shape); a dense dataset in an
 * HDF5 file; a Dectris Arina/Eiger master with the data files it links
 * (only regular files inside its own folder); a Quantum Detectors Merlin
 * .mib (single chip or quad, 1/6/12/24-bit counters; RAW mode refused);
 * an EMPAD acquisition .xml with the .raw it names; Gatan DM3/DM4 and K2
 * IS, TIA .ser/.emi, Velox and Berkeley EMD, NanoMegas .blo, MRC, TVIPS,
 * StreamPix .seq, PNDetector FRMS6, LiberTEM raw_csr; or raw binary the
 * caller describes. Sample types uint8, uint16, uint32 (stored as uint16
 * only when every admitted value fits) and float32; signed, 64-bit and
 * float64 samples stored as uint16 or float32 only where every value is
 * exact there (one pass at open); pixels the detector flags become invalid
 * (.qem) or excluded (packs). doc/inputs.md. */
typedef struct qem_acquisition qem_acquisition;

typedef struct qem_acquisition_options {
    size_t struct_size;
    const char *dataset;    /* HDF5 dataset of frames; NULL = the only candidate */
    uint64_t scan_shape[2]; /* where the file does not state it; {0, 0} = the file's */
    /* Raw binary (all of shape and dtype, or none): the 4D shape; "uint8",
     * "uint16", "uint32", "float32", "int8", "int16", "int32", "float64"
     * (little-endian) or a numpy descr such as ">u2", "<i4" or ">f8"; bytes
     * before the first frame; bytes before each frame. */
    uint64_t raw_shape[4];
    const char *raw_dtype;
    uint64_t raw_offset;
    uint64_t raw_frame_header;
    /* Bytes of each member while it is hashed (done, total of that
     * member); returning nonzero cancels. */
    qem_progress_fn progress;
    void *progress_user;
} qem_acquisition_options;

QEM_API void qem_acquisition_options_init(qem_acquisition_options *options);

/* Recognises and describes `path`: shape, sample type, flagged pixels,
 * the files it consists of (each stamped, so a change is seen later),
 * facts and calibration. Nothing is hashed yet; refusals say why. */
QEM_API qem_status qem_acquisition_open(const char *path, const qem_acquisition_options *options,
                                        qem_acquisition **out, qem_error *error);
QEM_API void qem_acquisition_close(qem_acquisition *acquisition);
/* SHA-256 of every byte of every member between two stamps, and the
 * source identity (pack notes 2.6); QEM_E_CHANGED if a member moved. */
QEM_API qem_status qem_acquisition_authenticate(qem_acquisition *acquisition, qem_error *error);

typedef struct qem_acquisition_info {
    size_t struct_size;      /* set by the caller */
    char family[16];         /* "npy", "hdf5", "arina", "mib", "empad", "dm", "tia", ... */
    uint64_t shape[4];
    uint64_t scans, pixels;
    qem_dtype sample_type;   /* as stored: uint8, uint16, uint32 or float32 */
    qem_dtype stored_dtype;  /* what a .qem or pack holds: uint8, uint16 or float32 */
    uint64_t flagged_pixels; /* pixels the detector flags */
    uint64_t members;        /* files it consists of */
    uint64_t bytes;          /* of every member together */
    int authenticated;       /* every member hashed, identity known */
} qem_acquisition_info;

QEM_API qem_status qem_acquisition_get_info(const qem_acquisition *acquisition,
                                            qem_acquisition_info *info, qem_error *error);

/* A JSON description for people and scripts (`qem inspect`): family,
 * shape, sample type and what would be stored, flagged pixels, members
 * (with digests once authenticated), identity, the facts read from the
 * file, calibration, and size bounds of the .qem and pack that would be
 * written. qem_free() it; NULL with the reason in `error`. */
QEM_API char *qem_acquisition_json(const qem_acquisition *acquisition, qem_error *error);

/* Saves an open acquisition as .qem (see qem_save_file). */
QEM_API qem_status qem_save_acquisition(qem_acquisition *acquisition, const char *dest,
                                        const qem_save_options *options, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Producing packs: inspect -> plan -> produce                              */

typedef struct qem_pack_inspection qem_pack_inspection;

/* Opens and authenticates an acquisition (qem_acquisition_open, then
 * qem_acquisition_authenticate) and refuses what cannot be packed, saying
 * why (float32 data; packs hold counts). */
QEM_API qem_status qem_pack_inspect(const char *source, const qem_acquisition_options *options,
                                    qem_pack_inspection **out, qem_error *error);
QEM_API void qem_pack_inspection_free(qem_pack_inspection *inspection);
/* The inspection as JSON (members, shape, dtype, logical bytes, bad pixels
 * and their digest, mask identity, source identity). qem_free() it; NULL
 * with QEM_E_NO_MEMORY in `error`. */
QEM_API char *qem_pack_inspection_json(const qem_pack_inspection *inspection, qem_error *error);

typedef struct qem_pack_plan_options {
    size_t struct_size;
    qem_pack_profile profile;     /* default QEM_PACK_UINT16_LZ4 */
    const char *destination;      /* where the pack will go (for the disk figure) */
    const uint8_t *exclude;       /* pixels bytes, nonzero = also excluded; or NULL */
    uint64_t available_memory;    /* 0 = measured (MemAvailable) */
    uint64_t available_disk;      /* 0 = measured at the destination's folder */
} qem_pack_plan_options;

QEM_API void qem_pack_plan_options_init(qem_pack_plan_options *options);

typedef struct qem_pack_plan {
    size_t struct_size; /* set by the caller */
    qem_pack_profile profile;
    uint64_t scans_per_shard, shard_count;
    uint64_t excluded_count;
    uint64_t resident_bytes;       /* largest packed resident once loaded */
    uint64_t peak_transient_bytes; /* largest memory production holds at once */
    uint64_t output_max_bytes;
    uint64_t receipt_max_bytes;
    uint64_t disk_need_bytes;      /* output + receipt at the destination */
    uint64_t available_memory, available_disk;
    /* The prelude, manifest and index at their largest (every digest,
     * offset and count at its widest), with room for a later detector
     * calibration; and the HDF5 user block that holds them: 65536, or the
     * smallest power of two above that they fit, at most 16 MiB. */
    uint64_t metadata_max_bytes;
    uint64_t user_block_bytes;
} qem_pack_plan;

/* Computes the shard size and predicted bounds; fails with the required
 * and available figures (QEM_E_INSUFFICIENT_MEMORY / _DISK) when short,
 * and with QEM_E_LIMIT, naming both sizes, when the metadata of the
 * shards would not fit the largest user block.
 * Shard size: uint8/bitpacked - the largest multiple of 32 that divides
 * the scan count, at most 4096; uint16/LZ4 - see doc/pack-producer.md. */
QEM_API qem_status qem_pack_plan_make(const qem_pack_inspection *inspection,
                                      const qem_pack_plan_options *options, qem_pack_plan *plan,
                                      qem_error *error);

typedef struct qem_pack_produce_options {
    size_t struct_size;
    qem_progress_fn progress; /* per shard */
    void *progress_user;
    /* Bytes of each member as it is hashed again before the first shard
     * (the re-authentication); returning nonzero cancels. */
    qem_progress_fn hash_progress;
    void *hash_progress_user;
    /* 0 = OpenMP default (all cores). Tiles and blocks of each shard are
     * encoded on these threads and, from 2, the next shard is read and the
     * source digests run beside them; the pack's bytes and the receipt
     * (but for its timings) are the same for every count. */
    int threads;
} qem_pack_produce_options;

QEM_API void qem_pack_produce_options_init(qem_pack_produce_options *options);

/* Plans again from `plan_options` (as qem_pack_plan_make does, failing the
 * same way when memory or disk is short), re-authenticates the source
 * (QEM_E_CHANGED if it changed since the inspection), builds one shard at a
 * time, writes a genuine HDF5 pack and publishes DEST.receipt.json first
 * and DEST last (the commit marker), never overwriting; any failure
 * publishes nothing. */
QEM_API qem_status qem_pack_produce(qem_pack_inspection *inspection,
                                    const qem_pack_plan_options *plan_options, const char *dest,
                                    const qem_pack_produce_options *options, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Whole-file conveniences (what the CLI uses)                              */

/* Saves `source` as .qem, reading one window of scans at a time:
 *  - an acquisition (qem_acquisition_open with options->input): uint8 and
 *    uint16 counts (integer codec), uint32 counts stored exactly as uint16
 *    (or refused naming the scan, pixel and value), float32 values (float
 *    codec); flagged pixels are invalid; the family, members, digests,
 *    identity, narrowing proof and the file's facts go to source_metadata,
 *    calibration facts whose meaning is certain to schema 2 (beneath the
 *    options' calibration file). Every member is authenticated while it is
 *    read (or before, for HDF5), and a change refuses the save;
 *  - a .qem file: re-saved with its own codec, data, metadata, overrides,
 *    empad block or precision report (options may add calibration or a new
 *    chunk size).
 * Recognised by content, never by name. Peak memory: about
 * 3 * chunk_scans * pixels * 4 bytes. */
QEM_API qem_status qem_save_file(const char *source, const char *dest,
                                 const qem_save_options *options, qem_error *error);

/* Reads a mean-dark recipe for detector shape rows x columns from a .npy:
 * a 2D float32 plane, or a 3D (frames, rows, columns) float32/uint16/uint8
 * stack whose per-pixel mean (in float64, rounded once) is the plane
 * (plane_size >= 4 * rows * columns bytes). The identity (64 hex digits
 * and a NUL: identity_size >= 65) is SHA-256 of "empad-mean-dark/v1", a
 * NUL, the raw bytes of every frame (none for a plane) and the plane's
 * float32 bytes. */
QEM_API qem_status qem_dark_from_npy(const char *path, uint64_t rows, uint64_t columns,
                                     float *plane, size_t plane_size, char *identity,
                                     size_t identity_size, qem_error *error);

/* ------------------------------------------------------------------------ */
/* Live acquisition: a detector's network stream recorded into a .qem       */

/* Where a recording stands, handed to the progress callback about ten
 * times a second and once at the end. */
typedef struct qem_record_progress {
    size_t struct_size;
    uint64_t expected; /* frames the scan holds (0 until the header arrived) */
    uint64_t received; /* frames received, in order and checked */
    uint64_t encoded;  /* frames handed to the writer (with live_view: readable) */
    uint64_t queued;   /* received, waiting in memory */
    uint64_t spilled;  /* received, waiting in the spill file */
    double seconds;    /* since the recording started */
    int finished;      /* the recording ended: published, or failed */
} qem_record_progress;

/* Nonzero asks the recording to stop: the frames received so far are
 * published, marked incomplete. */
typedef int (*qem_record_progress_fn)(void *user, const qem_record_progress *progress);

typedef struct qem_record_options {
    size_t struct_size;
    /* Scan rows and columns; {0, 0} = what the stream's header states
     * (a Merlin's frames per trigger); required where it states none. */
    uint64_t scan_shape[2];
    int threads;          /* encoding threads; 0 = OpenMP default */
    uint32_t chunk_scans; /* as qem_save_options; 0 = 512 */
    /* Frames wait in memory up to this many bytes, then in a spill file
     * on disk (never dropped); 0 = 256 MiB. */
    uint64_t queue_bytes;
    /* Folder of the spill file (and the live journal); NULL = the
     * destination's folder. Both are anonymous: nothing is left behind. */
    const char *spill_dir;
    /* Milliseconds to wait for the stream's header; 0 = 10000. */
    int connect_timeout_ms;
    /* Milliseconds without a message after which the stream counts as
     * ended; 0 = wait for the end of the acquisition (or a stop). */
    int idle_ms;
    /* Keep every frame received readable while recording
     * (qem_recorder_container), in an anonymous journal file of the
     * stored frames; 0 = no journal. */
    int live_view;
    qem_record_progress_fn progress;
    void *progress_user;
    /* The header's free-form "metadata" object (JSON), and a calibration
     * file applied on top, as qem_save_options. */
    const char *metadata_json;
    const char *calibration_json;
} qem_record_options;

QEM_API void qem_record_options_init(qem_record_options *options);

/* What a finished recording wrote. */
typedef struct qem_record_result {
    size_t struct_size;
    int published;      /* 1 if `dest` now holds the file */
    int complete;       /* 1 if every frame of the scan arrived */
    uint64_t expected;  /* frames of the scan */
    uint64_t received;  /* frames received and stored, exact */
    uint64_t spilled;   /* frames that waited in the spill file */
    uint64_t shape[4];  /* of the published file */
    double seconds;     /* from start to publication */
    double publish_seconds; /* from the last frame to publication */
} qem_record_result;

typedef struct qem_recorder qem_recorder;

/* Starts recording the stream at `url` into `dest` (a .qem that must not
 * exist): "merlin://HOST[:PORT]" (Quantum Detectors Merlin data port,
 * default 6342) or "dectris://HOST[:PORT]" (DECTRIS SIMPLON stream V1 over
 * ZeroMQ, default 9999). Receiving runs on a thread of its own, encoding
 * on another; nothing blocks the caller. Frames are checked (numbers in
 * order, sizes, headers), narrowed exactly as qem_save_file does (uint32
 * to uint16, flagged pixels invalid), encoded by the writer of
 * qem_save_file into the same body, and the file is published atomically
 * when the acquisition ends. A stream that ends early, or a stop, publishes
 * every frame received, exact: the last scan row is completed with zeros
 * and the metadata says the acquisition is incomplete and how many frames
 * arrived. A message that breaks the protocol stops the recording with
 * QEM_E_STREAM naming the frame, after publishing the frames before it
 * the same way. */
QEM_API qem_status qem_record_start(const char *url, const char *dest,
                                    const qem_record_options *options, qem_recorder **out,
                                    qem_error *error);

/* Asks the recording to end now (from any thread, a signal handler
 * excepted); qem_recorder_wait then publishes what arrived. */
QEM_API void qem_recorder_stop(qem_recorder *recorder);

/* Where the recording stands now (thread-safe). */
QEM_API void qem_recorder_progress(qem_recorder *recorder, qem_record_progress *progress);

/* Waits for the recording to end and the file to be published. QEM_OK
 * with result->complete 0 for a stream that ended early or a stop; the
 * failure (QEM_E_STREAM, QEM_E_IO, ...) otherwise, with result->published
 * saying whether the frames before it were published. */
QEM_API qem_status qem_recorder_wait(qem_recorder *recorder, qem_record_result *result,
                                     qem_error *error);

/* With options.live_view: a container over the frames received so far
 * (unreceived positions read as zeros), for products while recording;
 * close it before qem_recorder_free. Waits for the stream's header.
 * QEM_E_INVALID_ARGUMENT without live_view. */
QEM_API qem_status qem_recorder_container(qem_recorder *recorder, qem_container **out,
                                          qem_error *error);

/* Stops (if still running), waits, frees. NULL-safe. */
QEM_API void qem_recorder_free(qem_recorder *recorder);

/* qem_record_start + qem_recorder_wait + qem_recorder_free. */
QEM_API qem_status qem_record(const char *url, const char *dest,
                              const qem_record_options *options, qem_record_result *result,
                              qem_error *error);

#ifdef __cplusplus
}
#endif

#endif /* QEM_H */
