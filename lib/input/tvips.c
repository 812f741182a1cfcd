/* TVIPS recorder streams (.tvips): a 256-byte series header (little-endian
 * u32: header size 256, version 1 or 2, width, height, bits per pixel,
 * offsets, binning, pixel size, high tension, magnification, frame header
 * bytes), then records of a frame header and the frame's samples (uint8 or
 * uint16, little-endian, rows of `width`). A long recording continues in
 * numbered parts without the series header: name_000.tvips, name_001.tvips
 * ... beside the first, read in order as one stream of frames. Frames are
 * kept in the stored order; the scan shape is the caller's. */
#include <dirent.h>
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
#include "input/swap.h"

#define TVIPS_SERIES_HEADER 256u
#define TVIPS_V1_FRAME_HEADER 12u
#define TVIPS_V2_FRAME_FIELDS 60u   /* the fields read from a v2 frame header */
#define TVIPS_SCAN_FIELDS_END 76u   /* a v2 header this long carries Scan_x, Scan_y */
#define TVIPS_MAX_FRAME_HEADER (1u << 20)
#define TVIPS_MAX_PARTS 1000u       /* _000 to _999 */

typedef struct tvips_state {
    int *fd;           /* one per member */
    uint64_t *start;   /* first frame of each member; start[count] = frames */
    uint64_t *base;    /* offset of each member's first record */
    size_t count;
    uint64_t frame_header, frame_bytes, record;
} tvips_state;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float le_f32(const uint8_t *p)
{
    const uint32_t u = le32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A float fact: finite values as numbers, others as text. */
static json_t *float_json(float v)
{
    return isfinite(v) ? json_real(v) : json_string(isnan(v) ? "nan" : "inf");
}

/* The series header: its size 256, a version 1 to 15 and 8, 12, 16 or 32
 * bits per pixel (12 and 32 and versions above 2 are refused by name when
 * described, rather than taken for another format). */
static int tvips_recognises(const uint8_t *head, size_t n)
{
    if (n < TVIPS_SERIES_HEADER || le32(head) != TVIPS_SERIES_HEADER)
        return 0;
    const uint32_t version = le32(head + 4), bpp = le32(head + 16);
    return version >= 1 && version <= 15 && (bpp == 8 || bpp == 12 || bpp == 16 || bpp == 32);
}

/* --- the parts ------------------------------------------------------------- */

/* The parts that continue `path` when its name ends "_000.<ext>": `prefix`
 * (the name up to and with the '_'), the extension (with its '.'). */
typedef struct tvips_name {
    char *dir;
    char prefix[512];
    char ext[64];
    int numbered; /* the name ends _000.<ext> */
} tvips_name;

static int name_of(const char *path, tvips_name *t)
{
    memset(t, 0, sizeof *t);
    if (!(t->dir = qem_path_dirname(path)))
        return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot - base < 4 || strlen(dot) >= sizeof t->ext ||
        (size_t)(dot - base) >= sizeof t->prefix)
        return 1;
    if (memcmp(dot - 4, "_000", 4) != 0)
        return 1;
    snprintf(t->prefix, sizeof t->prefix, "%.*s", (int)(dot - base - 3), base);
    snprintf(t->ext, sizeof t->ext, "%s", dot);
    t->numbered = 1;
    return 1;
}

/* The highest part number in the folder above `after` (0 when none): a
 * part there after a missing one is refused, never silently left out. */
static unsigned later_part(const tvips_name *t, unsigned after)
{
    DIR *d = opendir(t->dir);
    if (!d)
        return 0;
    unsigned found = 0;
    const size_t np = strlen(t->prefix), ne = strlen(t->ext);
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (strlen(s) != np + 3 + ne || memcmp(s, t->prefix, np) != 0 ||
            memcmp(s + np + 3, t->ext, ne) != 0)
            continue;
        const char *digits = s + np;
        if (digits[0] < '0' || digits[0] > '9' || digits[1] < '0' || digits[1] > '9' ||
            digits[2] < '0' || digits[2] > '9')
            continue;
        const unsigned k = (unsigned)((digits[0] - '0') * 100 + (digits[1] - '0') * 10 +
                                      (digits[2] - '0'));
        if (k > after && k > found)
            found = k;
    }
    closedir(d);
    return found;
}

/* Adds the parts _001, _002 ... that exist beside the first part, each a
 * companion (a regular file inside the folder). */
