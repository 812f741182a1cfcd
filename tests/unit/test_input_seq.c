/* The Norpix .seq family (lib/input/seq.c). No public .seq file exists
 * here: the files are built (tests/common/tvseq_build.c) from the format's
 * description, whose facts this test checks against the reader:
 *   - magic 0xFEED at 0, "Norpix seq" in UTF-16 at 4, version at 28,
 *     header size at 32, then width 548, height 552, bit depth 556, real
 *     bit depth 560, image bytes 564, image format 568 (100: monochrome),
 *     allocated frames 572, true image size 580, frame rate 584 (double),
 *     compression 620 (0: none): LiberTEM src/libertem/io/dataset/seq.py
 *     (HEADER_FIELDS, check_valid) and RosettaSciIO rsciio/de/_api.py
 *     (_read_file_header);
 *   - images from 8192 for version >= 5 (1024 before), image k at
 *     8192 + k * true_image_size: LiberTEM's _get_image_offset;
 *   - each image followed by u32 seconds, u16 ms, u16 us: RosettaSciIO's
 *     record dtype ("sec", "ms", "mis");
 *   - Celeritas: <lead>_Top*.seq and <lead>_Bottom*.seq, SegmentPreBuffer
 *     frames per stored image from <lead>.seq.Config.Metadata.xml
 *     (FileInfo/SegmentPreBuffer/@Value), the top block flipped vertically
 *     above the bottom block: RosettaSciIO's CeleritasReader and
 *     read_stitch_binary; companions <name>.metadata, .dark.mrc,
 *     .gain.mrc: RosettaSciIO's file_reader.
 * Every frame read equals the builder's values bit for bit; one refusal
 * per rule; members hashed while read. */
#include <sys/stat.h>
#include <unistd.h>

#include "input_check.h"
#include "tvseq_build.h"

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

static int64_t fact_int(const acquisition *a, const char *key)
{
    return json_integer_value(json_object_get(a->facts, key));
}

static void test_plain(void)
{
    static const seqb_options cases[] = {
        {.width = 6, .height = 4, .bits = 16, .frames = 6},
        {.width = 5, .height = 3, .bits = 8, .frames = 4, .padding = 8192 - 23},
        {.width = 4, .height = 4, .bits = 16, .frames = 2, .version = 4},
    };
    static const uint64_t scans[][2] = {{2, 3}, {2, 2}, {1, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "plain%zu.seq", k);
        const char *p = test_path(name);
        CHECK(seqb_write(p, &cases[k]) == 0);
        input_options o = {0};
        o.scan_shape[0] = scans[k][0];
        o.scan_shape[1] = scans[k][1];
        acquisition *a = ic_open(p, &o);
        if (!a)
            continue;
        CHECK(!strcmp(a->family->name, "seq"));
        CHECK_EQ_U64(a->shape[2], cases[k].height);
        CHECK_EQ_U64(a->shape[3], cases[k].width);
        CHECK(a->sample_type == (cases[k].bits == 8 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16));
        CHECK_EQ_U64(a->member_count, 1);
        CHECK_EQ_U64(fact_int(a, "true_image_size"), seqb_true_image_size(&cases[k]));
        CHECK_EQ_U64(fact_int(a, "allocated_frames"), cases[k].frames);
        CHECK_EQ_U64(fact_int(a, "header_size"), cases[k].version == 4 ? 1024 : 8192);
        CHECK(!strcmp(json_string_value(json_object_get(a->facts, "description")),
                      "qem test sequence"));
        check_values(a, cases[k].bits);
        ic_check_streamed(a);
        qem_input_close(a);
    }
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("reference", f);
        fclose(f);
    }
}

