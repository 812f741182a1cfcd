/* The input layer: acquisitions (the detector files a microscopist has) read
 * through one small interface, below both writers (`qem save` and the pack
 * producer). A family recognises its files by content, describes them
 * (shape, sample type, flagged pixels, facts, calibration), reads a window
 * of frames, and its members are authenticated (SHA-256 of every byte,
 * stamps before and after) and re-checked. See doc/inputs.md.
 *
 * Families: npy.c, hdf5.c (a dense dataset), arina.c (Dectris Arina/Eiger
 * master + data files), emd.c (Berkeley EMD 0.x/1.0, py4DSTEM, prismatic),
 * velox.c (Thermo Fisher Velox EMD), mib.c (Quantum Detectors Merlin),
 * empad.c (EMPAD XML + raw), blo.c (NanoMegas blockfiles), mrc.c (MRC2014
 * frame stacks), dm.c (Gatan Digital Micrograph DM3/DM4), tia.c (Thermo
 * Fisher/FEI TIA .ser series + .emi), k2is.c (Gatan K2 IS sector files),
 * frms6.c (PNDetector pnCCD .frms6 + .hdr), tvips.c (TVIPS recorder streams
 * and their parts), seq.c (Norpix StreamPix .seq as Direct Electron cameras
 * write it, Celeritas halves paired), csr.c (LiberTEM raw_csr: a TOML
 * descriptor naming indptr, indices and data files), raw.c (raw binary
 * described by options); de_info.c reads Direct Electron's _info.txt beside
 * mrc and seq movies. The HDF5 families share hdf5_util.c and use
 * libhdf5, which Debian builds without thread safety: use one acquisition
 * from one thread at a time. */
#ifndef QEM_INPUT_INPUT_H
#define QEM_INPUT_INPUT_H

#include <jansson.h>
#include <stdint.h>

#include "common/fileio.h"
#include "common/sha256.h"
#include "qem.h"

/* One file an acquisition consists of. */
typedef struct input_member {
    char *path;
    int is_master;        /* the master, or the single file of a one-file acquisition */
    uint64_t bytes;
    uint8_t sha256[32];
    int hashed;           /* sha256 holds the digest of every byte */
    qem_file_stamp stamp; /* when it was described (or hashed) */
    /* Hashing while the family reads the file front to back (byte
     * families during a save): the digest of bytes [0, streamed). */
    qem_sha256 *stream;
    uint64_t streamed;
} input_member;

/* Samples no codec stores as they are (values.c): signed, 64-bit or
 * float64. A family that reads them sets a->read_values in describe (its
 * reads then give those samples, native byte order) and leaves sample_type
 * NONE; qem_input_open reads every frame once and settles sample_type:
 * integers to uint16 when every value fits, else integers and float64 to
 * float32 when every value survives it bit for bit, else QEM_E_VALUE_RANGE
 * naming the range found. Nothing is clipped or rounded. */
typedef enum input_values {
    INPUT_VALUES_AS_STORED = 0, /* reads give sample_type itself */
    INPUT_VALUES_INT8,
    INPUT_VALUES_INT16,
    INPUT_VALUES_INT32,
    INPUT_VALUES_INT64,
    INPUT_VALUES_UINT32, /* the settling rule; sample_type UINT32 is the narrowing one */
    INPUT_VALUES_UINT64,
    INPUT_VALUES_FLOAT64
} input_values;

/* Raw binary, described by the caller. */
typedef struct input_raw {
    uint64_t shape[4];     /* scan rows, scan columns, detector rows, detector columns */
    qem_dtype dtype;       /* UINT8, UINT16, UINT32 or FLOAT32; NONE: see values */
    input_values values;   /* signed, 64-bit or float64 samples instead of dtype */
    int big_endian;
    uint64_t offset;       /* bytes before the first frame */
    uint64_t frame_header; /* bytes before each frame */
} input_raw;