static qem_status add_parts(acquisition *a, const char *path, const tvips_name *t,
                            unsigned *parts, qem_error *error)
{
    char subject[700];
    snprintf(subject, sizeof subject, "the TVIPS series '%s' continues in", path);
    const input_companion c = {
        .owner = path,
        .subject = subject,
        .folder = "the first part's folder",
        .rule = "every part of a TVIPS series must lie beside its first part",
        .keep = "keep every part of the series together",
    };
    unsigned k = 1;
    for (; k < TVIPS_MAX_PARTS; k++) {
        char name[600];
        snprintf(name, sizeof name, "%s%03u%s", t->prefix, k, t->ext);
        int present = 0;
        QEM_TRY(qem_input_entry_present(t->dir, name, &present, error));
        if (!present)
            break;
        char *member = NULL;
        QEM_TRY(qem_input_companion_path(&c, name, &member, error));
        const qem_status st = qem_input_add_member(a, member, 0, error);
        free(member);
        QEM_TRY(st);
    }
    const unsigned later = later_part(t, k);
    if (later)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the TVIPS series '%s' has the part %s%03u%s but not %s%03u%s; a series "
                        "is read only whole (a part is missing)",
                        path, t->prefix, later, t->ext, t->prefix, k, t->ext);
    *parts = k;
    return QEM_OK;
}

/* --- frame headers --------------------------------------------------------- */

/* What the v2 frame headers say, gathered over every frame. */
typedef struct tvips_frames {
    uint32_t first_counter, last_counter;
    uint32_t first_time, first_ms, last_time, last_ms;
    uint32_t rot_min, rot_max, rot_zero;
    uint32_t rot_prev;
    int rot_steps_by_one; /* every frame's rotator index is the one before + 1 */
    uint32_t mode;
    float first_scan_x, first_scan_y, last_scan_x, last_scan_y;
} tvips_frames;

/* Checks the v2 frame header of `frame` (of the whole stream, 0-based,
 * stored in member `part`): milliseconds below 1000, time never going
 * back (parts out of order, or from two recordings). */
static qem_status check_frame(const uint8_t *h, uint64_t frame, const char *part,
                              int have_scan, tvips_frames *f, qem_error *error)
{
    const uint32_t counter = le32(h), time = le32(h + 4), ms = le32(h + 8);
    const uint32_t rot = le32(h + 48);
    if (ms > 999)
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of the TVIPS series (in '%s') states %u milliseconds past "
                        "its second; a frame header's milliseconds are 0 to 999",
                        (unsigned long long)frame + 1, part, ms);
    if (frame > 0 && (time < f->last_time || (time == f->last_time && ms < f->last_ms)))
        return qem_fail(error, QEM_E_LAYOUT,
                        "frame %llu of the TVIPS series (in '%s') is stamped %u.%03u s, before "
                        "the frame ahead of it (%u.%03u s); the frames are out of order, or the "
                        "parts come from different recordings",
                        (unsigned long long)frame + 1, part, time, ms, f->last_time, f->last_ms);
    if (frame == 0) {
        f->first_counter = counter;
        f->first_time = time;
        f->first_ms = ms;
        f->rot_min = f->rot_max = rot;
        f->rot_steps_by_one = 1;
        f->mode = le32(h + 24);
        if (have_scan) {
            f->first_scan_x = le_f32(h + 68);
            f->first_scan_y = le_f32(h + 72);
        }
    } else {
        f->rot_steps_by_one &= rot == f->rot_prev + 1;
    }
    f->rot_min = rot < f->rot_min ? rot : f->rot_min;
    f->rot_max = rot > f->rot_max ? rot : f->rot_max;
    f->rot_zero += rot == 0;
    f->rot_prev = rot;
    f->last_counter = counter;
    f->last_time = time;
    f->last_ms = ms;
    if (have_scan) {
        f->last_scan_x = le_f32(h + 68);
        f->last_scan_y = le_f32(h + 72);
    }
    return QEM_OK;
}

