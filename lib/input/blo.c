/* NanoMegas ASTAR/TopSpin blockfiles (.blo): a 240-byte little-endian
 * header starting "IMGBLO", a text note up to Data_offset_1, a virtual
 * bright-field image of NX x NY bytes at Data_offset_1, then at
 * Data_offset_2 one record per scan position: 0xAA 0x55, the u32 LE frame
 * counter (0, 1, 2, ...), and the DP_SZ x DP_SZ pattern. The scan is NY
 * rows of NX positions, the frames in that order. NanoMegas publishes no
 * description: the fields are those HyperSpy and LiberTEM read (doc/inputs.md).
 * Every per-pattern header is checked when the file is described and again
 * when its frame is read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/swap.h"

#define BLO_HEADER_BYTES 240u
#define BLO_RECORD_HEADER 6u
#define BLO_MAGIC_8BIT 0x0102u  /* HyperSpy's and LiberTEM's; uint8 patterns */
#define BLO_MAGIC_DEPTH 0x0103u /* LiberTEM's newer one: the note may state the bit depth */
#define BLO_NOTE_MAX (64u << 10)
#define BLO_NOTE_FACT_MAX 4096u

typedef struct blo_state {
    int fd;
    uint64_t data_offset; /* Data_offset_2 */
    uint64_t frame_bytes; /* DP_SZ^2 x item */
    uint64_t record;      /* 6 + frame_bytes */
    size_t item;
} blo_state;

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static double le_f64(const uint8_t *p)
{
    uint64_t bits = 0;
    for (int k = 7; k >= 0; k--)
        bits = bits << 8 | p[k];
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* A double as JSON (JSON has no NaN or infinity: those as text). */
static json_t *real_json(double d)
{
    if (isfinite(d))
        return json_real(d);
    return json_string(isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
}

/* Printable ASCII kept, CR/LF as "\n", anything else '?': a fact is valid
 * JSON and never moves a terminal. */
static json_t *note_json(const uint8_t *s, size_t n)
{
    char *copy = malloc(n + 1);
    if (!copy)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
            continue;
        copy[k++] = s[i] == '\n' || s[i] == '\r' ? '\n'
                    : (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i]
                                                      : '?';
    }
    copy[k] = '\0';
    json_t *out = json_string(copy);
    free(copy);
    return out;
}

/* The bit depth a note states on a line "Blo Bit Depth: N bits" (LiberTEM
 * reads it for header magic 0x0103): 0 when no line states one, -1 when a
 * line does not parse, else N. */
static int note_bit_depth(const uint8_t *note, size_t n)
{
    static const char key[] = "blo bit depth:";
    for (size_t i = 0; i < n;) {
        size_t end = i;
        while (end < n && note[end] != '\n' && note[end] != '\r' && note[end] != '\0')
            end++;
        size_t a = i;
        while (a < end && (note[a] == ' ' || note[a] == '\t'))
            a++;
        if (end - a >= sizeof key - 1) {
            size_t m = 0;
            while (m < sizeof key - 1 && (note[a + m] | 0x20) == key[m])
                m++;
            if (m == sizeof key - 1) {
                size_t p = a + m;
                while (p < end && note[p] == ' ')
                    p++;
                int bits = 0, digits = 0;
                while (p < end && note[p] >= '0' && note[p] <= '9' && digits < 4)
                    bits = bits * 10 + (note[p++] - '0'), digits++;
                if (!digits || end - p < 5 || memcmp(note + p, " bits", 5) != 0)
                    return -1;
                p += 5;
                while (p < end && note[p] == ' ')
                    p++;
                return p == end && bits > 0 ? bits : -1;
            }
        }
        i = end + 1;
    }
    return 0;
}

static int blo_recognises(const uint8_t *head, size_t n)
{
    return n >= 6 && memcmp(head, "IMGBLO", 6) == 0;
}

/* Checks the 6-byte header of frame `frame`: 0xAA 0x55 and the counter. */
static qem_status check_record_header(const uint8_t *h, const char *path, uint64_t frame,
                                      qem_error *error)
{
    if (h[0] != 0xAA || h[1] != 0x55)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the blockfile '%s' has 0x%02X 0x%02X before pattern %llu where every "
                        "pattern starts 0xAA 0x55: the patterns are not where its header puts "
                        "them",
                        path, h[0], h[1], (unsigned long long)frame);
    const uint32_t counter = le32(h + 2);
    if (counter != (uint32_t)frame || frame > UINT32_MAX)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the blockfile '%s' numbers pattern %llu as %u; the patterns must be "
                        "numbered 0, 1, 2, ... in scan order",
                        path, (unsigned long long)frame, counter);
    return QEM_OK;
}