typedef struct input_options {
    const char *dataset;    /* HDF5: the dataset of frames; NULL = the only candidate */
    uint64_t scan_shape[2]; /* for files that do not state it; {0, 0} = the file's */
    input_raw raw;
    qem_progress_fn progress; /* bytes of each member while it is hashed; cancels */
    void *progress_user;
} input_options;

typedef struct acquisition acquisition;

/* A family of acquisition files. */
typedef struct input_family {
    const char *name; /* "npy", "hdf5", "arina", "mib", "empad", "k2is", "mrc", ..., "raw" */
    /* 1 if a file starting with `head` is of this family (by content,
     * never by name). NULL for families chosen otherwise (HDF5 by the
     * superblock signature, raw by the caller's options). */
    int (*recognises)(const uint8_t *head, size_t head_size);
    /* Describes the file at `path`, whose first bytes are `head`: shape,
     * sample type, members (qem_input_add_member), flagged pixels, facts and
     * calibration. Returns QEM_OK, or the refusal. */
    qem_status (*describe)(acquisition *a, const char *path, const uint8_t *head, size_t head_size,
                           const input_options *o, qem_error *error);
    /* Reads frames [first, first + count) in the stored sample type, native
     * byte order, C order, into `out`. */
    qem_status (*read)(acquisition *a, uint64_t first, uint64_t count, void *out, qem_error *error);
    /* Frees the family's state (a->impl). */
    void (*release)(acquisition *a);
    /* 1 if reads go through the family's own pread of member bytes (so the
     * members can be hashed while a save reads them front to back). */
    int reads_bytes;
    /* Families of HDF5 files, which all carry the superblock signature:
     * sets `*claimed` to 1 if the file at `path` is of this family (or
     * returns its refusal). An HDF5 file no family claims is a dataset
     * (hdf5). The file it opened stays in a->impl for the describe that
     * follows, whichever HDF5 family that is: libhdf5 opens it once.
     * NULL for the rest. */
    qem_status (*claims_hdf5)(acquisition *a, const char *path, int *claimed, qem_error *error);
} input_family;

struct acquisition {
    const input_family *family;
    uint64_t shape[4];
    qem_dtype sample_type; /* as stored: UINT8, UINT16, UINT32 or FLOAT32 */
    input_member *members; /* the master (or single file) first, then data files in order */
    size_t member_count;
    uint32_t *flagged; /* detector pixels the detector flags (pixel_mask != 0), ascending */
    uint64_t flagged_count;
    uint8_t detector_mask_sha256[32]; /* the LE u32 mask; without one, of 4 x pixels zero bytes */
    const char *mask_origin;
    uint8_t identity[32]; /* framed over the member digests (pack notes 2.6) */
    int authenticated;    /* every member hashed and the identity computed */
    uint64_t largest_compressed_chunk; /* HDF5: largest stored chunk, 0 if unknown */
    json_t *facts;       /* what the family read from the file: source_metadata */
    json_t *calibration; /* a calibration file document of certain facts, or NULL */
    /* Narrowing (uint32 stored as uint16): what reads found so far. */
    uint32_t max_admitted; /* largest value at an admitted pixel */
    uint64_t flagged_clipped; /* values above 65535 at flagged pixels, stored as 65535 */
    input_values read_values; /* what reads give when not sample_type (values.c) */
    json_t *values;           /* how they were settled: source_metadata "values" */
    void *impl;
};

/* --- for the families ------------------------------------------------------ */

/* Adds a member (not hashed yet; its stamp taken now, opening it so that a
 * FIFO or device is refused). */
qem_status qem_input_add_member(acquisition *a, const char *path, int is_master, qem_error *error);
/* The one file a byte family reads first (the master): --dataset refused
 * (it names HDF5 datasets; "'<path>' is <format>; ..."), the member added,
 * opened into `*fd` (the caller closes it) and its stamp checked; `*size`
 * its bytes. */
