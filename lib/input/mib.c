/* Quantum Detectors Merlin .mib acquisitions: a sequence of frame records,
 * each an ASCII header ("MQ1,<number>,<header bytes>,<chips>,<width>,
 * <height>,<type>,<layout>,...", NUL-padded) and the frame's samples (U08,
 * U16 or U32, big-endian; a quad's 2x2 frames stored assembled). A .hdr
 * beside the .mib ("Key:\tValue" lines) describes the acquisition. Every
 * header is checked against the first when the file is described and
 * again when its frame is read. Rows stay in the order stored in the file
 * (RosettaSciIO returns them flipped vertically). RAW mode (R64) is
 * refused: its counter bits need the chip's readout order. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/mib_header.h"
#include "input/swap.h"

#define MIB_MIN_HEADER 16u
#define MIB_MAX_HEADER 65536u
#define MIB_MAX_FIELDS 1024
#define MIB_MAX_SIDE 65535u
#define HDR_MAX_BYTES (1u << 20)
#define HDR_MAX_KEYS 512

typedef struct mib_state {
    int fd;
    mib_header first;
    uint64_t record; /* header + samples */
    uint64_t frame_bytes;
    uint64_t frames;
    uint8_t *header;  /* one header's bytes */
    uint64_t next;    /* the frame after the last one read, for sequential reads */
    uint64_t prev_number;
} mib_state;

/* --- text ------------------------------------------------------------------- */

/* The header's text (up to its first NUL, within `n` bytes) split at commas
 * into at most MIB_MAX_FIELDS fields, each trimmed of spaces. `text` is a
 * NUL-terminated copy the fields point into. */
typedef struct mib_fields {
    char *text;
    char *field[MIB_MAX_FIELDS];
    size_t count;
} mib_fields;

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

static int split_fields(const uint8_t *bytes, size_t n, mib_fields *f)
{
    const uint8_t *nul = memchr(bytes, 0, n);
    const size_t len = nul ? (size_t)(nul - bytes) : n;
    f->text = malloc(len + 1);
    f->count = 0;
    if (!f->text)
        return 0;
    memcpy(f->text, bytes, len);
    f->text[len] = '\0';
    char *p = f->text;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (f->count < MIB_MAX_FIELDS)
            f->field[f->count++] = trim(p);
        if (!comma)
            break;
        p = comma + 1;
    }
    return 1;
}

