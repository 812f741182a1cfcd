/* Direct Electron's <dataset>_info.txt (lib/input/de_info.c), read beside
 * the mrc and seq families' movies. No DE file ships here; the info files
 * are written from the facts below, each cited:
 *  - names: RosettaSciIO's file specification page (doc/file_specification/
 *    index.rst, "MRC (CCP-EM)"): the movie is
 *    CurrentDate_MovieNumber_suffix_movie.mrc and the metadata file
 *    CurrentDate_MovieNumber_suffix_info.txt, the suffix optional; its test
 *    file rsciio/tests/data/mrc/20241021_00405_info.txt names its own movie
 *    "Autosave Movie Frames File Path = ...\20241021_00405_movie.mrc".
 *  - syntax: those test files: one `Key = Value` line per DE-Server
 *    property, the key padded with spaces to a column, values that may be
 *    empty ("Autosave Filename Suffix = ") or hold ':', ',' and Windows
 *    paths; RosettaSciIO's read_de_metadata_file (rsciio/mrc/_api.py)
 *    splits each line at '=' and strips both sides.
 *  - scan: read_de_metadata_file takes the navigation shape from
 *    "Scan - Size X" and "Scan - Size Y" when "Scan - Enable" is "Enable"
 *    and "Scan - Type" is "Raster"; RosettaSciIO's test_mrc_metadata loads
 *    4DSTEMscan.mrc with info.txt (Size X 8, Size Y 32) as (32, 8, 256, 256):
 *    rows = Size Y, columns = Size X. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input/de_info.h"
#include "input/input.h"
#include "input_check.h"
#include "mrc_build.h"
#include "test_util.h"
#include "tvseq_build.h"

/* Lines as DE-Server writes them (from 4DSTEM_scan_info.txt's layout). */
static const char *const sample_lines =
    "Server Software Version                                         = 2.7.2.9048\r\n"
    "Autosave Filename Suffix                                        = \r\n"
    "Autosave Movie Frames File Path                                 = "
    "D:\\DEOutput\\CeleritasXS\\20230925_01497_movie.mrc\r\n"
    "Camera Model                                                    = CeleritasXS\r\n"
    "Diffraction Pixel Size X                                        = 0.1\r\n"
    "Image Size X (pixels)                                           = 4\r\n"
    "Image Size Y (pixels)                                           = 4\r\n"
    "Preset - Properties                                             = Readout - Shutter:Rolling,"
    "Crop Size X:128\r\n"
    "Instrument Project Magnification Allowed Values                 =\r\n"
    "Scan - Enable                                                   = Enable\r\n"
    "Scan - Type                                                     = Raster\r\n";

static char *info_text(int size_x, int size_y, const char *extra)
{
    static char text[8192];
    snprintf(text, sizeof text,
             "%sScan - Size X                                                   = %d\r\n"
             "Scan - Size Y                                                   = %d\r\n%s",
             sample_lines, size_x, size_y, extra ? extra : "");
    return text;
}

static void parse_ok(const char *text, de_info *d)
{
    qem_error e = {0};
    CHECK_OK(qem_de_info_parse(text, strlen(text), "t_info.txt", d, &e), &e);
}

static void parse_refused(const char *text, size_t n, qem_status status, const char *needle)
{
    de_info d;
    qem_error e = {0};
    CHECK_STATUS(qem_de_info_parse(text, n, "t_info.txt", &d, &e), status, &e);
    if (needle && !strstr(e.message, needle)) {
        CHECK(!"the refusal names what is wrong");
        fprintf(stderr, "  missing '%s' in: %s\n", needle, e.message);
    }
    qem_de_info_free(&d);
}

