/* The TVIPS family (lib/input/tvips.c). The real files HyperSpy ships
 * (QEM_HYPERSPY_IO/tvips_files) are read and compared with the values
 * HyperSpy's test expects of them (np.arange written as uint16 in stored
 * order); files built here (tests/common/tvseq_build.c) cover 8 and 16
 * bits, versions 1 and 2, frame headers with scan positions, series split
 * into parts; one refusal per rule; members hashed while read. */
#include <sys/stat.h>
#include <unistd.h>

#include "input_check.h"
#include "tvseq_build.h"

#ifndef QEM_HYPERSPY_IO
#define QEM_HYPERSPY_IO "/usr/lib/python3/dist-packages/hyperspy/tests/io"
#endif

static void check_values(acquisition *a, unsigned bits)
{
    size_t size = 0;
    uint8_t *got = ic_read_all(a, 3, &size);
    CHECK(got != NULL);
    const uint64_t rows = a->shape[2], cols = a->shape[3];
    int same = got != NULL;
    for (uint64_t f = 0; same && f < ic_frames(a); f++)
        for (uint64_t r = 0; same && r < rows; r++)
            for (uint64_t c = 0; same && c < cols; c++) {
                const uint64_t i = (f * rows + r) * cols + c;
                const uint32_t v = bits == 8 ? got[i] : ((const uint16_t *)(void *)got)[i];
                same = v == tvseqb_value(f, r, c, bits);
            }
    CHECK(same);
    free(got);
}

/* --- HyperSpy's files ------------------------------------------------------------ */

static void test_real(void)
{
    static const struct {
        const char *name;
        uint64_t rows, cols, height, width;
        size_t members;
    } files[] = {{"test_tvips_2233_000.tvips", 2, 2, 3, 3, 1},
                 {"test_tvips_2345_000.tvips", 2, 3, 4, 5, 1},
                 {"test_tvips_2345_split_000.tvips", 2, 3, 4, 5, 3}};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tvips_files/%s", QEM_HYPERSPY_IO, files[k].name);
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "unit_input_tvips: %s missing (python3-hyperspy)\n", path);
            CHECK(!"HyperSpy's TVIPS files are installed");
            continue;
        }
        input_options o = {0};
        o.scan_shape[0] = files[k].rows;
        o.scan_shape[1] = files[k].cols;
        acquisition *a = ic_open(path, &o);
        if (!a)
            continue;
        CHECK(!strcmp(a->family->name, "tvips"));
        CHECK_EQ_U64(a->shape[0], files[k].rows);
        CHECK_EQ_U64(a->shape[1], files[k].cols);
        CHECK_EQ_U64(a->shape[2], files[k].height);
        CHECK_EQ_U64(a->shape[3], files[k].width);
        CHECK(a->sample_type == QEM_DTYPE_UINT16);
        CHECK_EQ_U64(a->member_count, files[k].members);
        CHECK(a->members[0].is_master);
        if (files[k].members == 3)
            CHECK(ic_member_named(a, 1, "test_tvips_2345_split_001.tvips") &&
                  ic_member_named(a, 2, "test_tvips_2345_split_002.tvips"));
        /* HyperSpy's fixtures hold 0, 1, 2 ... in stored order. */
        size_t size = 0;
        uint16_t *v = ic_read_all(a, 4, &size);
        int arange = v != NULL;
        for (size_t i = 0; arange && i < size / 2; i++)
            arange = v[i] == i;
        CHECK(arange);
        free(v);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "high_tension_kv")), 200);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "version")), 2);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "frame_header_bytes")), 60);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "parts")), files[k].members);
        CHECK(a->calibration == NULL);
        ic_check_streamed(a);
        qem_input_close(a);
        /* Without a scan shape, several frames are refused naming the count. */
        ic_refused(path, NULL, QEM_E_LAYOUT, "--scan-shape");
    }
}

/* --- built files -------------------------------------------------------------------- */

