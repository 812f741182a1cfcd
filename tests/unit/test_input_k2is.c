/* The Gatan K2 IS family (lib/input/k2is.c). No public K2 IS acquisition
 * exists here: the sector files are built (tests/common/k2frms_build.c)
 * from the format as LiberTEM's reader documents it, and each fact used is
 * checked below with its source:
 *   [L] LiberTEM, src/libertem/io/dataset/k2is.py (HEADER_SIZE, BLOCK_SIZE,
 *       BLOCK_SHAPE, BLOCKS_PER_SECTOR_PER_FRAME, NUM_SECTORS, SECTOR_SIZE,
 *       DataBlock.header_dtype, DataBlock.is_valid, decode_uint12_le,
 *       DataBlock.copy_to_frame, _k2is_read_ranges_tile_block, K2Syncer,
 *       SHUTTER_ACTIVE_MASK), https://github.com/LiberTEM/LiberTEM
 *   [T] LiberTEM's tests, tests/io/datasets/test_k2is.py (file names
 *       Capture52_.gtg, <name>_1.bin ...; the 1860 x 2048 frame).
 *   [G] LiberTEM, k2is.py, _get_nav_shape and _nav_shape_without_flyback:
 *       the .gtg is read as a DM file (ncempy's dm.fileDM); its tags
 *       '.SI Dimensions.Size Y' and '.Size X' are the scan (rows, columns),
 *       both or neither; '.SI Image Tags.SI.Acquisition.Spatial Sampling.
 *       Height (pixels)' and 'Width (pixels)' the scan without flyback.
 *       The .gtg files are built by tests/common/dm_build.c.
 * Every frame read is compared bit for bit with the values the builder
 * packed; one refusal per rule. */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "input/input.h"
#include "dm_build.h"
#include "input_check.h"
#include "k2frms_build.h"
#include "test_util.h"

static void file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

/* The facts of the format, as [L] states them. */
static void test_format_facts(void)
{
    /* [L] BLOCK_SIZE = 0x5758, HEADER_SIZE = 40, BLOCK_SHAPE = (930, 16):
     * the pixel data is 930 x 16 values of 12 bits. */
    CHECK_EQ_U64(K2B_BLOCK_BYTES, 0x5758);
    CHECK_EQ_U64(K2B_BLOCK_BYTES - K2B_HEADER_BYTES, 930 * 16 * 12 / 8);
    /* [L] SECTOR_SIZE = (2 * 930, 256), NUM_SECTORS = 8, 32 blocks per
     * sector per frame: 32 cells of 930 x 16 tile a 1860 x 256 sector,
     * and the frame is 1860 x 2048 ([T]: shape (34, 35, 1860, 2048)). */
    CHECK_EQ_U64(K2B_BLOCKS_PER_FRAME * 930 * 16, 1860 * 256);
    CHECK_EQ_U64(K2B_ROWS, 2 * 930);
    CHECK_EQ_U64(K2B_COLUMNS, 8 * 256);
    /* [L] header_dtype: big-endian sync u4 (0xFFFF0055), 4 padding bytes,
     * version u1, flags u1 (bit 0: shutter active), 6 padding bytes,
     * block_count u4, width u2 (256), height u2 (1860), frame_id u4,
     * pixel_x_start, pixel_y_start, pixel_x_end, pixel_y_end u2 (within
     * the sector, last pixel inclusive), block_size u4: 40 bytes. */
    uint8_t h[40];
    k2b_header(h, 3, 17, 0x01020304u, 77, 1);
    CHECK(h[0] == 0xFF && h[1] == 0xFF && h[2] == 0x00 && h[3] == 0x55);
    CHECK(h[9] == 0x01);
    CHECK(h[20] == 0x01 && h[21] == 0x00 && h[22] == 0x07 && h[23] == 0x44); /* 256, 1860 */
    CHECK(h[24] == 1 && h[25] == 2 && h[26] == 3 && h[27] == 4);
    /* [L] _k2is_read_ranges_tile_block: block b of a sector frame lies at
     * x 16 * (15 - b % 16), y 930 * (b / 16); block 17 is x 224, y 930. */
    CHECK((h[28] << 8 | h[29]) == 224 && (h[30] << 8 | h[31]) == 930);
    CHECK((h[32] << 8 | h[33]) == 239 && (h[34] << 8 | h[35]) == 1859);
    CHECK(h[36] == 0 && h[37] == 0 && h[38] == 0x57 && h[39] == 0x58);
}

