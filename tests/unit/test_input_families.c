/* The Merlin .mib, EMPAD and raw binary families of the input layer
 * (lib/input/mib.c, empad.c, raw.c). Every real file of
 * fixtures/detectors/{mib,empad} is read through qem_input_open/qem_input_read and
 * compared bit for bit with its reference array; files built here
 * (tests/common/mib_build.c) cover each counter depth, the quad layout,
 * 3D stacks with scan shapes from the caller or the .hdr, EMPAD with and
 * without the XML's scan shape, raw binary of each type and byte order;
 * one refusal per rule; members hashed while read equal the files'
 * SHA-256; a member changed during the read is caught. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sha256.h"
#include "input/input.h"
#include "mib_build.h"
#include "test_util.h"

/* --- helpers ---------------------------------------------------------------- */

/* A reference .npy (little-endian, C order): its shape, element size and
 * data bytes, parsed here independently of the library. */
typedef struct ref_array {
    uint8_t *file;
    const uint8_t *data;
    size_t data_size;
    size_t item;
    char descr[8];
    uint64_t shape[4];
    int ndim;
} ref_array;

static int load_ref(const char *path, ref_array *r)
{
    memset(r, 0, sizeof *r);
    size_t n = 0;
    r->file = read_file(path, &n);
    if (!r->file || n < 12 || memcmp(r->file, "\x93NUMPY", 6) != 0)
        return 0;
    size_t header = r->file[6] == 1 ? (size_t)(r->file[8] | r->file[9] << 8) + 10
                                    : (size_t)(r->file[8] | r->file[9] << 8 | r->file[10] << 16 |
                                               (size_t)r->file[11] << 24) +
                                          12;
    if (header > n)
        return 0;
    char dict[1024];
    const size_t start = r->file[6] == 1 ? 10 : 12;
    snprintf(dict, sizeof dict, "%.*s", (int)(header - start < 1000 ? header - start : 1000),
             (const char *)r->file + start);
    const char *d = strstr(dict, "'descr': '");
    const char *s = strstr(dict, "'shape': (");
    if (!d || !s)
        return 0;
    snprintf(r->descr, sizeof r->descr, "%.3s", d + 10);
    r->item = (size_t)(r->descr[2] - '0');
    s += 10;
    while (*s && *s != ')' && r->ndim < 4) {
        r->shape[r->ndim++] = strtoull(s, (char **)&s, 10);
        while (*s == ',' || *s == ' ')
            s++;
    }
    r->data = r->file + header;
    r->data_size = n - header;
    return 1;
}

static void free_ref(ref_array *r)
{
    free(r->file);
}

static void file_sha256(const char *path, uint8_t d[32])
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    free(data);
}

static uint64_t frames_of(const acquisition *a)
{
    return a->shape[0] * a->shape[1];
}

static uint64_t pixels_of(const acquisition *a)
{
    return a->shape[2] * a->shape[3];
}

/* Every frame read as `target` into a fresh buffer (`*size` bytes). */
static void *read_all(acquisition *a, qem_dtype target, size_t *size, qem_error *e)
{
    *size = (size_t)(frames_of(a) * pixels_of(a) * qem_dtype_size(target));
    void *out = malloc(*size ? *size : 1);
    if (out && qem_input_read(a, 0, frames_of(a), target, out, *size, e) != QEM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static acquisition *open_ok(const char *path, const input_options *o)
{
    acquisition *a = NULL;
    qem_error e = {0};
    CHECK_OK(qem_input_open(path, o, &a, &e), &e);
    return a;
}

/* Refused with `status`, the message naming `needle` (when given). */
static void refused(const char *path, const input_options *o, qem_status status,
                    const char *needle)
{
    acquisition *a = NULL;
    qem_error e = {0};
    CHECK_STATUS(qem_input_open(path, o, &a, &e), status, &e);
    CHECK(a == NULL);
    if (needle && !strstr(e.message, needle)) {
        CHECK(!"the refusal names what is wrong");
        fprintf(stderr, "  missing '%s' in: %s\n", needle, e.message);
    }
    qem_input_close(a);
}

/* Hashing while reading every frame in order (as a save does) gives each
 * member the SHA-256 of its bytes; the frames' member (`data`) is hashed
 * by the reads themselves up to its last `tail` bytes (nothing re-read). */
static void check_streamed(acquisition *a, qem_dtype target, size_t data, uint64_t tail)
{
    qem_error e = {0};
    CHECK_OK(qem_input_stream_begin(a, &e), &e);
    const uint64_t per = 3;
    const size_t frame = (size_t)(pixels_of(a) * qem_dtype_size(target));
    uint8_t *buf = malloc(frame * per);
    for (uint64_t f = 0; f < frames_of(a); f += per) {
        const uint64_t n = frames_of(a) - f < per ? frames_of(a) - f : per;
        CHECK_OK(qem_input_read(a, f, n, target, buf, frame * n, &e), &e);
    }
    free(buf);
    CHECK(data < a->member_count);
    if (data < a->member_count)
        CHECK_EQ_U64(a->members[data].streamed, a->members[data].bytes - tail);
    CHECK_OK(qem_input_stream_finish(a, NULL, NULL, &e), &e);
    CHECK(a->authenticated);
    for (size_t i = 0; i < a->member_count; i++) {
        uint8_t d[32];
        file_sha256(a->members[i].path, d);
        CHECK(a->members[i].hashed && memcmp(a->members[i].sha256, d, 32) == 0);
    }
}

static const char *fact_string(const acquisition *a, const char *key)
{
    return json_string_value(json_object_get(a->facts, key));
}

/* Field `index` of the header of frame `frame` of a .mib, split here. */
static void mib_field(const char *path, uint64_t record, uint64_t frame, int index, char *out,
                      size_t size)
{
    size_t n = 0;
    uint8_t *b = read_file(path, &n);
    out[0] = '\0';
    if (b && (frame + 1) * record <= n) {
        const char *p = (const char *)b + frame * record;
        for (int i = 0; i < index && p; i++) {
            p = memchr(p, ',', (size_t)((const char *)b + n - p));
            p = p ? p + 1 : NULL;
        }
        if (p) {
            const char *end = memchr(p, ',', (size_t)((const char *)b + n - p));
            snprintf(out, size, "%.*s", end ? (int)(end - p) : 0, p);
        }
    }
    free(b);
}

/* --- real Merlin files ---------------------------------------------------------- */

static void test_real_mib(void)
{
    static const struct {
        const char *name;
        uint64_t scan[2];  /* the caller's scan shape, {0, 0}: none */
        uint64_t shape[4]; /* as read */
        qem_dtype dtype;
        int depth;
    } files[] = {
        {"001_4x2_6bit", {2, 4}, {2, 4, 256, 256}, QEM_DTYPE_UINT8, 6},
        {"Single_9_Frame_CounterDepth_12_Rows_256", {0, 0}, {1, 9, 256, 256}, QEM_DTYPE_UINT16, 12},
        {"Single_1_Frame_CounterDepth_24_Rows_256", {0, 0}, {1, 1, 256, 256}, QEM_DTYPE_UINT32, 24},
        {"Single_1_Frame_CounterDepth_1_Rows_256", {0, 0}, {1, 1, 256, 256}, QEM_DTYPE_UINT8, 1},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[256], mib[1024], hdr[1024], refp[1024];
        snprintf(rel, sizeof rel, "detectors/mib/%s.mib", files[i].name);
        snprintf(mib, sizeof mib, "%s", fixture_path(rel));
        mibb_hdr_path(mib, hdr, sizeof hdr);
        snprintf(rel, sizeof rel, "detectors/mib/%s.file-order.npy", files[i].name);
        snprintf(refp, sizeof refp, "%s", fixture_path(rel));
        input_options o = {.scan_shape = {files[i].scan[0], files[i].scan[1]}};
        acquisition *a = open_ok(mib, &o);
        ref_array r;
        CHECK(load_ref(refp, &r));
        if (!a) {
            free_ref(&r);
            continue;
        }
        CHECK(strcmp(a->family->name, "mib") == 0);
        CHECK(memcmp(a->shape, files[i].shape, sizeof a->shape) == 0);
        CHECK(a->sample_type == files[i].dtype);
        /* Every sample, in the stored type, bit for bit. */
        qem_error e = {0};
        size_t size = 0;
        void *got = read_all(a, files[i].dtype, &size, &e);
        CHECK(got != NULL);
        CHECK_EQ_U64(size, r.data_size);
        CHECK(got && size == r.data_size && memcmp(got, r.data, size) == 0);
        CHECK_EQ_U64(r.item, qem_dtype_size(files[i].dtype));
        free(got);
        /* The 24-bit counts fit uint16: stored narrowed, values equal. */
        if (files[i].dtype == QEM_DTYPE_UINT32) {
            uint16_t *narrow = read_all(a, QEM_DTYPE_UINT16, &size, &e);
            CHECK(narrow != NULL);
            int same = narrow != NULL;
            const uint32_t *ref32 = (const uint32_t *)r.data;
            for (size_t p = 0; narrow && p < size / 2; p++)
                same &= narrow[p] == ref32[p];
            CHECK(same);
            CHECK_EQ_U64(a->max_admitted, 2255);
            free(narrow);
        }
        /* Members: the .mib (master) and its .hdr. */
        CHECK_EQ_U64(a->member_count, 2);
        if (a->member_count == 2) {
            CHECK(a->members[0].is_master && strcmp(a->members[0].path, mib) == 0);
            CHECK(!a->members[1].is_master && strcmp(a->members[1].path, hdr) == 0);
        }
        /* Facts from the headers and the .hdr, checked against fields
         * split here from the file's own bytes. */
        const uint64_t record = 384 + 256 * 256 * qem_dtype_size(files[i].dtype);
        const uint64_t frames = frames_of(a);
        char want[128];
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "counter_depth")),
                     files[i].depth);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "frames")), frames);
        mib_field(mib, record, 0, 9, want, sizeof want);
        CHECK(fact_string(a, "first_frame_timestamp") &&
              strcmp(fact_string(a, "first_frame_timestamp"), want) == 0);
        mib_field(mib, record, frames - 1, 9, want, sizeof want);
        CHECK(fact_string(a, "last_frame_timestamp") &&
              strcmp(fact_string(a, "last_frame_timestamp"), want) == 0);
        mib_field(mib, record, 0, 10, want, sizeof want);
        CHECK(fabs(json_number_value(json_object_get(a->facts, "exposure_s")) - atof(want)) <
              1e-12);
        mib_field(mib, record, 0, 14, want, sizeof want);
        json_t *th = json_object_get(a->facts, "thresholds_keV");
        CHECK(json_array_size(th) == 8 && json_number_value(json_array_get(th, 0)) == atof(want));
        CHECK(fact_string(a, "high_voltage") && !strcmp(fact_string(a, "high_voltage"), "120 V"));
        CHECK(fact_string(a, "chip_id") && !strncmp(fact_string(a, "chip_id"), "W5", 2));
        CHECK(fact_string(a, "chip_layout") && !strcmp(fact_string(a, "chip_layout"), "1x1"));
        json_t *hdrmap = json_object_get(a->facts, "hdr");
        CHECK(json_string_value(json_object_get(hdrmap, "Gain")) &&
              !strcmp(json_string_value(json_object_get(hdrmap, "Gain")), "SLGM"));
        CHECK(json_object_get(hdrmap, "HDR,") == NULL && json_object_get(hdrmap, "End") == NULL);
        CHECK(fact_string(a, "row_order") && strstr(fact_string(a, "row_order"), "flipped"));
        qem_input_close(a);
        /* Hashed while read: the digests of the files. */
        a = open_ok(mib, &o);
        if (a)
            check_streamed(a, qem_input_stored_dtype(a), 0, 0);
        qem_input_close(a);
        free_ref(&r);
    }
    /* The 4 x 2 navigation is not stated by the file: without the caller's
     * scan shape it is refused, naming the frame count. */
    refused(fixture_path("detectors/mib/001_4x2_6bit.mib"), NULL, QEM_E_LAYOUT, "8 frames");
    /* The .hdr's 9 frames per trigger give 1 x 9; the caller's 3 x 3
     * contradicts it. */
    input_options o33 = {.scan_shape = {3, 3}};
    refused(fixture_path("detectors/mib/Single_9_Frame_CounterDepth_12_Rows_256.mib"), &o33,
            QEM_E_INVALID_ARGUMENT, "contradicts");
    /* RAW mode: refused by its own status and name. */
    refused(fixture_path("detectors/mib/Single_1_Frame_CounterDepth_1_Rows_256RAW.mib"), NULL,
            QEM_E_UNSUPPORTED, "RAW mode");
    refused(fixture_path("detectors/mib/Single_1_Frame_CounterDepth_1_Rows_256RAW.mib"), NULL,
            QEM_E_UNSUPPORTED, "not supported");
}

