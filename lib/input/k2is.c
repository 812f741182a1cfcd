/* Gatan K2 IS raw acquisitions: eight sector files <name>1.bin ...
 * <name>8.bin (and usually <name>.gtg, a DM4-style tag file of acquisition
 * metadata) beside each other. Each sector file is a sequence of 22360-byte
 * blocks: a 40-byte big-endian header (sync 0xFFFF0055, version, flags,
 * block count, sector width 256 and height 1860, frame id, the block's
 * first and last pixel within the sector, block size) and 930 x 16 pixels
 * packed as 12-bit little-endian pairs. 32 blocks of one sector tile the
 * sector's 1860 x 256 pixels; sector k is columns 256k .. 256k + 255 of the
 * 1860 x 2048 frame. The kept frames are the frames complete in all eight
 * sectors, from the first one whose blocks all carry the shutter-active
 * flag (or the first complete one when no block carries it). The .gtg is
 * a member (hashed) and is parsed with the DM family's tag walk: its tags
 * are facts, and its "SI Dimensions" (Size Y rows, Size X columns) the
 * scan shape, as LiberTEM reads it. A .gtg that does not parse is refused. */
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

#define K2_SECTORS 8u
#define K2_BLOCK_BYTES 22360u /* 0x5758 */
#define K2_HEADER_BYTES 40u
#define K2_DATA_BYTES (K2_BLOCK_BYTES - K2_HEADER_BYTES) /* 930 x 16 x 12 bits */
#define K2_BLOCK_ROWS 930u
#define K2_BLOCK_COLUMNS 16u
#define K2_BLOCKS_PER_FRAME 32u /* per sector */
#define K2_SECTOR_ROWS 1860u
#define K2_SECTOR_COLUMNS 256u
#define K2_FRAME_COLUMNS (K2_SECTORS * K2_SECTOR_COLUMNS)
#define K2_SYNC 0xFFFF0055u
#define K2_SHUTTER_ACTIVE 0x01u
#define K2_SECTOR_FRAME_BYTES ((uint64_t)K2_BLOCK_BYTES * K2_BLOCKS_PER_FRAME)

/* One block header (big-endian fields). */
typedef struct k2_block {
    uint32_t sync;
    uint8_t version, flags;
    uint32_t block_count;
    uint16_t width, height;
    uint32_t frame_id;
    uint16_t x0, y0, x1, y1; /* first and last pixel within the sector */
    uint32_t block_size;
} k2_block;

typedef struct k2_state {
    int fd[K2_SECTORS];
    uint64_t first[K2_SECTORS]; /* offset of the first kept frame in each sector */
    uint64_t first_id;          /* its frame id */
    uint64_t frames;
    uint8_t *block; /* one block's bytes */
} k2_state;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void parse_block(const uint8_t *b, k2_block *h)
{
    h->sync = be32(b);
    h->version = b[8];
    h->flags = b[9];
    h->block_count = be32(b + 16);
    h->width = be16(b + 20);
    h->height = be16(b + 22);
    h->frame_id = be32(b + 24);
    h->x0 = be16(b + 28);
    h->y0 = be16(b + 30);
    h->x1 = be16(b + 32);
    h->y1 = be16(b + 34);
    h->block_size = be32(b + 36);
}

/* The block at `offset` of `path` is one qem reads: the sync pattern, the
 * sector's size and the block size of a K2 IS, and a 930 x 16 cell of the
 * sector's grid (`*cell`, 0..31). */