qem_status qem_input_open_master(acquisition *a, const char *path, const char *format,
                                 const input_options *o, int *fd, uint64_t *size,
                                 qem_error *error);
/* Refuses an acquisition with an empty dimension, a detector of more than
 * INPUT_MAX_DETECTOR_PIXELS pixels, or sizes that overflow: the check every
 * entry point passes before any work proportional to the shape. */
qem_status qem_input_check_shape(const acquisition *a, const char *path, qem_error *error);
/* The scan shape of `frames` frames: the caller's, else the file's
 * (`have_file`, stated on `file_on`), which must agree; rows x columns
 * must equal `frames`. */
qem_status qem_input_scan_shape(const input_options *o, int have_file, const uint64_t file_shape[2],
                                const char *file_on, uint64_t frames, const char *path,
                                uint64_t out[2], qem_error *error);
/* No detector mask: the implicit all-admitted mask digest (4 x pixels zero
 * bytes, hashed only once qem_input_check_shape has passed). */
qem_status qem_input_implicit_mask(acquisition *a, qem_error *error);
/* Records that the family read `size` bytes of member `m` (open as `fd`)
 * at `offset` into `data`: while a save hashes as it reads, bytes the
 * reads skipped before `offset` (a header) are hashed from `fd` first, and
 * these bytes when they continue the stream. */
void qem_input_member_read(input_member *m, int fd, uint64_t offset, const void *data, size_t size);
/* Settling read_values (qem_input_open calls it after describe) and
 * reading them as sample_type. */
size_t qem_input_values_size(input_values v);
const char *qem_input_values_name(input_values v);
qem_status qem_input_settle_values(acquisition *a, const char *path, qem_error *error);
qem_status qem_input_read_values(acquisition *a, uint64_t first, uint64_t count, void *out,
                                 qem_error *error);
/* 1 if the options ask for raw binary. */
static inline int qem_input_raw_requested(const input_options *o)
{
    return o->raw.dtype != QEM_DTYPE_NONE || o->raw.values != INPUT_VALUES_AS_STORED;
}
/* facts[key] = value (takes the reference). */
void qem_input_fact(acquisition *a, const char *key, json_t *value);

extern const input_family qem_input_family_npy, qem_input_family_hdf5, qem_input_family_arina,
    qem_input_family_emd, qem_input_family_velox, qem_input_family_mib, qem_input_family_empad,
    qem_input_family_raw, qem_input_family_k2is, qem_input_family_frms6, qem_input_family_tvips,
    qem_input_family_seq, qem_input_family_blo, qem_input_family_mrc, qem_input_family_csr,
    qem_input_family_dm, qem_input_family_tia;

/* A companion: a file that another file of the acquisition names or implies
 * (an Arina data link, an EMPAD raw file, a Merlin .hdr). One containment
 * rule for every family: it must be a regular file inside its owner's own
 * folder, symlinks resolved, so that a crafted acquisition cannot make qem
 * read, hash or quote any other file of the machine. The messages are
 * "<subject> '<name>', outside <folder>; <rule>" and the like. */
typedef struct input_companion {
    const char *owner;   /* the file that names it */
    const char *subject; /* "'a.xml' names the raw file", "master 'm.h5' links data_000001 to" */
    const char *folder;  /* "the XML's folder" */
    const char *rule;    /* "the raw file must lie beside its XML" */
    const char *keep;    /* advice when it cannot be read: "keep the XML and its raw file together" */
} input_companion;
/* `*present` = 1 when anything named `name` lies in `folder` (lstat: a
 * dangling or outward symlink counts, for qem_input_companion_path to
 * refuse), else 0: how a family finds its optional companions. */
qem_status qem_input_entry_present(const char *folder, const char *name, int *present,
                                   qem_error *error);