static void test_parse(void)
{
    de_info d;
    parse_ok(info_text(8, 32, NULL), &d);
    CHECK(d.scan_stated && d.scan[0] == 32 && d.scan[1] == 8); /* rows Size Y, columns X */
    CHECK_EQ_U64(json_object_size(d.keys), 13);
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "Camera Model")), "CeleritasXS"));
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "Autosave Filename Suffix")), ""));
    CHECK(!strcmp(json_string_value(json_object_get(
                      d.keys, "Instrument Project Magnification Allowed Values")),
                  ""));
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "Preset - Properties")),
                  "Readout - Shutter:Rolling,Crop Size X:128"));
    qem_de_info_free(&d);
    /* Blank lines, LF endings, a last line without its newline, '=' in a value. */
    parse_ok("\nA = 1\n  \nB = x=y\nScan - Enable = Disable", &d);
    CHECK(!d.scan_stated && !d.why_not[0]);
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "B")), "x=y"));
    qem_de_info_free(&d);
    /* Latin-1 bytes kept as '?' (the facts are UTF-8 JSON). */
    parse_ok("Unit = 5 \xb5m\n", &d);
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "Unit")), "5 ?m"));
    qem_de_info_free(&d);
    parse_ok("Unit = 5 \xc2\xb5m\n", &d); /* UTF-8 kept as it is */
    CHECK(!strcmp(json_string_value(json_object_get(d.keys, "Unit")), "5 \xc2\xb5m"));
    qem_de_info_free(&d);
    /* Scans that are not one raster pass: no shape, the reason kept. */
    parse_ok(info_text(8, 32, "Scan - Repeats = 3\n"), &d);
    CHECK(!d.scan_stated && strstr(d.why_not, "scanned 3 times"));
    qem_de_info_free(&d);
    parse_ok(info_text(8, 32, "Scan - Repeats = 1\nScan - Point Repeat = 1\n"), &d);
    CHECK(d.scan_stated);
    qem_de_info_free(&d);
    parse_ok(info_text(8, 32, "Scan - Point Repeat = 2\n"), &d);
    CHECK(!d.scan_stated && strstr(d.why_not, "2 frames per point"));
    qem_de_info_free(&d);
    parse_ok("Scan - Enable = Enable\nScan - Type = Custom\nScan - Size X = 4\nScan - Size Y = 4\n",
             &d);
    CHECK(!d.scan_stated && strstr(d.why_not, "'Custom'"));
    qem_de_info_free(&d);
    parse_ok(info_text(8, 32, "Scan - ROI Enable = Enable\n"), &d);
    CHECK(!d.scan_stated && strstr(d.why_not, "region of interest"));
    qem_de_info_free(&d);
    parse_ok("Scan - Enable = Enable\nScan - Size X = 0\nScan - Size Y = 4\n", &d);
    CHECK(!d.scan_stated && strstr(d.why_not, "positive"));
    qem_de_info_free(&d);
}

static void test_parse_refusals(void)
{
    const char *no_eq = "A = 1\nB = 2\nthis line is free text\n";
    parse_refused(no_eq, strlen(no_eq), QEM_E_LAYOUT, "line 3");
    parse_refused("A = 1\n   = 2\n", 13, QEM_E_LAYOUT, "line 2 of the Direct Electron info file");
    parse_refused("A = 1\nA = 2\n", 12, QEM_E_LAYOUT, "second time");
    parse_refused("A = 1\x01\n", 7, QEM_E_LAYOUT, "control byte 0x01");
    parse_refused("A = 1\0B = 2\n", 12, QEM_E_LAYOUT, "control byte 0x00");
    parse_refused("Scan - Size X = 8.5\n", 20, QEM_E_LAYOUT, "'Scan - Size X' the value '8.5'");
    parse_refused("Scan - Size Y = -4\n", 19, QEM_E_LAYOUT, "line 1");
    parse_refused("Scan - Repeats = 99999999999\n", 29, QEM_E_LAYOUT, "Scan - Repeats");
    /* Bounds: file, line, keys. */
    const size_t big = DE_INFO_MAX_BYTES + 1;
    char *text = malloc(big + DE_INFO_MAX_KEYS * 16);
    memset(text, 'a', big);
    parse_refused(text, big, QEM_E_LIMIT, "at most");
    memcpy(text, "A = ", 4);
    parse_refused(text, DE_INFO_MAX_LINE + 1, QEM_E_LIMIT, "line 1");
    size_t n = 0;
    for (unsigned k = 0; k <= DE_INFO_MAX_KEYS; k++)
        n += (size_t)sprintf(text + n, "K%u = %u\n", k, k);
    parse_refused(text, n, QEM_E_LIMIT, "keys");
    free(text);
}

/* --- beside a movie ---------------------------------------------------------------- */

static char *in_dir(const char *dir, const char *name)
{
    static char buf[8][1024];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    CHECK(write_file(path, text, strlen(text)));
}