static qem_status check_block(const k2_block *h, const char *path, uint64_t offset, unsigned *cell,
                              qem_error *error)
{
    if (h->sync != K2_SYNC)
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' has no K2 IS block at byte %llu (sync 0x%08X, not 0xFFFF0055); "
                        "the sector file is damaged or truncated inside a block",
                        path, (unsigned long long)offset, (unsigned)h->sync);
    if (h->width != K2_SECTOR_COLUMNS || h->height != K2_SECTOR_ROWS ||
        h->block_size != K2_BLOCK_BYTES)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the block at byte %llu of '%s' describes a %u x %u sector in blocks of "
                        "%u bytes; qem reads the K2 IS layout (1860 x 256 sectors, 22360-byte "
                        "blocks of 930 x 16 12-bit pixels)",
                        (unsigned long long)offset, path, (unsigned)h->height,
                        (unsigned)h->width, (unsigned)h->block_size);
    if (h->x0 % K2_BLOCK_COLUMNS || h->y0 % K2_BLOCK_ROWS || h->x0 >= K2_SECTOR_COLUMNS ||
        h->y0 >= K2_SECTOR_ROWS || h->x1 != h->x0 + K2_BLOCK_COLUMNS - 1 ||
        h->y1 != h->y0 + K2_BLOCK_ROWS - 1)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the block at byte %llu of '%s' covers pixels x %u..%u, y %u..%u of its "
                        "sector; a K2 IS block covers one 16 x 930 cell of the 256 x 1860 "
                        "sector",
                        (unsigned long long)offset, path, (unsigned)h->x0, (unsigned)h->x1,
                        (unsigned)h->y0, (unsigned)h->y1);
    *cell = (h->y0 / K2_BLOCK_ROWS) * (K2_SECTOR_COLUMNS / K2_BLOCK_COLUMNS) +
            h->x0 / K2_BLOCK_COLUMNS;
    return QEM_OK;
}

static qem_status read_header(int fd, const char *path, uint64_t offset, k2_block *h,
                              unsigned *cell, qem_error *error)
{
    uint8_t b[K2_HEADER_BYTES];
    QEM_TRY(qem_pread_full(fd, b, sizeof b, offset, QEM_E_CHANGED, error));
    parse_block(b, h);
    return check_block(h, path, offset, cell, error);
}

/* The 32 blocks at `offset` are one whole frame of a sector: all numbered
 * `id`, each cell once. `*shutter` is cleared when a block lacks the
 * shutter-active flag. */
static qem_status check_sector_frame(int fd, const char *path, uint64_t offset, uint64_t id,
                                     int *shutter, qem_error *error)
{
    uint32_t cells = 0;
    for (unsigned b = 0; b < K2_BLOCKS_PER_FRAME; b++) {
        const uint64_t at = offset + (uint64_t)b * K2_BLOCK_BYTES;
        k2_block h;
        unsigned cell = 0;
        QEM_TRY(read_header(fd, path, at, &h, &cell, error));
        if (h.frame_id != id)
            return qem_fail(error, QEM_E_LAYOUT,
                            "the block at byte %llu of '%s' belongs to frame %u where frame "
                            "%llu continues; a sector's frames are 32 consecutive blocks each "
                            "and their ids increase by one (a block was lost)",
                            (unsigned long long)at, path, (unsigned)h.frame_id,
                            (unsigned long long)id);
        if (cells & (1u << cell))
            return qem_fail(error, QEM_E_LAYOUT,
                            "the block at byte %llu of '%s' covers the cell at x %u, y %u a "
                            "second time in frame %llu; the 32 blocks of a frame tile the sector",
                            (unsigned long long)at, path, (unsigned)h.x0, (unsigned)h.y0,
                            (unsigned long long)id);
        cells |= 1u << cell;
        if (!(h.flags & K2_SHUTTER_ACTIVE))
            *shutter = 0;
    }
    return QEM_OK;
}

/* --- names -------------------------------------------------------------------- */

/* The opened file's name split as <stem><sector digit><.bin>: `*stem_len`
 * bytes of the base name, the extension as written. 0 if it is not. */
static int split_name(const char *base, size_t *stem_len, const char **ext)
{
    const size_t n = strlen(base);
    if (n < 5 || strcasecmp(base + n - 4, ".bin") != 0)
        return 0;
    const char d = base[n - 5];
    if (d < '1' || d > '8' || (n >= 6 && base[n - 6] >= '0' && base[n - 6] <= '9'))
        return 0;
    *stem_len = n - 5;
    *ext = base + n - 4;
    return 1;
}

static qem_status companion(const char *owner, const char *name, const char *what,
                            char **member, qem_error *error)
{
    char subject[700];
    snprintf(subject, sizeof subject, "the K2 IS acquisition of '%s' has the %s", owner, what);
    const input_companion c = {
        .owner = owner,
        .subject = subject,
        .folder = "the sector file's folder",
        .rule = "the eight sector files and the .gtg must lie side by side",
        .keep = "keep the eight .bin files and the .gtg of an acquisition together",
    };
    return qem_input_companion_path(&c, name, member, error);
}

