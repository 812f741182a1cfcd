/* PNDetector pnCCD acquisitions (FRMS6): <name>.hdr, an INI text whose
 * [measurementInfo] section describes the acquisition (scan size, readout
 * mode and binning, dark and signal frame counts), and the files
 * <name>_000.frms6, <name>_001.frms6, ... numbered without a gap: _000
 * holds the dark frames, the rest the signal frames in order. Each file is
 * a 1024-byte little-endian header (header size 1024, frame header size
 * 64, version 6, width, height, frame count) and frames of a 64-byte
 * header and height x width uint16 little-endian samples. The pnCCD reads
 * out from two sides into one folded frame: qem unfolds it as LiberTEM
 * does, rows 0..H-1 from the left half of the stored rows, rows H..2H-1
 * from the right half, both reversed (row 2H-1-y, column W-1-x). The dark
 * frames are a member, recorded, never subtracted; binned frames are kept
 * as stored (no row is repeated). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "input/input.h"
#include "input/swap.h"

#define FRMS6_FILE_HEADER 1024u
#define FRMS6_FRAME_HEADER 64u
#define FRMS6_VERSION 6
#define FRMS6_MAX_FILES 512u
#define HDR_MAX_BYTES (1u << 20)
#define HDR_MAX_KEYS 512
#define HDR_MAX_VALUE 4096

typedef struct frms6_file {
    uint64_t size;
    uint64_t width, height; /* as stored: the folded frame */
    uint64_t frames;
    int stated; /* the header states its frame count (older files leave 0) */
} frms6_file;

typedef struct frms6_state {
    int *fd;           /* the data files (_001 ...) */
    uint64_t *start;   /* the first frame of each data file */
    size_t files;      /* data files */
    uint64_t record;   /* frame header + samples */
    uint64_t width, height;
    uint8_t *scratch;  /* one record, allocated on the first read */
} frms6_state;

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* --- the .hdr ------------------------------------------------------------------ */

/* Text from a file as a JSON string: printable ASCII kept, anything else
 * shown as '?'. */
static json_t *text_json(const char *s, size_t n)
{
    if (n > HDR_MAX_VALUE)
        n = HDR_MAX_VALUE;
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

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
        (*n)--;
}

/* The .hdr's [measurementInfo] as key -> value, keys in lower case (as
 * the INI reader LiberTEM uses gives them); `*has_section` says whether
 * the section is there at all. */