/* Every range [first, first + count) of the 9-frame file against its
 * reference, in and out of order (the frame-number check across reads). */
static void test_real_mib_ranges(void)
{
    ref_array r;
    CHECK(load_ref(fixture_path("detectors/mib/Single_9_Frame_CounterDepth_12_Rows_256.file-order.npy"),
                   &r));
    acquisition *a = open_ok(fixture_path("detectors/mib/Single_9_Frame_CounterDepth_12_Rows_256.mib"),
                             NULL);
    if (a && r.data) {
        const size_t frame = 256 * 256 * 2;
        uint8_t *out = malloc(frame * 10);
        int bad = 0;
        for (uint64_t first = 0; first < 9; first++)
            for (uint64_t count = 1; first + count <= 9; count++) {
                qem_error e = {0};
                memset(out, 0xAB, frame * (count + 1));
                int guard = 1;
                if (qem_input_read(a, first, count, QEM_DTYPE_UINT16, out, frame * count, &e) !=
                    QEM_OK)
                    bad++;
                for (size_t i = frame * count; i < frame * (count + 1); i++)
                    guard &= out[i] == 0xAB;
                if (!guard || memcmp(out, r.data + first * frame, frame * count) != 0)
                    bad++;
            }
        CHECK(bad == 0);
        free(out);
    }
    qem_input_close(a);
    free_ref(&r);
}

/* --- real EMPAD file -------------------------------------------------------------- */

static double quantity(const json_t *cal, const char *path, const char *unit)
{
    json_t *q = json_object_get(json_object_get(cal, "quantities"), path);
    const char *u = json_string_value(json_object_get(q, "unit"));
    const char *prov = json_string_value(json_object_get(q, "provenance"));
    if (!q || !u || strcmp(u, unit) != 0 || !prov || strcmp(prov, "EMPAD acquisition XML") != 0)
        return -1;
    return json_number_value(json_object_get(q, "value"));
}

static void test_real_empad(void)
{
    const char *xml = fixture_path("detectors/empad/map4x4.xml");
    char xml_path[1024], raw_path[1024];
    snprintf(xml_path, sizeof xml_path, "%s", xml);
    snprintf(raw_path, sizeof raw_path, "%s", fixture_path("detectors/empad/scan_x4_y4.raw"));
    ref_array r;
    CHECK(load_ref(fixture_path("detectors/empad/map4x4.hyperspy.npy"), &r));
    acquisition *a = open_ok(xml_path, NULL);
    if (a && r.data) {
        const uint64_t shape[4] = {4, 4, 128, 128};
        CHECK(strcmp(a->family->name, "empad") == 0);
        CHECK(memcmp(a->shape, shape, sizeof shape) == 0);
        CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
        CHECK(strcmp(r.descr, "<f4") == 0);
        qem_error e = {0};
        size_t size = 0;
        void *got = read_all(a, QEM_DTYPE_FLOAT32, &size, &e);
        CHECK(got && size == r.data_size && memcmp(got, r.data, size) == 0);
        free(got);
        CHECK_EQ_U64(a->member_count, 2);
        if (a->member_count == 2) {
            CHECK(a->members[0].is_master && !strcmp(a->members[0].path, xml_path));
            CHECK(!a->members[1].is_master && !strcmp(a->members[1].path, raw_path));
        }
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "dropped_rows")), 2);
        /* Calibration: the certain quantities, as the XML states them. */
        CHECK(a->calibration != NULL);
        CHECK(quantity(a->calibration, "electron_source/accelerating_voltage", "V") == 300000.0);
        CHECK(quantity(a->calibration, "imaging_system/camera_length", "m") == 0.7225);
        CHECK(quantity(a->calibration, "scan_sampling_row", "m") == 1.826537060227288e-10);
        CHECK(quantity(a->calibration, "scan_sampling_column", "m") == 1.826537060227288e-10);
        CHECK(quantity(a->calibration, "detector_sampling_row", "rad") == 0.00042906574394463665);
        CHECK(quantity(a->calibration, "detector_sampling_column", "rad") ==
              0.00042906574394463665);
        CHECK_EQ_U64(json_object_size(json_object_get(a->calibration, "quantities")), 6);
        /* Everything else, flattened, under source_metadata. */
        json_t *x = json_object_get(a->facts, "xml");
        const char *v = json_string_value(json_object_get(x, "iom_measurements/source.get_state"));
        CHECK(v && !strcmp(v, "1"));
        v = json_string_value(json_object_get(x, "scan_parameters[1]@mode"));
        CHECK(v && !strcmp(v, "acquire"));
        v = json_string_value(json_object_get(x, "scan_parameters[1]/scan_resolution_x"));
        CHECK(v && !strcmp(v, "128"));
        v = json_string_value(json_object_get(x, "reconstructions/reconstruction[6]@absolute_filename"));
        CHECK(v && strstr(v, "scan_roi3_cw_annulus"));
        v = json_string_value(json_object_get(x, "@name"));
        CHECK(v && !strcmp(v, "acquisition_1"));
    }
    qem_input_close(a);
    a = open_ok(xml_path, NULL);
    if (a)
        check_streamed(a, QEM_DTYPE_FLOAT32, 1, 1024);
    qem_input_close(a);
    free_ref(&r);

    /* Through qem_save_file: the calibration becomes schema-2 metadata. */
    const char *out = strdup(test_path("empad.qem"));
    qem_error e = {0};
    CHECK_OK(qem_save_file(xml_path, out, NULL, &e), &e);
    qem_file *f = NULL;
    CHECK_OK(qem_open(out, NULL, &f, &e), &e);
    if (f) {
        qem_calibration c = {.struct_size = sizeof c};
        CHECK_OK(qem_get_calibration(f, &c, &e), &e);
        CHECK(c.voltage.source == QEM_CALIBRATION_RECORDED && fabs(c.voltage.value - 300.0) < 1e-9 &&
              !strcmp(c.voltage.unit, "kV"));
        CHECK(c.camera_length.source == QEM_CALIBRATION_RECORDED &&
              fabs(c.camera_length.value - 722.5) < 1e-9);
        CHECK(c.scan_step[0].source == QEM_CALIBRATION_RECORDED &&
              fabs(c.scan_step[0].value - 1.826537060227288) < 1e-12 &&
              !strcmp(c.scan_step[1].unit, "angstrom"));
        CHECK(c.detector_step[1].source == QEM_CALIBRATION_RECORDED &&
              fabs(c.detector_step[1].value - 0.42906574394463665) < 1e-12 &&
              !strcmp(c.detector_step[1].unit, "mrad"));
        CHECK(c.semiangle.source == QEM_CALIBRATION_ABSENT);
        qem_close(f);
    }
    free((void *)out);
}