static void check_scan_fact(const acquisition *a, const char *file, uint64_t rows, uint64_t cols)
{
    json_t *f = json_object_get(a->facts, "de_info");
    CHECK(f && !strcmp(json_string_value(json_object_get(f, "file")), file));
    json_t *s = json_object_get(f, "scan_shape");
    CHECK((uint64_t)json_integer_value(json_array_get(s, 0)) == rows &&
          (uint64_t)json_integer_value(json_array_get(s, 1)) == cols);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(f, "properties"),
                                                    "Camera Model")),
                  "CeleritasXS"));
}

static void test_mrc(void)
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/de_mrc", test_dir());
    mkdir(dir, 0700);
    char outside[900];
    snprintf(outside, sizeof outside, "%s/de_elsewhere", test_dir());
    mkdir(outside, 0700);
    const char *movie = strdup(in_dir(dir, "20240101_00001_movie.mrc"));
    const char *info = strdup(in_dir(dir, "20240101_00001_info.txt"));
    mrcb_options m = {.nx = 4, .ny = 4, .nz = 6, .mode = 6};
    CHECK(mrcb_write(movie, &m) == 0);
    /* Missing: the frames need --scan-shape, as before. */
    ic_refused(movie, NULL, QEM_E_LAYOUT, "--scan-shape");
    write_text(info, info_text(2, 3, NULL));
    acquisition *a = ic_open(movie, NULL);
    CHECK(a && a->shape[0] == 3 && a->shape[1] == 2 && a->shape[2] == 4 && a->shape[3] == 4);
    CHECK(a && a->member_count == 2 && a->members[0].is_master &&
          !strcmp(a->members[1].path, info));
    if (a) {
        check_scan_fact(a, "20240101_00001_info.txt", 3, 2);
        size_t size = 0;
        uint16_t *got = ic_read_all(a, 4, &size);
        int same = got != NULL;
        for (uint64_t i = 0; same && i < 6 * 16; i++) {
            uint16_t want;
            mrcb_value(6, i, &want);
            same = got[i] == want;
        }
        CHECK(same);
        free(got);
        qem_error e = {0};
        CHECK_OK(qem_input_authenticate(a, NULL, NULL, &e), &e);
        uint8_t d[32];
        ic_file_sha256(info, d);
        CHECK(a->members[1].hashed && !memcmp(a->members[1].sha256, d, 32));
    }
    qem_input_close(a);
    /* --scan-shape: the same is fine, another refused. */
    const input_options same = {.scan_shape = {3, 2}};
    a = ic_open(movie, &same);
    CHECK(a && a->shape[0] == 3);
    qem_input_close(a);
    const input_options other = {.scan_shape = {2, 3}};
    ic_refused(movie, &other, QEM_E_INVALID_ARGUMENT, "contradicts the scan shape 3x2");
    /* A scan that is not the frame count: both named. */
    write_text(info, info_text(4, 2, NULL));
    ic_refused(movie, NULL, QEM_E_LAYOUT, "states a scan of 2 x 4");
    ic_refused(movie, NULL, QEM_E_LAYOUT, "holds 6 frames");
    /* Repeated scans: the caller's shape only. */
    write_text(info, info_text(2, 3, "Scan - Repeats = 2\n"));
    ic_refused(movie, NULL, QEM_E_LAYOUT, "Scan - Repeats");
    const input_options six = {.scan_shape = {6, 1}};
    a = ic_open(movie, &six);
    CHECK(a && a->shape[0] == 6 && a->member_count == 2);
    qem_input_close(a);
    /* Malformed and oversize files refused. */
    write_text(info, "Camera Model = X\nfree text\n");
    ic_refused(movie, &same, QEM_E_LAYOUT, "line 2");
    char *huge = malloc(DE_INFO_MAX_BYTES + 2);
    memset(huge, ' ', DE_INFO_MAX_BYTES + 1);
    huge[DE_INFO_MAX_BYTES + 1] = '\0';
    write_text(info, huge);
    free(huge);
    ic_refused(movie, &same, QEM_E_LIMIT, "at most");
    /* Outside the folder: a symlink leading out (through ..), a dangling
     * one, a folder of that name. */
    unlink(info);
    write_text(in_dir(outside, "stolen.txt"), info_text(2, 3, NULL));
    CHECK(symlink("../de_elsewhere/stolen.txt", info) == 0);
    ic_refused(movie, &same, QEM_E_LAYOUT, "outside");
    unlink(info);
    CHECK(symlink("no_such_file.txt", info) == 0);
    ic_refused(movie, &same, QEM_E_IO, NULL);
    unlink(info);
    CHECK(mkdir(info, 0700) == 0);
    ic_refused(movie, &same, QEM_E_LAYOUT, NULL);
    rmdir(info);
    /* A symlink inside the folder is fine. */
    write_text(in_dir(dir, "real.txt"), info_text(2, 3, NULL));
    CHECK(symlink("real.txt", info) == 0);
    a = ic_open(movie, NULL);
    CHECK(a && a->shape[0] == 3 && a->member_count == 2);
    qem_input_close(a);
    unlink(info);
    /* Not named <P>_movie.<ext>: no info file is looked for. */
    const char *plain = strdup(in_dir(dir, "stack.mrc"));
    CHECK(mrcb_write(plain, &m) == 0);
    write_text(in_dir(dir, "stack_info.txt"), info_text(2, 3, NULL));
    a = ic_open(plain, &same);
    CHECK(a && a->member_count == 1 && !json_object_get(a->facts, "de_info"));
    qem_input_close(a);
    /* A suffix: <date>_<number>_<suffix>_movie.mrc and ..._<suffix>_info.txt. */
    const char *suffixed = strdup(in_dir(dir, "20240101_00002_tilt_a_movie.mrc"));
    CHECK(mrcb_write(suffixed, &m) == 0);
    write_text(in_dir(dir, "20240101_00002_tilt_a_info.txt"), info_text(3, 2, NULL));
    a = ic_open(suffixed, NULL);
    CHECK(a && a->shape[0] == 2 && a->shape[1] == 3);
    qem_input_close(a);
    free((void *)movie);
    free((void *)info);
    free((void *)plain);
    free((void *)suffixed);
}