/* Reads every frame and compares it with the builder's values of frames
 * first_id, first_id + 1, ...; hashing while reading as a save does. */
static void check_frames(acquisition *a, uint64_t first_id)
{
    const uint64_t frames = a->shape[0] * a->shape[1];
    const size_t values = (size_t)K2B_ROWS * K2B_COLUMNS;
    uint16_t *frame = malloc(values * 2);
    CHECK(frame != NULL);
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    uint64_t wrong = 0;
    for (uint64_t f = 0; frame && f < frames; f++) {
        CHECK_OK(qem_input_read(a, f, 1, QEM_DTYPE_UINT16, frame, values * 2, &e), &e);
        /* [L] copy_to_frame: sector k's pixel (y, x) is frame pixel
         * (y, 256 k + x); decode_uint12_le unpacks the 12-bit pairs. */
        for (uint64_t y = 0; y < K2B_ROWS; y++)
            for (uint64_t x = 0; x < K2B_COLUMNS; x++)
                wrong += frame[y * K2B_COLUMNS + x] != k2b_value(first_id + f, y, x);
    }
    CHECK_EQ_U64(wrong, 0);
    free(frame);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    CHECK(a->authenticated);
    for (size_t i = 0; i < a->member_count; i++) {
        uint8_t d[32];
        file_sha256(a->members[i].path, d);
        CHECK(a->members[i].hashed && memcmp(a->members[i].sha256, d, 32) == 0);
    }
}

static int64_t fact_int(const acquisition *a, const char *key)
{
    json_t *v = json_object_get(a->facts, key);
    CHECK(json_is_integer(v));
    return json_integer_value(v);
}

/* Eight sectors starting mid-frame, one starting a frame later, partial
 * frames at the ends, frames before the shutter opens, and a .gtg. */