static void header_facts(acquisition *a, const uint8_t *h, unsigned magic)
{
    qem_input_fact(a, "magic", json_integer(magic));
    qem_input_fact(a, "unknown1", json_integer(le32(h + 16)));
    qem_input_fact(a, "dp_rotation", json_integer(le16(h + 22)));
    qem_input_fact(a, "scan_rotation_centidegrees", json_integer(le16(h + 28)));
    qem_input_fact(a, "sx_nm", real_json(le_f64(h + 30)));
    qem_input_fact(a, "sy_nm", real_json(le_f64(h + 38)));
    qem_input_fact(a, "beam_energy_V", json_integer(le32(h + 46)));
    qem_input_fact(a, "sdp", json_integer(le16(h + 50)));
    qem_input_fact(a, "camera_length", json_integer(le32(h + 52)));
    qem_input_fact(a, "acquisition_time_serial_date", real_json(le_f64(h + 56)));
    json_t *centering = json_array(), *distortion = json_array();
    for (int k = 0; k < 8; k++)
        json_array_append_new(centering, real_json(le_f64(h + 64 + 8 * k)));
    for (int k = 0; k < 14; k++)
        json_array_append_new(distortion, real_json(le_f64(h + 128 + 8 * k)));
    qem_input_fact(a, "centering", centering);
    qem_input_fact(a, "distortion", distortion);
}

/* The scan step SX (columns) and SY (rows), in nm as HyperSpy and LiberTEM
 * read them and HyperSpy writes them; only positive finite values. */
static json_t *calibration_of(const uint8_t *h)
{
    static const struct {
        size_t at;
        const char *field, *quantity;
    } steps[] = {{38, "SY", "scan_sampling_row"}, {30, "SX", "scan_sampling_column"}};
    json_t *quantities = json_object();
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
        const double v = le_f64(h + steps[k].at);
        if (!isfinite(v) || !(v > 0))
            continue;
        char evidence[64];
        snprintf(evidence, sizeof evidence, "blockfile header %s (nm)", steps[k].field);
        json_object_set_new(quantities, steps[k].quantity,
                            json_pack("{s:f, s:s, s:s, s:s}", "value", v, "unit", "nm",
                                      "provenance", "NanoMegas blockfile header", "evidence",
                                      evidence));
    }
    if (!json_object_size(quantities)) {
        json_decref(quantities);
        return NULL;
    }
    return json_pack("{s:o}", "quantities", quantities);
}