static void test_seq(void)
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/de_seq", test_dir());
    mkdir(dir, 0700);
    const char *movie = strdup(in_dir(dir, "20240101_00003_movie.seq"));
    const char *info = strdup(in_dir(dir, "20240101_00003_info.txt"));
    const seqb_options s = {.width = 4, .height = 4, .bits = 16, .frames = 6};
    CHECK(seqb_write(movie, &s) == 0);
    write_text(in_dir(dir, "20240101_00003_movie.seq.metadata"), "meta");
    ic_refused(movie, NULL, QEM_E_LAYOUT, "--scan-shape");
    write_text(info, info_text(3, 2, NULL));
    acquisition *a = ic_open(movie, NULL);
    CHECK(a && a->shape[0] == 2 && a->shape[1] == 3);
    /* Members: the sequence, its StreamPix companion, then the info file. */
    CHECK(a && a->member_count == 3 && !strcmp(a->members[2].path, info));
    if (a) {
        check_scan_fact(a, "20240101_00003_info.txt", 2, 3);
        json_t *c = json_object_get(a->facts, "companions");
        CHECK(!strcmp(json_string_value(json_object_get(c, "de_info")),
                      "20240101_00003_info.txt"));
        size_t size = 0;
        uint16_t *got = ic_read_all(a, 4, &size);
        int same = got != NULL;
        for (uint64_t f = 0; same && f < 6; f++)
            for (uint64_t r = 0; same && r < 4; r++)
                for (uint64_t col = 0; same && col < 4; col++)
                    same = got[(f * 4 + r) * 4 + col] == (uint16_t)tvseqb_value(f, r, col, 16);
        CHECK(same);
        free(got);
    }
    qem_input_close(a);
    const input_options other = {.scan_shape = {3, 2}};
    ic_refused(movie, &other, QEM_E_INVALID_ARGUMENT, "contradicts");
    write_text(info, info_text(5, 5, NULL));
    ic_refused(movie, NULL, QEM_E_LAYOUT, "states a scan of 5 x 5");
    write_text(info, "= no key\n");
    ic_refused(movie, &other, QEM_E_LAYOUT, "line 1");
    unlink(info);
    CHECK(symlink("../de_elsewhere/stolen.txt", info) == 0);
    ic_refused(movie, &other, QEM_E_LAYOUT, "outside");
    unlink(info);
    free((void *)movie);
    free((void *)info);
}

int main(void)
{
    test_parse();
    test_parse_refusals();
    test_mrc();
    test_seq();
    return test_finish("unit_input_de_info");
}