static void test_acquisition(void)
{
    const char *dir = ic_fresh_dir("k2");
    k2b_options o;
    memset(&o, 0, sizeof o);
    o.first_id = 57;
    o.before = 2;
    o.frames = 4;
    o.write_gtg = 1;
    for (unsigned s = 0; s < 8; s++) {
        o.lead_blocks[s] = (s * 5) % 32;
        o.trail_blocks[s] = (s * 7) % 32;
    }
    o.skip_frames[2] = 1; /* sector 3 begins at frame 58 */
    CHECK(k2b_write(dir, "Capture52_", &o) == 0);
    /* [G] The .gtg states the scan: Size Y rows, Size X columns. */
    const dmb_tag tags[] = {
        {"SI Dimensions/Size X", 'l', 2, 0, NULL},
        {"SI Dimensions/Size Y", 'l', 2, 0, NULL},
        {"SI Image Tags/SI/Acquisition/Spatial Sampling/Height (pixels)", 'l', 2, 0, NULL},
        {"SI Image Tags/SI/Acquisition/Spatial Sampling/Width (pixels)", 'l', 1, 0, NULL},
        {"Microscope Info/Voltage", 'd', 0, 300000.0, NULL},
        {"Microscope Info/Name", 't', 0, 0, "test microscope"},
    };
    CHECK(dmb_write_tags(ic_in(dir, "Capture52_.gtg"), 4, tags, 6) == 0);
    const input_options two = ic_scan(2, 2);
    /* Any sector file opens the acquisition; the scan shape is the .gtg's. */
    acquisition *a = ic_open(ic_in(dir, "Capture52_5.bin"), NULL);
    if (!a)
        return;
    CHECK(!strcmp(a->family->name, "k2is"));
    CHECK_EQ_U64(a->shape[0], 2);
    CHECK_EQ_U64(a->shape[1], 2);
    CHECK_EQ_U64(a->shape[2], 1860);
    CHECK_EQ_U64(a->shape[3], 2048);
    CHECK(a->sample_type == QEM_DTYPE_UINT16);
    CHECK_EQ_U64(a->flagged_count, 0);
    /* The sectors in order (the first the master), then the .gtg. */
    CHECK_EQ_U64(a->member_count, 9);
    if (a->member_count == 9) {
        CHECK(a->members[0].is_master && strstr(a->members[0].path, "Capture52_1.bin"));
        CHECK(!a->members[7].is_master && strstr(a->members[7].path, "Capture52_8.bin"));
        CHECK(strstr(a->members[8].path, "Capture52_.gtg") != NULL);
    }
    /* The first frame complete in all sectors is 58 (sector 3 starts
     * there); 59 is the first with the shutter-active flag ([L] K2Syncer
     * syncs to it). */
    CHECK_EQ_U64(fact_int(a, "first_complete_frame_id"), 58);
    CHECK_EQ_U64(fact_int(a, "first_frame_id"), 59);
    CHECK_EQ_U64(fact_int(a, "frames_before_shutter"), 1);
    CHECK_EQ_U64(fact_int(a, "frames"), 4);
    CHECK_EQ_U64(fact_int(a, "last_frame_id"), 62);
    CHECK_EQ_U64(fact_int(a, "block_version"), 2);
    CHECK(json_string_value(json_object_get(a->facts, "gtg_file")) &&
          !strcmp(json_string_value(json_object_get(a->facts, "gtg_file")), "Capture52_.gtg"));
    CHECK_EQ_U64(json_array_size(json_object_get(a->facts, "sector_files")), 8);
    /* The .gtg's tags are facts, under their paths. */
    json_t *gtg = json_object_get(a->facts, "gtg_tags");
    CHECK(json_integer_value(json_object_get(gtg, "SI Dimensions/Size Y")) == 2);
    CHECK(json_real_value(json_object_get(gtg, "Microscope Info/Voltage")) == 300000.0);
    CHECK(json_string_value(json_object_get(gtg, "Microscope Info/Name")) &&
          !strcmp(json_string_value(json_object_get(gtg, "Microscope Info/Name")),
                  "test microscope"));
    CHECK(json_object_get(a->facts, "gtg_tags_truncated") == NULL);
    CHECK_EQ_U64(fact_int(a, "gtg_dm_version"), 4);
    json_t *sampling = json_object_get(a->facts, "gtg_spatial_sampling");
    CHECK(json_integer_value(json_object_get(sampling, "rows")) == 2);
    CHECK(json_integer_value(json_object_get(sampling, "columns")) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(a->facts, "scan_shape_source")),
                  "the .gtg's SI Dimensions"));
    check_frames(a, 59);
    /* A window of frames from the middle, out of order. */
    uint16_t *two_frames = malloc((size_t)2 * K2B_ROWS * K2B_COLUMNS * 2);
    qem_error e = {0};
    CHECK_OK(qem_input_read(a, 1, 2, QEM_DTYPE_UINT16, two_frames,
                            (size_t)2 * K2B_ROWS * K2B_COLUMNS * 2, &e),
             &e);
    CHECK(two_frames[0] == k2b_value(60, 0, 0));
    CHECK(two_frames[(size_t)K2B_ROWS * K2B_COLUMNS + 1859 * 2048 + 2047] ==
          k2b_value(61, 1859, 2047));
    free(two_frames);
    json_t *meta = qem_input_source_metadata(a);
    CHECK(json_object_get(meta, "k2is") != NULL);
    json_decref(meta);
    qem_input_close(a);

    /* --scan-shape as the .gtg states it: taken; another: refused. */
    a = ic_open(ic_in(dir, "Capture52_1.bin"), &two);
    CHECK(a && !strcmp(json_string_value(json_object_get(a->facts, "scan_shape_source")),
                       "--scan-shape, as the .gtg states it"));
    qem_input_close(a);
    const input_options four = ic_scan(4, 1);
    ic_refused(ic_in(dir, "Capture52_1.bin"), &four, QEM_E_INVALID_ARGUMENT, "Capture52_.gtg");
    /* The .gtg is a DM4 tag file: opened itself, the DM family takes it and
     * refuses it (it holds no image); a .bin opens K2 IS. */
    ic_refused(ic_in(dir, "Capture52_.gtg"), &two, QEM_E_UNSUPPORTED, "no image");
}