/* --- the .gtg ------------------------------------------------------------------- */

/* The .gtg's tags LiberTEM reads (io/dataset/k2is.py, _get_nav_shape and
 * _nav_shape_without_flyback, through ncempy's '.SI Dimensions.Size Y'
 * and the like): the scan, and the scan without its flyback column. */
#define GTG_SIZE_X "SI Dimensions/Size X"
#define GTG_SIZE_Y "SI Dimensions/Size Y"
#define GTG_WIDTH "SI Image Tags/SI/Acquisition/Spatial Sampling/Width (pixels)"
#define GTG_HEIGHT "SI Image Tags/SI/Acquisition/Spatial Sampling/Height (pixels)"

/* A count the .gtg states (an integer, or a real with an integral value). */
static int gtg_count(json_t *v, uint64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) > 0) {
        *out = (uint64_t)json_integer_value(v);
        return 1;
    }
    const double d = json_is_real(v) ? json_real_value(v) : 0;
    if (d >= 1 && d <= 9007199254740992.0 && d == (double)(uint64_t)d) {
        *out = (uint64_t)d;
        return 1;
    }
    return 0;
}

/* Parses the .gtg (member `m`): its tags into facts, and `scan` (rows,
 * columns) when it states SI Dimensions (`*have_scan`). */
static qem_status read_gtg(acquisition *a, const char *owner, input_member *m, uint64_t scan[2],
                           int *have_scan, qem_error *error)
{
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(m->path, &fd, &sb, error));
    static const char *const names[] = {GTG_SIZE_X, GTG_SIZE_Y, GTG_WIDTH, GTG_HEIGHT};
    input_dm_tags t;
    qem_error local = {0};
    qem_status st = qem_file_stamp_check(fd, &m->stamp, m->path, "described", error);
    if (st == QEM_OK) {
        st = qem_input_dm_tags(fd, (uint64_t)sb.st_size, m->path, names, 4, &t, &local);
        if (st != QEM_OK)
            st = qem_fail(error, st,
                          "the .gtg of the K2 IS acquisition of '%s' does not parse: %s; qem "
                          "refuses it rather than read the sector files without their metadata "
                          "(move it aside and give --scan-shape to read them)",
                          owner, local.message);
    }
    close(fd);
    QEM_TRY(st);
    qem_input_fact(a, "gtg_dm_version", json_integer(t.version));
    qem_input_fact(a, "gtg_tags", json_incref(t.tags));
    if (t.truncated)
        qem_input_fact(a, "gtg_tags_truncated",
                       json_string("only the first tags of the .gtg are recorded (the caps of "
                                   "the DM family's facts); the scan tags are always read"));
    json_t *x = json_object_get(t.named, GTG_SIZE_X), *y = json_object_get(t.named, GTG_SIZE_Y);
    *have_scan = 0;
    if (x || y) {
        if (!x || !y || !gtg_count(y, &scan[0]) || !gtg_count(x, &scan[1])) {
            qem_input_dm_tags_free(&t);
            return qem_fail(error, QEM_E_LAYOUT,
                            "'%s' (the .gtg of the K2 IS acquisition of '%s') states SI "
                            "Dimensions that are not two positive counts (Size X and Size Y)",
                            m->path, owner);
        }
        *have_scan = 1;
    }
    uint64_t rows, columns;
    if (gtg_count(json_object_get(t.named, GTG_HEIGHT), &rows) &&
        gtg_count(json_object_get(t.named, GTG_WIDTH), &columns))
        qem_input_fact(a, "gtg_spatial_sampling",
                       json_pack("{s:I, s:I}", "rows", (json_int_t)rows, "columns",
                                 (json_int_t)columns));
    qem_input_dm_tags_free(&t);
    return QEM_OK;
}

/* --- the family ------------------------------------------------------------------ */

static int k2is_recognises(const uint8_t *head, size_t n)
{
    return n >= 4 && be32(head) == K2_SYNC;
}

