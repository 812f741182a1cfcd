/* The PNDetector FRMS6 family (lib/input/frms6.c). No public FRMS6
 * acquisition exists here: the files are built (tests/common/
 * k2frms_build.c) from the format as LiberTEM's reader documents it, and
 * each fact used is checked below with its source:
 *   [L] LiberTEM, src/libertem/io/dataset/frms6.py (file_header_dtype,
 *       frame_header_dtype, _header_valid, _num_frames, _read_dataset_hdr,
 *       _pattern, _get_base_filename, _map_y, _make_decode_frms6,
 *       FRMS6DataSet docstring: "_000.frms6 contains dark frames"),
 *       https://github.com/LiberTEM/LiberTEM
 * Every frame read is compared bit for bit with the stored values unfolded
 * by [L]'s rule; one refusal per rule. */
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "input/input.h"
#include "k2frms_build.h"
#include "input_check.h"
#include "test_util.h"

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *b = read_file(from, &n);
    CHECK(b != NULL && write_file(to, b, n));
    free(b);
}

static void file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

static int64_t fact_int(const acquisition *a, const char *key)
{
    json_t *v = json_object_get(a->facts, key);
    CHECK(json_is_integer(v));
    return json_integer_value(v);
}

/* The facts of the format, as [L] states them. */
static void test_format_facts(void)
{
    uint8_t h[1024];
    f6b_file_header(h, 528, 132, 9);
    /* [L] file_header_dtype: little-endian header_size u2 (1024),
     * frame_header_size u2 (64), 3 padding bytes, version u1 (6), an
     * 80-byte comment, width u2, height u2, a 928-byte comment,
     * num_frames u4: 1024 bytes. */
    CHECK(h[0] == 0x00 && h[1] == 0x04 && h[2] == 64 && h[3] == 0 && h[7] == 6);
    CHECK_EQ_U64(8 + 80, 88);
    CHECK_EQ_U64(88 + 2 + 2 + 928 + 4, 1024);
    CHECK((h[88] | h[89] << 8) == 528 && (h[90] | h[91] << 8) == 132);
    CHECK(h[1020] == 9 && h[1021] == 0);
    /* [L] frame_header_dtype: 4 padding bytes, timestamp_s u4,
     * timestamp_us u4, frame_number u4, 12 padding bytes, a 36-byte
     * comment: 64 bytes. */
    CHECK_EQ_U64(4 + 4 + 4 + 4 + 12 + 36, 64);
}

/* The unfolded value ([L] _map_y and _decode_frms6: rows y < H are stored
 * row y, columns 0..W/2-1; rows y >= H are stored row 2H-1-y, its columns
 * W/2..W-1 reversed). */
static uint16_t unfolded(uint64_t frame, uint64_t w, uint64_t h, uint64_t y, uint64_t x)
{
    return y < h ? f6b_value(frame, y, x) : f6b_value(frame, 2 * h - 1 - y, w - 1 - x);
}

static void check_frames(acquisition *a, uint64_t w, uint64_t h)
{
    const uint64_t frames = a->shape[0] * a->shape[1];
    const size_t values = (size_t)(w * h);
    uint16_t *all = malloc(frames * values * 2);
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    /* Windows of two frames, across the data files' boundary. */
    for (uint64_t f = 0; all && f < frames; f += 2) {
        const uint64_t n = frames - f < 2 ? frames - f : 2;
        CHECK_OK(qem_input_read(a, f, n, QEM_DTYPE_UINT16, all + f * values, n * values * 2, &e),
                 &e);
    }
    uint64_t wrong = 0;
    for (uint64_t f = 0; all && f < frames; f++)
        for (uint64_t y = 0; y < 2 * h; y++)
            for (uint64_t x = 0; x < w / 2; x++)
                wrong += all[f * values + y * (w / 2) + x] != unfolded(f, w, h, y, x);
    CHECK_EQ_U64(wrong, 0);
    free(all);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    for (size_t i = 0; i < a->member_count; i++) {
        uint8_t d[32];
        file_sha256(a->members[i].path, d);
        CHECK(a->members[i].hashed && memcmp(a->members[i].sha256, d, 32) == 0);
    }
}

static f6b_options basic(void)
{
    f6b_options o;
    memset(&o, 0, sizeof o);
    o.width = 16;
    o.height = 6;
    o.dark_frames = 3;
    o.frames[0] = 4;
    o.frames[1] = 2;
    o.data_files = 2;
    o.write_hdr = 1;
    o.scan_rows = 2;
    o.scan_columns = 3;
    o.bin = 1;
    o.state_signal = 1;
    return o;
}