/* --- synthetic Merlin files -------------------------------------------------------- */

/* The values mibb_write stores for `o` (pattern), in the depth's type. */
static void *expected_mib(const mibb_options *o, size_t *size)
{
    const size_t item = mibb_item(o->depth);
    const uint64_t pixels = mibb_width(o) * mibb_height(o);
    const uint32_t max = o->max_value ? o->max_value
                         : o->depth == 1 ? 1u
                         : o->depth == 6 ? 63u
                         : o->depth == 12 ? 4095u
                                         : 16777215u;
    *size = (size_t)(o->frames * pixels * item);
    uint8_t *v = malloc(*size);
    for (uint64_t k = 0; k < o->frames; k++)
        for (uint64_t p = 0; p < pixels; p++) {
            const uint32_t x = mibb_pattern(k, p, max);
            const size_t at = (size_t)(k * pixels + p);
            if (item == 1)
                v[at] = (uint8_t)x;
            else if (item == 2)
                ((uint16_t *)v)[at] = (uint16_t)x;
            else
                ((uint32_t *)v)[at] = x;
        }
    return v;
}

static void check_mib_file(const char *path, const mibb_options *m, const input_options *o,
                           const uint64_t shape[4])
{
    acquisition *a = open_ok(path, o);
    if (!a)
        return;
    const qem_dtype dtype = mibb_item(m->depth) == 1   ? QEM_DTYPE_UINT8
                            : mibb_item(m->depth) == 2 ? QEM_DTYPE_UINT16
                                                       : QEM_DTYPE_UINT32;
    CHECK(memcmp(a->shape, shape, sizeof a->shape) == 0);
    CHECK(a->sample_type == dtype);
    size_t want_size = 0, size = 0;
    void *want = expected_mib(m, &want_size);
    qem_error e = {0};
    void *got = read_all(a, dtype, &size, &e);
    CHECK(got && size == want_size && memcmp(got, want, size) == 0);
    if (m->depth)
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "counter_depth")), m->depth);
    free(got);
    free(want);
    qem_input_close(a);
    a = open_ok(path, o);
    if (a)
        check_streamed(a, qem_input_stored_dtype(a), 0, 0);
    qem_input_close(a);
}

static void test_mib_depths(void)
{
    static const int depths[] = {1, 6, 12, 24};
    for (size_t i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "depth%d.mib", depths[i]);
        const char *path = strdup(test_path(name));
        /* 6 frames, 3 per trigger: a 2 x 3 scan from the .hdr. 24-bit
         * counts up to 65535, so that they narrow to uint16. */
        mibb_options m = {.depth = depths[i], .frames = 6, .write_hdr = 1,
                          .frames_per_trigger = 3,
                          .max_value = depths[i] == 24 ? 65535u : 0};
        CHECK(mibb_write(path, &m) == 0);
        const uint64_t shape[4] = {2, 3, 256, 256};
        check_mib_file(path, &m, NULL, shape);
        acquisition *a = open_ok(path, NULL);
        if (a && depths[i] == 24) {
            /* uint16 storage holds them exactly: 65535 passes. */
            qem_error e = {0};
            size_t size = 0;
            uint16_t *got = read_all(a, QEM_DTYPE_UINT16, &size, &e);
            CHECK(got != NULL);
            CHECK(a->max_admitted <= 65535);
            free(got);
        }
        qem_input_close(a);
        free((void *)path);
    }
    /* A 24-bit count of 65536 at an admitted pixel is never truncated: the
     * read fails naming the scan position, the pixel and the value. */
    const uint64_t pixels = 256 * 256;
    uint32_t *v = calloc(4 * pixels, 4);
    v[3 * pixels + 5 * 256 + 7] = 65536;
    v[1 * pixels] = 65535;
    const char *path = strdup(test_path("over.mib"));
    mibb_options m = {.depth = 24, .frames = 4, .data = v};
    CHECK(mibb_write(path, &m) == 0);
    input_options o = {.scan_shape = {2, 2}};
    acquisition *a = open_ok(path, &o);
    if (a) {
        uint16_t *out = malloc(4 * pixels * 2);
        qem_error e = {0};
        CHECK_STATUS(qem_input_read(a, 0, 3, QEM_DTYPE_UINT16, out, 3 * pixels * 2 - 1, &e),
                     QEM_E_BUFFER_TOO_SMALL, &e);
        e = (qem_error){0};
        CHECK_OK(qem_input_read(a, 0, 3, QEM_DTYPE_UINT16, out, 3 * pixels * 2, &e), &e);
        CHECK(out[pixels] == 65535);
        CHECK_STATUS(qem_input_read(a, 0, 4, QEM_DTYPE_UINT16, out, 4 * pixels * 2, &e),
                     QEM_E_VALUE_RANGE, &e);
        CHECK(strstr(e.message, "scan position (1, 1), detector pixel (5, 7) holds 65536"));
        free(out);
    }
    qem_input_close(a);
    free(v);
    free((void *)path);
}

static void test_mib_quad(void)
{
    const char *path = strdup(test_path("quad.mib"));
    mibb_options m = {.depth = 12, .quad = 1, .frames = 4};
    CHECK(mibb_write(path, &m) == 0);
    CHECK_EQ_U64(mibb_record_bytes(&m), 768 + 512 * 512 * 2);
    input_options o = {.scan_shape = {2, 2}};
    const uint64_t shape[4] = {2, 2, 512, 512};
    check_mib_file(path, &m, &o, shape);
    acquisition *a = open_ok(path, &o);
    if (a) {
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "header_bytes")), 768);
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "chips")), 4);
        CHECK(fact_string(a, "chip_layout") && !strcmp(fact_string(a, "chip_layout"), "2x2"));
        CHECK_EQ_U64(a->member_count, 1); /* no .hdr */
    }
    qem_input_close(a);
    /* A quad of 1-bit counters with its .hdr (4 frames per trigger). */
    const char *p1 = strdup(test_path("quad1.mib"));
    mibb_options m1 = {.depth = 1, .quad = 1, .frames = 8, .write_hdr = 1, .frames_per_trigger = 4};
    CHECK(mibb_write(p1, &m1) == 0);
    const uint64_t shape1[4] = {2, 4, 512, 512};
    check_mib_file(p1, &m1, NULL, shape1);
    free((void *)path);
    free((void *)p1);
}

/* A stack of frames: the scan shape from the caller, from the .hdr, or
 * refused. */
static void test_mib_scan_shapes(void)
{
    const char *bare = strdup(test_path("stack.mib"));
    mibb_options m = {.depth = 6, .frames = 12, .width = 16, .height = 8};
    CHECK(mibb_write(bare, &m) == 0);
    refused(bare, NULL, QEM_E_LAYOUT, "12 frames");
    input_options o34 = {.scan_shape = {3, 4}};
    const uint64_t shape34[4] = {3, 4, 8, 16};
    check_mib_file(bare, &m, &o34, shape34);
    input_options o55 = {.scan_shape = {5, 5}};
    refused(bare, &o55, QEM_E_LAYOUT, "does not match the 12 frames");
    input_options odata = {.dataset = "/entry/data"};
    refused(bare, &odata, QEM_E_INVALID_ARGUMENT, "--dataset");

    /* The .hdr's frames per trigger: columns of a scan row. */
    const char *hdr4 = strdup(test_path("fpt4.mib"));
    mibb_options m4 = m;
    m4.write_hdr = 1;
    m4.frames_per_trigger = 4;
    CHECK(mibb_write(hdr4, &m4) == 0);
    check_mib_file(hdr4, &m4, NULL, shape34);
    check_mib_file(hdr4, &m4, &o34, shape34);
    input_options o43 = {.scan_shape = {4, 3}};
    refused(hdr4, &o43, QEM_E_INVALID_ARGUMENT, "Frames per Trigger");
    /* 5 per trigger does not divide 12 frames: refused unless given. */
    const char *hdr5 = strdup(test_path("fpt5.mib"));
    mibb_options m5 = m4;
    m5.frames_per_trigger = 5;
    CHECK(mibb_write(hdr5, &m5) == 0);
    refused(hdr5, NULL, QEM_E_LAYOUT, "frames per trigger");
    check_mib_file(hdr5, &m5, &o34, shape34);
    /* One frame is one scan position. */
    const char *one = strdup(test_path("one.mib"));
    mibb_options m1 = m;
    m1.frames = 1;
    CHECK(mibb_write(one, &m1) == 0);
    const uint64_t shape1[4] = {1, 1, 8, 16};
    check_mib_file(one, &m1, NULL, shape1);
    /* An older header without the extension: the depth from the .hdr. */
    const char *old = strdup(test_path("old.mib"));
    mibb_options mo = m4;
    mo.omit_extended = 1;
    CHECK(mibb_write(old, &mo) == 0);
    acquisition *a = open_ok(old, NULL);
    if (a)
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "counter_depth")), 6);
    qem_input_close(a);
    /* A file named otherwise is recognised by its content. */
    const char *other = strdup(test_path("acquisition.bin"));
    CHECK(rename(one, other) == 0);
    a = open_ok(other, NULL);
    CHECK(a && !strcmp(a->family->name, "mib"));
    qem_input_close(a);
    free((void *)bare);
    free((void *)hdr4);
    free((void *)hdr5);
    free((void *)one);
    free((void *)old);
    free((void *)other);
}