/* The first whole frame of sector `s` (its first 32 blocks when they
 * share a frame id, else from the first block of the next frame):
 * `*start` its offset, `*id` its frame id, `*frames` the whole frames from
 * there (a trailing partial frame is not counted). */
static qem_status sector_start(int fd, const char *path, uint64_t size, uint64_t *start,
                               uint64_t *id, uint64_t *frames, qem_error *error)
{
    if (size < K2_SECTOR_FRAME_BYTES)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' holds %llu bytes, less than one frame of a K2 IS sector (32 "
                        "blocks of 22360 bytes)",
                        path, (unsigned long long)size);
    k2_block first, h;
    unsigned cell = 0;
    QEM_TRY(read_header(fd, path, 0, &first, &cell, error));
    uint64_t at = 0;
    for (unsigned b = 1; b < K2_BLOCKS_PER_FRAME && !at; b++) {
        QEM_TRY(read_header(fd, path, (uint64_t)b * K2_BLOCK_BYTES, &h, &cell, error));
        if (h.frame_id != first.frame_id)
            at = (uint64_t)b * K2_BLOCK_BYTES;
    }
    if (at && size - at < K2_SECTOR_FRAME_BYTES)
        return qem_fail(error, QEM_E_FILE_LENGTH,
                        "'%s' holds no whole frame: its first frame starts before the file and "
                        "the next one is cut short",
                        path);
    if (at)
        QEM_TRY(read_header(fd, path, at, &h, &cell, error));
    *start = at;
    *id = at ? h.frame_id : first.frame_id;
    *frames = (size - at) / K2_SECTOR_FRAME_BYTES;
    return QEM_OK;
}