/* A whole field of decimal digits (at most 18), as a number. */
static int parse_digits(const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    if (n == 0 || n > 18)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

/* Text from a file as a JSON string: printable ASCII kept, anything else
 * (control bytes, invalid UTF-8) shown as '?', so a fact is always valid
 * JSON and never moves a terminal. */
static json_t *text_json(const char *s, size_t n)
{
    char *copy = malloc(n + 1);
    if (!copy)
        return NULL;
    for (size_t i = 0; i < n; i++)
        copy[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    copy[n] = '\0';
    json_t *out = json_string(copy);
    free(copy);
    return out;
}

/* A number when the whole text is one finite number, else the text. */
static json_t *value_json(const char *s)
{
    if (*s) {
        char *end = NULL;
        errno = 0;
        const double v = strtod(s, &end);
        if (end && *end == '\0' && errno == 0 && isfinite(v)) {
            uint64_t digits;
            if (parse_digits(s, &digits))
                return json_integer((json_int_t)digits);
            return json_real(v);
        }
    }
    return text_json(s, strlen(s));
}

/* --- frame headers ----------------------------------------------------------- */

static qem_status bad_header(qem_error *error, const char *path, uint64_t frame, const char *what)
{
    return qem_fail(error, QEM_E_LAYOUT,
                    "frame %llu of '%s' does not have a Merlin frame header: %s",
                    (unsigned long long)frame + 1, path, what);
}

/* The header size (field 3) from the file's first bytes, before the whole
 * header is read: "MQ1,<number>,<size>,". */
static qem_status header_size_of(const uint8_t *head, size_t n, const char *path, uint64_t *out,
                                 qem_error *error)
{
    char field[24];
    size_t at = 4, len = 0;
    while (at < n && head[at] != ',')
        at++;
    for (at++; at < n && head[at] != ',' && len + 1 < sizeof field; at++)
        field[len++] = (char)head[at];
    field[len] = '\0';
    if (at >= n || head[at] != ',' || !parse_digits(trim(field), out))
        return bad_header(error, path, 0,
                          "it must start \"MQ1,<frame number>,<header size>,\"");
    if (*out < MIB_MIN_HEADER || *out > MIB_MAX_HEADER)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the first frame of '%s' states a header of %llu bytes; Merlin headers "
                        "are %u to %u bytes (384 for one chip, 768 for a quad)",
                        path, (unsigned long long)*out, MIB_MIN_HEADER, MIB_MAX_HEADER);
    return QEM_OK;
}

/* Parses the header of frame `frame` (0-based) from `n` bytes. The data
 * type R64 is refused here as RAW mode. */
static qem_status parse_header(const uint8_t *bytes, size_t n, const char *path, uint64_t frame,
                               mib_header *h, mib_fields *f, qem_error *error)
{
    memset(h, 0, sizeof *h);
    if (!split_fields(bytes, n, f))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    h->fields = f->count;
    if (f->count < 8 || strcmp(f->field[0], "MQ1") != 0)
        return bad_header(error, path, frame,
                          "it must start \"MQ1,\" and hold at least 8 comma-separated fields");
    if (!parse_digits(f->field[1], &h->number) || !parse_digits(f->field[2], &h->header_bytes) ||
        !parse_digits(f->field[3], &h->chips) || !parse_digits(f->field[4], &h->width) ||
        !parse_digits(f->field[5], &h->height))
        return bad_header(error, path, frame,
                          "its frame number, header size, chip count, width and height "
                          "(fields 2 to 6) must be decimal numbers");
    if (h->header_bytes < MIB_MIN_HEADER || h->header_bytes > MIB_MAX_HEADER)
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of '%s' states a header of %llu bytes; Merlin headers are "
                        "%u to %u bytes (384 for one chip, 768 for a quad)",
                        (unsigned long long)frame + 1, path, (unsigned long long)h->header_bytes,
                        MIB_MIN_HEADER, MIB_MAX_HEADER);
    if (h->chips == 0 || h->width == 0 || h->height == 0 || h->width > MIB_MAX_SIDE ||
        h->height > MIB_MAX_SIDE)
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of '%s' states %llu chips of %llu x %llu pixels; each must "
                        "be 1 to %u",
                        (unsigned long long)frame + 1, path, (unsigned long long)h->chips,
                        (unsigned long long)h->width, (unsigned long long)h->height, MIB_MAX_SIDE);
    snprintf(h->type, sizeof h->type, "%.7s", f->field[6]);
    if (!strcmp(f->field[6], "U08"))
        h->item = 1;
    else if (!strcmp(f->field[6], "U16"))
        h->item = 2;
    else if (!strcmp(f->field[6], "U32"))
        h->item = 4;
    else if (!strcmp(f->field[6], "R64"))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' was recorded in the Merlin's RAW mode (data type R64): RAW mode is "
                        "not supported, because its samples are the counter bits in the chips' "
                        "readout order; record in a counting mode (U08/U16/U32) or convert the "
                        "file with the Merlin software first",
                        path);
    else
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of '%s' has the data type '%.16s', which is not a Merlin "
                        "data type qem reads (U08, U16 or U32)",
                        (unsigned long long)frame + 1, path, f->field[6]);
    if (!f->field[7][0] || strlen(f->field[7]) >= sizeof h->layout)
        return bad_header(error, path, frame, "its chip layout (field 8) is missing or too long");
    snprintf(h->layout, sizeof h->layout, "%s", f->field[7]);
    /* Newer headers extend it: "MQ1A", timestamp, exposure in ns, counter
     * depth. */
    for (size_t i = 8; i < f->count; i++) {
        if (strcmp(f->field[i], "MQ1A") != 0)
            continue;
        uint64_t depth = 0;
        if (i + 3 >= f->count || !parse_digits(f->field[i + 3], &depth))
            return qem_fail(error, QEM_E_LAYOUT,
                            "frame %llu of '%s' has an extended header (MQ1A) without a counter "
                            "depth",
                            (unsigned long long)frame + 1, path);
        const size_t want = depth == 1 || depth == 6 ? 1 : depth == 12 ? 2 : depth == 24 ? 4 : 0;
        if (!want)
            return qem_fail(error, QEM_E_LAYOUT,
                            "frame %llu of '%s' states the counter depth %llu; Merlin counters "
                            "are 1, 6, 12 or 24 bits deep",
                            (unsigned long long)frame + 1, path, (unsigned long long)depth);
        if (want != h->item)
            return qem_fail(error, QEM_E_LAYOUT,
                            "frame %llu of '%s' states the counter depth %llu but the data type "
                            "%s; a %llu-bit counter is stored as %s",
                            (unsigned long long)frame + 1, path, (unsigned long long)depth,
                            h->type, (unsigned long long)depth,
                            want == 1 ? "U08" : want == 2 ? "U16" : "U32");
        h->depth = (int)depth;
        break;
    }
    return QEM_OK;
}

