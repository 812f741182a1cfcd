/* MRC files (MRC2014, https://www.ccpem.ac.uk/mrc_format/mrc2014.php): a
 * 1024-byte header ("MAP " at byte 208, the machine stamp at 212 giving
 * the byte order), NSYMBT bytes of extended header (skipped; its type,
 * EXTTYP, recorded), then NZ sections of NY rows of NX columns, columns
 * fastest. A 4D-STEM MRC (Direct Electron DE-Server, Velox export) stores
 * one diffraction pattern per section, in scan order: the scan shape comes
 * from the caller (--scan-shape); one section is one position. Modes:
 * 0 int8, 1 int16, 2 float32, 6 uint16, 12 float16 (read as float32, which
 * holds every float16 exactly); complex and packed 4-bit data are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/de_info.h"
#include "input/input.h"
#include "input/swap.h"

#define MRC_HEADER_BYTES 1024u
#define MRC_LABELS 10
#define MRC_LABEL_BYTES 80

typedef struct mrc_state {
    int fd;
    int big_endian;
    int half;             /* mode 12: float16 on disk, float32 read */
    size_t item;          /* bytes per sample on disk */
    uint64_t data_offset; /* 1024 + NSYMBT */
    uint64_t frame_bytes; /* on disk */
} mrc_state;

/* The header's words in the file's byte order. */
typedef struct mrc_header {
    const uint8_t *b;
    int big_endian;
} mrc_header;