/* Overwrites `n` bytes at `offset` of `path`. */
static void patch(const char *path, uint64_t offset, const char *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, bytes, n, (off_t)offset) == (ssize_t)n);
    close(fd);
}

static void test_mib_refusals(void)
{
    mibb_options m = {.depth = 12, .frames = 4, .width = 32, .height = 16};
    const uint64_t record = mibb_record_bytes(&m);
    input_options o = {.scan_shape = {2, 2}};
    /* A truncated last frame. */
    const char *p = strdup(test_path("trunc.mib"));
    CHECK(mibb_write(p, &m) == 0);
    CHECK(truncate(p, (off_t)(4 * record - 100)) == 0);
    refused(p, &o, QEM_E_FILE_LENGTH, "last frame is truncated");
    CHECK(truncate(p, 200) == 0);
    refused(p, &o, QEM_E_FILE_LENGTH, "shorter than its first frame header");
    /* A frame header that disagrees: frame 3's width ("0032" at byte 20). */
    CHECK(mibb_write(p, &m) == 0);
    patch(p, 2 * record + 20, "0016", 4);
    refused(p, &o, QEM_E_LAYOUT, "frame 3 of");
    refused(p, &o, QEM_E_LAYOUT, "disagrees with the first frame's");
    /* ... its data type. */
    CHECK(mibb_write(p, &m) == 0);
    patch(p, 3 * record + 30, "U08", 3);
    refused(p, &o, QEM_E_LAYOUT, "frame 4 of");
    /* ... its number (frames out of order). */
    CHECK(mibb_write(p, &m) == 0);
    patch(p, 2 * record + 4, "000001", 6);
    refused(p, &o, QEM_E_LAYOUT, "numbers must increase");
    /* ... its header size. */
    CHECK(mibb_write(p, &m) == 0);
    patch(p, record + 11, "00768", 5);
    refused(p, &o, QEM_E_LAYOUT, "disagrees");
    /* An unknown counter depth; a depth that disagrees with the type. */
    mibb_options md = m;
    md.stated_depth = 8;
    CHECK(unlink(p) == 0 && mibb_write(p, &md) == 0);
    refused(p, &o, QEM_E_LAYOUT, "counter depth 8");
    md.stated_depth = 24;
    CHECK(unlink(p) == 0 && mibb_write(p, &md) == 0);
    refused(p, &o, QEM_E_LAYOUT, "counter depth 24 but the data type U16");
    /* An unknown data type; RAW mode. */
    mibb_options mt = m;
    mt.data_type = "U64";
    CHECK(unlink(p) == 0 && mibb_write(p, &mt) == 0);
    refused(p, &o, QEM_E_LAYOUT, "data type 'U64'");
    mt.data_type = "R64";
    CHECK(unlink(p) == 0 && mibb_write(p, &mt) == 0);
    refused(p, &o, QEM_E_UNSUPPORTED, "RAW mode");
    /* Headers that are not Merlin headers. */
    CHECK(write_file(p, "MQ1,", 4));
    refused(p, &o, QEM_E_LAYOUT, "header size");
    CHECK(write_file(p, "MQ1,000001,00003,01,", 20));
    refused(p, &o, QEM_E_LAYOUT, "3 bytes");
    CHECK(write_file(p, "MQ1,000001,00040,01,0x10,0016,U08,1x1\0\0\0\0", 42));
    refused(p, &o, QEM_E_LAYOUT, "decimal numbers");
    CHECK(write_file(p, "MQ1,000001,00040,01,0000,0016,U08,1x1\0\0\0\0", 42));
    refused(p, &o, QEM_E_LAYOUT, "1 to 65535");
    free((void *)p);
}

/* Replaces `path` by a new file (same bytes, another inode), as a writer
 * that rewrites an acquisition does. */
static void replace_file(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    size_t n = 0;
    uint8_t *b = read_file(path, &n);
    CHECK(b && write_file(tmp, b, n));
    CHECK(rename(tmp, path) == 0);
    free(b);
}