qem_status qem_mib_parse_header(const uint8_t *bytes, size_t n, const char *path, uint64_t frame,
                                mib_header *h, qem_error *error)
{
    mib_fields f;
    const qem_status st = parse_header(bytes, n, path, frame, h, &f, error);
    free(f.text);
    return st;
}

/* Parses the header of `frame` and checks it against the first frame's
 * and against the number of the frame before it (`prev_number`, ignored
 * for frame 0). */
qem_status qem_mib_check_header(const uint8_t *bytes, size_t n, const char *path,
                                uint64_t frame, const mib_header *first, int have_prev,
                                uint64_t prev_number, mib_header *h, qem_error *error)
{
    mib_fields f;
    qem_status st = parse_header(bytes, n, path, frame, h, &f, error);
    free(f.text);
    QEM_TRY(st);
    if (h->header_bytes != first->header_bytes || h->chips != first->chips ||
        h->width != first->width || h->height != first->height || h->item != first->item ||
        strcmp(h->layout, first->layout) != 0 || h->depth != first->depth)
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of '%s' has a header that disagrees with the first frame's "
                        "(%llu-byte header, %llu chips in layout %s, %llu x %llu %s, counter "
                        "depth %d against %llu-byte header, %llu chips in layout %s, %llu x "
                        "%llu %s, counter depth %d); every frame of an acquisition must have "
                        "the same shape",
                        (unsigned long long)frame + 1, path, (unsigned long long)h->header_bytes,
                        (unsigned long long)h->chips, h->layout, (unsigned long long)h->width,
                        (unsigned long long)h->height, h->type, h->depth,
                        (unsigned long long)first->header_bytes,
                        (unsigned long long)first->chips, first->layout,
                        (unsigned long long)first->width, (unsigned long long)first->height,
                        first->type, first->depth);
    if (have_prev && h->number <= prev_number)
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of '%s' is numbered %llu after frame number %llu; frame "
                        "numbers must increase (frames out of order, or two acquisitions in "
                        "one file)",
                        (unsigned long long)frame + 1, path, (unsigned long long)h->number,
                        (unsigned long long)prev_number);
    return QEM_OK;
}

/* --- the .hdr beside the .mib ------------------------------------------------ */

/* The .hdr's name: the .mib's with its extension replaced (".mib" ->
 * ".hdr", ".MIB" -> ".HDR"), or ".hdr" appended. */
static char *hdr_path_of(const char *path)
{
    const size_t n = strlen(path);
    char *out = malloc(n + 5);
    if (!out)
        return NULL;
    memcpy(out, path, n + 1);
    if (n > 4 && (!strcmp(path + n - 4, ".mib") || !strcmp(path + n - 4, ".MIB")))
        memcpy(out + n - 3, path[n - 3] == 'm' ? "hdr" : "HDR", 4);
    else
        memcpy(out + n, ".hdr", 5);
    return out;
}

