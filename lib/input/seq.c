/* Norpix StreamPix sequences (.seq) as Direct Electron cameras write them:
 * a header (magic 0xFEED, the name "Norpix seq" in UTF-16, version, header
 * size, image info: width, height, bit depth, real bit depth, image bytes,
 * image format, frame count, true image size = the stride between frames,
 * compression), the first image at 8192 (1024 before version 5), image k at
 * 8192 + k * true_image_size, each followed by its timestamp (u32 seconds,
 * u16 milliseconds, u16 microseconds). Uncompressed 8/16-bit monochrome
 * only. Companions Direct Electron writes beside it (<name>.metadata,
 * <name>.dark.mrc, <name>.gain.mrc, <name>.Config.Metadata.xml) become
 * members when present. A Celeritas recording is two files, the detector's
 * top and bottom halves (<lead>_Top....seq, <lead>_Bottom....seq), each
 * stored image holding SegmentPreBuffer frames one above the other (the
 * number stated in <lead>.seq.Config.Metadata.xml): a frame is the top
 * half's block flipped vertically above the bottom half's, as RosettaSciIO
 * stitches them. */
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
#include "input/de_info.h"
#include "input/input.h"
#include "input/swap.h"

#define SEQ_MAGIC 0xFEEDu
#define SEQ_HEADER_FIELDS 632u /* bytes of the header read: up to the reference time */
#define SEQ_FORMAT_MONO 100u
#define SEQ_XML_MAX_BYTES (16u << 20)
#define SEQ_NAME_MAX 1024

/* The header fields qem reads (offsets: LiberTEM's and RosettaSciIO's
 * readers, doc/inputs.md). */
typedef struct seq_header {
    int32_t version, header_size;
    uint32_t width, height, bit_depth, bit_depth_real, image_bytes, image_format;
    uint32_t frames, origin, true_image_size, compression;
    double frame_rate;
    uint64_t offset;     /* of the first image */
    uint64_t timestamp;  /* bytes of each image's timestamp: 8 (6 before version 5) */
    char description[256];
} seq_header;

typedef struct seq_state {
    int fd[2];       /* one file, or the Celeritas top and bottom halves */
    int halves;      /* 1 or 2 */
    seq_header h;
    uint64_t prebuffer;   /* frames per stored image (Celeritas); 1 otherwise */
    uint64_t block;       /* bytes of one frame's block in a stored image */
    uint64_t block_rows;
} seq_state;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* "Norpix seq" in UTF-16LE, the header's name field. */
static int has_name(const uint8_t *h)
{
    static const char name[] = "Norpix seq";
    for (size_t i = 0; i < sizeof name - 1; i++)
        if (h[4 + 2 * i] != (uint8_t)name[i] || h[5 + 2 * i] != 0)
            return 0;
    return 1;
}

static int seq_recognises(const uint8_t *head, size_t n)
{
    return n >= 28 && le32(head) == SEQ_MAGIC && has_name(head);
}