/* The .gtg's scan shape and its refusals, on one acquisition of 2 frames. */
static void test_gtg(void)
{
    const char *dir = ic_fresh_dir("k2-gtg");
    k2b_options o;
    memset(&o, 0, sizeof o);
    o.first_id = 3;
    o.frames = 2;
    o.write_gtg = 1;
    CHECK(k2b_write(dir, "g_", &o) == 0);
    const char *s1 = ic_in(dir, "g_1.bin"), *gtg = ic_in(dir, "g_.gtg");
    const input_options one_two = ic_scan(1, 2), two_one = ic_scan(2, 1),
                        one_three = ic_scan(1, 3);

    /* The builder's .gtg: a DM4 tag file with no tags. No scan tags: the
     * scan shape is the caller's, as without a .gtg. */
    ic_refused(s1, NULL, QEM_E_LAYOUT, "--scan-shape");
    ic_refused(s1, &one_three, QEM_E_LAYOUT, "does not match");
    acquisition *a = ic_open(s1, &two_one);
    if (a) {
        CHECK_EQ_U64(a->shape[0], 2);
        CHECK_EQ_U64(json_object_size(json_object_get(a->facts, "gtg_tags")), 0);
        CHECK(!strcmp(json_string_value(json_object_get(a->facts, "scan_shape_source")),
                      "--scan-shape"));
        qem_input_close(a);
    }
    const dmb_tag other[] = {{"Microscope Info/Voltage", 'd', 0, 200000.0, NULL}};
    CHECK(dmb_write_tags(gtg, 3, other, 1) == 0); /* a DM3 tag file parses too */
    ic_refused(s1, NULL, QEM_E_LAYOUT, "--scan-shape");
    a = ic_open(s1, &one_two);
    if (a) {
        CHECK_EQ_U64(fact_int(a, "gtg_dm_version"), 3);
        CHECK(json_real_value(json_object_get(json_object_get(a->facts, "gtg_tags"),
                                              "Microscope Info/Voltage")) == 200000.0);
        qem_input_close(a);
    }

    /* [G] Size Y 1, Size X 2: one row of two. */
    dmb_tag scan[] = {{"SI Dimensions/Size X", 'l', 2, 0, NULL},
                      {"SI Dimensions/Size Y", 'l', 1, 0, NULL}};
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    a = ic_open(s1, NULL);
    if (a) {
        CHECK_EQ_U64(a->shape[0], 1);
        CHECK_EQ_U64(a->shape[1], 2);
        check_frames(a, 3);
        qem_input_close(a);
    }
    ic_refused(s1, &two_one, QEM_E_INVALID_ARGUMENT, "contradicts");
    /* A real value with an integral value is a count (DM writes some as
     * floats); 2.5 is not. */
    scan[0].kind = 'd', scan[0].real = 2.0;
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    a = ic_open(s1, NULL);
    CHECK(a && a->shape[1] == 2);
    qem_input_close(a);
    scan[0].real = 2.5;
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    ic_refused(s1, NULL, QEM_E_LAYOUT, "two positive counts");
    scan[0].kind = 'l';
    /* A scan that does not hold the frames kept: refused naming both. */
    scan[0].number = 3;
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    ic_refused(s1, NULL, QEM_E_LAYOUT, "1 x 3");
    ic_refused(s1, NULL, QEM_E_LAYOUT, "hold 2 frames");
    ic_refused(s1, &one_three, QEM_E_LAYOUT, "g_.gtg");
    /* One of the two, or a count of 0: refused. */
    scan[0].number = 0;
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    ic_refused(s1, &one_two, QEM_E_LAYOUT, "two positive counts");
    CHECK(dmb_write_tags(gtg, 4, scan + 1, 1) == 0);
    ic_refused(s1, &one_two, QEM_E_LAYOUT, "two positive counts");

    /* A damaged .gtg is refused with the DM parser's status, naming it
     * (documented in doc/inputs.md: qem does not read around a member). */
    scan[0].number = 2;
    CHECK(dmb_write_tags(gtg, 4, scan, 2) == 0);
    size_t n = 0;
    uint8_t *good = read_file(gtg, &n);
    CHECK(good != NULL && n > 40);
    CHECK(truncate(gtg, (off_t)n - 20) == 0); /* cut inside the last tag */
    ic_refused(s1, &one_two, QEM_E_FILE_LENGTH, "g_.gtg");
    ic_refused(s1, &one_two, QEM_E_FILE_LENGTH, "does not parse");
    CHECK(good && write_file(gtg, good, n));
    ic_patch(gtg, 3, "", 1); /* version 7 */
    ic_refused(s1, &one_two, QEM_E_UNSUPPORTED, "version 7");
    CHECK(good && write_file(gtg, good, n));
    ic_patch(gtg, 16 + 2 + 8, "3", 1); /* the first tag is neither group nor data */
    ic_refused(s1, &one_two, QEM_E_LAYOUT, "neither a group");
    CHECK(write_file(gtg, (const uint8_t *)"\0\0\0\4", 4)); /* the header cut */
    ic_refused(s1, &one_two, QEM_E_FILE_LENGTH, "g_.gtg");
    /* Without the .gtg the sector files read as before. */
    CHECK(unlink(gtg) == 0);
    a = ic_open(s1, &one_two);
    CHECK(a && a->member_count == 8 && !json_object_get(a->facts, "gtg_tags"));
    qem_input_close(a);
    CHECK(good && write_file(gtg, good, n));
    free(good);
}