static qem_status read_hdr(const char *hdr, json_t **out, int *has_section, qem_error *error)
{
    *out = NULL;
    *has_section = 0;
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(hdr, &fd, &sb, error));
    if ((uint64_t)sb.st_size > HDR_MAX_BYTES) {
        close(fd);
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is %lld bytes; an FRMS6 .hdr is a few kilobytes (at most %u read)",
                        hdr, (long long)sb.st_size, HDR_MAX_BYTES);
    }
    const size_t size = (size_t)sb.st_size;
    char *text = malloc(size + 1);
    qem_status st = text ? qem_pread_full(fd, text, size, 0, QEM_E_CHANGED, error)
                         : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    close(fd);
    json_t *map = st == QEM_OK ? json_object() : NULL;
    if (st == QEM_OK && !map)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int in_section = 0;
    for (size_t at = 0; st == QEM_OK && at < size;) {
        const char *line = text + at;
        const char *end = memchr(line, '\n', size - at);
        size_t len = end ? (size_t)(end - line) : size - at;
        at += len + 1;
        trim(&line, &len);
        if (!len || line[0] == ';' || line[0] == '#')
            continue;
        if (line[0] == '[') {
            in_section = len == 17 && !memcmp(line, "[measurementInfo]", 17);
            *has_section |= in_section;
            continue;
        }
        if (!in_section || json_object_size(map) >= HDR_MAX_KEYS)
            continue;
        size_t eq = 0;
        while (eq < len && line[eq] != '=' && line[eq] != ':')
            eq++;
        if (eq == len)
            continue;
        const char *key = line, *value = line + eq + 1;
        size_t nk = eq, nv = len - eq - 1;
        trim(&key, &nk);
        trim(&value, &nv);
        if (!nk || nk > 64)
            continue;
        char k[65];
        for (size_t i = 0; i < nk; i++)
            k[i] = (char)((key[i] >= 'A' && key[i] <= 'Z') ? key[i] - 'A' + 'a' : key[i]);
        k[nk] = '\0';
        json_t *v = text_json(value, nv);
        if (!v || json_object_set_new(map, k, v) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    free(text);
    if (st != QEM_OK) {
        json_decref(map);
        return st;
    }
    *out = map;
    return QEM_OK;
}

/* A whole decimal number (spaces around allowed), at most 9 digits. */
static int parse_count(const char *s, size_t n, uint64_t *out)
{
    trim(&s, &n);
    if (!n || n > 9)
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

/* "<rows>x<columns>", as LiberTEM reads stemimagesize. */
static int parse_scan(const char *s, uint64_t out[2])
{
    const char *x = strchr(s, 'x');
    return x && parse_count(s, (size_t)(x - s), &out[0]) &&
           parse_count(x + 1, strlen(x + 1), &out[1]) && out[0] && out[1];
}

/* The binning factor of readoutmode ("bin: <n>, windowing: ..."). */
static int parse_bin(const char *s, uint64_t *bin)
{
    const char *b = strstr(s, "bin:");
    if (!b)
        return 0;
    b += 4;
    size_t n = 0;
    while (b[n] == ' ')
        n++;
    while (b[n] >= '0' && b[n] <= '9')
        n++;
    return parse_count(b, n, bin) && *bin > 0;
}

/* --- file headers --------------------------------------------------------------- */

static qem_status read_file_header(int fd, const char *path, uint64_t size, frms6_file *f,
                                   qem_error *error)
{
    memset(f, 0, sizeof *f);
    f->size = size;
    if (size < FRMS6_FILE_HEADER)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' holds %llu bytes, less than the 1024-byte FRMS6 file header",
                        path, (unsigned long long)size);
    uint8_t h[FRMS6_FILE_HEADER];
    QEM_TRY(qem_pread_full(fd, h, sizeof h, 0, QEM_E_CHANGED, error));
    if (le16(h) != FRMS6_FILE_HEADER || le16(h + 2) != FRMS6_FRAME_HEADER)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' does not start with an FRMS6 file header (header size %u, frame "
                        "header size %u; FRMS6 states 1024 and 64)",
                        path, (unsigned)le16(h), (unsigned)le16(h + 2));
    if (h[7] != FRMS6_VERSION)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is an FRMS6 file of version %u; qem reads version 6", path,
                        (unsigned)h[7]);
    f->width = le16(h + 88);
    f->height = le16(h + 90);
    if (!f->width || !f->height || f->width % 2)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states frames of %llu x %llu pixels; an FRMS6 frame has rows and "
                        "an even, non-zero number of columns (its two halves are unfolded)",
                        path, (unsigned long long)f->height, (unsigned long long)f->width);
    const uint64_t record = FRMS6_FRAME_HEADER + 2 * f->width * f->height;
    const uint64_t stated = le32(h + 1020), body = size - FRMS6_FILE_HEADER;
    uint64_t want;
    if (stated) {
        if (qem_mul_overflow_u64(stated, record, &want) || body != want)
            return qem_fail(error, QEM_E_FILE_LENGTH,
                            "'%s' holds %llu bytes after its header, but its %llu frames of "
                            "%llu bytes (a 64-byte header and %llu x %llu uint16) need %llu",
                            path, (unsigned long long)body, (unsigned long long)stated,
                            (unsigned long long)record, (unsigned long long)f->height,
                            (unsigned long long)f->width,
                            (unsigned long long)(stated * record));
        f->frames = stated;
        f->stated = 1;
    } else {
        /* Older files leave the count 0: the size says it. */
        if (body % record)
            return qem_fail(error, QEM_E_FILE_LENGTH,
                            "'%s' holds %llu bytes after its header, not a whole number of "
                            "frames of %llu bytes (its last frame is cut short)",
                            path, (unsigned long long)body, (unsigned long long)record);
        f->frames = body / record;
    }
    return QEM_OK;
}