/* A member replaced or rewritten while it is read. */
static void test_changed_during_read(void)
{
    /* MIB: the .mib replaced mid-read. */
    const char *p = strdup(test_path("changing.mib"));
    mibb_options m = {.depth = 6, .frames = 4, .width = 32, .height = 16, .write_hdr = 1,
                      .frames_per_trigger = 2};
    CHECK(mibb_write(p, &m) == 0);
    acquisition *a = open_ok(p, NULL);
    if (a) {
        qem_error e = {0};
        uint8_t out[2 * 32 * 16];
        CHECK_OK(qem_input_stream_begin(a, &e), &e);
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        replace_file(p);
        CHECK_OK(qem_input_read(a, 2, 2, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        qem_error e1 = {0}, e2 = {0};
        CHECK_STATUS(qem_input_check_unchanged(a, &e1), QEM_E_CHANGED, &e1);
        CHECK(strstr(e1.message, "changing.mib") != NULL);
        CHECK_STATUS(qem_input_stream_finish(a, NULL, NULL, &e2), QEM_E_CHANGED, &e2);
    }
    qem_input_close(a);
    /* ... the .hdr rewritten. */
    a = open_ok(p, NULL);
    if (a) {
        qem_error e = {0};
        uint8_t out[4 * 32 * 16];
        CHECK_OK(qem_input_stream_begin(a, &e), &e);
        CHECK_OK(qem_input_read(a, 0, 4, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        char hdr[1024];
        mibb_hdr_path(p, hdr, sizeof hdr);
        patch(hdr, 2040, "x", 1);
        CHECK_STATUS(qem_input_stream_finish(a, NULL, NULL, &e), QEM_E_CHANGED, &e);
    }
    qem_input_close(a);
    /* ... a frame header rewritten in place since it was described: the
     * read itself refuses it. */
    CHECK(unlink(p) == 0 && mibb_write(p, &m) == 0);
    a = open_ok(p, NULL);
    if (a) {
        qem_error e = {0};
        uint8_t out[4 * 32 * 16];
        patch(p, 3 * mibb_record_bytes(&m) + 20, "0016", 4);
        CHECK_OK(qem_input_read(a, 0, 3, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        CHECK_STATUS(qem_input_read(a, 3, 1, QEM_DTYPE_UINT8, out, sizeof out, &e), QEM_E_CHANGED,
                     &e);
        CHECK(strstr(e.message, "changed since it was described"));
    }
    qem_input_close(a);
    /* ... frame numbers rewritten: out of order across two reads. */
    CHECK(unlink(p) == 0 && mibb_write(p, &m) == 0);
    a = open_ok(p, NULL);
    if (a) {
        qem_error e = {0};
        uint8_t out[4 * 32 * 16];
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_UINT8, out, sizeof out, &e), &e);
        patch(p, 2 * mibb_record_bytes(&m) + 4, "000001", 6);
        CHECK_STATUS(qem_input_read(a, 2, 1, QEM_DTYPE_UINT8, out, sizeof out, &e), QEM_E_CHANGED,
                     &e);
        CHECK(strstr(e.message, "increase"));
    }
    qem_input_close(a);

    /* EMPAD: the raw file replaced mid-read. */
    const char *x = strdup(test_path("chg/acq.xml"));
    mkdir(test_path("chg"), 0700);
    empadb_options eo = {.scan_rows = 2, .scan_columns = 2, .state_scan = 1};
    CHECK(empadb_write(x, &eo) == 0);
    a = open_ok(x, NULL);
    if (a) {
        qem_error e = {0};
        float *out = malloc(4 * 128 * 128 * 4);
        CHECK_OK(qem_input_stream_begin(a, &e), &e);
        CHECK_OK(qem_input_read(a, 0, 2, QEM_DTYPE_FLOAT32, out, 2 * 128 * 128 * 4, &e), &e);
        replace_file(test_path("chg/scan_x2_y2.raw"));
        CHECK_OK(qem_input_read(a, 2, 2, QEM_DTYPE_FLOAT32, out, 2 * 128 * 128 * 4, &e), &e);
        qem_error e1 = {0}, e2 = {0};
        CHECK_STATUS(qem_input_check_unchanged(a, &e1), QEM_E_CHANGED, &e1);
        CHECK(strstr(e1.message, "scan_x2_y2.raw") != NULL);
        CHECK_STATUS(qem_input_stream_finish(a, NULL, NULL, &e2), QEM_E_CHANGED, &e2);
        free(out);
    }
    qem_input_close(a);

    /* Raw: the file replaced mid-read. */
    const char *r = strdup(test_path("changing.raw"));
    uint16_t v[4 * 6];
    for (int i = 0; i < 24; i++)
        v[i] = (uint16_t)(i * 1000);
    rawb_options ro = {.shape = {2, 2, 2, 3}, .dtype = QEM_DTYPE_UINT16, .data = v};
    CHECK(rawb_write(r, &ro) == 0);
    input_options o = {.raw = {.shape = {2, 2, 2, 3}, .dtype = QEM_DTYPE_UINT16}};
    a = open_ok(r, &o);
    if (a) {
        qem_error e = {0};
        uint16_t out[24];
        CHECK_OK(qem_input_stream_begin(a, &e), &e);
        CHECK_OK(qem_input_read(a, 0, 4, QEM_DTYPE_UINT16, out, sizeof out, &e), &e);
        CHECK(memcmp(out, v, sizeof v) == 0);
        replace_file(r);
        qem_error e1 = {0}, e2 = {0};
        CHECK_STATUS(qem_input_check_unchanged(a, &e1), QEM_E_CHANGED, &e1);
        CHECK_STATUS(qem_input_stream_finish(a, NULL, NULL, &e2), QEM_E_CHANGED, &e2);
    }
    qem_input_close(a);
    free((void *)p);
    free((void *)x);
    free((void *)r);
}

/* --- synthetic EMPAD ---------------------------------------------------------------- */

static void check_empad(const char *xml, const input_options *o, uint64_t rows, uint64_t cols)
{
    acquisition *a = open_ok(xml, o);
    if (!a)
        return;
    const uint64_t shape[4] = {rows, cols, 128, 128};
    CHECK(memcmp(a->shape, shape, sizeof shape) == 0);
    qem_error e = {0};
    size_t size = 0;
    float *got = read_all(a, QEM_DTYPE_FLOAT32, &size, &e);
    CHECK(got != NULL);
    int same = got != NULL;
    for (uint64_t k = 0; got && k < rows * cols; k++)
        for (uint64_t r = 0; r < 128; r++)
            for (uint64_t c = 0; c < 128; c++)
                same &= got[(k * 128 + r) * 128 + c] == empadb_value(k, r, c);
    CHECK(same);
    free(got);
    qem_input_close(a);
    a = open_ok(xml, o);
    if (a)
        check_streamed(a, QEM_DTYPE_FLOAT32, 1, 1024);
    qem_input_close(a);
}

static void test_empad(void)
{
    mkdir(test_path("empad"), 0700);
    /* The XML states a 2 x 3 scan (pix_y = 2 rows, pix_x = 3 columns). */
    const char *xml = strdup(test_path("empad/stated.xml"));
    empadb_options eo = {.scan_rows = 2, .scan_columns = 3, .state_scan = 1, .calibration = 1,
                         .voltage_v = 200000, .camera_length_m = 0.115,
                         .pixel_size_m = 3.5e-11, .diffraction_angle_rad = 6.25e-4};
    CHECK(empadb_write(xml, &eo) == 0);
    check_empad(xml, NULL, 2, 3);
    input_options o23 = {.scan_shape = {2, 3}}, o32 = {.scan_shape = {3, 2}};
    check_empad(xml, &o23, 2, 3);
    refused(xml, &o32, QEM_E_INVALID_ARGUMENT, "<pix_y>/<pix_x>");
    acquisition *a = open_ok(xml, NULL);
    if (a) {
        CHECK(quantity(a->calibration, "electron_source/accelerating_voltage", "V") == 200000);
        CHECK(quantity(a->calibration, "imaging_system/camera_length", "m") == 0.115);
        CHECK(quantity(a->calibration, "scan_sampling_column", "m") == 3.5e-11);
        CHECK(quantity(a->calibration, "detector_sampling_row", "rad") == 6.25e-4);
        /* "None" is no quantity: recorded as a fact only. */
        const char *v = json_string_value(
            json_object_get(json_object_get(a->facts, "xml"), "iom_measurements/optics.get_magnicication"));
        CHECK(v && !strcmp(v, "None"));
        CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "dropped_rows")), 2);
    }
    qem_input_close(a);

    /* Without pix_x/pix_y: the caller's scan shape, any that fits. */
    const char *bare = strdup(test_path("empad/bare.xml"));
    empadb_options eb = {.scan_rows = 2, .scan_columns = 3, .raw_name = "bare.raw"};
    CHECK(empadb_write(bare, &eb) == 0);
    refused(bare, NULL, QEM_E_LAYOUT, "6 frames");
    check_empad(bare, &o23, 2, 3);
    check_empad(bare, &o32, 3, 2);
    a = open_ok(bare, &o23);
    CHECK(a && a->calibration == NULL);
    qem_input_close(a);

    /* The raw size must match the stated scan exactly. */
    const char *shortx = strdup(test_path("empad/short.xml"));
    empadb_options es = eo;
    es.raw_name = "short.raw";
    CHECK(empadb_write(shortx, &es) == 0);
    CHECK(truncate(test_path("empad/short.raw"), 6 * 66560 - 4) == 0);
    refused(shortx, NULL, QEM_E_FILE_LENGTH, "needs exactly 399360");
    es.state_scan = 0;
    CHECK(empadb_write(shortx, &es) == 0);
    CHECK(truncate(test_path("empad/short.raw"), 6 * 66560 - 4) == 0);
    refused(shortx, &o23, QEM_E_FILE_LENGTH, "not a whole number of EMPAD frames");
    CHECK(truncate(test_path("empad/short.raw"), 0) == 0);
    refused(shortx, &o23, QEM_E_FILE_LENGTH, "not a whole number");
    free((void *)xml);
    free((void *)bare);
    free((void *)shortx);
}

static void test_empad_refusals(void)
{
    mkdir(test_path("inner"), 0700);
    mkdir(test_path("inner/sub"), 0700);
    /* A raw file outside the XML's folder: "..", absolute, a symlink. */
    const char *x = strdup(test_path("inner/acq.xml"));
    const char *outside = strdup(test_path("outside.raw"));
    empadb_options eo = {.scan_rows = 1, .scan_columns = 2, .state_scan = 1,
                         .raw_name = "../outside.raw", .raw_path = outside};
    CHECK(empadb_write(x, &eo) == 0);
    refused(x, NULL, QEM_E_LAYOUT, "outside the XML's folder");
    eo.raw_name = outside;
    CHECK(empadb_write(x, &eo) == 0);
    refused(x, NULL, QEM_E_LAYOUT, "outside the XML's folder");
    eo.raw_name = "sub/../../outside.raw";
    CHECK(empadb_write(x, &eo) == 0);
    refused(x, NULL, QEM_E_LAYOUT, "outside");
    eo.raw_name = "link.raw";
    CHECK(empadb_write(x, &eo) == 0);
    CHECK(symlink(outside, test_path("inner/link.raw")) == 0);
    refused(x, NULL, QEM_E_LAYOUT, "resolves to");
    /* A symlink inside the folder is followed. */
    eo.raw_name = "sub/real.raw";
    eo.raw_path = NULL;
    CHECK(empadb_write(x, &eo) == 0);
    eo.raw_name = "inlink.raw";
    eo.raw_path = "";
    CHECK(empadb_write(x, &eo) == 0);
    CHECK(symlink("sub/real.raw", test_path("inner/inlink.raw")) == 0);
    acquisition *a = open_ok(x, NULL);
    CHECK(a && a->member_count == 2);
    qem_input_close(a);
    /* Not a regular file; missing. */
    eo.raw_name = "sub";
    CHECK(empadb_write(x, &eo) == 0);
    refused(x, NULL, QEM_E_LAYOUT, "not a regular file");
    eo.raw_name = "missing.raw";
    CHECK(empadb_write(x, &eo) == 0);
    refused(x, NULL, QEM_E_IO, "cannot be read");
    /* XML that is not an EMPAD acquisition, or not well-formed. */
    static const struct {
        const char *xml;
        qem_status status;
        const char *needle;
    } docs[] = {
        {"<root><type>scan</type></root>", QEM_E_UNSUPPORTED, "not an EMPAD acquisition"},
        {"<root><raw_file filename=\"a.raw\"/><raw_file filename=\"b.raw\"/></root>",
         QEM_E_LAYOUT, "more than one raw file"},
        {"<root><raw_file filename=\"\"/></root>", QEM_E_LAYOUT, "empty raw file name"},
        {"<root><raw_file filename=\"a.raw\"/>", QEM_E_LAYOUT, "not well-formed"},
        {"<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY e \"x\">]><r>&e;</r>", QEM_E_LAYOUT,
         "DOCTYPE"},
        {"  \n<root><pix_x>4</pix_x><raw_file filename=\"sub/real.raw\"/></root>", QEM_E_LAYOUT,
         "(missing)"},
        {"<root><pix_x>0</pix_x><pix_y>2</pix_y><raw_file filename=\"sub/real.raw\"/></root>",
         QEM_E_LAYOUT, "positive integers"},
        {"<root><pix_x>2x</pix_x><pix_y>1</pix_y><raw_file filename=\"sub/real.raw\"/></root>",
         QEM_E_LAYOUT, "positive integers"},
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        CHECK(write_file(x, docs[i].xml, strlen(docs[i].xml)));
        refused(x, NULL, docs[i].status, docs[i].needle);
    }
    /* Nesting without bound is refused (expat would follow it). */
    char *deep = malloc(70 * 7 + 64);
    size_t n = 0;
    for (int i = 0; i < 70; i++)
        n += (size_t)sprintf(deep + n, "<a>");
    for (int i = 0; i < 70; i++)
        n += (size_t)sprintf(deep + n, "</a>");
    CHECK(write_file(x, deep, n));
    refused(x, NULL, QEM_E_LIMIT, "deep");
    free(deep);
    /* A value longer than the 4096 bytes kept, cut inside a character:
     * the fact keeps whole characters only. */
    char *note = malloc(8192);
    n = (size_t)sprintf(note, "<root><pix_x>2</pix_x><pix_y>1</pix_y>"
                              "<raw_file filename=\"sub/real.raw\"/><note>x");
    for (int i = 0; i < 3000; i++)
        n += (size_t)sprintf(note + n, "\xc3\xa9");
    n += (size_t)sprintf(note + n, "</note></root>");
    CHECK(write_file(x, note, n));
    free(note);
    a = open_ok(x, NULL);
    if (a) {
        const char *v = json_string_value(json_object_get(json_object_get(a->facts, "xml"), "note"));
        CHECK(v && strlen(v) == 4095 && v[0] == 'x');
    }
    qem_input_close(a);
    /* With the raw file it names, in order, 1 x 2 frames. */
    const char *ok = "<root><pix_x>2</pix_x><pix_y>1</pix_y><raw_file filename=\"sub/real.raw\"/>"
                     "</root>";
    CHECK(write_file(x, ok, strlen(ok)));
    a = open_ok(x, NULL);
    CHECK(a && a->shape[0] == 1 && a->shape[1] == 2);
    qem_input_close(a);
    free((void *)x);
    free((void *)outside);
}

/* --- raw binary ---------------------------------------------------------------------- */

static void test_raw(void)
{
    static const struct {
        qem_dtype dtype;
        int big_endian;
    } kinds[] = {{QEM_DTYPE_UINT8, 0},  {QEM_DTYPE_UINT8, 1},   {QEM_DTYPE_UINT16, 0},
                 {QEM_DTYPE_UINT16, 1}, {QEM_DTYPE_UINT32, 0},  {QEM_DTYPE_UINT32, 1},
                 {QEM_DTYPE_FLOAT32, 0}, {QEM_DTYPE_FLOAT32, 1}};
    static const uint64_t layouts[3][2] = {{0, 0}, {7, 0}, {13, 5}}; /* offset, frame header */
    const uint64_t shape[4] = {3, 2, 5, 7}, n = 6 * 35;
    uint64_t s = 5;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t l = 0; l < 3; l++) {
            const size_t item = qem_dtype_size(kinds[k].dtype);
            uint8_t *v = malloc((size_t)n * item);
            for (uint64_t i = 0; i < n; i++) {
                const uint64_t r = test_rand(&s);
                if (kinds[k].dtype == QEM_DTYPE_FLOAT32) {
                    float x = (float)(r % 100000) / 7.0f - 1000.0f;
                    memcpy(v + i * 4, &x, 4);
                } else {
                    memcpy(v + i * item, &r, item); /* any bits: all values */
                }
            }
            const char *path = strdup(test_path("frames.raw"));
            unlink(path);
            rawb_options ro = {.shape = {3, 2, 5, 7}, .dtype = kinds[k].dtype,
                               .big_endian = kinds[k].big_endian, .offset = layouts[l][0],
                               .frame_header = layouts[l][1], .data = v};
            CHECK(rawb_write(path, &ro) == 0);
            input_options o = {.raw = {.shape = {3, 2, 5, 7}, .dtype = kinds[k].dtype,
                                       .big_endian = kinds[k].big_endian,
                                       .offset = layouts[l][0],
                                       .frame_header = layouts[l][1]}};
            acquisition *a = open_ok(path, &o);
            if (a) {
                CHECK(!strcmp(a->family->name, "raw"));
                CHECK(memcmp(a->shape, shape, sizeof shape) == 0);
                CHECK(a->sample_type == kinds[k].dtype);
                qem_error e = {0};
                size_t size = 0;
                void *got = read_all(a, kinds[k].dtype, &size, &e);
                CHECK(got && size == n * item && memcmp(got, v, size) == 0);
                free(got);
                /* A window in the middle. */
                uint8_t mid[2 * 35 * 4];
                CHECK_OK(qem_input_read(a, 3, 2, kinds[k].dtype, mid, 2 * 35 * item, &e), &e);
                CHECK(memcmp(mid, v + 3 * 35 * item, 2 * 35 * item) == 0);
                CHECK_EQ_U64(json_integer_value(json_object_get(a->facts, "frame_header")),
                             layouts[l][1]);
            }
            qem_input_close(a);
            a = open_ok(path, &o);
            if (a)
                check_streamed(a, kinds[k].dtype, 0, 0);
            qem_input_close(a);
            /* One byte more or less than the shape needs. */
            const uint64_t need = layouts[l][0] + 6 * (layouts[l][1] + 35 * item);
            char expect[64], actual[64];
            snprintf(expect, sizeof expect, "exactly %llu bytes", (unsigned long long)need);
            snprintf(actual, sizeof actual, "holds %llu bytes", (unsigned long long)need - 1);
            CHECK(truncate(path, (off_t)need - 1) == 0);
            refused(path, &o, QEM_E_FILE_LENGTH, expect);
            refused(path, &o, QEM_E_FILE_LENGTH, actual);
            CHECK(truncate(path, (off_t)need + 1) == 0);
            refused(path, &o, QEM_E_FILE_LENGTH, expect);
            free(v);
            free((void *)path);
        }
    /* Options that cannot apply, a shape that overflows. */
    const char *path = strdup(test_path("small.raw"));
    CHECK(write_file(path, "abcdef", 6));
    input_options bad = {.raw = {.shape = {1, 1, 2, 3}, .dtype = QEM_DTYPE_UINT8},
                         .scan_shape = {1, 1}};
    refused(path, &bad, QEM_E_INVALID_ARGUMENT, "--scan-shape");
    input_options ok = {.raw = {.shape = {1, 1, 2, 3}, .dtype = QEM_DTYPE_UINT8}};
    acquisition *a = open_ok(path, &ok);
    if (a) {
        uint8_t out[6];
        qem_error e = {0};
        CHECK_OK(qem_input_read(a, 0, 1, QEM_DTYPE_UINT8, out, 6, &e), &e);
        CHECK(memcmp(out, "abcdef", 6) == 0);
    }
    qem_input_close(a);
    input_options zero = {.raw = {.shape = {1, 0, 2, 3}, .dtype = QEM_DTYPE_UINT8}};
    refused(path, &zero, QEM_E_LAYOUT, "empty dimension");
    input_options huge = {.raw = {.shape = {1u << 20, 1u << 20, 1, 1}, .dtype = QEM_DTYPE_UINT8,
                                  .frame_header = 1u << 30}};
    refused(path, &huge, QEM_E_FILE_LENGTH, "more than 2^64 bytes");
    input_options wide = {.raw = {.shape = {1, 1, 2, 3}, .dtype = QEM_DTYPE_UINT8,
                                  .offset = UINT64_MAX}};
    refused(path, &wide, QEM_E_FILE_LENGTH, "2^64");
    input_options f64 = {.raw = {.shape = {1, 1, 2, 3}, .dtype = QEM_DTYPE_FLOAT64}};
    refused(path, &f64, QEM_E_INVALID_ARGUMENT, "uint8, uint16, uint32, float32, int8");
    free((void *)path);
}