/* ASCII of a UTF-16LE text field (others '?'), up to its NUL. */
static void utf16_ascii(const uint8_t *s, size_t bytes, char *out, size_t size)
{
    size_t k = 0;
    for (size_t i = 0; i + 1 < bytes && k + 1 < size; i += 2) {
        const uint16_t c = le16(s + i);
        if (!c)
            break;
        out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[k] = '\0';
}

/* Parses and checks the header of `path` (`h` holds its first
 * SEQ_HEADER_FIELDS bytes, `size` the file's bytes). */
static qem_status parse_header(const uint8_t *b, uint64_t size, const char *path, seq_header *h,
                               qem_error *error)
{
    memset(h, 0, sizeof *h);
    if (le32(b) != SEQ_MAGIC || !has_name(b))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' is not a Norpix sequence (magic 0xFEED and the name \"Norpix "
                        "seq\")",
                        path);
    h->version = (int32_t)le32(b + 28);
    h->header_size = (int32_t)le32(b + 32);
    utf16_ascii(b + 36, 512, h->description, sizeof h->description);
    h->width = le32(b + 548);
    h->height = le32(b + 552);
    h->bit_depth = le32(b + 556);
    h->bit_depth_real = le32(b + 560);
    h->image_bytes = le32(b + 564);
    h->image_format = le32(b + 568);
    h->frames = le32(b + 572);
    h->origin = le32(b + 576);
    h->true_image_size = le32(b + 580);
    uint64_t rate_bits = (uint64_t)le32(b + 584) | (uint64_t)le32(b + 588) << 32;
    memcpy(&h->frame_rate, &rate_bits, sizeof h->frame_rate);
    h->compression = le32(b + 620);
    /* Version 5 (StreamPix 6) and later: 8192-byte header, microseconds in
     * the timestamps; before, 1024 bytes (LiberTEM's reader). */
    h->offset = h->version >= 5 ? 8192 : 1024;
    h->timestamp = h->version >= 5 ? 8 : 6;
    if (h->header_size != (int32_t)h->offset)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' is a Norpix sequence of version %d whose header states %d bytes; "
                        "that version's header is %llu bytes",
                        path, h->version, h->header_size, (unsigned long long)h->offset);
    if (h->compression != 0)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a compressed Norpix sequence (compression format code %u); qem "
                        "reads uncompressed sequences (code 0)",
                        path, h->compression);
    if (h->image_format != SEQ_FORMAT_MONO)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' holds Norpix image format code %u; qem reads monochrome images "
                        "(code 100)",
                        path, h->image_format);
    if (h->bit_depth != 8 && h->bit_depth != 16)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' holds %u-bit monochrome images; qem reads 8 and 16 bits (unsigned "
                        "counts)",
                        path, h->bit_depth);
    if (h->bit_depth_real > h->bit_depth)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states %u real bits in %u-bit samples", path, h->bit_depth_real,
                        h->bit_depth);
    if (h->width == 0 || h->height == 0)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' states images of %u x %u pixels", path,
                        h->width, h->height);
    const uint64_t want = (uint64_t)h->width * h->height * (h->bit_depth / 8);
    if (want != h->image_bytes)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states images of %u bytes, but %u x %u samples of %u bits are "
                        "%llu bytes",
                        path, h->image_bytes, h->width, h->height, h->bit_depth,
                        (unsigned long long)want);
    if ((uint64_t)h->true_image_size < want + h->timestamp)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states a true image size (the stride between images) of %u bytes, "
                        "less than its %llu image bytes and %llu bytes of timestamp",
                        path, h->true_image_size, (unsigned long long)want,
                        (unsigned long long)h->timestamp);
    if (h->frames == 0)
        return qem_fail(error, QEM_E_LAYOUT, "'%s' states that it holds no image", path);
    uint64_t expected;
    if (qem_mul_overflow_u64(h->frames, h->true_image_size, &expected) ||
        qem_add_overflow_u64(expected, h->offset, &expected))
        return qem_fail(error, QEM_E_LIMIT, "the images of '%s' are too large", path);
    if (size < expected)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is %llu bytes, but its %u images of %u bytes after a %llu-byte "
                        "header need %llu: it is truncated",
                        path, (unsigned long long)size, h->frames, h->true_image_size,
                        (unsigned long long)h->offset, (unsigned long long)expected);
    if (size > expected)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' is %llu bytes, more than its %u images of %u bytes after a "
                        "%llu-byte header (%llu); the header's frame count disagrees with the "
                        "file",
                        path, (unsigned long long)size, h->frames, h->true_image_size,
                        (unsigned long long)h->offset, (unsigned long long)expected);
    return QEM_OK;
}

/* Every image's timestamp: milliseconds and microseconds below 1000, time
 * never going back. The first and last become facts under `which`. */