/* Direct Electron's companions become members, named in the facts. */
static void test_companions(void)
{
    const seqb_options s = {.width = 4, .height = 4, .bits = 16, .frames = 1};
    CHECK(mkdir(test_path("de"), 0755) == 0);
    char p[1024];
    snprintf(p, sizeof p, "%s", test_path("de/run.seq"));
    CHECK(seqb_write(p, &s) == 0);
    touch(test_path("de/run.seq.dark.mrc"));
    touch(test_path("de/run.seq.gain.mrc"));
    touch(test_path("de/run.seq.metadata"));
    acquisition *a = ic_open(p, NULL);
    if (a) {
        CHECK_EQ_U64(a->member_count, 4);
        CHECK(ic_member_named(a, 0, "run.seq") && a->members[0].is_master);
        CHECK(ic_member_named(a, 1, "run.seq.metadata"));
        CHECK(ic_member_named(a, 2, "run.seq.dark.mrc"));
        CHECK(ic_member_named(a, 3, "run.seq.gain.mrc"));
        json_t *c = json_object_get(a->facts, "companions");
        const char *dark = json_string_value(json_object_get(c, "dark_reference"));
        CHECK(dark && !strcmp(dark, "run.seq.dark.mrc"));
        ic_check_streamed(a);
    }
    qem_input_close(a);
    /* A companion leading out of the folder (absolute, through ".."), or dangling. */
    CHECK(mkdir(test_path("outside"), 0755) == 0);
    touch(test_path("outside/secret.mrc"));
    CHECK(unlink(test_path("de/run.seq.gain.mrc")) == 0);
    CHECK(symlink(test_path("outside/secret.mrc"), test_path("de/run.seq.gain.mrc")) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "outside");
    CHECK(unlink(test_path("de/run.seq.gain.mrc")) == 0);
    CHECK(symlink("../outside/secret.mrc", test_path("de/run.seq.gain.mrc")) == 0);
    ic_refused(p, NULL, QEM_E_LAYOUT, "outside");
    CHECK(unlink(test_path("de/run.seq.gain.mrc")) == 0);
    CHECK(symlink("gone.mrc", test_path("de/run.seq.gain.mrc")) == 0);
    ic_refused(p, NULL, QEM_E_IO, "cannot be read");
    CHECK(unlink(test_path("de/run.seq.gain.mrc")) == 0);
}

/* A Celeritas pair, recognised from either half. */
static void test_celeritas(void)
{
    CHECK(mkdir(test_path("cel"), 0755) == 0);
    const uint32_t prebuffer = 3, block = 2, width = 5, images = 2;
    seqb_options t = {.width = width, .height = prebuffer * block, .bits = 16,
                      .frames = images, .half = 1, .prebuffer = prebuffer};
    seqb_options b = t;
    b.half = 2;
    char top[1024], bottom[1024];
    snprintf(top, sizeof top, "%s", test_path("cel/scan_Top_14-02.seq"));
    snprintf(bottom, sizeof bottom, "%s", test_path("cel/scan_Bottom_14-02.seq"));
    CHECK(seqb_write(top, &t) == 0 && seqb_write(bottom, &b) == 0);
    /* Without the XML, the SegmentPreBuffer is not guessed. */
    ic_refused(top, NULL, QEM_E_IO, "Config.Metadata.xml");
    CHECK(seqb_write_config_xml(test_path("cel/scan.seq.Config.Metadata.xml"), prebuffer) == 0);
    input_options o = {0};
    o.scan_shape[0] = 2;
    o.scan_shape[1] = 3;
    for (int which = 0; which < 2; which++) {
        acquisition *a = ic_open(which ? bottom : top, &o);
        if (!a)
            continue;
        CHECK_EQ_U64(a->shape[2], 2 * block);
        CHECK_EQ_U64(a->shape[3], width);
        CHECK(ic_member_named(a, 0, "scan_Top_14-02.seq") && a->members[0].is_master);
        CHECK(ic_member_named(a, 1, "scan_Bottom_14-02.seq"));
        CHECK(ic_member_named(a, 2, "scan.seq.Config.Metadata.xml"));
        json_t *c = json_object_get(a->facts, "celeritas");
        CHECK_EQ_U64(json_integer_value(json_object_get(c, "segment_prebuffer")), prebuffer);
        check_values(a, 16);
        ic_check_streamed(a);
        qem_input_close(a);
    }
    /* Halves that disagree; an XML whose prebuffer does not divide; a missing half. */
    b.frames = images + 1;
    CHECK(seqb_write(bottom, &b) == 0);
    ic_refused(top, NULL, QEM_E_LAYOUT, "disagree");
    b.frames = images;
    CHECK(seqb_write(bottom, &b) == 0);
    CHECK(seqb_write_config_xml(test_path("cel/scan.seq.Config.Metadata.xml"), 4) == 0);
    ic_refused(top, &o, QEM_E_LAYOUT, "does not divide");
    CHECK(seqb_write_config_xml(test_path("cel/scan.seq.Config.Metadata.xml"), prebuffer) == 0);
    CHECK(rename(bottom, test_path("cel/elsewhere.bin")) == 0);
    ic_refused(top, &o, QEM_E_IO, "bottom half");
    /* Two candidates for the other half. */
    CHECK(rename(test_path("cel/elsewhere.bin"), bottom) == 0);
    CHECK(seqb_write(test_path("cel/scan_Bottom_15-00.seq"), &b) == 0);
    ic_refused(top, &o, QEM_E_LAYOUT, "could be its bottom half");
    /* "_Top" must be followed by '_' or '.': scan_Topography.seq is a plain sequence. */
    seqb_options plain = {.width = 4, .height = 4, .bits = 8, .frames = 1};
    CHECK(seqb_write(test_path("cel/scan_Topography.seq"), &plain) == 0);
    acquisition *a = ic_open(test_path("cel/scan_Topography.seq"), NULL);
    CHECK(a && a->member_count == 1);
    qem_input_close(a);
}