/* --- issue 30: signed, wider and float64 samples (lib/input/values.c) -------------- */

/* `n` values of `item` bytes each (host order) written as raw binary in
 * `big_endian` order, opened as 1 x n/6 frames of 2 x 3 of `values`. */
static acquisition *open_values(const char *name, input_values values, int big_endian,
                                const void *data, size_t n, size_t item, qem_status expect,
                                const char *needle)
{
    uint8_t *bytes = malloc(n * item);
    const uint8_t *host = data;
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < item; b++)
            bytes[i * item + b] = host[i * item + (big_endian ? item - 1 - b : b)];
    const char *path = test_path(name);
    CHECK(write_file(path, bytes, n * item));
    free(bytes);
    input_options o = {.raw = {.shape = {1, n / 6, 2, 3}, .values = values,
                               .big_endian = big_endian}};
    if (expect != QEM_OK) {
        refused(path, &o, expect, needle);
        return NULL;
    }
    return open_ok(path, &o);
}

static void check_values_json(const acquisition *a, const char *read_as, const char *stored,
                              const char *minimum, const char *maximum)
{
    json_t *meta = qem_input_source_metadata(a);
    json_t *v = json_object_get(meta, "values");
    const size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(17);
    char *lo = json_dumps(json_object_get(v, "minimum"), flags);
    char *hi = json_dumps(json_object_get(v, "maximum"), flags);
    CHECK(!strcmp(json_string_value(json_object_get(meta, "sample_type")), read_as));
    CHECK(!strcmp(json_string_value(json_object_get(meta, "stored_as")), stored));
    CHECK(!strcmp(json_string_value(json_object_get(v, "read_as")), read_as));
    CHECK(lo && !strcmp(lo, minimum));
    CHECK(hi && !strcmp(hi, maximum));
    free(lo);
    free(hi);
    json_decref(meta);
}