static qem_status check_timestamps(acquisition *a, int fd, const seq_header *h, const char *path,
                                   const char *which, qem_error *error)
{
    uint64_t prev = 0;
    uint8_t t[8] = {0};
    uint32_t first[3] = {0, 0, 0};
    for (uint64_t k = 0; k < h->frames; k++) {
        const uint64_t at = h->offset + k * h->true_image_size + h->image_bytes;
        QEM_TRY(qem_pread_full(fd, t, (size_t)h->timestamp, at, QEM_E_CHANGED, error));
        const uint32_t s = le32(t), ms = le16(t + 4), us = h->timestamp == 8 ? le16(t + 6) : 0;
        if (ms > 999 || us > 999)
            return qem_fail(error, QEM_E_LAYOUT,
                            "image %llu of '%s' is stamped %u s %u ms %u us; milliseconds and "
                            "microseconds are 0 to 999",
                            (unsigned long long)k + 1, path, s, ms, us);
        const uint64_t now = (uint64_t)s * 1000000 + ms * 1000u + us;
        if (k > 0 && now < prev)
            return qem_fail(error, QEM_E_LAYOUT,
                            "image %llu of '%s' is stamped %u.%06u s, before the image ahead of "
                            "it; the images are out of order",
                            (unsigned long long)k + 1, path, s, ms * 1000u + us);
        if (k == 0) {
            first[0] = s;
            first[1] = ms;
            first[2] = us;
        }
        prev = now;
    }
    char key[64];
    snprintf(key, sizeof key, "%sfirst_timestamp", which);
    qem_input_fact(a, key,
                   json_pack("{s:I, s:I, s:I}", "s", (json_int_t)first[0], "ms",
                             (json_int_t)first[1], "us", (json_int_t)first[2]));
    snprintf(key, sizeof key, "%slast_timestamp", which);
    qem_input_fact(a, key,
                   json_pack("{s:I, s:I, s:I}", "s", (json_int_t)(prev / 1000000), "ms",
                             (json_int_t)(prev / 1000 % 1000), "us", (json_int_t)(prev % 1000)));
    return QEM_OK;
}

static void header_facts(acquisition *a, const seq_header *h)
{
    qem_input_fact(a, "version", json_integer(h->version));
    qem_input_fact(a, "header_size", json_integer(h->header_size));
    qem_input_fact(a, "description", json_string(h->description));
    qem_input_fact(a, "width", json_integer(h->width));
    qem_input_fact(a, "height", json_integer(h->height));
    qem_input_fact(a, "bit_depth", json_integer(h->bit_depth));
    qem_input_fact(a, "bit_depth_real", json_integer(h->bit_depth_real));
    qem_input_fact(a, "image_size_bytes", json_integer(h->image_bytes));
    qem_input_fact(a, "image_format", json_integer(h->image_format));
    qem_input_fact(a, "allocated_frames", json_integer(h->frames));
    qem_input_fact(a, "origin", json_integer(h->origin));
    qem_input_fact(a, "true_image_size", json_integer(h->true_image_size));
    qem_input_fact(a, "compression_format", json_integer(h->compression));
    if (isfinite(h->frame_rate))
        qem_input_fact(a, "suggested_frame_rate", json_real(h->frame_rate));
}

/* --- companions ---------------------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static qem_status companion(const char *owner, const char *name, const char *what,
                            char **member, qem_error *error)
{
    char subject[1400];
    snprintf(subject, sizeof subject, "'%s' has %s", owner, what);
    const input_companion c = {
        .owner = owner,
        .subject = subject,
        .folder = "the sequence's folder",
        .rule = "the files of a Direct Electron recording are read only beside its .seq",
        .keep = "remove the broken link, or keep the recording's files together",
    };
    return qem_input_companion_path(&c, name, member, error);
}

/* Adds the companion `name` beside `owner` as a member when it exists; its
 * name goes into companions[key]. `*path` (may be NULL) gets its path. */