static uint32_t word(const mrc_header *h, size_t at)
{
    const uint8_t *p = h->b + at;
    return h->big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                         : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int32_t int_at(const mrc_header *h, size_t at)
{
    const uint32_t u = word(h, at);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static double real_at(const mrc_header *h, size_t at)
{
    const uint32_t u = word(h, at);
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

/* JSON has no NaN or infinity: those as text. */
static json_t *real_json(double d)
{
    if (isfinite(d))
        return json_real(d);
    return json_string(isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
}

/* Printable ASCII kept (trailing blanks and NULs dropped), anything else '?'. */
static json_t *text_json(const uint8_t *s, size_t n)
{
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\0'))
        n--;
    char copy[MRC_LABEL_BYTES + 1];
    n = n < MRC_LABEL_BYTES ? n : MRC_LABEL_BYTES;
    for (size_t i = 0; i < n; i++)
        copy[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    copy[n] = '\0';
    return json_string(copy);
}

/* An IEEE 754 binary16 as binary32, exactly: subnormals normalised,
 * infinities kept, a NaN's sign and payload kept (shifted as numpy does). */
static uint32_t half_to_float_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0x1f)
        return sign | 0x7f800000u | mantissa << 13;
    if (exponent != 0)
        return sign | (exponent + 112u) << 23 | mantissa << 13;
    if (mantissa == 0)
        return sign;
    exponent = 113; /* 2^-14, the smallest normal binary16 exponent, biased for binary32 */
    while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        exponent--;
    }
    return sign | exponent << 23 | (mantissa & 0x3ffu) << 13;
}

static int mrc_recognises(const uint8_t *head, size_t n)
{
    return n >= 212 && memcmp(head + 208, "MAP ", 4) == 0;
}

static void header_facts(acquisition *a, const mrc_header *h, const uint8_t *stamp)
{
    static const char *const ints[] = {"nx",     "ny",     "nz",     "mode",   "nxstart",
                                       "nystart", "nzstart", "mx",     "my",     "mz"};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        qem_input_fact(a, ints[k], json_integer(int_at(h, 4 * k)));
    qem_input_fact(a, "cell_angstrom", json_pack("[o,o,o]", real_json(real_at(h, 40)),
                                                 real_json(real_at(h, 44)),
                                                 real_json(real_at(h, 48))));
    qem_input_fact(a, "cell_angles_degrees", json_pack("[o,o,o]", real_json(real_at(h, 52)),
                                                       real_json(real_at(h, 56)),
                                                       real_json(real_at(h, 60))));
    qem_input_fact(a, "axis_order_mapc_mapr_maps",
                   json_pack("[i,i,i]", int_at(h, 64), int_at(h, 68), int_at(h, 72)));
    qem_input_fact(a, "dmin", real_json(real_at(h, 76)));
    qem_input_fact(a, "dmax", real_json(real_at(h, 80)));
    qem_input_fact(a, "dmean", real_json(real_at(h, 84)));
    qem_input_fact(a, "ispg", json_integer(int_at(h, 88)));
    qem_input_fact(a, "nsymbt", json_integer(int_at(h, 92)));
    qem_input_fact(a, "exttyp", text_json(h->b + 104, 4));
    qem_input_fact(a, "nversion", json_integer(int_at(h, 108)));
    qem_input_fact(a, "origin", json_pack("[o,o,o]", real_json(real_at(h, 196)),
                                          real_json(real_at(h, 200)),
                                          real_json(real_at(h, 204))));
    char hex[16];
    snprintf(hex, sizeof hex, "%02x %02x %02x %02x", stamp[0], stamp[1], stamp[2], stamp[3]);
    qem_input_fact(a, "machine_stamp", json_string(hex));
    qem_input_fact(a, "byte_order", json_string(h->big_endian ? "big-endian" : "little-endian"));
    qem_input_fact(a, "rms", real_json(real_at(h, 216)));
    /* Pixel size: CELLA / MXYZ, in angstrom (a length in the specimen,
     * so a fact, not the detector's calibration). */
    const int32_t mx = int_at(h, 28), my = int_at(h, 32);
    if (mx > 0 && my > 0)
        qem_input_fact(a, "pixel_size_angstrom",
                       json_pack("[o,o]", real_json(real_at(h, 40) / mx),
                                 real_json(real_at(h, 44) / my)));
    int32_t labels = int_at(h, 220);
    qem_input_fact(a, "nlabl", json_integer(labels));
    labels = labels < 0 ? 0 : labels > MRC_LABELS ? MRC_LABELS : labels;
    json_t *texts = json_array();
    for (int32_t k = 0; k < labels; k++)
        json_array_append_new(texts, text_json(h->b + 224 + MRC_LABEL_BYTES * (size_t)k,
                                               MRC_LABEL_BYTES));
    qem_input_fact(a, "labels", texts);
}

static qem_status mrc_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    mrc_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    uint64_t size = 0;
    QEM_TRY(qem_input_open_master(a, path, "an MRC file", o, &s->fd, &size, error));
    if (size < MRC_HEADER_BYTES)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "the MRC file '%s' is %llu bytes, shorter than its %u-byte header", path,
                        (unsigned long long)size, MRC_HEADER_BYTES);
    uint8_t b[MRC_HEADER_BYTES];
    QEM_TRY(qem_pread_full(s->fd, b, sizeof b, 0, QEM_E_CHANGED, error));

    /* MACHST: 0x44 0x44 little-endian, 0x11 0x11 big-endian (MRC2014); 0x44
     * 0x41, CCP4's little-endian stamp, as mrcfile reads it. */
    const uint8_t *stamp = b + 212;
    if (stamp[0] == 0x44 && (stamp[1] == 0x44 || stamp[1] == 0x41))
        s->big_endian = 0;
    else if (stamp[0] == 0x11 && stamp[1] == 0x11)
        s->big_endian = 1;
    else
        return qem_fail(error, QEM_E_LAYOUT,
                        "the MRC file '%s' has the machine stamp %02x %02x %02x %02x, neither "
                        "little-endian (44 44 00 00 or 44 41 00 00) nor big-endian (11 11 00 00): "
                        "its byte order is unknown",
                        path, stamp[0], stamp[1], stamp[2], stamp[3]);
    const mrc_header h = {b, s->big_endian};
    const int32_t nx = int_at(&h, 0), ny = int_at(&h, 4), nz = int_at(&h, 8);
    const int32_t mode = int_at(&h, 12), nsymbt = int_at(&h, 92);
    if (nx <= 0 || ny <= 0 || nz <= 0)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the MRC file '%s' states NX %d, NY %d, NZ %d; each must be positive",
                        path, nx, ny, nz);
    if (nsymbt < 0)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the MRC file '%s' states an extended header of %d bytes (NSYMBT)", path,
                        nsymbt);
    switch (mode) {
    case 0: /* MRC2014: 8-bit signed integer */
        a->read_values = INPUT_VALUES_INT8;
        s->item = 1;
        break;
    case 1:
        a->read_values = INPUT_VALUES_INT16;
        s->item = 2;
        break;
    case 2:
        a->sample_type = QEM_DTYPE_FLOAT32;
        s->item = 4;
        break;
    case 6:
        a->sample_type = QEM_DTYPE_UINT16;
        s->item = 2;
        break;
    case 12:
        a->sample_type = QEM_DTYPE_FLOAT32;
        s->item = 2;
        s->half = 1;
        break;
    case 3:
    case 4:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the MRC file '%s' holds complex samples (mode %d, %s); qem reads "
                        "detector counts and real values",
                        path, mode, mode == 3 ? "complex 16-bit integers" : "complex float32");
    case 101:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the MRC file '%s' holds 4-bit samples packed two to a byte (mode 101), "
                        "which qem does not read",
                        path);
    default:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the MRC file '%s' has mode %d, which MRC2014 does not define (0, 1, 2, "
                        "3, 4, 6, 12, 101)",
                        path, mode);
    }
    /* Columns, rows, sections must be X, Y, Z: frames as stored. */
    const int32_t mapc = int_at(&h, 64), mapr = int_at(&h, 68), maps = int_at(&h, 72);
    if (mapc != 1 || mapr != 2 || maps != 3) {
        const int permutation = mapc >= 1 && mapc <= 3 && mapr >= 1 && mapr <= 3 && maps >= 1 &&
                                maps <= 3 && mapc != mapr && mapr != maps && mapc != maps;
        return qem_fail(error, permutation ? QEM_E_UNSUPPORTED : QEM_E_LAYOUT,
                        "the MRC file '%s' maps columns, rows and sections to axes %d, %d, %d "
                        "(MAPC, MAPR, MAPS); %s",
                        path, mapc, mapr, maps,
                        permutation ? "qem reads frames stored as X, Y, Z (1, 2, 3) only"
                                    : "they must be a permutation of 1, 2, 3");
    }
    a->shape[2] = (uint64_t)ny;
    a->shape[3] = (uint64_t)nx;
    a->shape[0] = 1;
    a->shape[1] = (uint64_t)nz;
    QEM_TRY(qem_input_check_shape(a, path, error));
    uint64_t all = 0, expected = 0;
    s->data_offset = MRC_HEADER_BYTES + (uint64_t)nsymbt;
    if (qem_mul_overflow_u64((uint64_t)nx * (uint64_t)ny, s->item, &s->frame_bytes) ||
        qem_mul_overflow_u64(s->frame_bytes, (uint64_t)nz, &all) ||
        qem_add_overflow_u64(all, s->data_offset, &expected))
        return qem_fail(error, QEM_E_LIMIT, "the MRC file '%s' describes more than 2^64 bytes",
                        path);
    if (size != expected)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "the MRC file '%s' holds %llu bytes, but its header (1024 bytes), "
                        "extended header (%d bytes) and %d sections of %d x %d mode-%d samples "
                        "need exactly %llu (%s)",
                        path, (unsigned long long)size, nsymbt, nz, ny, nx, mode,
                        (unsigned long long)expected,
                        size < expected ? "truncated: the copy is incomplete"
                                        : "bytes follow the last section");
    /* A Direct Electron movie's <dataset>_info.txt states its scan. */
    de_info info;
    int found = 0;
    QEM_TRY(qem_de_info_companion(a, path, "the MRC file", &info, &found, error));
    uint64_t scan[2];
    qem_status st = qem_de_info_scan_shape(&info, found, o, (uint64_t)nz, path, scan, error);
    qem_de_info_free(&info);
    QEM_TRY(st);
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    header_facts(a, &h, stamp);
    qem_input_fact(a, "frames", json_integer(nz));
    if (s->half)
        qem_input_fact(a, "float16",
                       json_string("mode 12 float16 samples read as float32, which holds every "
                                   "float16 exactly"));
    qem_input_fact(a, "row_order",
                   json_string("as stored: row 0 is the first row of each section (as "
                               "HyperSpy and RosettaSciIO return it)"));
    return qem_input_implicit_mask(a, error);
}