json_t *qem_mib_hdr_map(char *text, size_t size, uint64_t *fpt)
{
    *fpt = 0;
    json_t *map = json_object();
    size_t keys = 0;
    for (size_t at = 0; map && at < size && keys < HDR_MAX_KEYS;) {
        char *line = text + at;
        char *end = memchr(line, '\n', size - at);
        const size_t len = end ? (size_t)(end - line) : size - at;
        at += len + 1;
        line[len] = '\0';
        /* NUL bytes end a line early; what follows them is padding. */
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = '\0';
        char *key = trim(line), *value = trim(tab + 1);
        size_t klen = strlen(key);
        while (klen && key[klen - 1] == ':')
            key[--klen] = '\0';
        if (!klen || !strncmp(key, "HDR", 3) || !strcmp(key, "End"))
            continue;
        json_t *k = text_json(key, klen);
        if (k && json_string_value(k)) {
            json_object_set_new(map, json_string_value(k), text_json(value, strlen(value)));
            keys++;
        }
        json_decref(k);
        if (!strcmp(key, "Frames per Trigger (Number)")) {
            uint64_t v;
            *fpt = parse_digits(value, &v) ? v : 0;
        }
    }
    return map;
}

/* Reads the .hdr into a key -> value object. `fpt` gets "Frames per
 * Trigger" when it is a number (else 0). */
static qem_status read_hdr(const char *hdr, json_t **out, uint64_t *fpt, qem_error *error)
{
    *out = NULL;
    *fpt = 0;
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(hdr, &fd, &sb, error));
    if ((uint64_t)sb.st_size > HDR_MAX_BYTES) {
        close(fd);
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is %lld bytes; a Merlin .hdr is a few kilobytes (at most %u read)",
                        hdr, (long long)sb.st_size, HDR_MAX_BYTES);
    }
    char *text = malloc((size_t)sb.st_size + 1);
    qem_status st = text ? qem_pread_full(fd, text, (size_t)sb.st_size, 0, QEM_E_CHANGED, error)
                         : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    close(fd);
    if (st != QEM_OK) {
        free(text);
        return st;
    }
    const size_t size = (size_t)sb.st_size;
    text[size] = '\0';
    json_t *map = qem_mib_hdr_map(text, size, fpt);
    free(text);
    if (!map)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    *out = map;
    return QEM_OK;
}

/* The .hdr is a companion of the .mib (qem_input_companion_path): a regular
 * file in the .mib's own folder, symlinks resolved. */
static qem_status check_hdr(const char *mib, const char *hdr, char **member, qem_error *error)
{
    char subject[600];
    snprintf(subject, sizeof subject, "'%s' has the .hdr", mib);
    const input_companion c = {
        .owner = mib,
        .subject = subject,
        .folder = "the .mib's folder",
        .rule = "a .hdr is read only when it lies beside its .mib (remove the link, or copy "
                "the .hdr there)",
        .keep = "remove the broken link, or keep the .mib and its .hdr together",
    };
    const char *slash = strrchr(hdr, '/');
    return qem_input_companion_path(&c, slash ? slash + 1 : hdr, member, error);
}

/* The .hdr's counter depth, when it states one, under the rules of the
 * frame headers' (1, 6, 12 or 24, matching the data type, and the
 * headers' own depth when they state it). */
qem_status qem_mib_hdr_depth(const char *hdr, json_t *map, const mib_header *first,
                              qem_error *error)
{
    const char *text = json_string_value(json_object_get(map, "Counter Depth (number)"));
    if (!text)
        return QEM_OK;
    uint64_t depth = 0;
    const int number = parse_digits(text, &depth);
    const size_t want = !number                    ? 0
                        : depth == 1 || depth == 6 ? 1
                        : depth == 12              ? 2
                        : depth == 24              ? 4
                                                   : 0;
    if (!want)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states the counter depth '%.32s'; Merlin counters are 1, 6, 12 or "
                        "24 bits deep",
                        hdr, text);
    if (want != first->item)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states the counter depth %llu but the frames' data type is %s; a "
                        "%llu-bit counter is stored as %s",
                        hdr, (unsigned long long)depth, first->type, (unsigned long long)depth,
                        want == 1 ? "U08" : want == 2 ? "U16" : "U32");
    if (first->depth && (uint64_t)first->depth != depth)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states the counter depth %llu but the frame headers state %d",
                        hdr, (unsigned long long)depth, first->depth);
    return QEM_OK;
}