static void test_raw_values(void)
{
    qem_error e = {0};
    size_t size = 0;
    /* int16 within 0..65535: uint16, both byte orders. */
    const int16_t i16[6] = {0, 1, 300, 32767, 7, 2};
    for (int be = 0; be < 2; be++) {
        acquisition *a = open_values("i16.raw", INPUT_VALUES_INT16, be, i16, 6, 2, QEM_OK, NULL);
        if (!a)
            continue;
        CHECK(a->sample_type == QEM_DTYPE_UINT16);
        CHECK(qem_input_stored_dtype(a) == QEM_DTYPE_UINT16);
        uint16_t *got = read_all(a, QEM_DTYPE_UINT16, &size, &e);
        CHECK(got && got[0] == 0 && got[2] == 300 && got[3] == 32767 && got[5] == 2);
        free(got);
        check_values_json(a, "int16", "uint16", "0", "32767");
        qem_input_close(a);
    }
    /* Negative values: float32, exactly. */
    const int8_t i8[6] = {-128, -1, 0, 1, 127, 5};
    acquisition *a = open_values("i8.raw", INPUT_VALUES_INT8, 0, i8, 6, 1, QEM_OK, NULL);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
        float *got = read_all(a, QEM_DTYPE_FLOAT32, &size, &e);
        CHECK(got && got[0] == -128.0f && got[1] == -1.0f && got[4] == 127.0f);
        free(got);
        CHECK_STATUS(qem_input_read(a, 0, 1, QEM_DTYPE_UINT16, &size, 12, &e),
                     QEM_E_WRONG_CODEC, &e);
        check_values_json(a, "int8", "float32", "-128", "127");
    }
    qem_input_close(a);
    /* int32: beyond uint16 but within float32's 24 bits; 2^25 is exact
     * too; 2^24 + 1 is not. */
    const int32_t i32[6] = {70000, -3, 16777216, 33554432, 0, 9};
    a = open_values("i32.raw", INPUT_VALUES_INT32, 1, i32, 6, 4, QEM_OK, NULL);
    if (a) {
        float *got = read_all(a, QEM_DTYPE_FLOAT32, &size, &e);
        CHECK(got && got[0] == 70000.0f && got[1] == -3.0f && got[3] == 33554432.0f);
        free(got);
        check_values_json(a, "int32", "float32", "-3", "33554432");
    }
    qem_input_close(a);
    const int32_t odd[6] = {16777217, -1, 0, 0, 0, 0};
    open_values("odd.raw", INPUT_VALUES_INT32, 0, odd, 6, 4, QEM_E_VALUE_RANGE,
                "int32 values from -1 to 16777217");
    const int32_t in_range[6] = {65535, 0, 1, 2, 3, 4};
    a = open_values("u.raw", INPUT_VALUES_INT32, 0, in_range, 6, 4, QEM_OK, NULL);
    CHECK(a && a->sample_type == QEM_DTYPE_UINT16);
    qem_input_close(a);
    /* float64: float32 bit for bit (-0.0, infinity, the quiet NaN), never
     * uint16 even when integral; 0.1 would round. */
    const double f64[6] = {0.25, -0.0, INFINITY, NAN, 3.0, -1024.5};
    uint32_t bits[6];
    a = open_values("f64.raw", INPUT_VALUES_FLOAT64, 1, f64, 6, 8, QEM_OK, NULL);
    if (a) {
        CHECK(a->sample_type == QEM_DTYPE_FLOAT32);
        float *got = read_all(a, QEM_DTYPE_FLOAT32, &size, &e);
        for (int k = 0; got && k < 6; k++) {
            const float want = (float)f64[k];
            memcpy(&bits[k], &got[k], 4);
            CHECK(memcmp(&got[k], &want, 4) == 0);
        }
        CHECK(bits[1] == 0x80000000u && bits[3] == 0x7fc00000u);
        free(got);
        check_values_json(a, "float64", "float32", "-1024.5", "\"inf\"");
    }
    qem_input_close(a);
    const double integral[6] = {0, 1, 2, 3, 4, 5};
    a = open_values("f64i.raw", INPUT_VALUES_FLOAT64, 0, integral, 6, 8, QEM_OK, NULL);
    CHECK(a && a->sample_type == QEM_DTYPE_FLOAT32);
    qem_input_close(a);
    const double tenth[6] = {0, 0.1, 2, 3, 4, 5};
    open_values("f64r.raw", INPUT_VALUES_FLOAT64, 0, tenth, 6, 8, QEM_E_VALUE_RANGE,
                "a value would round in float32");
    /* A value changed after the open proved the rest: refused while reading. */
    a = open_values("chg.raw", INPUT_VALUES_INT16, 0, i16, 12 / 2, 2, QEM_OK, NULL);
    if (a) {
        const int16_t negative = -5;
        FILE *f = fopen(test_path("chg.raw"), "r+b");
        CHECK(f && fseek(f, 4, SEEK_SET) == 0 && fwrite(&negative, 2, 1, f) == 1);
        if (f)
            fclose(f);
        uint16_t out[6];
        qem_error changed = {0};
        CHECK_STATUS(qem_input_read(a, 0, 1, QEM_DTYPE_UINT16, out, sizeof out, &changed),
                     QEM_E_CHANGED, &changed);
        CHECK(strstr(changed.message, "detector pixel (0, 2)") != NULL);
    }
    qem_input_close(a);
}

/* --- issue 27: companions, .hdr depths, shapes, long XML ------------------------ */

/* Rewrites `path` with the first `from` replaced by `to`. */
static void replace_text(const char *path, const char *from, const char *to)
{
    size_t n = 0;
    char *b = (char *)read_file(path, &n);
    char *at = b ? memmem(b, n, from, strlen(from)) : NULL;
    CHECK(at != NULL);
    if (at) {
        const size_t head = (size_t)(at - b), tail = n - head - strlen(from);
        char *out = malloc(head + strlen(to) + tail);
        memcpy(out, b, head);
        memcpy(out + head, to, strlen(to));
        memcpy(out + head + strlen(to), at + strlen(from), tail);
        CHECK(write_file(path, out, head + strlen(to) + tail));
        free(out);
    }
    free(b);
}

/* A Merlin .hdr is a companion like an EMPAD raw file: a symlink leading
 * out of the .mib's folder is refused, its target never read or quoted. */
static void test_mib_hdr_companion(void)
{
    mkdir(test_path("hdrdir"), 0700);
    mkdir(test_path("hdrdir/sub"), 0700);
    const char *p = strdup(test_path("hdrdir/acq.mib"));
    char hdr[1024];
    mibb_hdr_path(p, hdr, sizeof hdr);
    mibb_options m = {.depth = 12, .frames = 4, .width = 32, .height = 16, .write_hdr = 1,
                      .frames_per_trigger = 2};
    CHECK(mibb_write(p, &m) == 0);
    /* Outside: a file of the machine with "Key:\tValue" lines. */
    const char *secret = strdup(test_path("secret.txt"));
    CHECK(write_file(secret, "Password:\thunter2\n", 18));
    CHECK(unlink(hdr) == 0 && symlink(secret, hdr) == 0);
    refused(p, NULL, QEM_E_LAYOUT, "has the .hdr 'acq.hdr', which resolves to");
    refused(p, NULL, QEM_E_LAYOUT, "outside the .mib's folder");
    /* ... a relative symlink leading out, and a dangling one. */
    CHECK(unlink(hdr) == 0 && symlink("../secret.txt", hdr) == 0);
    refused(p, NULL, QEM_E_LAYOUT, "outside the .mib's folder");
    CHECK(unlink(hdr) == 0 && symlink("gone.hdr", hdr) == 0);
    refused(p, NULL, QEM_E_IO, "which cannot be read");
    /* ... a folder in its place. */
    CHECK(unlink(hdr) == 0 && mkdir(hdr, 0700) == 0);
    refused(p, NULL, QEM_E_LAYOUT, "which is not a regular file");
    CHECK(rmdir(hdr) == 0);
    /* A symlink inside the folder is followed and read. */
    char real[1024];
    snprintf(real, sizeof real, "%s", test_path("hdrdir/sub/real.hdr"));
    CHECK(mibb_write(p, &m) == 0);
    CHECK(rename(hdr, real) == 0 && symlink("sub/real.hdr", hdr) == 0);
    acquisition *a = open_ok(p, NULL);
    CHECK(a && a->member_count == 2 && a->shape[0] == 2 && a->shape[1] == 2);
    qem_input_close(a);
    CHECK(unlink(hdr) == 0);
    free((void *)secret);
    free((void *)p);
}