/* --- names ------------------------------------------------------------------------ */

/* The opened name split as <stem>_<digits><.frms6>. 0 if it is not. */
static int split_name(const char *base, size_t *stem_len, size_t *digits, unsigned long *number,
                      const char **ext)
{
    const size_t n = strlen(base);
    if (n < 8 || strcasecmp(base + n - 6, ".frms6") != 0)
        return 0;
    size_t d = 0;
    while (d < n - 6 && d < 6 && base[n - 7 - d] >= '0' && base[n - 7 - d] <= '9')
        d++;
    if (!d || d >= n - 6 || base[n - 7 - d] != '_')
        return 0;
    *stem_len = n - 7 - d;
    *digits = d;
    *number = strtoul(base + n - 6 - d, NULL, 10);
    *ext = base + n - 6;
    return 1;
}

static qem_status companion(const char *owner, const char *name, const char *what,
                            char **member, qem_error *error)
{
    char subject[700];
    snprintf(subject, sizeof subject, "the FRMS6 acquisition of '%s' has the %s", owner, what);
    const input_companion c = {
        .owner = owner,
        .subject = subject,
        .folder = "the .frms6 file's folder",
        .rule = "the .hdr and every .frms6 file of an acquisition must lie side by side",
        .keep = "keep the .hdr and the .frms6 files of an acquisition together",
    };
    return qem_input_companion_path(&c, name, member, error);
}

/* --- the family --------------------------------------------------------------------- */

static int frms6_recognises(const uint8_t *head, size_t n)
{
    /* header size 1024 and frame header size 64, little-endian u16 */
    return n >= 4 && head[0] == 0x00 && head[1] == 0x04 && head[2] == 0x40 && head[3] == 0x00;
}

static const char *fact_text(json_t *map, const char *key)
{
    return json_string_value(json_object_get(map, key));
}