/* --- the family ---------------------------------------------------------------- */

static int mib_recognises(const uint8_t *head, size_t n)
{
    return n >= 4 && memcmp(head, "MQ1,", 4) == 0;
}

/* What the first frame's header says beyond its shape. */
static void header_facts(acquisition *a, const mib_header *h, const mib_fields *f)
{
    qem_input_fact(a, "header_bytes", json_integer((json_int_t)h->header_bytes));
    qem_input_fact(a, "chips", json_integer((json_int_t)h->chips));
    qem_input_fact(a, "chip_layout", text_json(h->layout, strlen(h->layout)));
    qem_input_fact(a, "data_type", json_string(h->type));
    if (f->count > 8)
        qem_input_fact(a, "chip_select", text_json(f->field[8], strlen(f->field[8])));
    if (f->count > 10)
        qem_input_fact(a, "exposure_s", value_json(f->field[10]));
    if (f->count > 13) {
        qem_input_fact(a, "counter", value_json(f->field[11]));
        qem_input_fact(a, "colour_mode", value_json(f->field[12]));
        qem_input_fact(a, "gain_mode", value_json(f->field[13]));
    }
    if (f->count > 21) {
        json_t *thresholds = json_array();
        for (size_t i = 14; i <= 21; i++)
            json_array_append_new(thresholds, value_json(f->field[i]));
        qem_input_fact(a, "thresholds_keV", thresholds);
    }
    if (f->count > 22)
        qem_input_fact(a, "dac_format", text_json(f->field[22], strlen(f->field[22])));
    for (size_t i = 8; i + 3 < f->count; i++)
        if (!strcmp(f->field[i], "MQ1A")) {
            qem_input_fact(a, "exposure_ns", text_json(f->field[i + 2], strlen(f->field[i + 2])));
            break;
        }
    if (h->depth)
        qem_input_fact(a, "counter_depth", json_integer(h->depth));
}

/* The timestamps a header carries: field 10, and the extended one. */
static void timestamp_facts(acquisition *a, const mib_fields *f, const char *which)
{
    char key[64];
    if (f->count > 9) {
        snprintf(key, sizeof key, "%s_frame_timestamp", which);
        qem_input_fact(a, key, text_json(f->field[9], strlen(f->field[9])));
    }
    for (size_t i = 8; i + 1 < f->count; i++)
        if (!strcmp(f->field[i], "MQ1A")) {
            snprintf(key, sizeof key, "%s_frame_timestamp_utc", which);
            qem_input_fact(a, key, text_json(f->field[i + 1], strlen(f->field[i + 1])));
            break;
        }
}