static void test_built(void)
{
    static const tvipsb_options cases[] = {
        {.width = 5, .height = 3, .bits = 16, .frames = 6},
        {.width = 8, .height = 4, .bits = 8, .frames = 12, .frames_per_part = 5},
        {.width = 3, .height = 7, .bits = 16, .frames = 4, .version = 1},
        {.width = 4, .height = 4, .bits = 16, .frames = 8, .frame_header = 108,
         .frames_per_part = 3, .first_rotator = 1},
    };
    static const uint64_t scans[][2] = {{2, 3}, {3, 4}, {4, 1}, {2, 4}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[64];
        snprintf(path, sizeof path, "built%zu_000.tvips", k);
        const char *p = test_path(path);
        CHECK(tvipsb_write(p, &cases[k]) == 0);
        input_options o = {0};
        o.scan_shape[0] = scans[k][0];
        o.scan_shape[1] = scans[k][1];
        acquisition *a = ic_open(p, &o);
        if (!a)
            continue;
        CHECK_EQ_U64(a->shape[2], cases[k].height);
        CHECK_EQ_U64(a->shape[3], cases[k].width);
        CHECK(a->sample_type == (cases[k].bits == 8 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16));
        const uint64_t per = cases[k].frames_per_part ? cases[k].frames_per_part
                                                      : cases[k].frames;
        CHECK_EQ_U64(a->member_count, (cases[k].frames + per - 1) / per);
        check_values(a, cases[k].bits);
        json_t *rot = json_object_get(a->facts, "rotator_index");
        if (cases[k].version == 1) {
            CHECK(rot == NULL);
        } else {
            CHECK_EQ_U64(json_integer_value(json_object_get(rot, "max")),
                         cases[k].first_rotator + cases[k].frames - 1);
            CHECK(json_is_true(json_object_get(rot, "steps_by_one_every_frame")));
        }
        CHECK((json_object_get(a->facts, "scan_position") != NULL) ==
              (cases[k].frame_header >= 76));
        ic_check_streamed(a);
        qem_input_close(a);
    }
    /* One frame needs no scan shape. */
    const tvipsb_options one = {.width = 2, .height = 2, .bits = 8, .frames = 1};
    CHECK(tvipsb_write(test_path("one_000.tvips"), &one) == 0);
    acquisition *a = ic_open(test_path("one_000.tvips"), NULL);
    CHECK(a && a->shape[0] == 1 && a->shape[1] == 1);
    qem_input_close(a);
    /* A name without _000 is one file: no parts are looked for. */
    CHECK(rename(test_path("one_000.tvips"), test_path("single.tvips")) == 0);
    a = ic_open(test_path("single.tvips"), NULL);
    CHECK(a && a->member_count == 1);
    qem_input_close(a);
}

/* --- refusals --------------------------------------------------------------------------- */

static void patch32(const char *path, long at, uint32_t v)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    CHECK(fseek(f, at, SEEK_SET) == 0 && fwrite(b, 1, 4, f) == 4);
    fclose(f);
}

static void fresh(const char *p, const tvipsb_options *o)
{
    for (unsigned k = 0; k < 4; k++) {
        char part[1024];
        tvipsb_part_path(p, k, part, sizeof part);
        unlink(part);
    }
    CHECK(tvipsb_write(p, o) == 0);
}