static void frame_facts(acquisition *a, const tvips_frames *f, int have_scan)
{
    qem_input_fact(a, "first_frame_counter", json_integer(f->first_counter));
    qem_input_fact(a, "last_frame_counter", json_integer(f->last_counter));
    qem_input_fact(a, "first_frame_time_s", json_integer(f->first_time));
    qem_input_fact(a, "first_frame_time_ms", json_integer(f->first_ms));
    qem_input_fact(a, "last_frame_time_s", json_integer(f->last_time));
    qem_input_fact(a, "last_frame_time_ms", json_integer(f->last_ms));
    qem_input_fact(a, "mag_mode_first_frame",
                   json_string(f->mode == 1   ? "1 (imaging)"
                               : f->mode == 2 ? "2 (diffraction)"
                                              : "other"));
    qem_input_fact(a, "rotator_index",
                   json_pack("{s:I, s:I, s:I, s:b, s:s}", "min", (json_int_t)f->rot_min, "max",
                             (json_int_t)f->rot_max, "frames_at_zero",
                             (json_int_t)f->rot_zero, "steps_by_one_every_frame",
                             f->rot_steps_by_one, "used",
                             "not for the scan shape: a recording holds frames before and after "
                             "the scan and repeats indices; give --scan-shape"));
    if (have_scan)
        qem_input_fact(a, "scan_position",
                       json_pack("{s:o, s:o, s:o, s:o}", "first_x", float_json(f->first_scan_x),
                                 "first_y", float_json(f->first_scan_y), "last_x",
                                 float_json(f->last_scan_x), "last_y",
                                 float_json(f->last_scan_y)));
}

/* --- the family ---------------------------------------------------------------- */