static void test_acquisition(void)
{
    const char *dir = ic_fresh_dir("f6");
    const f6b_options o = basic();
    CHECK(f6b_write(dir, "scan", &o) == 0);
    /* Any file of the acquisition opens it ([L] _pattern: .hdr or
     * .frms6); the .hdr names the scan (stemimagesize "2x3"). */
    acquisition *a = ic_open(ic_in(dir, "scan_002.frms6"), NULL);
    if (!a)
        return;
    CHECK(!strcmp(a->family->name, "frms6"));
    CHECK_EQ_U64(a->shape[0], 2);
    CHECK_EQ_U64(a->shape[1], 3);
    /* [L] _do_initialize: frame_size = 2 * height, width // 2 */
    CHECK_EQ_U64(a->shape[2], 12);
    CHECK_EQ_U64(a->shape[3], 8);
    CHECK(a->sample_type == QEM_DTYPE_UINT16);
    CHECK_EQ_U64(a->member_count, 4);
    if (a->member_count == 4) {
        CHECK(a->members[0].is_master && strstr(a->members[0].path, "scan.hdr"));
        CHECK(strstr(a->members[1].path, "scan_000.frms6") != NULL);
        CHECK(strstr(a->members[3].path, "scan_002.frms6") != NULL);
    }
    CHECK_EQ_U64(fact_int(a, "frames"), 6);
    CHECK_EQ_U64(fact_int(a, "dark_frames"), 3);
    CHECK_EQ_U64(fact_int(a, "binning"), 1);
    CHECK_EQ_U64(fact_int(a, "first_frame_number"), 0);
    CHECK(json_is_false(json_object_get(a->facts, "dark_frames_subtracted")));
    json_t *hdr = json_object_get(a->facts, "hdr");
    CHECK(json_string_value(json_object_get(hdr, "stemimagesize")) &&
          !strcmp(json_string_value(json_object_get(hdr, "stemimagesize")), "2x3"));
    CHECK(a->calibration == NULL);
    check_frames(a, o.width, o.height);
    qem_input_close(a);
    /* The dark frame file opens the same acquisition. */
    a = ic_open(ic_in(dir, "scan_000.frms6"), NULL);
    qem_input_close(a);

    /* Older files: frame counts 0, the sizes say them ([L] _num_frames). */
    const char *older = ic_fresh_dir("f6-older");
    f6b_options p = basic();
    p.omit_count = 1;
    p.bin = 2;
    CHECK(f6b_write(older, "scan", &p) == 0);
    a = ic_open(ic_in(older, "scan_001.frms6"), NULL);
    if (a) {
        /* Binned frames kept as stored ([L] repeats each row bin times). */
        CHECK_EQ_U64(fact_int(a, "binning"), 2);
        CHECK_EQ_U64(a->shape[2], 12);
        check_frames(a, p.width, p.height);
        qem_input_close(a);
    }

    /* No stemimagesize: the caller's scan shape. */
    const char *noscan = ic_fresh_dir("f6-noscan");
    p = basic();
    p.scan_rows = 0;
    p.bin = 0;
    CHECK(f6b_write(noscan, "n", &p) == 0);
    ic_refused(ic_in(noscan, "n_001.frms6"), NULL, QEM_E_LAYOUT, "--scan-shape");
    const input_options s32 = ic_scan(3, 2);
    a = ic_open(ic_in(noscan, "n_001.frms6"), &s32);
    if (a) {
        CHECK_EQ_U64(a->shape[0], 3);
        CHECK(json_is_false(json_object_get(a->facts, "binning_stated")));
        qem_input_close(a);
    }
    /* A scan shape against the .hdr's. */
    ic_refused(ic_in(dir, "scan_001.frms6"), &s32, QEM_E_INVALID_ARGUMENT, "stemimagesize");
    /* The .hdr is not recognised itself; a .frms6 opens. */
    ic_refused(ic_in(dir, "scan.hdr"), NULL, QEM_E_UNSUPPORTED, NULL);
}

static void put_text(const char *path, const char *text)
{
    CHECK(write_file(path, text, strlen(text)));
}