static qem_status blo_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    blo_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    uint64_t size = 0;
    QEM_TRY(qem_input_open_master(a, path, "a NanoMegas blockfile", o, &s->fd, &size, error));
    if (size < BLO_HEADER_BYTES)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "the blockfile '%s' is %llu bytes, shorter than its %u-byte header", path,
                        (unsigned long long)size, BLO_HEADER_BYTES);
    uint8_t h[BLO_HEADER_BYTES];
    QEM_TRY(qem_pread_full(s->fd, h, sizeof h, 0, QEM_E_CHANGED, error));
    const unsigned magic = le16(h + 6);
    if (magic != BLO_MAGIC_8BIT && magic != BLO_MAGIC_DEPTH)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the blockfile '%s' has header magic 0x%04X; qem reads 0x0102 and 0x0103 "
                        "blockfiles, the variants whose layout is known",
                        path, magic);
    const uint64_t offset1 = le32(h + 8), offset2 = le32(h + 12);
    const uint64_t dp = le16(h + 20), nx = le16(h + 24), ny = le16(h + 26);
    if (!nx || !ny || !dp)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the blockfile '%s' states an empty scan or detector (NX %llu, NY %llu, "
                        "DP_SZ %llu)",
                        path, (unsigned long long)nx, (unsigned long long)ny,
                        (unsigned long long)dp);
    /* The note, the virtual bright field, then the patterns, in order. */
    if (offset1 < BLO_HEADER_BYTES || offset1 + nx * ny > offset2)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the blockfile '%s' puts its virtual bright-field image at byte %llu and "
                        "its patterns at byte %llu; they must follow the %u-byte header in that "
                        "order, %llu bytes (NX x NY) apart at least",
                        path, (unsigned long long)offset1, (unsigned long long)offset2,
                        BLO_HEADER_BYTES, (unsigned long long)(nx * ny));
    if (offset2 > size)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "the blockfile '%s' is %llu bytes; its header puts the patterns at byte "
                        "%llu",
                        path, (unsigned long long)size, (unsigned long long)offset2);

    /* The note (its first BLO_NOTE_MAX bytes), for facts and the bit depth. */
    const size_t note_bytes =
        offset1 - BLO_HEADER_BYTES < BLO_NOTE_MAX ? (size_t)(offset1 - BLO_HEADER_BYTES)
                                                  : BLO_NOTE_MAX;
    uint8_t *note = malloc(note_bytes + 1);
    if (!note)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = qem_pread_full(s->fd, note, note_bytes, BLO_HEADER_BYTES, QEM_E_CHANGED, error);
    int bits = 8;
    if (st == QEM_OK && magic == BLO_MAGIC_DEPTH) {
        const int stated = note_bit_depth(note, note_bytes);
        if (stated < 0 || (stated && stated != 8 && stated != 16 && stated != 32))
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "the blockfile '%s' states a bit depth (\"Blo Bit Depth:\") qem does "
                          "not read; it reads 8, 16 and 32 bits",
                          path);
        bits = stated > 0 ? stated : 8;
    }
    if (st == QEM_OK) {
        size_t kept = note_bytes;
        while (kept && note[kept - 1] == '\0')
            kept--;
        const uint8_t *nul = memchr(note, 0, kept);
        kept = nul ? (size_t)(nul - note) : kept;
        qem_input_fact(a, "note", note_json(note, kept < BLO_NOTE_FACT_MAX ? kept
                                                                           : BLO_NOTE_FACT_MAX));
    }
    free(note);
    QEM_TRY(st);

    s->item = (size_t)bits / 8;
    s->data_offset = offset2;
    a->shape[0] = ny;
    a->shape[1] = nx;
    a->shape[2] = dp;
    a->shape[3] = dp;
    QEM_TRY(qem_input_check_shape(a, path, error));
    const uint64_t frames = nx * ny;
    uint64_t all = 0, expected = 0;
    if (qem_mul_overflow_u64(dp * dp, s->item, &s->frame_bytes) ||
        qem_add_overflow_u64(s->frame_bytes, BLO_RECORD_HEADER, &s->record) ||
        qem_mul_overflow_u64(frames, s->record, &all) ||
        qem_add_overflow_u64(all, offset2, &expected))
        return qem_fail(error, QEM_E_LIMIT, "the blockfile '%s' describes more than 2^64 bytes",
                        path);
    if (size != expected)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "the blockfile '%s' holds %llu bytes, but %llu x %llu patterns of %llu x "
                        "%llu %d-bit pixels, each behind a 6-byte header, from byte %llu need "
                        "exactly %llu (%s)",
                        path, (unsigned long long)size, (unsigned long long)ny,
                        (unsigned long long)nx, (unsigned long long)dp, (unsigned long long)dp,
                        bits, (unsigned long long)offset2, (unsigned long long)expected,
                        size < expected ? "truncated: the acquisition was interrupted or the "
                                          "copy is incomplete"
                                        : "bytes follow the last pattern");

    /* Every per-pattern header (6 bytes read per pattern). */
    uint8_t rh[BLO_RECORD_HEADER];
    for (uint64_t k = 0; k < frames; k++) {
        QEM_TRY(qem_pread_full(s->fd, rh, sizeof rh, offset2 + k * s->record, QEM_E_CHANGED,
                               error));
        QEM_TRY(check_record_header(rh, path, k, error));
    }

    const uint64_t file_shape[2] = {ny, nx};
    uint64_t scan[2];
    QEM_TRY(qem_input_scan_shape(o, 1, file_shape, "its header (NY x NX)", frames, path, scan,
                                 error));
    a->sample_type = bits == 8 ? QEM_DTYPE_UINT8 : bits == 16 ? QEM_DTYPE_UINT16 : QEM_DTYPE_UINT32;
    header_facts(a, h, magic);
    qem_input_fact(a, "bit_depth", json_integer(bits));
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    qem_input_fact(a, "virtual_bright_field_offset", json_integer((json_int_t)offset1));
    qem_input_fact(a, "patterns_offset", json_integer((json_int_t)offset2));
    qem_input_fact(a, "pattern_header",
                   json_string("6 bytes before each pattern: 0xAA 0x55 and the u32 LE pattern "
                               "number, checked"));
    a->calibration = calibration_of(h);
    return qem_input_implicit_mask(a, error);
}

static qem_status blo_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    blo_state *s = a->impl;
    input_member *m = &a->members[0];
    const size_t fb = (size_t)s->frame_bytes;
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t frame = first + k, at = s->data_offset + frame * s->record;
        uint8_t rh[BLO_RECORD_HEADER];
        uint8_t *dst = (uint8_t *)out + k * fb;
        QEM_TRY(qem_pread_full(s->fd, rh, sizeof rh, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, rh, sizeof rh);
        qem_error local = {0};
        if (check_record_header(rh, m->path, frame, &local) != QEM_OK)
            return qem_fail(error, QEM_E_CHANGED, "'%s' changed since it was described: %s",
                            m->path, local.message);
        QEM_TRY(qem_pread_full(s->fd, dst, fb, at + BLO_RECORD_HEADER, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at + BLO_RECORD_HEADER, dst, fb);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        input_swap(dst, fb / s->item, s->item);
#endif
    }
    return QEM_OK;
}

static void blo_release(acquisition *a)
{
    blo_state *s = a->impl;
    if (s && s->fd >= 0)
        close(s->fd);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_blo = {
    "blo", blo_recognises, blo_describe, blo_read, blo_release, 1, NULL};