static json_t *ascii_json(const uint8_t *s, size_t n)
{
    char text[256];
    size_t k = 0;
    for (size_t i = 0; i < n && s[i] && k + 1 < sizeof text; i++)
        text[k++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    while (k && text[k - 1] == ' ')
        k--;
    text[k] = '\0';
    return json_string(text);
}

static void header_facts(acquisition *a, const uint8_t *h, unsigned parts)
{
    static const struct {
        unsigned at;
        const char *key;
    } fields[] = {{4, "version"},        {8, "width"},
                  {12, "height"},        {16, "bits_per_pixel"},
                  {20, "offset_x"},      {24, "offset_y"},
                  {28, "binning_x"},     {32, "binning_y"},
                  {36, "pixel_size_nm"}, {40, "high_tension_kv"},
                  {44, "magnification_total"}};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
        qem_input_fact(a, fields[k].key, json_integer(le32(h + fields[k].at)));
    qem_input_fact(a, "header_text", ascii_json(h + 52, TVIPS_SERIES_HEADER - 52));
    qem_input_fact(a, "parts", json_integer(parts));
    qem_input_fact(a, "units_of_pixel_size",
                   json_string("nm as LiberTEM reads it (1/nm in diffraction, as HyperSpy "
                               "reads it); not taken as calibration"));
}

static qem_status tvips_describe(acquisition *a, const char *path, const uint8_t *h, size_t n,
                                 const input_options *o, qem_error *error)
{
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a TVIPS recording; --dataset only applies to HDF5 files", path);
    tvips_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    a->impl = s;
    const uint32_t version = le32(h + 4), width = le32(h + 8), height = le32(h + 12);
    const uint32_t bpp = le32(h + 16), stated_frame_header = le32(h + 48);
    if (version != 1 && version != 2)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a TVIPS recording of series header version %u; qem reads "
                        "versions 1 and 2",
                        path, version);
    if (bpp != 8 && bpp != 16)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a TVIPS recording of %u bits per pixel; qem reads 8 and 16 "
                        "(unsigned counts)",
                        path, bpp);
    if (width == 0 || height == 0)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' states frames of %u x %u pixels", path, width,
                        height);
    /* Version 1 frame headers are 12 bytes (LiberTEM, HyperSpy); version 2
     * states its own, at least the 60 bytes of fields HyperSpy reads. */
    s->frame_header = version == 1 ? TVIPS_V1_FRAME_HEADER : stated_frame_header;
    if (version == 2 && (stated_frame_header < TVIPS_V2_FRAME_FIELDS ||
                         stated_frame_header > TVIPS_MAX_FRAME_HEADER))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states frame headers of %u bytes; a version 2 frame header holds "
                        "at least %u bytes of fields (at most %u read)",
                        path, stated_frame_header, TVIPS_V2_FRAME_FIELDS, TVIPS_MAX_FRAME_HEADER);
    const uint64_t item = bpp / 8;
    if (qem_mul_overflow_u64((uint64_t)width * height, item, &s->frame_bytes) ||
        qem_add_overflow_u64(s->frame_bytes, s->frame_header, &s->record))
        return qem_fail(error, QEM_E_LIMIT, "the frames of '%s' are too large", path);
    a->shape[2] = height;
    a->shape[3] = width;
    a->shape[0] = a->shape[1] = 1;
    QEM_TRY(qem_input_check_shape(a, path, error));

    /* The members: this file, then the parts that continue it. */
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    tvips_name t;
    if (!name_of(path, &t))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    unsigned parts = 1;
    qem_status st = t.numbered ? add_parts(a, path, &t, &parts, error) : QEM_OK;
    free(t.dir);
    QEM_TRY(st);
    s->count = a->member_count;
    s->fd = malloc(s->count * sizeof *s->fd);
    s->start = calloc(s->count + 1, sizeof *s->start);
    s->base = calloc(s->count, sizeof *s->base);
    if (!s->fd || !s->start || !s->base)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < s->count; i++)
        s->fd[i] = -1;
    uint64_t frames = 0;
    for (size_t i = 0; i < s->count; i++) {
        const input_member *m = &a->members[i];
        struct stat sb;
        QEM_TRY(qem_open_input(m->path, &s->fd[i], &sb, error));
        QEM_TRY(qem_file_stamp_check(s->fd[i], &m->stamp, m->path, "described", error));
        const uint64_t size = (uint64_t)sb.st_size, base = i == 0 ? TVIPS_SERIES_HEADER : 0;
        if ((size - base) % s->record != 0)
            return qem_fail(error, QEM_E_FILE_LENGTH,
                            "'%s' holds %llu whole frame records of %llu bytes (a %llu-byte "
                            "frame header and %u x %u samples of %u bits) and %llu bytes more: "
                            "its last frame is truncated",
                            m->path, (unsigned long long)((size - base) / s->record),
                            (unsigned long long)s->record, (unsigned long long)s->frame_header,
                            width, height, bpp, (unsigned long long)((size - base) % s->record));
        if (i > 0 && size == 0)
            return qem_fail(error, QEM_E_LAYOUT,
                            "'%s', a part of the TVIPS series '%s', holds no frame", m->path,
                            path);
        s->base[i] = base;
        s->start[i] = frames;
        frames += (size - base) / s->record;
    }
    s->start[s->count] = frames;
    if (frames == 0)
        return qem_fail(error, QEM_E_LAYOUT, "the TVIPS series '%s' holds no frame", path);

    /* Every v2 frame header: time in order, milliseconds valid. */
    if (version == 2) {
        tvips_frames f;
        memset(&f, 0, sizeof f);
        const int have_scan = s->frame_header >= TVIPS_SCAN_FIELDS_END;
        const size_t want = have_scan ? TVIPS_SCAN_FIELDS_END : TVIPS_V2_FRAME_FIELDS;
        uint8_t fh[TVIPS_SCAN_FIELDS_END];
        for (size_t i = 0; i < s->count; i++)
            for (uint64_t k = s->start[i]; k < s->start[i + 1]; k++) {
                const uint64_t at = s->base[i] + (k - s->start[i]) * s->record;
                QEM_TRY(qem_pread_full(s->fd[i], fh, want, at, QEM_E_CHANGED, error));
                QEM_TRY(check_frame(fh, k, a->members[i].path, have_scan, &f, error));
            }
        frame_facts(a, &f, have_scan);
    }
    header_facts(a, h, parts);
    qem_input_fact(a, "frame_header_bytes", json_integer((json_int_t)s->frame_header));
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    uint64_t scan[2];
    const uint64_t none[2] = {0, 0};
    QEM_TRY(qem_input_scan_shape(o, 0, none, NULL, frames, path, scan, error));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->sample_type = bpp == 8 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16;
    return qem_input_implicit_mask(a, error);
}

static qem_status tvips_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                             qem_error *error)
{
    tvips_state *s = a->impl;
    size_t part = 0;
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t frame = first + k;
        while (part + 1 < s->count && frame >= s->start[part + 1])
            part++;
        const uint64_t at = s->base[part] + (frame - s->start[part]) * s->record + s->frame_header;
        uint8_t *dst = (uint8_t *)out + k * s->frame_bytes;
        QEM_TRY(qem_pread_full(s->fd[part], dst, (size_t)s->frame_bytes, at, QEM_E_CHANGED,
                               error));
        qem_input_member_read(&a->members[part], s->fd[part], at, dst, (size_t)s->frame_bytes);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        if (a->sample_type == QEM_DTYPE_UINT16)
            input_swap(dst, (size_t)s->frame_bytes / 2, 2);
#endif
    }
    return QEM_OK;
}

static void tvips_release(acquisition *a)
{
    tvips_state *s = a->impl;
    if (s) {
        for (size_t i = 0; s->fd && i < s->count; i++)
            if (s->fd[i] >= 0)
                close(s->fd[i]);
        free(s->fd);
        free(s->start);
        free(s->base);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_tvips = {
    "tvips", tvips_recognises, tvips_describe, tvips_read, tvips_release, 1, NULL};