static qem_status frms6_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                 const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is an FRMS6 file; --dataset only applies to HDF5 files", path);
    frms6_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    a->impl = s;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t stem_len = 0, digits = 0;
    unsigned long opened = 0;
    const char *ext = NULL;
    if (!split_name(base, &stem_len, &digits, &opened, &ext))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' holds an FRMS6 header, but its name is not that of an FRMS6 "
                        "file (<name>_000.frms6, <name>_001.frms6, ...): qem finds the .hdr and "
                        "the other files by that name",
                        path);
    if (stem_len > 900)
        return qem_fail(error, QEM_E_LIMIT, "the name of '%s' is too long", path);
    char *dir = qem_path_dirname(path);
    if (!dir)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");

    /* The .hdr (the master), then the files numbered from 0 without gap. */
    char name[1024], *member = NULL;
    snprintf(name, sizeof name, "%.*s.hdr", (int)stem_len, base);
    qem_status st = companion(path, name, ".hdr", &member, error);
    if (st == QEM_OK)
        st = qem_input_add_member(a, member, 1, error);
    json_t *hdr = NULL;
    int has_section = 0;
    if (st == QEM_OK)
        st = read_hdr(member, &hdr, &has_section, error);
    if (st == QEM_OK && !has_section)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' has no [measurementInfo] section; an FRMS6 .hdr describes the "
                      "acquisition there",
                      member);
    free(member);
    member = NULL;
    if (st == QEM_OK)
        qem_input_fact(a, "hdr_file", json_string(name));
    json_t *files = json_array();
    size_t count = 0;
    for (; st == QEM_OK && count <= FRMS6_MAX_FILES; count++) {
        snprintf(name, sizeof name, "%.*s_%0*zu%s", (int)stem_len, base, (int)digits, count, ext);
        char full[2048];
        snprintf(full, sizeof full, "%s/%s", dir, name);
        struct stat ls;
        if (lstat(full, &ls) != 0)
            break;
        if (count == FRMS6_MAX_FILES)
            st = qem_fail(error, QEM_E_LIMIT,
                          "the FRMS6 acquisition of '%s' has more than %u files; qem reads at "
                          "most that many",
                          path, FRMS6_MAX_FILES);
        if (st == QEM_OK)
            st = companion(path, name, count ? "data file" : "dark frame file", &member, error);
        if (st == QEM_OK)
            st = qem_input_add_member(a, member, 0, error);
        free(member);
        member = NULL;
        json_array_append_new(files, json_string(name));
    }
    free(dir);
    qem_input_fact(a, "frms6_files", files);
    if (st == QEM_OK && count < 2)
        st = qem_fail(error, QEM_E_IO,
                      "the FRMS6 acquisition of '%s' needs its dark frame file _%0*u and at "
                      "least one data file _%0*u beside it; %s",
                      path, (int)digits, 0u, (int)digits, 1u,
                      count ? "there is no data file" : "the dark frame file is missing");
    if (st == QEM_OK && opened >= count)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' is not among the files numbered from _%0*u without a gap (%zu "
                      "found); an FRMS6 acquisition's files are numbered consecutively",
                      path, (int)digits, 0u, count);
    if (st != QEM_OK) {
        json_decref(hdr);
        return st;
    }
    qem_input_fact(a, "hdr", hdr); /* owned by the facts from here on */

    /* Every file's header: one frame size, one version. */
    s->files = count - 1;
    s->fd = malloc(s->files * sizeof *s->fd);
    s->start = malloc(s->files * sizeof *s->start);
    if (!s->fd || !s->start) {
        s->files = 0;
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < s->files; i++)
        s->fd[i] = -1;
    frms6_file first = {0};
    uint64_t frames = 0, dark_frames = 0;
    for (size_t i = 0; i < count; i++) {
        input_member *m = &a->members[1 + i];
        int fd = -1;
        struct stat sb;
        frms6_file f;
        QEM_TRY(qem_open_input(m->path, &fd, &sb, error));
        if (i)
            s->fd[i - 1] = fd;
        st = qem_file_stamp_check(fd, &m->stamp, m->path, "described", error);
        if (st == QEM_OK)
            st = read_file_header(fd, m->path, (uint64_t)sb.st_size, &f, error);
        if (!i)
            close(fd);
        QEM_TRY(st);
        if (!i)
            first = f;
        else if (f.width != first.width || f.height != first.height)
            return qem_fail(error, QEM_E_LAYOUT,
                            "'%s' holds frames of %llu x %llu pixels but '%s' of %llu x %llu; "
                            "every file of an acquisition has one frame size",
                            m->path, (unsigned long long)f.height, (unsigned long long)f.width,
                            a->members[1].path, (unsigned long long)first.height,
                            (unsigned long long)first.width);
        if (!i) {
            dark_frames = f.frames;
            continue;
        }
        s->start[i - 1] = frames;
        frames += f.frames;
    }
    s->width = first.width;
    s->height = first.height;
    s->record = FRMS6_FRAME_HEADER + 2 * s->width * s->height;

    /* What the .hdr states: the signal frames, the scan, the binning. */
    json_t *map = json_object_get(a->facts, "hdr");
    uint64_t signal = 0, bin = 1, file_scan[2] = {0, 0};
    const char *text = fact_text(map, "signalframes");
    if (text && (!parse_count(text, strlen(text), &signal) || signal != frames))
        return qem_fail(error, QEM_E_LAYOUT,
                        "the .hdr of '%s' states signalframes = %.32s, but its data files hold "
                        "%llu frames",
                        path, text, (unsigned long long)frames);
    text = fact_text(map, "stemimagesize");
    const int have_scan = text != NULL;
    if (text && !parse_scan(text, file_scan))
        return qem_fail(error, QEM_E_LAYOUT,
                        "the .hdr of '%s' states stemimagesize = %.32s; it must be "
                        "<rows>x<columns>",
                        path, text);
    text = fact_text(map, "readoutmode");
    if (text && !parse_bin(text, &bin))
        return qem_fail(error, QEM_E_LAYOUT,
                        "the .hdr of '%s' states readoutmode = %.64s, without a binning factor "
                        "(\"bin: <n>, windowing: ...\")",
                        path, text);
    uint64_t scan[2];
    QEM_TRY(qem_input_scan_shape(o, have_scan, file_scan, "the .hdr's stemimagesize", frames,
                                 path, scan, error));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = 2 * s->height;
    a->shape[3] = s->width / 2;
    a->sample_type = QEM_DTYPE_UINT16;
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    qem_input_fact(a, "dark_frames", json_integer((json_int_t)dark_frames));
    qem_input_fact(a, "dark_frames_subtracted", json_false());
    qem_input_fact(a, "binning", json_integer((json_int_t)bin));
    qem_input_fact(a, "binning_stated", json_boolean(fact_text(map, "readoutmode") != NULL));
    qem_input_fact(a, "stored_frame_rows", json_integer((json_int_t)s->height));
    qem_input_fact(a, "stored_frame_columns", json_integer((json_int_t)s->width));
    qem_input_fact(a, "unfolding",
                   json_string("row y < H: stored row y, columns 0..W/2-1; row y >= H: stored "
                               "row 2H-1-y, columns W-1 down to W/2"));
    /* The first signal frame's header (number and time). */
    size_t with = 0;
    while (with + 1 < s->files && s->start[with + 1] == 0)
        with++;
    uint8_t fh[FRMS6_FRAME_HEADER];
    QEM_TRY(qem_pread_full(s->fd[with], fh, sizeof fh, FRMS6_FILE_HEADER, QEM_E_CHANGED, error));
    qem_input_fact(a, "first_frame_number", json_integer(le32(fh + 12)));
    qem_input_fact(a, "first_frame_timestamp_s", json_integer(le32(fh + 4)));
    qem_input_fact(a, "first_frame_timestamp_us", json_integer(le32(fh + 8)));
    return qem_input_implicit_mask(a, error);
}