static void test_refusals(void)
{
    const char *dir = ic_fresh_dir("f6-bad");
    const f6b_options o = basic();
    CHECK(f6b_write(dir, "r", &o) == 0);
    const char *f1 = ic_in(dir, "r_001.frms6"), *f2 = ic_in(dir, "r_002.frms6");
    const char *hdr = ic_in(dir, "r.hdr");
    const char *keep = test_path("f6-keep"), *keep_hdr = test_path("f6-keep.hdr");
    copy_file(f2, keep);
    copy_file(hdr, keep_hdr);
    acquisition *a = ic_open(f1, NULL);
    qem_input_close(a);

    /* Truncated: a frame cut short, stated count and older files. */
    const uint64_t record = 64 + 2 * o.width * o.height;
    CHECK(truncate(f2, (off_t)(1024 + 2 * record - 10)) == 0);
    ic_refused(f1, NULL, QEM_E_FILE_LENGTH, "r_002.frms6");
    ic_patch(f2, 1020, "\0\0\0\0", 4);
    ic_refused(f1, NULL, QEM_E_FILE_LENGTH, "cut short");
    CHECK(truncate(f2, 100) == 0);
    ic_refused(f1, NULL, QEM_E_FILE_LENGTH, "1024-byte");
    copy_file(keep, f2);
    /* Sizes that overflow: 2^32-1 frames of 65534 x 65535. */
    ic_patch(f2, 88, "\xfe\xff\xff\xff", 4);
    ic_patch(f2, 1020, "\xff\xff\xff\xff", 4);
    ic_refused(f1, NULL, QEM_E_FILE_LENGTH, "r_002.frms6");
    copy_file(keep, f2);
    /* Inconsistent: another frame size in one file. */
    ic_patch(f2, 88, "\x08\x00\x0c\x00", 4); /* 12 x 8: the same bytes per frame */
    ic_refused(f1, NULL, QEM_E_LAYOUT, "one frame size");
    copy_file(keep, f2);
    /* An odd width cannot be unfolded. */
    ic_patch(f2, 88, "\x0f\x00", 2);
    ic_refused(f2, NULL, QEM_E_LAYOUT, "even");
    copy_file(keep, f2);
    /* Another version; other header sizes. */
    ic_patch(f2, 7, "\x07", 1);
    ic_refused(f1, NULL, QEM_E_UNSUPPORTED, "version 7");
    copy_file(keep, f2);
    ic_patch(f2, 2, "\x80\x00", 2);
    ic_refused(f1, NULL, QEM_E_LAYOUT, "frame header size 128");
    copy_file(keep, f2);

    /* The .hdr: inconsistent or malformed values. */
    put_text(hdr, "[measurementInfo]\nsignalFrames=7\nstemImageSize=2x3\n");
    ic_refused(f1, NULL, QEM_E_LAYOUT, "signalframes");
    put_text(hdr, "[measurementInfo]\nstemImageSize=2by3\n");
    ic_refused(f1, NULL, QEM_E_LAYOUT, "stemimagesize");
    put_text(hdr, "[measurementInfo]\nstemImageSize=2x3\nreadoutMode=\"windowing: 1\"\n");
    ic_refused(f1, NULL, QEM_E_LAYOUT, "binning");
    put_text(hdr, "[other]\nstemImageSize=2x3\n");
    ic_refused(f1, NULL, QEM_E_LAYOUT, "[measurementInfo]");
    put_text(hdr, "[measurementInfo]\nstemImageSize=3x3\n");
    ic_refused(f1, NULL, QEM_E_LAYOUT, "does not match");
    copy_file(keep_hdr, hdr);

    /* Companions missing. */
    CHECK(unlink(hdr) == 0);
    ic_refused(f1, NULL, QEM_E_IO, "r.hdr");
    /* Outside the folder through a symlink. */
    CHECK(symlink(keep_hdr, hdr) == 0);
    ic_refused(f1, NULL, QEM_E_LAYOUT, "outside");
    CHECK(unlink(hdr) == 0);
    copy_file(keep_hdr, hdr);
    CHECK(unlink(f2) == 0);
    CHECK(symlink(keep, f2) == 0);
    ic_refused(f1, NULL, QEM_E_LAYOUT, "outside");
    CHECK(unlink(f2) == 0);
    copy_file(keep, f2);
    /* (Names are made from the opened one, so a "../" cannot occur.) */
    const char *dark = ic_in(dir, "r_000.frms6");
    const char *keep_dark = test_path("f6-keep-dark");
    CHECK(rename(dark, keep_dark) == 0);
    ic_refused(f1, NULL, QEM_E_IO, "dark frame file");
    /* A gap in the numbering: _001 and _002 without _000. */
    ic_refused(f2, NULL, QEM_E_IO, NULL);
    CHECK(rename(keep_dark, dark) == 0);
    const char *f3 = ic_in(dir, "r_003.frms6");
    CHECK(rename(f2, f3) == 0);
    ic_refused(f3, NULL, QEM_E_LAYOUT, "without a gap");
    CHECK(rename(f3, f2) == 0);
    /* A name that is not an FRMS6 file's. */
    copy_file(f1, ic_in(dir, "plain.frms6"));
    ic_refused(ic_in(dir, "plain.frms6"), NULL, QEM_E_LAYOUT, "<name>_000.frms6");
}

int main(void)
{
    test_format_facts();
    test_acquisition();
    test_refusals();
    return test_finish("unit_input_frms6");
}