static qem_status mib_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    mib_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    uint64_t size = 0;
    QEM_TRY(qem_input_open_master(a, path, "a Merlin .mib file", o, &s->fd, &size, error));

    /* The header size first (field 3), then the whole first header. */
    uint64_t hb64 = 0;
    QEM_TRY(header_size_of(head, n, path, &hb64, error));
    if (hb64 > size)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is %llu bytes, shorter than its first frame header (%llu bytes)",
                        path, (unsigned long long)size, (unsigned long long)hb64);
    const size_t hb = (size_t)hb64;
    if (!(s->header = malloc(hb)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    QEM_TRY(qem_pread_full(s->fd, s->header, hb, 0, QEM_E_CHANGED, error));
    mib_fields f0 = {0};
    qem_status st = parse_header(s->header, hb, path, 0, &s->first, &f0, error);
    if (st == QEM_OK && s->first.header_bytes != hb64)
        st = qem_fail(error, QEM_E_LAYOUT, "the first frame header of '%s' is inconsistent",
                      path);
    uint64_t pixels = 0;
    if (st == QEM_OK &&
        (qem_mul_overflow_u64(s->first.width, s->first.height, &pixels) ||
         qem_mul_overflow_u64(pixels, s->first.item, &s->frame_bytes) ||
         qem_add_overflow_u64(s->frame_bytes, s->first.header_bytes, &s->record)))
        st = qem_fail(error, QEM_E_LIMIT, "the frames of '%s' are too large", path);
    if (st == QEM_OK && size % s->record != 0)
        st = qem_fail(error, QEM_E_FILE_LENGTH,
                      "'%s' holds %llu whole frame records of %llu bytes (a %llu-byte header "
                      "and %llu x %llu %s samples) and %llu bytes more: its last frame is "
                      "truncated (the acquisition was interrupted or the copy is incomplete)",
                      path, (unsigned long long)(size / s->record),
                      (unsigned long long)s->record, (unsigned long long)s->first.header_bytes,
                      (unsigned long long)s->first.width, (unsigned long long)s->first.height,
                      s->first.type, (unsigned long long)(size % s->record));
    if (st == QEM_OK) {
        s->frames = size / s->record;
        header_facts(a, &s->first, &f0);
        timestamp_facts(a, &f0, "first");
        qem_input_fact(a, "first_frame_number", json_integer((json_int_t)s->first.number));
    }
    /* Every other header against the first. */
    uint64_t prev = s->first.number;
    for (uint64_t k = 1; st == QEM_OK && k < s->frames; k++) {
        mib_header h;
        st = qem_pread_full(s->fd, s->header, hb, k * s->record, QEM_E_CHANGED, error);
        if (st == QEM_OK)
            st = qem_mib_check_header(s->header, hb, path, k, &s->first, 1, prev, &h, error);
        if (st == QEM_OK)
            prev = h.number;
    }
    /* The last frame's timestamps (the first's when there is one frame). */
    if (st == QEM_OK && s->frames > 1) {
        mib_fields fl = {0};
        st = qem_pread_full(s->fd, s->header, hb, (s->frames - 1) * s->record, QEM_E_CHANGED,
                            error);
        if (st == QEM_OK && split_fields(s->header, hb, &fl))
            timestamp_facts(a, &fl, "last");
        free(fl.text);
    } else if (st == QEM_OK) {
        timestamp_facts(a, &f0, "last");
    }
    free(f0.text);
    QEM_TRY(st);
    qem_input_fact(a, "last_frame_number", json_integer((json_int_t)prev));
    qem_input_fact(a, "frames", json_integer((json_int_t)s->frames));
    qem_input_fact(a, "row_order",
                   json_string("as stored in the file (RosettaSciIO returns each "
                               "frame flipped vertically)"));

    /* The .hdr, when there is one beside the .mib: a companion, so it must
     * be a regular file in the .mib's folder (a symlink leading out is
     * refused, never read or quoted). */
    char *hdr = hdr_path_of(path);
    if (!hdr)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    struct stat hs;
    uint64_t fpt = 0;
    const int have_hdr = lstat(hdr, &hs) == 0;
    if (have_hdr) {
        json_t *map = NULL;
        char *checked = NULL;
        st = check_hdr(path, hdr, &checked, error);
        free(checked);
        if (st == QEM_OK)
            st = qem_input_add_member(a, hdr, 0, error);
        if (st == QEM_OK)
            st = read_hdr(hdr, &map, &fpt, error);
        if (st == QEM_OK)
            st = qem_mib_hdr_depth(hdr, map, &s->first, error);
        if (st == QEM_OK) {
            const char *slash = strrchr(hdr, '/');
            qem_input_fact(a, "hdr_file", json_string(slash ? slash + 1 : hdr));
            static const struct {
                const char *key, *fact;
            } picks[] = {{"Sensor Bias (V)", "high_voltage"},
                         {"Chip ID", "chip_id"},
                         {"Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX)", "chip_type"},
                         {"Frames in Acquisition (Number)", "frames_in_acquisition"},
                         {"Frames per Trigger (Number)", "frames_per_trigger"}};
            for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++) {
                json_t *v = json_object_get(map, picks[k].key);
                if (v)
                    qem_input_fact(a, picks[k].fact, json_incref(v));
            }
            json_t *depth = json_object_get(map, "Counter Depth (number)");
            if (!s->first.depth && depth)
                qem_input_fact(a, "counter_depth", value_json(json_string_value(depth)));
            qem_input_fact(a, "hdr", map);
        } else {
            json_decref(map);
        }
    }
    if (st != QEM_OK) {
        free(hdr);
        return st;
    }

    /* The scan shape: the caller's, else the .hdr's frames per trigger
     * (rows of that many frames), else one frame is one position. */
    uint64_t file_shape[2] = {0, 0}, scan[2];
    int have_file = 0;
    if (fpt > 1) {
        if (s->frames % fpt == 0) {
            file_shape[0] = s->frames / fpt;
            file_shape[1] = fpt;
            have_file = 1;
        } else if (!o->scan_shape[0] && !o->scan_shape[1]) {
            st = qem_fail(error, QEM_E_LAYOUT,
                          "'%s' holds %llu frames, which its .hdr's %llu frames per trigger "
                          "do not divide into scan rows (an interrupted scan?); give the scan "
                          "shape (--scan-shape ROWS,COLUMNS)",
                          path, (unsigned long long)s->frames, (unsigned long long)fpt);
        }
    }
    if (st == QEM_OK)
        st = qem_input_scan_shape(o, have_file, file_shape, "the .hdr's Frames per Trigger",
                                  s->frames, path, scan, error);
    free(hdr);
    QEM_TRY(st);
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = s->first.height;
    a->shape[3] = s->first.width;
    a->sample_type = s->first.item == 1   ? QEM_DTYPE_UINT8
                     : s->first.item == 2 ? QEM_DTYPE_UINT16
                                          : QEM_DTYPE_UINT32;
    s->next = 0;
    return qem_input_implicit_mask(a, error);
}