static qem_status optional_companion(acquisition *a, const char *owner, const char *name,
                                     const char *key, json_t *companions, char **path,
                                     qem_error *error)
{
    char *dir = qem_path_dirname(owner);
    int present = 0;
    const qem_status found = dir ? qem_input_entry_present(dir, name, &present, error)
                                 : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    free(dir);
    if (found != QEM_OK || !present)
        return found;
    char what[SEQ_NAME_MAX + 64];
    snprintf(what, sizeof what, "the %s companion", key);
    char *member = NULL;
    QEM_TRY(companion(owner, name, what, &member, error));
    qem_status st = qem_input_add_member(a, member, 0, error);
    if (st == QEM_OK)
        json_object_set_new(companions, key, json_string(name));
    if (st == QEM_OK && path)
        *path = member;
    else
        free(member);
    return st;
}

/* The SegmentPreBuffer of a Celeritas recording's XML. */
static qem_status read_prebuffer(const char *xml_path, uint64_t *out, json_t **facts,
                                 qem_error *error)
{
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(xml_path, &fd, &sb, error));
    if ((uint64_t)sb.st_size > SEQ_XML_MAX_BYTES) {
        close(fd);
        return qem_fail(error, QEM_E_LIMIT, "'%s' is %lld bytes; at most %u are read", xml_path,
                        (long long)sb.st_size, SEQ_XML_MAX_BYTES);
    }
    char *xml = malloc((size_t)sb.st_size + 1);
    qem_status st = xml ? qem_pread_full(fd, xml, (size_t)sb.st_size, 0, QEM_E_CHANGED, error)
                        : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    close(fd);
    input_empad_xml parsed;
    memset(&parsed, 0, sizeof parsed);
    if (st == QEM_OK)
        st = qem_input_empad_parse_xml(xml, (size_t)sb.st_size, xml_path, &parsed, error);
    free(xml);
    QEM_TRY(st);
    static const char *const keys[] = {"FileInfo/SegmentPreBuffer@Value",
                                       "FileInfo/SegmentPreBuffer/Value",
                                       "FileInfo/SegmentPreBuffer"};
    const char *text = NULL;
    for (size_t k = 0; !text && k < sizeof keys / sizeof keys[0]; k++)
        text = json_string_value(json_object_get(parsed.facts, keys[k]));
    uint64_t v = 0;
    size_t digits = 0;
    for (const char *p = text ? text : ""; *p >= '0' && *p <= '9' && digits < 10; p++, digits++)
        v = v * 10 + (uint64_t)(*p - '0');
    if (!text)
        st = qem_fail(error,
                      json_object_get(parsed.facts, "_truncated") ? QEM_E_LIMIT : QEM_E_LAYOUT,
                      "'%s' states no FileInfo/SegmentPreBuffer (how many frames each stored "
                      "image of a Celeritas recording holds)",
                      xml_path);
    else if (!digits || text[digits] || v == 0 || v > 65535)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' states the SegmentPreBuffer '%.32s'; it must be a count of frames "
                      "from 1 to 65535",
                      xml_path, text);
    if (st == QEM_OK) {
        *out = v;
        *facts = parsed.facts;
        parsed.facts = NULL;
    }
    qem_input_empad_xml_free(&parsed);
    return st;
}

/* --- Celeritas halves ------------------------------------------------------------ */

/* Where the last "_Top" or "_Bottom" followed by '_' or '.' starts in
 * `base`; `*top` says which. -1 when neither. */
static long half_marker(const char *base, int *top)
{
    long at = -1;
    for (const char *p = base; (p = strchr(p, '_')); p++) {
        const int t = !strncmp(p, "_Top", 4) && (p[4] == '_' || p[4] == '.');
        const int b = !strncmp(p, "_Bottom", 7) && (p[7] == '_' || p[7] == '.');
        if (t || b) {
            at = p - base;
            *top = t;
        }
    }
    return at;
}

/* The other half of a Celeritas recording: the only file of the folder
 * named <lead>_Bottom (or _Top) then '_' or '.', ending as `base` ends. */