static void patch32(const char *path, long at, uint32_t v)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    CHECK(fseek(f, at, SEEK_SET) == 0 && fwrite(x, 1, 4, f) == 4);
    fclose(f);
}

static void test_refusals(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", test_path("bad.seq"));
    const seqb_options base = {.width = 4, .height = 2, .bits = 16, .frames = 3};
    const uint32_t tis = seqb_true_image_size(&base);
    input_options o = {0};
    o.scan_shape[0] = 1;
    o.scan_shape[1] = 3;
    /* Truncated, and longer than the stated frames. */
    CHECK(seqb_write(p, &base) == 0);
    CHECK(truncate(p, 8192 + 3 * tis - 1) == 0);
    ic_refused(p, &o, QEM_E_FILE_LENGTH, "truncated");
    seqb_options more = base;
    more.stated_frames = 2;
    CHECK(seqb_write(p, &more) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "disagrees");
    /* Unsupported variants, named. */
    seqb_options v = base;
    v.compression = 1;
    CHECK(seqb_write(p, &v) == 0);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "compression format code 1");
    v = base;
    v.image_format = 200;
    CHECK(seqb_write(p, &v) == 0);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "format code 200");
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 556, 32);
    ic_refused(p, &o, QEM_E_UNSUPPORTED, "32-bit");
    /* Inconsistent header fields. */
    v = base;
    v.header_size = 1024;
    CHECK(seqb_write(p, &v) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "header states 1024");
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 564, 17);
    ic_refused(p, &o, QEM_E_LAYOUT, "images of 17 bytes");
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 580, 16);
    ic_refused(p, &o, QEM_E_LAYOUT, "true image size");
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 560, 17);
    ic_refused(p, &o, QEM_E_LAYOUT, "real bits");
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 572, 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "no image");
    v = base;
    v.ms_out_of_range = 1;
    CHECK(seqb_write(p, &v) == 0);
    ic_refused(p, &o, QEM_E_LAYOUT, "milliseconds");
    /* A timestamp going back. */
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 8192 + 2 * tis + 16, 1600000000u);
    ic_refused(p, &o, QEM_E_LAYOUT, "out of order");
    /* A 65536 x 65536 image (2^33 bytes) whose u32 image size cannot
     * state it: refused before any work proportional to it. */
    CHECK(seqb_write(p, &base) == 0);
    patch32(p, 548, 65536);
    patch32(p, 552, 65536);
    patch32(p, 564, 0);
    ic_refused(p, &o, QEM_E_LAYOUT, NULL);
    /* A scan shape that does not match. */
    CHECK(seqb_write(p, &base) == 0);
    o.scan_shape[1] = 2;
    ic_refused(p, &o, QEM_E_LAYOUT, "3 frames");
}

int main(void)
{
    test_plain();
    test_companions();
    test_celeritas();
    test_refusals();
    return test_finish("unit_input_seq");
}