/* One stored (folded) frame unfolded into `out` (2H x W/2). */
static void unfold(const uint16_t *in, uint64_t width, uint64_t height, uint16_t *out)
{
    const uint64_t half = width / 2;
    for (uint64_t y = 0; y < height; y++)
        memcpy(out + y * half, in + y * width, half * 2);
    for (uint64_t y = height; y < 2 * height; y++) {
        const uint16_t *row = in + (2 * height - 1 - y) * width;
        uint16_t *dst = out + y * half;
        for (uint64_t x = 0; x < half; x++)
            dst[x] = row[width - 1 - x];
    }
}

static qem_status frms6_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                             qem_error *error)
{
    frms6_state *s = a->impl;
    if (!s->scratch && !(s->scratch = malloc((size_t)s->record)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const uint64_t pixels = s->width * s->height;
    size_t file = 0;
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t frame = first + k;
        while (file + 1 < s->files && s->start[file + 1] <= frame)
            file++;
        while (file > 0 && s->start[file] > frame)
            file--;
        const uint64_t at = FRMS6_FILE_HEADER + (frame - s->start[file]) * s->record;
        QEM_TRY(qem_pread_full(s->fd[file], s->scratch, (size_t)s->record, at, QEM_E_CHANGED,
                               error));
        qem_input_member_read(&a->members[2 + file], s->fd[file], at, s->scratch,
                              (size_t)s->record);
        uint16_t *samples = (uint16_t *)(s->scratch + FRMS6_FRAME_HEADER);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        input_swap(samples, (size_t)pixels, 2);
#endif
        unfold(samples, s->width, s->height, (uint16_t *)out + k * pixels);
    }
    return QEM_OK;
}

static void frms6_release(acquisition *a)
{
    frms6_state *s = a->impl;
    if (s) {
        for (size_t i = 0; s->fd && i < s->files; i++)
            if (s->fd[i] >= 0)
                close(s->fd[i]);
        free(s->fd);
        free(s->start);
        free(s->scratch);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_frms6 = {
    "frms6", frms6_recognises, frms6_describe, frms6_read, frms6_release, 1, NULL};