static qem_status find_partner(const char *path, const char *base, size_t lead, int top,
                               char *out, size_t size, qem_error *error)
{
    char *dir = qem_path_dirname(path);
    if (!dir)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const char *ext = strrchr(base, '.');
    const char *want = top ? "_Bottom" : "_Top";
    const size_t nw = strlen(want), ne = ext ? strlen(ext) : 0;
    DIR *d = opendir(dir);
    size_t found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *s = e->d_name;
        const size_t n = strlen(s);
        if (n < lead + nw + 1 + ne || strncmp(s, base, lead) != 0 ||
            strncmp(s + lead, want, nw) != 0 || (s[lead + nw] != '_' && s[lead + nw] != '.') ||
            (ne && strcmp(s + n - ne, ext) != 0))
            continue;
        if (found++ == 0)
            snprintf(out, size, "%s", s);
    }
    if (d)
        closedir(d);
    free(dir);
    if (found == 0)
        return qem_fail(error, QEM_E_IO,
                        "'%s' is the %s half of a Celeritas recording, and its %s half "
                        "(%.*s%s_...%s or %.*s%s%s) is not in its folder; keep both halves "
                        "together",
                        path, top ? "top" : "bottom", top ? "bottom" : "top", (int)lead, base,
                        want, ext ? ext : "", (int)lead, base, want, ext ? ext : "");
    if (found > 1)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' is the %s half of a Celeritas recording, and its folder holds %zu "
                        "files that could be its %s half (%.*s%s...); keep one recording per "
                        "folder",
                        path, top ? "top" : "bottom", found, top ? "bottom" : "top", (int)lead,
                        base, want);
    return QEM_OK;
}

static qem_status read_header_of(const char *path, int fd, uint64_t size, seq_header *h,
                                 qem_error *error)
{
    uint8_t b[SEQ_HEADER_FIELDS];
    if (size < SEQ_HEADER_FIELDS)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' is %llu bytes, shorter than a Norpix sequence header", path,
                        (unsigned long long)size);
    QEM_TRY(qem_pread_full(fd, b, sizeof b, 0, QEM_E_CHANGED, error));
    return parse_header(b, size, path, h, error);
}

/* --- the family -------------------------------------------------------------------- */

static qem_status open_member(acquisition *a, size_t i, int *fd, uint64_t *size,
                              qem_error *error)
{
    struct stat sb;
    QEM_TRY(qem_open_input(a->members[i].path, fd, &sb, error));
    QEM_TRY(qem_file_stamp_check(*fd, &a->members[i].stamp, a->members[i].path, "described",
                                 error));
    *size = (uint64_t)sb.st_size;
    return QEM_OK;
}