static qem_status mrc_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    mrc_state *s = a->impl;
    input_member *m = &a->members[0];
    const uint64_t at = s->data_offset + first * s->frame_bytes;
    const size_t bytes = (size_t)(count * s->frame_bytes), values = bytes / s->item;
    /* float16 into the upper half of `out`, then widened front to back
     * (value i goes to bytes 4i..4i+3, never past an unread one). */
    uint8_t *raw = s->half ? (uint8_t *)out + bytes : out;
    QEM_TRY(qem_pread_full(s->fd, raw, bytes, at, QEM_E_CHANGED, error));
    qem_input_member_read(m, s->fd, at, raw, bytes);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (s->big_endian && s->item > 1)
        input_swap(raw, values, s->item);
#else
    if (!s->big_endian && s->item > 1)
        input_swap(raw, values, s->item);
#endif
    if (s->half) {
        for (size_t i = 0; i < values; i++) {
            uint16_t half;
            memcpy(&half, raw + 2 * i, sizeof half);
            const uint32_t wide = half_to_float_bits(half);
            memcpy((uint8_t *)out + 4 * i, &wide, sizeof wide);
        }
    }
    return QEM_OK;
}

static void mrc_release(acquisition *a)
{
    mrc_state *s = a->impl;
    if (s && s->fd >= 0)
        close(s->fd);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_mrc = {
    "mrc", mrc_recognises, mrc_describe, mrc_read, mrc_release, 1, NULL};