static void test_refusals(void)
{
    CHECK(mkdir(test_path("s"), 0755) == 0);
    char p[1024];
    snprintf(p, sizeof p, "%s", test_path("s/r_000.tvips"));
    char part1[1024], part2[1024];
    tvipsb_part_path(p, 1, part1, sizeof part1);
    tvipsb_part_path(p, 2, part2, sizeof part2);
    const tvipsb_options base = {.width = 4, .height = 2, .bits = 16, .frames = 6,
                                 .frames_per_part = 2};
    input_options o = {0};
    o.scan_shape[0] = 2;
    o.scan_shape[1] = 3;

    /* Truncated: the last part a byte short. */
    fresh(p, &base);
    CHECK(truncate(part2, 60 + 16 + 60 + 15) == 0);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "truncated");
    /* A missing middle part with a later one present. */
    fresh(p, &base);
    CHECK(unlink(part1) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "r_001.tvips");
    /* A part that is a symlink leading out of the folder (absolute, and
     * through ".."), and a dangling one. */
    fresh(p, &base);
    CHECK(mkdir(test_path("elsewhere"), 0755) == 0);
    CHECK(rename(part1, test_path("elsewhere/r_001.tvips")) == 0);
    CHECK(symlink(test_path("elsewhere/r_001.tvips"), part1) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "outside");
    CHECK(unlink(part1) == 0 && symlink("../elsewhere/r_001.tvips", part1) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "outside");
    CHECK(unlink(part1) == 0 && symlink("gone.tvips", part1) == 0);
    ic_refused(p, &o, QEM_E_IO, "cannot be read");
    /* A symlink inside the folder is followed. */
    fresh(p, &base);
    CHECK(rename(part1, test_path("s/inside.bin")) == 0 && symlink("inside.bin", part1) == 0);
    acquisition *a = ic_open(p, &o);
    CHECK(a && a->member_count == 3);
    qem_input_close(a);
    /* Inconsistent frame headers: time going back, milliseconds past 999. */
    tvipsb_options back = base;
    back.time_back_at = 3;
    fresh(p, &back);
    ic_refused(p, &o, QEM_E_LAYOUT, "out of order");
    fresh(p, &base);
    patch32(p, 256 + 8, 1000);
    ic_refused(p, &o, QEM_E_LAYOUT, "milliseconds");
    /* Series header variants: version, bit depths, frame header size, empty frames. */
    fresh(p, &base);
    patch32(p, 4, 3);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "version 3");
    fresh(p, &base);
    patch32(p, 16, 32);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "32 bits");
    fresh(p, &base);
    patch32(p, 16, 12);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "12 bits");
    fresh(p, &base);
    patch32(p, 48, 40);
    ic_refused(p, &o, QEM_E_LAYOUT, "40 bytes");
    fresh(p, &base);
    patch32(p, 8, 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "0 x 2");
    /* Sizes that overflow or exceed any detector. */
    fresh(p, &base);
    patch32(p, 8, 0xFFFFFFFFu);
    patch32(p, 12, 0xFFFFFFFFu);
    ic_refused(p, &o, QEM_E_LIMIT, NULL);
    /* A scan shape that does not match the frames. */
    fresh(p, &base);
    o.scan_shape[1] = 4;
    ic_refused(p, &o, QEM_E_LAYOUT, "6 frames");
    /* A file of only the series header holds no frame. */
    CHECK(truncate(p, 256) == 0 && unlink(part1) == 0 && unlink(part2) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "no frame");
}

/* A part replaced while reading is caught. */
static void test_changed(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", test_path("c_000.tvips"));
    const tvipsb_options base = {.width = 4, .height = 2, .bits = 16, .frames = 4,
                                 .frames_per_part = 2};
    CHECK(tvipsb_write(p, &base) == 0);
    input_options o = {0};
    o.scan_shape[0] = 2;
    o.scan_shape[1] = 2;
    acquisition *a = ic_open(p, &o);
    if (!a)
        return;
    qem_error e = {0};
    uint16_t out[16];
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT16, out, sizeof out, &e), &e);
    char part1[1024];
    tvipsb_part_path(p, 1, part1, sizeof part1);
    patch32(part1, 70, 7);
    CHECK_STATUS(qem_input_stream_finish(a, NULL, NULL, &e), QEM_E_CHANGED, &e);
    qem_input_close(a);
}

int main(void)
{
    test_real();
    test_built();
    test_refusals();
    test_changed();
    return test_finish("unit_input_tvips");
}