static qem_status describe_celeritas(acquisition *a, seq_state *s, const char *path,
                                     const char *base, size_t lead, int top, json_t *companions,
                                     qem_error *error)
{
    char partner[SEQ_NAME_MAX], name[SEQ_NAME_MAX + 64];
    QEM_TRY(find_partner(path, base, lead, top, partner, sizeof partner, error));
    char what[SEQ_NAME_MAX + 64];
    snprintf(what, sizeof what, "the %s half '%s'", top ? "bottom" : "top", partner);
    char *other = NULL;
    QEM_TRY(companion(path, partner, what, &other, error));
    /* The top half is the master whichever half was named. */
    qem_status st = top ? qem_input_add_member(a, path, 1, error)
                        : qem_input_add_member(a, other, 1, error);
    if (st == QEM_OK)
        st = top ? qem_input_add_member(a, other, 0, error)
                 : qem_input_add_member(a, path, 0, error);
    free(other);
    QEM_TRY(st);
    uint64_t size[2];
    seq_header h2;
    QEM_TRY(open_member(a, 0, &s->fd[0], &size[0], error));
    QEM_TRY(open_member(a, 1, &s->fd[1], &size[1], error));
    s->halves = 2;
    QEM_TRY(read_header_of(a->members[0].path, s->fd[0], size[0], &s->h, error));
    QEM_TRY(read_header_of(a->members[1].path, s->fd[1], size[1], &h2, error));
    if (h2.version != s->h.version || h2.width != s->h.width || h2.height != s->h.height ||
        h2.bit_depth != s->h.bit_depth || h2.frames != s->h.frames ||
        h2.true_image_size != s->h.true_image_size)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the Celeritas halves '%s' (%u images of %u x %u, %u bits) and '%s' "
                        "(%u images of %u x %u, %u bits) disagree",
                        a->members[0].path, s->h.frames, s->h.width, s->h.height,
                        s->h.bit_depth, a->members[1].path, h2.frames, h2.width, h2.height,
                        h2.bit_depth);
    /* The companions RosettaSciIO reads: <lead>.seq.* and <half>.metadata. */
    char *xml = NULL;
    static const char *const lead_ext[][2] = {{".seq.Config.Metadata.xml", "config_xml"},
                                              {".seq.dark.mrc", "dark_reference"},
                                              {".seq.gain.mrc", "gain_reference"}};
    for (size_t k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%.*s%s", (int)lead, base, lead_ext[k][0]);
        QEM_TRY(optional_companion(a, path, name, lead_ext[k][1], companions, k ? NULL : &xml,
                                   error));
    }
    for (size_t k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "%s.metadata", base_name(a->members[k].path));
        QEM_TRY(optional_companion(a, path, name, k ? "bottom_metadata" : "top_metadata",
                                   companions, NULL, error));
    }
    if (!xml)
        return qem_fail(error, QEM_E_IO,
                        "the Celeritas recording '%s' needs '%.*s.seq.Config.Metadata.xml' "
                        "beside it: its SegmentPreBuffer says how many frames each stored image "
                        "holds, and qem does not guess it",
                        path, (int)lead, base);
    json_t *xml_facts = NULL;
    st = read_prebuffer(xml, &s->prebuffer, &xml_facts, error);
    free(xml);
    QEM_TRY(st);
    qem_input_fact(a, "config_xml", xml_facts);
    if (s->h.height % s->prebuffer != 0)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the Celeritas recording '%s' stores images of %u rows, which its "
                        "SegmentPreBuffer of %llu frames does not divide",
                        path, s->h.height, (unsigned long long)s->prebuffer);
    s->block_rows = s->h.height / s->prebuffer;
    QEM_TRY(check_timestamps(a, s->fd[0], &s->h, a->members[0].path, "top_", error));
    QEM_TRY(check_timestamps(a, s->fd[1], &h2, a->members[1].path, "bottom_", error));
    qem_input_fact(a, "celeritas",
                   json_pack("{s:s, s:s, s:I, s:I, s:s}", "top", base_name(a->members[0].path),
                             "bottom", base_name(a->members[1].path), "segment_prebuffer",
                             (json_int_t)s->prebuffer, "frame_rows",
                             (json_int_t)(2 * s->block_rows), "frame",
                             "the top half's block flipped vertically, above the bottom "
                             "half's block (as RosettaSciIO stitches them)"));
    return QEM_OK;
}