static qem_status k2is_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                                const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a K2 IS sector file; --dataset only applies to HDF5 files", path);
    k2_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (unsigned k = 0; k < K2_SECTORS; k++)
        s->fd[k] = -1;
    a->impl = s;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t stem_len = 0;
    const char *ext = NULL;
    if (!split_name(base, &stem_len, &ext))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' holds K2 IS blocks, but its name is not that of a sector file "
                        "(<name>1.bin ... <name>8.bin): qem finds the other seven sectors by "
                        "that name",
                        path);
    if (stem_len > 900)
        return qem_fail(error, QEM_E_LIMIT, "the name of '%s' is too long", path);
    /* The eight sectors (the first is the master), then the .gtg when
     * there is one; each a companion inside the opened file's folder. */
    char name[1024];
    json_t *files = json_array();
    qem_status st = QEM_OK;
    uint64_t size[K2_SECTORS];
    for (unsigned k = 0; st == QEM_OK && k < K2_SECTORS; k++) {
        snprintf(name, sizeof name, "%.*s%u%s", (int)stem_len, base, k + 1, ext);
        char *member = NULL;
        char what[64];
        snprintf(what, sizeof what, "sector %u file", k + 1);
        st = companion(path, name, what, &member, error);
        struct stat sb;
        if (st == QEM_OK)
            st = qem_input_add_member(a, member, k == 0, error);
        if (st == QEM_OK)
            st = qem_open_input(member, &s->fd[k], &sb, error);
        if (st == QEM_OK)
            st = qem_file_stamp_check(s->fd[k], &a->members[k].stamp, member, "described",
                                      error);
        if (st == QEM_OK)
            size[k] = (uint64_t)sb.st_size;
        free(member);
        json_array_append_new(files, json_string(name));
    }
    qem_input_fact(a, "sector_files", files);
    QEM_TRY(st);
    snprintf(name, sizeof name, "%.*s.gtg", (int)stem_len, base);
    char *dir = qem_path_dirname(path);
    if (!dir)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    char gtg[1200];
    snprintf(gtg, sizeof gtg, "%s/%s", dir, name);
    free(dir);
    struct stat gs;
    uint64_t gtg_scan[2] = {0, 0};
    int have_gtg_scan = 0;
    if (lstat(gtg, &gs) == 0) {
        char *member = NULL;
        st = companion(path, name, ".gtg", &member, error);
        if (st == QEM_OK)
            st = qem_input_add_member(a, member, 0, error);
        free(member);
        QEM_TRY(st);
        qem_input_fact(a, "gtg_file", json_string(name));
        QEM_TRY(read_gtg(a, path, &a->members[K2_SECTORS], gtg_scan, &have_gtg_scan, error));
    }

    /* The frames complete in every sector: [common_first, common_end). */
    uint64_t start[K2_SECTORS], id[K2_SECTORS], frames[K2_SECTORS];
    uint64_t common_first = 0, common_end = UINT64_MAX;
    for (unsigned k = 0; k < K2_SECTORS; k++) {
        QEM_TRY(sector_start(s->fd[k], a->members[k].path, size[k], &start[k], &id[k],
                             &frames[k], error));
        if (id[k] > common_first)
            common_first = id[k];
        if (id[k] + frames[k] < common_end)
            common_end = id[k] + frames[k];
    }
    if (common_end <= common_first)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the eight sector files of '%s' share no whole frame (their frame ids "
                        "do not overlap); they are not one acquisition",
                        path);
    /* Every block of those frames, and the first frame whose blocks all
     * carry the shutter-active flag. */
    uint64_t shutter_first = UINT64_MAX, shutter_frames = 0;
    for (uint64_t f = common_first; f < common_end; f++) {
        int shutter = 1;
        for (unsigned k = 0; k < K2_SECTORS; k++)
            QEM_TRY(check_sector_frame(s->fd[k], a->members[k].path,
                                       start[k] + (f - id[k]) * K2_SECTOR_FRAME_BYTES, f,
                                       &shutter, error));
        if (shutter) {
            shutter_frames++;
            if (shutter_first == UINT64_MAX)
                shutter_first = f;
        }
    }
    s->first_id = shutter_first != UINT64_MAX ? shutter_first : common_first;
    s->frames = common_end - s->first_id;
    for (unsigned k = 0; k < K2_SECTORS; k++)
        s->first[k] = start[k] + (s->first_id - id[k]) * K2_SECTOR_FRAME_BYTES;
    k2_block h;
    uint8_t b[K2_HEADER_BYTES];
    QEM_TRY(qem_pread_full(s->fd[0], b, sizeof b, s->first[0], QEM_E_CHANGED, error));
    parse_block(b, &h);

    /* The scan: --scan-shape, else the .gtg's SI Dimensions; when both,
     * they agree. The .gtg's must hold the frames kept. */
    uint64_t scan[2], scans = 0;
    const int given = o->scan_shape[0] || o->scan_shape[1];
    const int agree = !given || (o->scan_shape[0] == gtg_scan[0] &&
                                 o->scan_shape[1] == gtg_scan[1]);
    if (have_gtg_scan && agree &&
        (qem_mul_overflow_u64(gtg_scan[0], gtg_scan[1], &scans) || scans != s->frames))
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' states a scan of %llu x %llu (SI Dimensions: Size Y rows, Size X "
                        "columns), but the sector files of '%s' hold %llu frames (those qem keeps: "
                        "see the fact first_frame_rule); they are not one acquisition, or the "
                        "scan was cut short",
                        a->members[K2_SECTORS].path, (unsigned long long)gtg_scan[0],
                        (unsigned long long)gtg_scan[1], path, (unsigned long long)s->frames);
    QEM_TRY(qem_input_scan_shape(o, have_gtg_scan, gtg_scan,
                                 "SI Dimensions (Size Y rows, Size X columns)",
                                 s->frames, have_gtg_scan ? a->members[K2_SECTORS].path : path,
                                 scan, error));
    qem_input_fact(a, "scan_shape_source",
                   json_string(given && have_gtg_scan ? "--scan-shape, as the .gtg states it"
                               : given               ? "--scan-shape"
                                                     : "the .gtg's SI Dimensions"));
    a->shape[0] = scan[0];
    a->shape[1] = scan[1];
    a->shape[2] = K2_SECTOR_ROWS;
    a->shape[3] = K2_FRAME_COLUMNS;
    a->sample_type = QEM_DTYPE_UINT16;
    qem_input_fact(a, "block_version", json_integer(h.version));
    qem_input_fact(a, "frames", json_integer((json_int_t)s->frames));
    qem_input_fact(a, "first_frame_id", json_integer((json_int_t)s->first_id));
    qem_input_fact(a, "last_frame_id", json_integer((json_int_t)(common_end - 1)));
    qem_input_fact(a, "first_complete_frame_id", json_integer((json_int_t)common_first));
    qem_input_fact(a, "frames_before_shutter",
                   json_integer((json_int_t)(s->first_id - common_first)));
    qem_input_fact(a, "shutter_active_frames", json_integer((json_int_t)shutter_frames));
    qem_input_fact(a, "first_frame_rule",
                   json_string(shutter_first != UINT64_MAX
                                   ? "the first frame complete in all eight sectors whose blocks "
                                     "all carry the shutter-active flag"
                                   : "the first frame complete in all eight sectors (no block "
                                     "carries the shutter-active flag)"));
    qem_input_fact(a, "pixel_bits", json_integer(12));
    if (!(s->block = malloc(K2_BLOCK_BYTES)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return qem_input_implicit_mask(a, error);
}

/* 930 x 16 packed 12-bit pixels (two in three bytes, little-endian) into
 * the frame at the block's place. */
static void unpack_block(const uint8_t *data, const k2_block *h, unsigned sector, uint16_t *frame)
{
    for (unsigned r = 0; r < K2_BLOCK_ROWS; r++) {
        uint16_t *row = frame + (size_t)(h->y0 + r) * K2_FRAME_COLUMNS +
                        (size_t)sector * K2_SECTOR_COLUMNS + h->x0;
        const uint8_t *p = data + (size_t)r * (K2_BLOCK_COLUMNS * 3 / 2);
        for (unsigned c = 0; c < K2_BLOCK_COLUMNS; c += 2, p += 3) {
            row[c] = (uint16_t)(p[0] | (p[1] & 0x0F) << 8);
            row[c + 1] = (uint16_t)(p[1] >> 4 | p[2] << 4);
        }
    }
}

static qem_status k2is_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                            qem_error *error)
{
    k2_state *s = a->impl;
    const size_t frame_values = (size_t)K2_SECTOR_ROWS * K2_FRAME_COLUMNS;
    for (uint64_t f = 0; f < count; f++) {
        uint16_t *frame = (uint16_t *)out + f * frame_values;
        const uint64_t id = s->first_id + first + f;
        for (unsigned k = 0; k < K2_SECTORS; k++) {
            input_member *m = &a->members[k];
            uint32_t cells = 0;
            for (unsigned b = 0; b < K2_BLOCKS_PER_FRAME; b++) {
                const uint64_t at = s->first[k] + (first + f) * K2_SECTOR_FRAME_BYTES +
                                    (uint64_t)b * K2_BLOCK_BYTES;
                QEM_TRY(qem_pread_full(s->fd[k], s->block, K2_BLOCK_BYTES, at, QEM_E_CHANGED,
                                       error));
                qem_input_member_read(m, s->fd[k], at, s->block, K2_BLOCK_BYTES);
                k2_block h;
                unsigned cell = 0;
                qem_error local = {0};
                parse_block(s->block, &h);
                if (check_block(&h, m->path, at, &cell, &local) != QEM_OK)
                    return qem_fail(error, QEM_E_CHANGED,
                                    "'%s' changed since it was described: %s", m->path,
                                    local.message);
                if (h.frame_id != id || (cells & (1u << cell)))
                    return qem_fail(error, QEM_E_CHANGED,
                                    "'%s' changed since it was described: the block at byte "
                                    "%llu is not the one of frame %llu it held",
                                    m->path, (unsigned long long)at, (unsigned long long)id);
                cells |= 1u << cell;
                unpack_block(s->block + K2_HEADER_BYTES, &h, k, frame);
            }
        }
    }
    return QEM_OK;
}

static void k2is_release(acquisition *a)
{
    k2_state *s = a->impl;
    if (s) {
        for (unsigned k = 0; k < K2_SECTORS; k++)
            if (s->fd[k] >= 0)
                close(s->fd[k]);
        free(s->block);
    }
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_k2is = {
    "k2is", k2is_recognises, k2is_describe, k2is_read, k2is_release, 1, NULL};