/* The .hdr's counter depth obeys the rules of the frame headers'. */
static void test_mib_hdr_depth(void)
{
    const char *p = strdup(test_path("hdrdepth.mib"));
    char hdr[1024];
    mibb_hdr_path(p, hdr, sizeof hdr);
    mibb_options m = {.depth = 12, .frames = 4, .width = 32, .height = 16, .write_hdr = 1,
                      .frames_per_trigger = 2, .omit_extended = 1};
    static const struct {
        const char *depth;
        const char *needle;
    } bad[] = {
        {"99", "states the counter depth '99'; Merlin counters are 1, 6, 12 or 24 bits deep"},
        {"twelve", "states the counter depth 'twelve'"},
        {"24", "states the counter depth 24 but the frames' data type is U16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(mibb_write(p, &m) == 0);
        char line[64];
        snprintf(line, sizeof line, "Counter Depth (number):\t%s\r\n", bad[i].depth);
        replace_text(hdr, "Counter Depth (number):\t12\r\n", line);
        refused(p, NULL, QEM_E_LAYOUT, bad[i].needle);
    }
    /* Headers stating 1 bit, the .hdr 6 (both U08): they disagree. */
    mibb_options m1 = {.depth = 1, .frames = 4, .width = 32, .height = 16, .write_hdr = 1,
                       .frames_per_trigger = 2};
    CHECK(mibb_write(p, &m1) == 0);
    replace_text(hdr, "Counter Depth (number):\t1\r\n", "Counter Depth (number):\t6\r\n");
    refused(p, NULL, QEM_E_LAYOUT, "states the counter depth 6 but the frame headers state 1");
    /* The depth it states is recorded. */
    CHECK(mibb_write(p, &m) == 0);
    acquisition *a = open_ok(p, NULL);
    CHECK(a && json_integer_value(json_object_get(a->facts, "counter_depth")) == 12);
    qem_input_close(a);
    free((void *)p);
}

/* Shapes whose work would be absurd are refused before any of it, in every
 * family: a detector above 2^26 pixels (8192 x 8192). */
static void test_absurd_detectors(void)
{
    /* A .mib of one 8193 x 8193 U08 frame (the samples a sparse hole). */
    const char *p = strdup(test_path("huge.mib"));
    mibb_options m = {.depth = 6, .frames = 1, .width = 8193, .height = 8193, .omit_extended = 1};
    char header[384];
    CHECK(mibb_frame_header(&m, 0, header) == 0);
    CHECK(write_file(p, header, sizeof header));
    CHECK(truncate(p, (off_t)(sizeof header + 8193ull * 8193)) == 0);
    alarm(60);
    refused(p, NULL, QEM_E_LIMIT, "a detector of 8193 x 8193 pixels");
    /* Raw binary of the same detector. */
    const char *r = strdup(test_path("huge.raw"));
    CHECK(write_file(r, "", 0));
    CHECK(truncate(r, (off_t)(8193ull * 8193)) == 0);
    input_options o = {.raw = {.shape = {1, 1, 8193, 8193}, .dtype = QEM_DTYPE_UINT8}};
    refused(r, &o, QEM_E_LIMIT, "at most 67108864 pixels");
    /* An empty axis of raw binary, whatever the rest. */
    input_options empty = {.raw = {.shape = {0, 1, 3000000, 3000000}, .dtype = QEM_DTYPE_UINT8}};
    refused(r, &empty, QEM_E_LAYOUT, "empty dimension");
    alarm(0);
    CHECK(unlink(p) == 0 && unlink(r) == 0);
    free((void *)p);
    free((void *)r);
}

/* An EMPAD XML whose raw_file, scan shape and calibration come after more
 * values than the facts keep: read as it says (issue 27: it was "not an
 * EMPAD acquisition: it names no raw file"). */
static void test_empad_after_cap(void)
{
    mkdir(test_path("cap"), 0700);
    const char *x = strdup(test_path("cap/acq.xml"));
    empadb_options eo = {.scan_rows = 1, .scan_columns = 2, .state_scan = 1, .raw_name = "r.raw"};
    CHECK(empadb_write(x, &eo) == 0);
    char *doc = malloc(6000 * 16 + 512);
    size_t n = (size_t)sprintf(doc, "<root>");
    for (int i = 0; i < 5000; i++)
        n += (size_t)sprintf(doc + n, "<v%d>%d</v%d>", i, i, i);
    n += (size_t)sprintf(doc + n, "<iom_measurements><source.get_voltage>300000"
                                  "</source.get_voltage></iom_measurements>"
                                  "<pix_x>2</pix_x><pix_y>1</pix_y>"
                                  "<raw_file filename=\"r.raw\"/></root>");
    CHECK(write_file(x, doc, n));
    acquisition *a = open_ok(x, NULL);
    if (a) {
        CHECK(a->shape[0] == 1 && a->shape[1] == 2);
        CHECK(quantity(a->calibration, "electron_source/accelerating_voltage", "V") == 300000);
        json_t *xml = json_object_get(a->facts, "xml");
        CHECK(json_object_get(xml, "_truncated") != NULL);
        CHECK(json_object_get(xml, "raw_file@filename") == NULL); /* a fact beyond the cap */
        CHECK(!strcmp(fact_string(a, "raw_file"), "r.raw"));
    }
    qem_input_close(a);
    /* Two raw files, the second beyond the cap: still refused. */
    n -= strlen("</root>");
    n += (size_t)sprintf(doc + n, "<raw_file filename=\"s.raw\"/></root>");
    CHECK(write_file(x, doc, n));
    refused(x, NULL, QEM_E_LAYOUT, "more than one raw file");
    free(doc);
    free((void *)x);
}

/* Source documents are parsed in time linear in their size: one long
 * element name with 250k attributes, and a deep chain of long names with
 * 250k children, each under the 16 MiB cap. Each attribute or child used
 * to copy its whole parent path (minutes); the bytes copied are now
 * bounded by the document, asserted exactly, and the alarm ends the test
 * if a parse takes minutes again. */
static void test_empad_linear_xml(void)
{
    mkdir(test_path("long"), 0700);
    const char *x = strdup(test_path("long/acq.xml"));
    empadb_options eo = {.scan_rows = 1, .scan_columns = 1, .raw_name = "r.raw"};
    CHECK(empadb_write(x, &eo) == 0);
    const size_t name_len = 4u << 20, attrs = 250000;
    char *doc = malloc(12u << 20);
    /* 1. <root><NNN...N a0="" a1="" .../><raw_file .../></root> */
    size_t n = (size_t)sprintf(doc, "<root><");
    memset(doc + n, 'N', name_len);
    n += name_len;
    for (size_t i = 0; i < attrs; i++)
        n += (size_t)sprintf(doc + n, " a%zu=\"\"", i);
    n += (size_t)sprintf(doc + n, "/><raw_file filename=\"r.raw\"/></root>");
    input_empad_xml parsed;
    qem_error e = {0};
    alarm(60);
    CHECK_OK(qem_input_empad_parse_xml(doc, n, "wide.xml", &parsed, &e), &e);
    CHECK(parsed.work <= 3 * n + (1u << 20));
    CHECK(json_string_value(json_object_get(parsed.used, "raw_file@filename")) != NULL);
    CHECK(json_object_get(parsed.facts, "_truncated") != NULL);
    qem_input_empad_xml_free(&parsed);
    CHECK(write_file(x, doc, n));
    acquisition *a = open_ok(x, NULL);
    CHECK(a && a->shape[0] == 1);
    qem_input_close(a);
    /* 2. 60 nested elements of 64 KiB names, then 250k children. */
    alarm(60);
    n = (size_t)sprintf(doc, "<root>");
    const size_t depth = 60, long_name = 64u << 10;
    for (size_t d = 0; d < depth; d++) {
        doc[n++] = '<';
        memset(doc + n, (int)('A' + d % 26), long_name);
        n += long_name;
        doc[n++] = '>';
    }
    for (size_t i = 0; i < attrs; i++)
        n += (size_t)sprintf(doc + n, "<c/>");
    for (size_t d = depth; d-- > 0;) {
        n += (size_t)sprintf(doc + n, "</");
        memset(doc + n, (int)('A' + d % 26), long_name);
        n += long_name;
        doc[n++] = '>';
    }
    n += (size_t)sprintf(doc + n, "<raw_file filename=\"r.raw\"/></root>");
    CHECK_OK(qem_input_empad_parse_xml(doc, n, "deep.xml", &parsed, &e), &e);
    CHECK(parsed.work <= 3 * n + (1u << 20));
    CHECK(json_string_value(json_object_get(parsed.used, "raw_file@filename")) != NULL);
    qem_input_empad_xml_free(&parsed);
    CHECK(write_file(x, doc, n));
    a = open_ok(x, NULL);
    CHECK(a && a->shape[0] == 1);
    qem_input_close(a);
    alarm(0);
    free(doc);
    free((void *)x);
}

int main(void)
{
    test_real_mib();
    test_real_mib_ranges();
    test_real_empad();
    test_mib_depths();
    test_mib_quad();
    test_mib_scan_shapes();
    test_mib_refusals();
    test_changed_during_read();
    test_empad();
    test_empad_refusals();
    test_raw();
    test_raw_values();
    test_mib_hdr_companion();
    test_mib_hdr_depth();
    test_absurd_detectors();
    test_empad_after_cap();
    test_empad_linear_xml();
    return test_finish("unit_input_families");
}