static qem_status mib_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    mib_state *s = a->impl;
    input_member *m = &a->members[0];
    const char *path = m->path;
    const size_t hb = (size_t)s->first.header_bytes, fb = (size_t)s->frame_bytes;
    int have_prev = first > 0;
    uint64_t prev = s->prev_number;
    if (first > 0 && first != s->next) {
        /* Not where the last read ended: the previous frame's number. */
        mib_header h;
        const uint64_t at = (first - 1) * s->record;
        QEM_TRY(qem_pread_full(s->fd, s->header, hb, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, s->header, hb);
        qem_error local = {0};
        if (qem_mib_check_header(s->header, hb, path, first - 1, &s->first, 0, 0, &h, &local) != QEM_OK)
            return qem_fail(error, QEM_E_CHANGED,
                            "'%s' changed since it was described: %s", path, local.message);
        prev = h.number;
    }
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t frame = first + k, at = frame * s->record;
        uint8_t *dst = (uint8_t *)out + k * fb;
        QEM_TRY(qem_pread_full(s->fd, s->header, hb, at, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at, s->header, hb);
        mib_header h;
        qem_error local = {0};
        if (qem_mib_check_header(s->header, hb, path, frame, &s->first, have_prev, prev, &h, &local) !=
            QEM_OK)
            return qem_fail(error, QEM_E_CHANGED,
                            "'%s' changed since it was described: %s", path, local.message);
        QEM_TRY(qem_pread_full(s->fd, dst, fb, at + hb, QEM_E_CHANGED, error));
        qem_input_member_read(m, s->fd, at + hb, dst, fb);
        input_from_big_endian(dst, fb / s->first.item, s->first.item);
        prev = h.number;
        have_prev = 1;
    }
    s->next = first + count;
    s->prev_number = prev;
    return QEM_OK;
}

static void mib_release(acquisition *a)
{
    mib_state *s = a->impl;
    if (s) {
        if (s->fd >= 0)
            close(s->fd);
        free(s->header);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_mib = {
    "mib", mib_recognises, mib_describe, mib_read, mib_release, 1, NULL};