/* No block carries the shutter-active flag: every complete frame. */
static void test_no_shutter(void)
{
    const char *dir = ic_fresh_dir("k2-noshutter");
    k2b_options o;
    memset(&o, 0, sizeof o);
    o.first_id = 1;
    o.before = 1;
    o.frames = 1;
    o.no_shutter = 1;
    CHECK(k2b_write(dir, "t", &o) == 0);
    const input_options two = ic_scan(1, 2);
    acquisition *a = ic_open(ic_in(dir, "t1.bin"), &two);
    if (!a)
        return;
    CHECK_EQ_U64(fact_int(a, "first_frame_id"), 1);
    CHECK_EQ_U64(fact_int(a, "shutter_active_frames"), 0);
    CHECK_EQ_U64(a->member_count, 8); /* no .gtg */
    check_frames(a, 1);
    qem_input_close(a);
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *b = read_file(from, &n);
    CHECK(b != NULL && write_file(to, b, n));
    free(b);
}

static void test_refusals(void)
{
    const char *dir = ic_fresh_dir("k2-bad");
    k2b_options o;
    memset(&o, 0, sizeof o);
    o.first_id = 10;
    o.frames = 2;
    o.write_gtg = 1;
    CHECK(k2b_write(dir, "r_", &o) == 0);
    const input_options one = ic_scan(1, 2);
    const char *s1 = ic_in(dir, "r_1.bin"), *s4 = ic_in(dir, "r_4.bin");
    acquisition *a = ic_open(s1, &one);
    qem_input_close(a);
    const char *keep = test_path("k2-keep.bin");
    copy_file(s4, keep);
    uint8_t b[4];

    /* Truncated: a sector shorter than one frame. */
    CHECK(truncate(s4, 1000) == 0);
    ic_refused(s1, &one, QEM_E_FILE_LENGTH, "r_4.bin");
    copy_file(keep, s4);
    /* A sync pattern broken inside the frame. */
    ic_patch(s4, 5 * K2B_BLOCK_BYTES, "\x12\x34\x56\x78", 4);
    ic_refused(s1, &one, QEM_E_LAYOUT, "sync");
    copy_file(keep, s4);
    /* A block of another frame inside the frame (one lost). */
    memcpy(b, "\x00\x00\x00\x0d", 4);
    ic_patch(s4, 41 * K2B_BLOCK_BYTES + 24, b, 4);
    ic_refused(s1, &one, QEM_E_LAYOUT, "belongs to frame 13");
    copy_file(keep, s4);
    /* Two blocks covering one cell. */
    ic_patch(s4, 9 * K2B_BLOCK_BYTES + 28, "\x00\xf0\x00\x00\x00\xff\x03\xa1", 8);
    ic_refused(s1, &one, QEM_E_LAYOUT, "second time");
    copy_file(keep, s4);
    /* A cell off the grid. */
    ic_patch(s4, 9 * K2B_BLOCK_BYTES + 28, "\x00\x01", 2);
    ic_refused(s1, &one, QEM_E_LAYOUT, "16 x 930 cell");
    copy_file(keep, s4);
    /* Variants: another sector width, another block size. */
    ic_patch(s4, 20, "\x02\x00", 2);
    ic_refused(s1, &one, QEM_E_UNSUPPORTED, "1860 x 256");
    copy_file(keep, s4);
    ic_patch(s4, 36, "\x00\x00\x57\x59", 4);
    ic_refused(s1, &one, QEM_E_UNSUPPORTED, "22360");
    copy_file(keep, s4);

    /* Sectors of two acquisitions (no frame in common). */
    const char *other = ic_fresh_dir("k2-other");
    k2b_options p = o;
    p.first_id = 500;
    p.write_gtg = 0;
    CHECK(k2b_write(other, "r_", &p) == 0);
    copy_file(ic_in(other, "r_4.bin"), s4);
    ic_refused(s1, &one, QEM_E_LAYOUT, "share no whole frame");
    copy_file(keep, s4);

    /* A companion missing. */
    CHECK(rename(s4, keep) == 0);
    ic_refused(s1, &one, QEM_E_IO, "r_4.bin");
    /* A companion outside the folder, through a symlink. */
    CHECK(symlink(keep, s4) == 0);
    ic_refused(s1, &one, QEM_E_LAYOUT, "outside");
    CHECK(unlink(s4) == 0);
    copy_file(keep, s4);
    const char *gtg = ic_in(dir, "r_.gtg");
    CHECK(rename(gtg, test_path("k2-keep.gtg")) == 0);
    CHECK(symlink(test_path("k2-keep.gtg"), gtg) == 0);
    ic_refused(s1, &one, QEM_E_LAYOUT, "outside");
    CHECK(unlink(gtg) == 0);
    /* A companion that is not a regular file. */
    CHECK(mkdir(gtg, 0755) == 0);
    ic_refused(s1, &one, QEM_E_LAYOUT, "not a regular file");
    CHECK(rmdir(gtg) == 0);
    /* (Names are made from the opened one, so a "../" cannot occur.) */

    /* Names that are not a sector's. */
    copy_file(s1, ic_in(dir, "plain.bin"));
    ic_refused(ic_in(dir, "plain.bin"), &one, QEM_E_LAYOUT, "<name>1.bin");
    copy_file(s1, ic_in(dir, "r_9.bin"));
    ic_refused(ic_in(dir, "r_9.bin"), &one, QEM_E_LAYOUT, "<name>1.bin");

    /* Changed after being described: the read says so. */
    a = ic_open(s1, &one);
    if (a) {
        ic_patch(s4, 3 * K2B_BLOCK_BYTES + 24, "\x00\x00\x00\x0c", 4);
        uint16_t *frame = malloc((size_t)K2B_ROWS * K2B_COLUMNS * 2);
        qem_error e = {0};
        CHECK_STATUS(qem_input_read(a, 0, 1, QEM_DTYPE_UINT16, frame,
                                    (size_t)K2B_ROWS * K2B_COLUMNS * 2, &e),
                     QEM_E_CHANGED, &e);
        free(frame);
        qem_input_close(a);
    }
}

int main(void)
{
    test_format_facts();
    test_acquisition();
    test_no_shutter();
    test_gtg();
    test_refusals();
    return test_finish("unit_input_k2is");
}