/* Checks the companion `name` (as written, relative to the owner's
 * folder) and gives the path to open (`*member`, the caller frees it):
 * QEM_E_LAYOUT when it is absolute, has a ".." component, resolves outside
 * the folder or is not a regular file; QEM_E_IO when it cannot be
 * resolved (missing). */
qem_status qem_input_companion_path(const input_companion *c, const char *name, char **member,
                                    qem_error *error);

/* An EMPAD acquisition XML parsed (empad.c): the flattened facts, the
 * values the reader uses (kept whatever the caps on facts) and the root's
 * name, all owned by the caller (qem_input_empad_xml_free). `work` counts the
 * bytes copied into element paths and facts: linear in the document,
 * which the tests assert. */
typedef struct input_empad_xml {
    json_t *facts;
    json_t *used;
    char *root;
    uint64_t work;
} input_empad_xml;
qem_status qem_input_empad_parse_xml(const char *xml, size_t size, const char *path,
                                     input_empad_xml *out, qem_error *error);
void qem_input_empad_xml_free(input_empad_xml *x);

/* The tags of a Gatan Digital Micrograph DM3/DM4 tag file (dm.c), such as
 * the .gtg of a K2 IS acquisition, walked with the DM family's parser and
 * bounds. Paths are the tag names joined by '/' (an unnamed group is
 * TagGroup<k>, unnamed data Data<k>, as HyperSpy names them). */
typedef struct input_dm_tags {
    json_t *tags;  /* path: value of each data tag, while the caps of the DM facts allow */
    json_t *named; /* path: value of each of the paths asked for that the file holds */
    int truncated; /* tags were left out of `tags` by the caps */
    int version;   /* 3 or 4 */
    int little_endian;
} input_dm_tags;
/* Parses the file `path` (open as `fd`, `size` bytes): the DM family's
 * refusals (QEM_E_FILE_LENGTH cut short, QEM_E_LAYOUT malformed,
 * QEM_E_UNSUPPORTED another version, QEM_E_LIMIT too deep or too many
 * tags). Values are read only when small (numbers, text, short arrays);
 * the rest are described. The caller frees `out` (qem_input_dm_tags_free). */
qem_status qem_input_dm_tags(int fd, uint64_t size, const char *path, const char *const *names,
                             size_t name_count, input_dm_tags *out, qem_error *error);
void qem_input_dm_tags_free(input_dm_tags *t);

/* The JSON of a Velox EMD file (velox_meta.c, free of libhdf5 so that it
 * is fuzzed alone). */
#define VELOX_MAX_METADATA_BYTES (1u << 20)
/* 1 if `text` (at most `size` bytes, NUL padded) is the /Version document
 * of a Velox file ({"format": "Velox", ...}); `*version` gets it. */
int qem_input_velox_version(const char *text, size_t size, json_t **version);
typedef struct input_velox_meta {
    json_t *facts;    /* the metadata's sections, each at most 16 KiB */
    int camera;       /* the frames come from a camera (not a scanning detector) */
    uint64_t scan[2]; /* the scan of camera frames Scan.ScanSize states, {0, 0} if none */
} input_velox_meta;
/* Parses the Metadata text of the first of `frames` frames (`where` names
 * it in messages): QEM_E_METADATA when it is no JSON object or its
 * Scan.ScanSize is no count, QEM_E_LIMIT over VELOX_MAX_METADATA_BYTES. */
qem_status qem_input_velox_parse_metadata(const char *text, size_t size, uint64_t frames,
                                          const char *where, input_velox_meta *out,
                                          qem_error *error);
void qem_input_velox_meta_free(input_velox_meta *m);

/* --- for the writers -------------------------------------------------------- */

/* Recognises `path` by content and describes it; members are stamped, not
 * hashed (qem_input_authenticate hashes them). */
qem_status qem_input_open(const char *path, const input_options *options, acquisition **out,
                          qem_error *error);
void qem_input_close(acquisition *a);