static qem_status seq_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a Norpix sequence; --dataset only applies to HDF5 files", path);
    seq_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd[0] = s->fd[1] = -1;
    a->impl = s;
    const char *base = base_name(path);
    if (strlen(base) >= SEQ_NAME_MAX - 32)
        return qem_fail(error, QEM_E_LIMIT, "the name of '%s' is too long", path);
    json_t *companions = json_object();
    if (!companions)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int top = 0;
    const long marker = half_marker(base, &top);
    qem_status st = QEM_OK;
    if (marker >= 0) {
        st = describe_celeritas(a, s, path, base, (size_t)marker, top, companions, error);
    } else {
        uint64_t size = 0;
        st = qem_input_add_member(a, path, 1, error);
        if (st == QEM_OK)
            st = open_member(a, 0, &s->fd[0], &size, error);
        if (st == QEM_OK)
            st = read_header_of(path, s->fd[0], size, &s->h, error);
        s->halves = 1;
        s->prebuffer = 1;
        s->block_rows = s->h.height;
        static const char *const ext[][2] = {{".metadata", "metadata"},
                                             {".dark.mrc", "dark_reference"},
                                             {".gain.mrc", "gain_reference"},
                                             {".Config.Metadata.xml", "config_xml"}};
        char name[SEQ_NAME_MAX + 32];
        for (size_t k = 0; st == QEM_OK && k < 4; k++) {
            snprintf(name, sizeof name, "%s%s", base, ext[k][0]);
            st = optional_companion(a, path, name, ext[k][1], companions, NULL, error);
        }
        if (st == QEM_OK)
            st = check_timestamps(a, s->fd[0], &s->h, path, "", error);
    }
    /* A Direct Electron movie's <dataset>_info.txt states its scan. */
    de_info info = {0};
    int found = 0;
    if (st == QEM_OK)
        st = qem_de_info_companion(a, path, "the sequence", &info, &found, error);
    if (st != QEM_OK) {
        json_decref(companions);
        return st;
    }
    if (found)
        json_object_set(companions, "de_info",
                        json_object_get(json_object_get(a->facts, "de_info"), "file"));
    header_facts(a, &s->h);
    qem_input_fact(a, "companions", companions);
    const uint64_t item = s->h.bit_depth / 8;
    s->block = s->block_rows * s->h.width * item;
    const uint64_t frames = (uint64_t)s->h.frames * s->prebuffer;
    qem_input_fact(a, "frames", json_integer((json_int_t)frames));
    a->shape[2] = s->halves * s->block_rows;
    a->shape[3] = s->h.width;
    a->shape[0] = a->shape[1] = 1;
    st = qem_input_check_shape(a, path, error);
    if (st != QEM_OK) {
        qem_de_info_free(&info);
        return st;
    }
    uint64_t scan[2];
    st = qem_de_info_scan_shape(&info, found, o, frames, path, scan, error);
    qem_de_info_free(&info);
    QEM_TRY(st);
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->sample_type = item == 1 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16;
    return qem_input_implicit_mask(a, error);
}

/* Reverses the order of `rows` rows of `row_bytes` in place. */
static void flip_rows(uint8_t *data, uint64_t rows, size_t row_bytes)
{
    for (uint64_t r = 0; r < rows / 2; r++) {
        uint8_t *x = data + r * row_bytes, *y = data + (rows - 1 - r) * row_bytes;
        for (size_t i = 0; i < row_bytes; i++) {
            const uint8_t t = x[i];
            x[i] = y[i];
            y[i] = t;
        }
    }
}

static qem_status seq_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    seq_state *s = a->impl;
    const size_t block = (size_t)s->block, row = (size_t)(s->h.width * (s->h.bit_depth / 8));
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t frame = first + k, image = frame / s->prebuffer;
        const uint64_t at = s->h.offset + image * s->h.true_image_size +
                            (frame % s->prebuffer) * s->block;
        uint8_t *dst = (uint8_t *)out + k * block * s->halves;
        for (int half = 0; half < s->halves; half++) {
            uint8_t *d = dst + half * block;
            QEM_TRY(qem_pread_full(s->fd[half], d, block, at, QEM_E_CHANGED, error));
            qem_input_member_read(&a->members[half], s->fd[half], at, d, block);
            if (s->halves == 2 && half == 0)
                flip_rows(d, s->block_rows, row);
        }
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        if (a->sample_type == QEM_DTYPE_UINT16)
            input_swap(dst, block * s->halves / 2, 2);
#endif
    }
    return QEM_OK;
}

static void seq_release(acquisition *a)
{
    seq_state *s = a->impl;
    for (int i = 0; s && i < 2; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_seq = {
    "seq", seq_recognises, seq_describe, seq_read, seq_release, 1, NULL};