/* Hashes every member between two stamps and computes the identity. */
qem_status qem_input_authenticate(acquisition *a, qem_progress_fn progress, void *progress_user,
                                  qem_error *error);
/* Hashes every member again: QEM_E_CHANGED when a digest or stamp moved. */
qem_status qem_input_reauthenticate(acquisition *a, qem_progress_fn progress, void *progress_user,
                                    qem_error *error);
/* Stamps only (cheap): QEM_E_CHANGED when any member moved. */
qem_status qem_input_check_unchanged(const acquisition *a, qem_error *error);

/* Starts hashing members as reads stream through them (families that read
 * bytes themselves), so a save that reads every frame in order needs no
 * second pass. */
qem_status qem_input_stream_begin(acquisition *a, qem_error *error);
/* Ends it: hashes what the reads did not cover, checks every stamp, and
 * computes the identity (QEM_E_CHANGED if a member moved). */
qem_status qem_input_stream_finish(acquisition *a, qem_progress_fn progress, void *progress_user,
                                   qem_error *error);

/* What a writer stores: uint8 and uint16 as they are, uint32 as uint16
 * (exactly, or refused), float32 as float32. */
qem_dtype qem_input_stored_dtype(const acquisition *a);
/* The samples as the file holds them: "uint16", "int32", "float64", ... */
const char *qem_input_read_as_name(const acquisition *a);

/* Reads frames [first, first + count) as `target` (UINT8 only from uint8
 * samples; UINT16 from uint8, uint16 or uint32; FLOAT32 from float32).
 * uint32 samples narrow exactly: a value above 65535 at an admitted pixel
 * fails with QEM_E_VALUE_RANGE naming the scan position, pixel and value;
 * at a flagged pixel it is stored as 65535 and counted. Scratch beyond
 * `out` is at most 8 MiB. */
qem_status qem_input_read(acquisition *a, uint64_t first, uint64_t count, qem_dtype target,
                          void *out, size_t out_size, qem_error *error);

/* The source_metadata a writer records: family, sample type and how it
 * was stored (the narrowing proof), members with their digests, the
 * identity when known, flagged pixels, and the family's facts. */
json_t *qem_input_source_metadata(const acquisition *a);

/* The writer options of a save from `a` (save.c): flagged pixels to
 * validity beside the caller's mask, the facts as source_metadata, the
 * source's calibration beneath the caller's. A live recording makes the
 * same, so its body is the body `qem save` writes. */
typedef struct save_setup {
    qem_save_options options; /* the caller's, amended; points into the rest */
    uint8_t *valid;
    char *calibration;
    char *source_metadata;
} save_setup;

qem_status qem_save_setup_make(const acquisition *a, const qem_save_options *options,
                               save_setup *setup, qem_error *error);
void qem_save_setup_free(save_setup *setup);
/* After the last read: the source_metadata the reads amended (the
 * narrowing proof, digests) into the writer's header. */
qem_status qem_save_note_facts(const acquisition *a, qem_writer *writer, qem_error *error);

/* The identity framing of pack notes 2.6 over member digests. */
qem_status qem_input_identity(const uint8_t *master_sha256, const uint8_t (*data_sha256)[32],
                              size_t data_count, uint8_t identity[32], qem_error *error);

/* The acquisition behind a public handle. */
acquisition *qem_acquisition_input(qem_acquisition *acquisition);

/* The largest detector any family describes: 2^26 pixels (8192 x 8192),
 * beyond every pixelated 4D-STEM detector made (an Eiger2 16M has 18
 * million). Work proportional to the detector (the implicit mask's digest,
 * a frame's scratch) stays below a second; a larger shape is refused
 * before any of it. */
#define INPUT_MAX_DETECTOR_PIXELS (1ull << 26)

#define INPUT_ORIGIN_SOURCE_MASK "source-little-endian-u32-mask"
#define INPUT_ORIGIN_IMPLICIT_MASK "implicit-all-admitted-u32-mask"

#endif
