/* Acquisitions of the input layer (lib/input: npy.c, hdf5.c, arina.c): .npy (4D uint16/uint8, 3D
 * with a scan shape), plain HDF5 (3D/4D, scan_shape attributes, several
 * candidates), Dectris/Arina families (master + bitshuffle/LZ4 data files
 * of different frame counts, pixel_mask). Members, digests, identity and
 * the mask digest are recomputed here from the files' bytes; every frame
 * is read back, in every range, against the array written; refusals say
 * why; a modified member is caught. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sha256.h"
#include "h5_build.h"
#include "common/error.h"
#include "input/input.h"
#include "test_util.h"


/* An inspection as the pack producer makes it: described, then every
 * member hashed. */
static qem_status inspect_input(const char *path, const input_options *o, acquisition **out,
                                qem_error *error)
{
    QEM_TRY(qem_input_open(path, o, out, error));
    const qem_status st = qem_input_authenticate(*out, NULL, NULL, error);
    if (st != QEM_OK) {
        qem_input_close(*out);
        *out = NULL;
    }
    return st;
}

/* Frames as uint16, into a buffer of exactly `count` frames. */
static qem_status read_u16(acquisition *s, uint64_t first, uint64_t count, uint16_t *out,
                           qem_error *error)
{
    const uint64_t pixels = s->shape[2] * s->shape[3];
    return qem_input_read(s, first, count, QEM_DTYPE_UINT16, out, (size_t)(count * pixels) * 2,
                          error);
}

static uint64_t seed = 11;

/* --- independent expectations ------------------------------------------- */

static void to_hex(const uint8_t d[32], char hex[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

static int from_hex(const char *hex, uint8_t d[32])
{
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 0;
        d[i] = (uint8_t)v;
    }
    return 1;
}

static void file_sha256(const char *path, uint8_t d[32], uint64_t *bytes)
{
    size_t n = 0;
    uint8_t *data = read_file(path, &n);
    CHECK(data != NULL);
    CHECK(qem_sha256_oneshot(data ? data : (const uint8_t *)"", data ? n : 0, d) == 0);
    if (bytes)
        *bytes = n;
    free(data);
}

/* The §2.6 framing built byte by byte: "live4dstem.dataset/v0.1" NUL, the
 * master's hex (when `has_master`), then NUL + hex for each data file. */
static void expected_identity(const char *const *paths, size_t count, int has_master,
                              uint8_t out[32])
{
    uint8_t buf[24 + 65 * 16];
    size_t n = 0;
    memcpy(buf, "live4dstem.dataset/v0.1", 23);
    buf[23] = 0;
    n = 24;
    for (size_t i = 0; i < count && i < 16; i++) {
        uint8_t d[32];
        char hex[65];
        file_sha256(paths[i], d, NULL);
        to_hex(d, hex);
        if (!(i == 0 && has_master))
            buf[n++] = 0;
        memcpy(buf + n, hex, 64);
        n += 64;
    }
    CHECK(qem_sha256_oneshot(buf, n, out) == 0);
}

static void zero_mask_digest(uint64_t pixels, uint8_t out[32])
{
    uint8_t *z = calloc((size_t)pixels * 4, 1);
    CHECK(qem_sha256_oneshot(z, (size_t)pixels * 4, out) == 0);
    free(z);
}

static void mask_digest(const uint32_t *mask, uint64_t pixels, uint8_t out[32])
{
    uint8_t *le = malloc((size_t)pixels * 4);
    for (uint64_t p = 0; p < pixels; p++) {
        le[4 * p] = (uint8_t)mask[p];
        le[4 * p + 1] = (uint8_t)(mask[p] >> 8);
        le[4 * p + 2] = (uint8_t)(mask[p] >> 16);
        le[4 * p + 3] = (uint8_t)(mask[p] >> 24);
    }
    CHECK(qem_sha256_oneshot(le, (size_t)pixels * 4, out) == 0);
    free(le);
}

static uint16_t *random_u16(uint64_t n, unsigned max)
{
    uint16_t *v = malloc((size_t)n * 2);
    for (uint64_t i = 0; i < n; i++)
        v[i] = (uint16_t)(test_rand(&seed) % (max + 1u));
    return v;
}

/* Every range [first, first + count) of `s` against `expect` (uint16); a
 * guard frame after each request must stay untouched. */
static void check_all_ranges(acquisition *s, const uint16_t *expect)
{
    const uint64_t scans = s->shape[0] * s->shape[1], pixels = s->shape[2] * s->shape[3];
    uint16_t *out = malloc((size_t)((scans + 1) * pixels) * 2);
    int bad = 0;
    for (uint64_t first = 0; first < scans; first++) {
        for (uint64_t count = 1; first + count <= scans; count++) {
            qem_error e = {0};
            memset(out, 0xAB, (size_t)((count + 1) * pixels) * 2);
            qem_status st = read_u16(s, first, count, out, &e);
            int guard_ok = 1;
            for (uint64_t i = count * pixels; i < (count + 1) * pixels; i++)
                guard_ok &= out[i] == 0xABAB;
            if (st != QEM_OK || !guard_ok ||
                memcmp(out, expect + first * pixels, (size_t)(count * pixels) * 2)) {
                if (!bad)
                    fprintf(stderr, "read [%llu, +%llu) differs%s: %s\n",
                            (unsigned long long)first, (unsigned long long)count,
                            guard_ok ? "" : " (wrote past the request)", e.message);
                bad++;
            }
        }
    }
    CHECK(bad == 0);
    /* Out of range and an empty read. */
    qem_error e = {0};
    CHECK_STATUS(read_u16(s, scans, 1, out, &e), QEM_E_INVALID_ARGUMENT, &e);
    qem_error e2 = {0};
    CHECK_STATUS(read_u16(s, 1, scans, out, &e2), QEM_E_INVALID_ARGUMENT, &e2);
    qem_error e3 = {0};
    CHECK_OK(read_u16(s, scans, 0, out, &e3), &e3);
    free(out);
}

static void check_single_member(const acquisition *s, const char *path)
{
    CHECK_EQ_U64(s->member_count, 1);
    if (s->member_count != 1)
        return;
    uint8_t d[32], id[32];
    uint64_t bytes = 0;
    file_sha256(path, d, &bytes);
    CHECK(strcmp(s->members[0].path, path) == 0);
    CHECK(s->members[0].is_master == 1);
    CHECK_EQ_U64(s->members[0].bytes, bytes);
    CHECK_EQ_U64((uint64_t)s->members[0].stamp.size, bytes);
    CHECK(memcmp(s->members[0].sha256, d, 32) == 0);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_ino == s->members[0].stamp.ino &&
          sb.st_mtim.tv_nsec == s->members[0].stamp.mtime.tv_nsec);
    const char *paths[1] = {path};
    expected_identity(paths, 1, 1, id);
    CHECK(memcmp(s->identity, id, 32) == 0);
}

static void check_implicit_mask(const acquisition *s)
{
    uint8_t z[32];
    zero_mask_digest(s->shape[2] * s->shape[3], z);
    CHECK(memcmp(s->detector_mask_sha256, z, 32) == 0);
    CHECK(s->mask_origin && strcmp(s->mask_origin, "implicit-all-admitted-u32-mask") == 0);
    CHECK_EQ_U64(s->flagged_count, 0);
}

static acquisition *inspect_ok(const char *path, const input_options *o)
{
    acquisition *s = NULL;
    qem_error e = {0};
    CHECK_OK(inspect_input(path, o, &s, &e), &e);
    return s;
}

/* Refused with `status`; `needle` (if any) must appear in the message. */
static void inspect_refused(const char *path, const input_options *o, qem_status status,
                            const char *needle)
{
    acquisition *s = NULL;
    qem_error e = {0};
    CHECK_STATUS(inspect_input(path, o, &s, &e), status, &e);
    CHECK(s == NULL);
    CHECK(e.message[0] != '\0');
    if (needle && !strstr(e.message, needle)) {
        CHECK(!"the refusal names what is wrong");
        fprintf(stderr, "  missing '%s' in: %s\n", needle, e.message);
    }
    qem_input_close(s);
}

/* --- identity vectors (notes §7 V4) -------------------------------------- */

static void test_identity_vectors(void)
{
    uint8_t empty[32], id[32], want[32];
    CHECK(qem_sha256_oneshot("", 0, empty) == 0);
    uint8_t members[1][32];
    memcpy(members[0], empty, 32);
    qem_error e = {0};
    CHECK_OK(qem_input_identity(NULL, (const uint8_t(*)[32])members, 1, id, &e), &e);
    CHECK(from_hex("aacec3ac1d5c0d58d8ef701c747bcd68045a0bc0ae2319582bd50d25b5d36a93", want));
    CHECK(memcmp(id, want, 32) == 0);
    CHECK_OK(qem_input_identity(empty, (const uint8_t(*)[32])members, 1, id, &e), &e);
    CHECK(from_hex("124cae1a3ca7612e04a9e592d781cd73b6774833e9fee85b8f8317fcb0d8a628", want));
    CHECK(memcmp(id, want, 32) == 0);
    /* A single-file source is framed as a master with no data files. */
    uint8_t buf[24 + 64];
    char hex[65];
    memcpy(buf, "live4dstem.dataset/v0.1\0", 24);
    to_hex(empty, hex);
    memcpy(buf + 24, hex, 64);
    CHECK(qem_sha256_oneshot(buf, sizeof buf, want) == 0);
    CHECK_OK(qem_input_identity(empty, NULL, 0, id, &e), &e);
    CHECK(memcmp(id, want, 32) == 0);
}

/* --- .npy ----------------------------------------------------------------- */

static void test_npy(void)
{
    const uint64_t shape[4] = {3, 4, 5, 6}, pixels = 30, n = 12 * 30;
    uint16_t *v16 = random_u16(n, 65535);
    const char *p16 = strdup(test_path("a16.npy"));
    CHECK(write_npy4(p16, QEM_DTYPE_UINT16, shape, v16));
    acquisition *s = inspect_ok(p16, NULL);
    if (s) {
        CHECK(strcmp(s->family->name, "npy") == 0);
        CHECK(memcmp(s->shape, shape, sizeof shape) == 0);
        CHECK(s->sample_type == QEM_DTYPE_UINT16);
        CHECK_EQ_U64(s->largest_compressed_chunk, 0);
        check_single_member(s, p16);
        check_implicit_mask(s);
        check_all_ranges(s, v16);
        qem_error e = {0};
        CHECK_OK(qem_input_reauthenticate(s, NULL, NULL, &e), &e);
        CHECK_OK(qem_input_check_unchanged(s, &e), &e);
    }
    qem_input_close(s);

    /* uint8 is widened on read. */
    uint8_t *v8 = malloc((size_t)n);
    uint16_t *w8 = malloc((size_t)n * 2);
    for (uint64_t i = 0; i < n; i++) {
        v8[i] = (uint8_t)test_rand(&seed);
        w8[i] = v8[i];
    }
    const char *p8 = strdup(test_path("a8.npy"));
    CHECK(write_npy4(p8, QEM_DTYPE_UINT8, shape, v8));
    s = inspect_ok(p8, NULL);
    if (s) {
        CHECK(s->sample_type == QEM_DTYPE_UINT8);
        check_single_member(s, p8);
        check_all_ranges(s, w8);
    }
    qem_input_close(s);

    /* A 3D stack needs a scan shape whose product is the frame count. */
    const uint64_t shape3[3] = {12, 5, 6};
    const char *p3 = strdup(test_path("stack3.npy"));
    qem_npy_writer *w = NULL;
    qem_error e = {0};
    CHECK_OK(qem_npy_writer_create(p3, QEM_DTYPE_UINT16, 3, shape3, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, v16, n, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    inspect_refused(p3, NULL, QEM_E_LAYOUT, "--scan-shape");
    input_options o = {.dataset = NULL, .scan_shape = {5, 2}};
    inspect_refused(p3, &o, QEM_E_LAYOUT, "12 frames");
    o.scan_shape[0] = 0;
    o.scan_shape[1] = 12;
    inspect_refused(p3, &o, QEM_E_INVALID_ARGUMENT, "two positive");
    o.scan_shape[0] = 2;
    o.scan_shape[1] = 6;
    s = inspect_ok(p3, &o);
    if (s) {
        const uint64_t want[4] = {2, 6, 5, 6};
        CHECK(memcmp(s->shape, want, sizeof want) == 0);
        check_all_ranges(s, v16);
    }
    qem_input_close(s);
    (void)pixels;

    /* Options that contradict a 4D .npy, or do not apply to it. */
    input_options wrong = {.dataset = NULL, .scan_shape = {4, 3}};
    inspect_refused(p16, &wrong, QEM_E_INVALID_ARGUMENT, "contradicts");
    input_options same = {.dataset = NULL, .scan_shape = {3, 4}};
    s = inspect_ok(p16, &same);
    qem_input_close(s);
    input_options ds = {.dataset = "/data", .scan_shape = {0, 0}};
    inspect_refused(p16, &ds, QEM_E_INVALID_ARGUMENT, "dataset");

    /* float32 and 2D arrays are refused. */
    float *f = calloc((size_t)n, sizeof *f);
    const char *pf = strdup(test_path("f32.npy"));
    CHECK(write_npy4(pf, QEM_DTYPE_FLOAT32, shape, f));
    {
        /* float32 is an acquisition (for the float codec); packs refuse it. */
        acquisition *fs = inspect_ok(pf, NULL);
        CHECK(fs && fs->sample_type == QEM_DTYPE_FLOAT32);
        CHECK(fs && qem_input_stored_dtype(fs) == QEM_DTYPE_FLOAT32);
        qem_input_close(fs);
        qem_pack_inspection *pin = NULL;
        qem_error pe = {0};
        CHECK_STATUS(qem_pack_inspect(pf, NULL, &pin, &pe), QEM_E_UNSUPPORTED, &pe);
        CHECK(strstr(pe.message, "float32") != NULL && pin == NULL);
    }
    const uint64_t shape2[2] = {30, 12};
    const char *p2 = strdup(test_path("plane.npy"));
    CHECK_OK(qem_npy_writer_create(p2, QEM_DTYPE_UINT16, 2, shape2, &w, &e), &e);
    CHECK_OK(qem_npy_writer_append(w, v16, n, &e), &e);
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    inspect_refused(p2, NULL, QEM_E_NPY, "2 dimensions");

    free(f);
    free((void *)pf);
    free((void *)p2);
    free((void *)p3);
    free((void *)p8);
    free((void *)p16);
    free(w8);
    free(v8);
    free(v16);
}

/* --- plain HDF5 ----------------------------------------------------------- */

static void test_hdf5_4d(void)
{
    const uint64_t shape[4] = {3, 4, 5, 3}, n = 12 * 15;
    uint16_t *v = random_u16(n, 4095);
    /* Contiguous, behind a 512-byte user block (signature not at 0). */
    const char *path = strdup(test_path("plain4d.h5"));
    CHECK(h5b_create(path, 512) == 0);
    h5b_dataset d = {.path = "/measurement/frames", .file_type = H5T_STD_U16BE,
                     .mem_type = H5T_NATIVE_UINT16, .rank = 4,
                     .dims = {3, 4, 5, 3}, .data = v};
    CHECK(h5b_write_dataset(path, &d) == 0);
    acquisition *s = inspect_ok(path, NULL);
    if (s) {
        CHECK(strcmp(s->family->name, "hdf5") == 0);
        CHECK(memcmp(s->shape, shape, sizeof shape) == 0);
        CHECK(s->sample_type == QEM_DTYPE_UINT16);
        CHECK_EQ_U64(s->largest_compressed_chunk, 0);
        check_single_member(s, path);
        check_implicit_mask(s);
        check_all_ranges(s, v);
    }
    qem_input_close(s);

    /* Chunked across scan rows (a chunk spans several frames), gzip. */
    const char *chunked = strdup(test_path("chunked4d.h5"));
    h5b_dataset c = d;
    c.path = "/data";
    c.file_type = H5T_STD_U16LE;
    c.chunk[0] = 2;
    c.chunk[1] = 3;
    c.chunk[2] = 5;
    c.chunk[3] = 3;
    c.deflate = 6;
    CHECK(h5b_write_dataset(chunked, &c) == 0);
    uint64_t stored = 0, largest = 0;
    CHECK(h5b_chunk_sizes(chunked, "/data", &stored, &largest) == 0);
    CHECK_EQ_U64(stored, 4); /* 2 x 2 chunks over the scan grid */
    CHECK(largest > 0);
    s = inspect_ok(chunked, NULL);
    if (s) {
        CHECK_EQ_U64(s->largest_compressed_chunk, largest);
        check_all_ranges(s, v);
    }
    qem_input_close(s);

    /* uint8 4D is widened; a contradicting scan shape is refused. */
    uint8_t *v8 = malloc((size_t)n);
    uint16_t *w8 = malloc((size_t)n * 2);
    for (uint64_t i = 0; i < n; i++)
        w8[i] = v8[i] = (uint8_t)test_rand(&seed);
    const char *p8 = strdup(test_path("u8.h5"));
    h5b_dataset d8 = d;
    d8.file_type = H5T_STD_U8LE;
    d8.mem_type = H5T_NATIVE_UINT8;
    d8.data = v8;
    CHECK(h5b_write_dataset(p8, &d8) == 0);
    s = inspect_ok(p8, NULL);
    if (s) {
        CHECK(s->sample_type == QEM_DTYPE_UINT8);
        check_all_ranges(s, w8);
    }
    qem_input_close(s);
    input_options wrong = {.dataset = NULL, .scan_shape = {4, 3}};
    inspect_refused(p8, &wrong, QEM_E_INVALID_ARGUMENT, "contradicts");

    free((void *)p8);
    free(w8);
    free(v8);
    free((void *)chunked);
    free((void *)path);
    free(v);
}

static void test_hdf5_3d(void)
{
    const uint64_t frames = 6, n = frames * 4 * 5;
    uint16_t *v = random_u16(n, 65535);
    const h5b_dataset d = {.path = "/entry/data/data", .file_type = H5T_STD_U16LE,
                           .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {6, 4, 5},
                           .chunk = {1, 4, 5}, .deflate = 3, .data = v};

    /* No attribute: the caller must give the scan shape. */
    const char *bare = strdup(test_path("bare3d.h5"));
    CHECK(h5b_write_dataset(bare, &d) == 0);
    inspect_refused(bare, NULL, QEM_E_LAYOUT, "does not state its scan shape");
    input_options o = {.dataset = NULL, .scan_shape = {4, 2}};
    inspect_refused(bare, &o, QEM_E_LAYOUT, "does not match");
    o.scan_shape[0] = 2;
    o.scan_shape[1] = 3;
    acquisition *s = inspect_ok(bare, &o);
    if (s) {
        const uint64_t want[4] = {2, 3, 4, 5};
        CHECK(memcmp(s->shape, want, sizeof want) == 0);
        uint64_t stored = 0, largest = 0;
        CHECK(h5b_chunk_sizes(bare, "/entry/data/data", &stored, &largest) == 0);
        CHECK_EQ_U64(stored, 6);
        CHECK_EQ_U64(s->largest_compressed_chunk, largest);
        check_single_member(s, bare);
        check_all_ranges(s, v);
    }
    qem_input_close(s);

    /* The attribute on the dataset itself. */
    const char *on_ds = strdup(test_path("attr_dataset.h5"));
    CHECK(h5b_write_dataset(on_ds, &d) == 0);
    CHECK(h5b_set_scan_shape(on_ds, "/entry/data/data", 3, 2) == 0);
    s = inspect_ok(on_ds, NULL);
    if (s) {
        CHECK_EQ_U64(s->shape[0], 3);
        CHECK_EQ_U64(s->shape[1], 2);
        check_all_ranges(s, v);
    }
    qem_input_close(s);
    input_options agree = {.dataset = NULL, .scan_shape = {3, 2}}, disagree = {.dataset = NULL, .scan_shape = {2, 3}};
    s = inspect_ok(on_ds, &agree);
    qem_input_close(s);
    inspect_refused(on_ds, &disagree, QEM_E_INVALID_ARGUMENT, "contradicts");

    /* The attribute on the parent group. */
    const char *on_group = strdup(test_path("attr_group.h5"));
    CHECK(h5b_write_dataset(on_group, &d) == 0);
    CHECK(h5b_set_scan_shape(on_group, "/entry/data", 1, 6) == 0);
    s = inspect_ok(on_group, NULL);
    if (s) {
        CHECK_EQ_U64(s->shape[0], 1);
        CHECK_EQ_U64(s->shape[1], 6);
    }
    qem_input_close(s);

    /* An attribute that does not divide the frames. */
    const char *bad_attr = strdup(test_path("attr_bad.h5"));
    CHECK(h5b_write_dataset(bad_attr, &d) == 0);
    CHECK(h5b_set_scan_shape(bad_attr, "/entry/data", 2, 2) == 0);
    inspect_refused(bad_attr, NULL, QEM_E_LAYOUT, "does not match");

    free((void *)bad_attr);
    free((void *)on_group);
    free((void *)on_ds);
    free((void *)bare);
    free(v);
}

static void test_hdf5_candidates(void)
{
    uint16_t *a = random_u16(6 * 4 * 5, 1000);
    uint8_t b[2 * 3 * 4 * 5];
    uint16_t wb[sizeof b];
    for (size_t i = 0; i < sizeof b; i++)
        wb[i] = b[i] = (uint8_t)test_rand(&seed);
    const char *path = strdup(test_path("two.h5"));
    const h5b_dataset da = {.path = "/a", .file_type = H5T_STD_U16LE,
                            .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {6, 4, 5},
                            .data = a};
    const h5b_dataset db = {.path = "/b/c", .file_type = H5T_STD_U8LE,
                            .mem_type = H5T_NATIVE_UINT8, .rank = 4, .dims = {2, 3, 4, 5},
                            .data = b};
    /* Neither a 2D plane nor a 3D float stack is a candidate. */
    float plane[20] = {0};
    const h5b_dataset dp = {.path = "/plane", .file_type = H5T_IEEE_F32LE,
                            .mem_type = H5T_NATIVE_FLOAT, .rank = 2, .dims = {4, 5},
                            .data = plane};
    CHECK(h5b_write_dataset(path, &da) == 0 && h5b_write_dataset(path, &db) == 0 &&
          h5b_write_dataset(path, &dp) == 0);
    inspect_refused(path, NULL, QEM_E_LAYOUT, "several 3D/4D numeric datasets (/a, /b/c)");
    input_options pick_b = {.dataset = "/b/c", .scan_shape = {0, 0}};
    acquisition *s = inspect_ok(path, &pick_b);
    if (s) {
        const uint64_t want[4] = {2, 3, 4, 5};
        CHECK(memcmp(s->shape, want, sizeof want) == 0);
        CHECK(s->sample_type == QEM_DTYPE_UINT8);
        check_all_ranges(s, wb);
    }
    qem_input_close(s);
    input_options pick_a = {.dataset = "a", .scan_shape = {3, 2}}; /* relative names are from the root */
    s = inspect_ok(path, &pick_a);
    if (s) {
        CHECK_EQ_U64(s->shape[0], 3);
        check_all_ranges(s, a);
    }
    qem_input_close(s);
    /* Repeated slashes are one separator, as libhdf5 and h5py read them
     * (issue 27: "//b//c" failed on the link '/'). */
    input_options slashes = {.dataset = "//b//c", .scan_shape = {0, 0}};
    s = inspect_ok(path, &slashes);
    if (s) {
        const uint64_t want[4] = {2, 3, 4, 5};
        CHECK(memcmp(s->shape, want, sizeof want) == 0);
    }
    qem_input_close(s);
    input_options slashes_rel = {.dataset = "b///c/", .scan_shape = {0, 0}};
    s = inspect_ok(path, &slashes_rel);
    CHECK(s && s->shape[0] == 2 && s->shape[3] == 5);
    qem_input_close(s);
    input_options missing = {.dataset = "/nope", .scan_shape = {0, 0}};
    inspect_refused(path, &missing, QEM_E_INVALID_ARGUMENT, "/nope");
    input_options group = {.dataset = "/b", .scan_shape = {0, 0}};
    inspect_refused(path, &group, QEM_E_LAYOUT, "not a dataset");
    input_options plane_pick = {.dataset = "/plane", .scan_shape = {0, 0}};
    inspect_refused(path, &plane_pick, QEM_E_LAYOUT, "2 dimensions");
    free((void *)path);
    free(a);
}

static void test_hdf5_refusals(void)
{
    int32_t i32[6 * 4 * 5] = {0};
    float f32[6 * 4 * 5] = {0};
    uint32_t u32[6 * 4 * 5] = {0};
    const char *pi = strdup(test_path("int32.h5"));
    h5b_dataset d = {.path = "/frames", .file_type = H5T_STD_I32LE,
                     .mem_type = H5T_NATIVE_INT32, .rank = 3, .dims = {6, 4, 5}, .data = i32};
    CHECK(h5b_write_dataset(pi, &d) == 0);
    input_options o = {.dataset = NULL, .scan_shape = {2, 3}};
    inspect_refused(pi, &o, QEM_E_UNSUPPORTED, "signed 32-bit");

    const char *pf = strdup(test_path("float.h5"));
    d.file_type = H5T_IEEE_F32LE;
    d.mem_type = H5T_NATIVE_FLOAT;
    d.data = f32;
    CHECK(h5b_write_dataset(pf, &d) == 0);
    {
        /* float32 frames are a candidate too, read as they are. */
        acquisition *fs = inspect_ok(pf, &o);
        CHECK(fs && fs->sample_type == QEM_DTYPE_FLOAT32);
        float back[6 * 20];
        qem_error fe = {0};
        if (fs)
            CHECK_OK(qem_input_read(fs, 0, 6, QEM_DTYPE_FLOAT32, back, sizeof back, &fe), &fe);
        CHECK(fs && memcmp(back, f32, sizeof back) == 0);
        qem_input_close(fs);
    }
    const char *pd = strdup(test_path("double.h5"));
    h5b_dataset dd = d;
    dd.file_type = H5T_IEEE_F64LE;
    double f64[6 * 20] = {0};
    dd.mem_type = H5T_NATIVE_DOUBLE;
    dd.data = f64;
    CHECK(h5b_write_dataset(pd, &dd) == 0);
    input_options od = {.dataset = "/frames", .scan_shape = {2, 3}};
    inspect_refused(pd, &od, QEM_E_UNSUPPORTED, "64-bit floating-point");

    const char *pu = strdup(test_path("u32.h5"));
    d.file_type = H5T_STD_U32LE;
    d.mem_type = H5T_NATIVE_UINT32;
    d.data = u32;
    CHECK(h5b_write_dataset(pu, &d) == 0);
    {
        /* uint32 frames narrow to uint16 when every admitted value fits. */
        acquisition *us = inspect_ok(pu, &o);
        CHECK(us && us->sample_type == QEM_DTYPE_UINT32);
        CHECK(us && qem_input_stored_dtype(us) == QEM_DTYPE_UINT16);
        uint16_t back[6 * 20];
        qem_error ue = {0};
        if (us)
            CHECK_OK(qem_input_read(us, 0, 6, QEM_DTYPE_UINT16, back, sizeof back, &ue), &ue);
        for (int k = 0; us && k < 6 * 20; k++)
            CHECK_EQ_U64(back[k], u32[k]);
        qem_input_close(us);
    }

    /* A chunked dataset whose chunks were never all written. */
    const char *partial = strdup(test_path("partial.h5"));
    h5b_dataset dz = {.path = "/frames", .file_type = H5T_STD_U16LE,
                      .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {6, 4, 5},
                      .chunk = {1, 4, 5}, .data = NULL};
    CHECK(h5b_write_dataset(partial, &dz) == 0);
    inspect_refused(partial, &o, QEM_E_LAYOUT, "stores only 0 of its 6 chunks");

    /* An empty file with no dataset at all. */
    const char *empty = strdup(test_path("empty.h5"));
    CHECK(h5b_create(empty, 0) == 0);
    inspect_refused(empty, NULL, QEM_E_LAYOUT, "no 3D");

    /* Files that are neither .npy nor HDF5, and a pack. */
    const char *junk = strdup(test_path("junk.h5"));
    CHECK(write_file(junk, "not an HDF5 file at all, honest", 31));
    inspect_refused(junk, NULL, QEM_E_UNSUPPORTED, "not a detector file qem recognises");
    const char *pack = strdup(test_path("already.pack"));
    uint8_t head[64] = {'Q', 'G', 'P', 'U', 'H', '5', 0, 1};
    CHECK(write_file(pack, head, sizeof head));
    inspect_refused(pack, NULL, QEM_E_UNSUPPORTED, "is a Lossless Pack Format v1 file");
    inspect_refused(test_path("does-not-exist.h5"), NULL, QEM_E_IO, "does-not-exist");

    /* A dataset reached through an external link lives in another file. */
    const char *linker = strdup(test_path("linker.h5"));
    CHECK(h5b_external_link(linker, "/frames", "float.h5", "/frames") == 0);
    input_options ol = {.dataset = "/frames", .scan_shape = {2, 3}};
    inspect_refused(linker, &ol, QEM_E_UNSUPPORTED, "external link");

    /* A soft link inside the file that ends in another file. */
    const char *soft = strdup(test_path("soft.h5"));
    CHECK(h5b_external_link(soft, "/outside", "u32.h5", "/") == 0);
    CHECK(h5b_soft_link(soft, "/frames", "/outside/frames") == 0);
    inspect_refused(soft, &ol, QEM_E_UNSUPPORTED, "lives in another file");

    /* A virtual dataset whose samples are in another file. */
    const char *source16 = strdup(test_path("vds_source.h5"));
    uint16_t zeros16[6 * 4 * 5] = {0};
    h5b_dataset ds16 = {.path = "/frames", .file_type = H5T_STD_U16LE,
                        .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {6, 4, 5},
                        .data = zeros16};
    CHECK(h5b_write_dataset(source16, &ds16) == 0);
    const char *vds = strdup(test_path("vds.h5"));
    const uint64_t vdims[3] = {6, 4, 5};
    CHECK(h5b_virtual(vds, "/frames", vdims, "vds_source.h5", "/frames") == 0);
    inspect_refused(vds, &o, QEM_E_UNSUPPORTED, "virtual dataset");

    /* A filter libhdf5 cannot decode here (optional, so it could be
     * written without its plugin). */
    const char *unknown = strdup(test_path("unknown_filter.h5"));
    ds16.chunk[0] = 1;
    ds16.chunk[1] = 4;
    ds16.chunk[2] = 5;
    ds16.optional_filter = 32999;
    CHECK(h5b_write_dataset(unknown, &ds16) == 0);
    inspect_refused(unknown, &o, QEM_E_UNSUPPORTED, "filter 32999");

    free((void *)unknown);
    free((void *)vds);
    free((void *)source16);
    free((void *)soft);
    free((void *)linker);
    free((void *)pack);
    free((void *)junk);
    free((void *)empty);
    free((void *)partial);
    free((void *)pu);
    free((void *)pd);
    free((void *)pf);
    free((void *)pi);
}

/* A single HDF5 file with a Dectris pixel_mask next to its frames. */
static void test_hdf5_mask(void)
{
    uint16_t *v = random_u16(4 * 3 * 4, 100);
    const h5b_dataset d = {.path = "/entry/data/data", .file_type = H5T_STD_U16LE,
                           .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {4, 3, 4},
                           .data = v};
    uint32_t mask[12] = {0};
    mask[11] = 2;
    mask[0] = 1;
    const h5b_dataset m = {.path = "/entry/instrument/detector/detectorSpecific/pixel_mask",
                           .file_type = H5T_STD_U32LE, .mem_type = H5T_NATIVE_UINT32,
                           .rank = 2, .dims = {3, 4}, .data = mask};
    const char *path = strdup(test_path("masked.h5"));
    CHECK(h5b_write_dataset(path, &d) == 0 && h5b_write_dataset(path, &m) == 0);
    input_options o = {.dataset = NULL, .scan_shape = {2, 2}};
    acquisition *s = inspect_ok(path, &o);
    if (s) {
        CHECK_EQ_U64(s->flagged_count, 2);
        if (s->flagged_count == 2)
            CHECK(s->flagged[0] == 0 && s->flagged[1] == 11);
        uint8_t want[32];
        mask_digest(mask, 12, want);
        CHECK(memcmp(s->detector_mask_sha256, want, 32) == 0);
        CHECK(strcmp(s->mask_origin, "source-little-endian-u32-mask") == 0);
    }
    qem_input_close(s);

    /* A mask that does not match the detector, and one that masks all. */
    const char *wrong = strdup(test_path("mask_wrong.h5"));
    h5b_dataset mw = m;
    mw.dims[0] = 4;
    mw.dims[1] = 3;
    CHECK(h5b_write_dataset(wrong, &d) == 0 && h5b_write_dataset(wrong, &mw) == 0);
    inspect_refused(wrong, &o, QEM_E_METADATA, "3x4");
    const char *all = strdup(test_path("mask_all.h5"));
    uint32_t every[12];
    for (int i = 0; i < 12; i++)
        every[i] = 1;
    h5b_dataset ma = m;
    ma.data = every;
    CHECK(h5b_write_dataset(all, &d) == 0 && h5b_write_dataset(all, &ma) == 0);
    inspect_refused(all, &o, QEM_E_METADATA, "every one");
    free((void *)all);
    free((void *)wrong);
    free((void *)path);
    free(v);
}

/* --- Dectris/Arina families ------------------------------------------------ */

typedef struct family {
    char dir[512];
    char master[512];
    char data[3][512];
    uint16_t *frames; /* all frames in order */
    uint32_t mask[8 * 6];
} family;

static const uint64_t FAMILY_FRAMES[2] = {5, 7};

static int make_family(family *f, const char *name, int scan_attr, int with_mask)
{
    snprintf(f->dir, sizeof f->dir, "%s", test_path(name));
    if (mkdir(f->dir, 0755) != 0)
        return 0;
    f->frames = random_u16(12 * 8 * 6, 3000);
    memset(f->mask, 0, sizeof f->mask);
    f->mask[3] = 1;
    f->mask[17] = 4;
    f->mask[40] = 0x80000000u;
    const h5b_arina a = {.dir = f->dir, .stem = "scan", .files = 2,
                         .frames = FAMILY_FRAMES, .rows = 8, .columns = 6,
                         .data = f->frames, .scan_rows = scan_attr ? 3 : 0,
                         .scan_columns = scan_attr ? 4 : 0,
                         .pixel_mask = with_mask ? f->mask : NULL};
    return h5b_write_arina(&a, f->master, sizeof f->master, f->data) == 0;
}

static void test_arina(void)
{
    family f;
    CHECK(make_family(&f, "arina", 1, 1));
    /* The data files really are bitshuffle/LZ4, one frame per chunk. */
    for (int k = 0; k < 2; k++) {
        unsigned id = 0, cd[8];
        size_t ncd = 0;
        CHECK(h5b_first_filter(f.data[k], "/entry/data/data", &id, cd, &ncd) == 0);
        CHECK_EQ_U64(id, H5B_BITSHUFFLE);
        CHECK(ncd >= 5 && cd[4] == 2); /* BSHUF_H5_COMPRESS_LZ4 */
    }
    acquisition *s = inspect_ok(f.master, NULL);
    if (s) {
        CHECK(strcmp(s->family->name, "arina") == 0);
        const uint64_t want[4] = {3, 4, 8, 6};
        CHECK(memcmp(s->shape, want, sizeof want) == 0);
        CHECK(s->sample_type == QEM_DTYPE_UINT16);
        /* Members: master first, then the data files in link order. */
        CHECK_EQ_U64(s->member_count, 3);
        const char *paths[3] = {f.master, f.data[0], f.data[1]};
        for (size_t i = 0; i < 3 && i < s->member_count; i++) {
            uint8_t d[32];
            uint64_t bytes = 0;
            file_sha256(paths[i], d, &bytes);
            CHECK(strcmp(s->members[i].path, paths[i]) == 0);
            CHECK(s->members[i].is_master == (i == 0));
            CHECK_EQ_U64(s->members[i].bytes, bytes);
            CHECK(memcmp(s->members[i].sha256, d, 32) == 0);
        }
        uint8_t id[32];
        expected_identity(paths, 3, 1, id);
        CHECK(memcmp(s->identity, id, 32) == 0);
        /* Bad pixels and the mask digest from the master's pixel_mask. */
        CHECK_EQ_U64(s->flagged_count, 3);
        if (s->flagged_count == 3)
            CHECK(s->flagged[0] == 3 && s->flagged[1] == 17 && s->flagged[2] == 40);
        uint8_t md[32];
        mask_digest(f.mask, 48, md);
        CHECK(memcmp(s->detector_mask_sha256, md, 32) == 0);
        CHECK(strcmp(s->mask_origin, "source-little-endian-u32-mask") == 0);
        /* The largest stored chunk over both data files. */
        uint64_t largest = 0;
        for (int k = 0; k < 2; k++) {
            uint64_t count = 0, l = 0;
            CHECK(h5b_chunk_sizes(f.data[k], "/entry/data/data", &count, &l) == 0);
            CHECK_EQ_U64(count, FAMILY_FRAMES[k]);
            largest = l > largest ? l : largest;
        }
        CHECK(largest > 0);
        CHECK_EQ_U64(s->largest_compressed_chunk, largest);
        /* Every frame, in every range (several cross the file boundary). */
        check_all_ranges(s, f.frames);
        qem_error e = {0};
        CHECK_OK(qem_input_reauthenticate(s, NULL, NULL, &e), &e);

        /* A data file rewritten in place, its mtime restored: its change
         * time (which cannot be set back) tells the cheap check, and the
         * digest tells reauthentication. */
        struct stat sb;
        CHECK(stat(f.data[1], &sb) == 0);
        int fd = open(f.data[1], O_RDWR);
        CHECK(fd >= 0);
        uint8_t byte = 0;
        CHECK(pread(fd, &byte, 1, sb.st_size - 1) == 1);
        byte ^= 0x5a;
        CHECK(pwrite(fd, &byte, 1, sb.st_size - 1) == 1);
        close(fd);
        const struct timespec times[2] = {sb.st_atim, sb.st_mtim};
        CHECK(utimensat(AT_FDCWD, f.data[1], times, 0) == 0);
        qem_error e1 = {0};
        CHECK_STATUS(qem_input_check_unchanged(s, &e1), QEM_E_CHANGED, &e1);
        qem_error e2 = {0};
        CHECK_STATUS(qem_input_reauthenticate(s, NULL, NULL, &e2), QEM_E_CHANGED, &e2);
        CHECK(strstr(e2.message, "scan_data_000002.h5") != NULL);
        /* Touching the master is seen by the cheap stat check. */
        const struct timespec later[2] = {{0, UTIME_OMIT}, {sb.st_mtim.tv_sec + 5, 0}};
        CHECK(utimensat(AT_FDCWD, f.master, later, 0) == 0);
        qem_error e3 = {0};
        CHECK_STATUS(qem_input_check_unchanged(s, &e3), QEM_E_CHANGED, &e3);
        CHECK(strstr(e3.message, "scan_master.h5") != NULL);
    }
    qem_input_close(s);
    free(f.frames);

    /* Without the scan_shape attribute the caller gives it; a contradicting
     * one is refused; without a mask the implicit digest is used. */
    family g;
    CHECK(make_family(&g, "arina_noattr", 0, 0));
    inspect_refused(g.master, NULL, QEM_E_LAYOUT, "12 frames");
    input_options o = {.dataset = NULL, .scan_shape = {2, 6}};
    s = inspect_ok(g.master, &o);
    if (s) {
        CHECK_EQ_U64(s->shape[0], 2);
        CHECK_EQ_U64(s->shape[1], 6);
        check_implicit_mask(s);
        check_all_ranges(s, g.frames);
    }
    qem_input_close(s);
    input_options bad_ds = {.dataset = "/entry/data/other", .scan_shape = {2, 6}};
    inspect_refused(g.master, &bad_ds, QEM_E_INVALID_ARGUMENT, "data_NNNNNN");
    input_options good_ds = {.dataset = "/entry/data/data", .scan_shape = {2, 6}};
    s = inspect_ok(g.master, &good_ds);
    qem_input_close(s);
    free(g.frames);

    /* A scan_shape attribute that does not match the frames. */
    family h;
    CHECK(make_family(&h, "arina_badshape", 0, 1));
    CHECK(h5b_set_scan_shape(h.master, "/entry/data", 5, 5) == 0);
    inspect_refused(h.master, NULL, QEM_E_LAYOUT, "does not match");
    input_options contra = {.dataset = NULL, .scan_shape = {3, 4}};
    inspect_refused(h.master, &contra, QEM_E_INVALID_ARGUMENT, "contradicts");
    free(h.frames);

    /* A missing data file. */
    family m;
    CHECK(make_family(&m, "arina_missing", 1, 1));
    CHECK(unlink(m.data[1]) == 0);
    inspect_refused(m.master, NULL, QEM_E_IO, "data_000002");
    free(m.frames);

    /* A third link to a data file already linked. */
    family dup;
    CHECK(make_family(&dup, "arina_dup", 1, 1));
    CHECK(h5b_external_link(dup.master, "/entry/data/data_000003", "scan_data_000002.h5",
                            "/entry/data/data") == 0);
    inspect_refused(dup.master, NULL, QEM_E_LAYOUT, "named twice");
    free(dup.frames);

    /* A data file of another detector shape. */
    family k;
    CHECK(make_family(&k, "arina_shape", 1, 0));
    CHECK(unlink(k.data[1]) == 0);
    uint16_t *other = random_u16(7 * 6 * 8, 10);
    const h5b_dataset d = {.path = "/entry/data/data", .file_type = H5T_STD_U16LE,
                           .mem_type = H5T_NATIVE_UINT16, .rank = 3, .dims = {7, 6, 8},
                           .chunk = {1, 6, 8}, .bitshuffle_lz4 = 1, .data = other};
    CHECK(h5b_write_dataset(k.data[1], &d) == 0);
    inspect_refused(k.master, NULL, QEM_E_LAYOUT, "same detector");
    free(other);
    free(k.frames);

}

/* A data file damaged after inspection: reads that need it fail with
 * libhdf5's reason; reads of the other data file still work. */
static void test_arina_damaged(void)
{
    family f;
    CHECK(make_family(&f, "arina_damaged", 1, 0));
    acquisition *s = inspect_ok(f.master, NULL);
    if (s) {
        struct stat sb;
        CHECK(stat(f.data[1], &sb) == 0);
        CHECK(truncate(f.data[1], sb.st_size / 2) == 0);
        uint16_t *out = malloc(12 * 48 * 2);
        qem_error e = {0};
        CHECK_STATUS(read_u16(s, 4, 3, out, &e), QEM_E_IO, &e);
        CHECK(strstr(e.message, "scan_data_000002.h5") && strstr(e.message, "libhdf5: "));
        qem_error e2 = {0};
        CHECK_OK(read_u16(s, 0, 5, out, &e2), &e2);
        CHECK(memcmp(out, f.frames, 5 * 48 * 2) == 0);
        qem_error e3 = {0};
        CHECK_STATUS(qem_input_check_unchanged(s, &e3), QEM_E_CHANGED, &e3);
        free(out);
    }
    qem_input_close(s);
    free(f.frames);
}

/* The gap is a layout refusal that names both links. */
static void test_arina_gap(void)
{
    family gap;
    CHECK(make_family(&gap, "arina_gap2", 1, 0));
    CHECK(h5b_external_link(gap.master, "/entry/data/data_000004", "scan_data_000002.h5",
                            "/entry/data/data") == 0);
    inspect_refused(gap.master, NULL, QEM_E_LAYOUT, "data_000004 but not data_000003");
    free(gap.frames);
}

/* Points the master's data_000002 at `target` instead. */
static int relink(const char *master, const char *target)
{
    hid_t file = H5Fopen(master, H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0)
        return 0;
    const int ok = H5Ldelete(file, "/entry/data/data_000002", H5P_DEFAULT) >= 0 &&
                   H5Lcreate_external(target, "/entry/data/data", file, "/entry/data/data_000002",
                                      H5P_DEFAULT, H5P_DEFAULT) >= 0;
    H5Fclose(file);
    return ok;
}

static int copy_file(const char *from, const char *to)
{
    size_t n = 0;
    uint8_t *bytes = read_file(from, &n);
    const int ok = bytes && write_file(to, bytes, n);
    free(bytes);
    return ok;
}

/* Data links may only name regular files in the master's own folder:
 * '..', an absolute path, a symlink leading out, a FIFO (which would
 * block) and a system file are each refused, naming the link. */
static void test_arina_links(void)
{
    family f;
    CHECK(make_family(&f, "arina_links", 1, 0));
    char secret_dir[600], secret[700], absolute[800], symlink_path[700], fifo[700];
    snprintf(secret_dir, sizeof secret_dir, "%s", test_path("secret"));
    CHECK(mkdir(secret_dir, 0755) == 0);
    snprintf(secret, sizeof secret, "%s/data.h5", secret_dir);
    CHECK(copy_file(f.data[1], secret)); /* a valid data file, only elsewhere */
    CHECK(realpath(secret, absolute) != NULL);
    snprintf(symlink_path, sizeof symlink_path, "%s/beside.h5", f.dir);
    CHECK(symlink(absolute, symlink_path) == 0);
    snprintf(fifo, sizeof fifo, "%s/fifo.h5", f.dir);
    CHECK(mkfifo(fifo, 0644) == 0);

    CHECK(relink(f.master, "../secret/data.h5"));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "'../secret/data.h5', outside the master's folder");
    CHECK(relink(f.master, "sub/../../secret/data.h5"));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "outside the master's folder");
    CHECK(relink(f.master, absolute));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "outside the master's folder");
    CHECK(relink(f.master, "/etc/passwd"));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "'/etc/passwd', outside the master's folder");
    CHECK(relink(f.master, "beside.h5"));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "which resolves to");
    /* Opening the FIFO would block this test forever: refused unopened. */
    CHECK(relink(f.master, "fifo.h5"));
    inspect_refused(f.master, NULL, QEM_E_LAYOUT, "'fifo.h5', which is not a regular file");
    /* The same file, linked from inside the folder, is accepted. */
    char inside[700];
    snprintf(inside, sizeof inside, "%s/moved.h5", f.dir);
    CHECK(copy_file(secret, inside));
    CHECK(relink(f.master, "moved.h5"));
    acquisition *s = inspect_ok(f.master, NULL);
    qem_input_close(s);
    free(f.frames);
}

/* Arina uint32 frames with a pixel mask: flagged pixels hold 2^32 - 1
 * and are stored as 65535; admitted values up to 65535 pass; 65536 at an
 * admitted pixel fails naming the scan position, pixel and value. */
static void test_arina_uint32(void)
{
    enum { ROWS = 4, COLS = 5, PIXELS = ROWS * COLS, FRAMES = 6 };
    static const uint64_t frames[1] = {FRAMES};
    uint32_t data[FRAMES * PIXELS], mask[PIXELS] = {0};
    mask[3] = 1;
    mask[12] = 8;
    for (int f = 0; f < FRAMES; f++)
        for (int p = 0; p < PIXELS; p++)
            data[f * PIXELS + p] = p == 3 || p == 12 ? UINT32_MAX : (uint32_t)(f * 1000 + p);
    data[2 * PIXELS + 7] = 65535; /* the limit passes */
    char dir[600];
    snprintf(dir, sizeof dir, "%s", test_path("arina32"));
    CHECK(mkdir(dir, 0755) == 0);
    h5b_arina fam = {.dir = dir, .stem = "scan", .files = 1, .frames = frames, .rows = ROWS,
                     .columns = COLS, .data32 = data, .scan_rows = 2, .scan_columns = 3,
                     .pixel_mask = mask};
    char master[512];
    CHECK(h5b_write_arina(&fam, master, sizeof master, NULL) == 0);
    acquisition *s = inspect_ok(master, NULL);
    if (s) {
        CHECK(s->sample_type == QEM_DTYPE_UINT32 && qem_input_stored_dtype(s) == QEM_DTYPE_UINT16);
        CHECK_EQ_U64(s->flagged_count, 2);
        CHECK(s->flagged_count == 2 && s->flagged[0] == 3 && s->flagged[1] == 12);
        uint16_t back[FRAMES * PIXELS];
        qem_error e = {0};
        CHECK_OK(read_u16(s, 0, FRAMES, back, &e), &e);
        for (int k = 0; k < FRAMES * PIXELS; k++)
            CHECK_EQ_U64(back[k], data[k] == UINT32_MAX ? 65535 : data[k]);
        CHECK_EQ_U64(s->max_admitted, 65535);
        CHECK_EQ_U64(s->flagged_clipped, 2 * FRAMES);
        json_t *meta = qem_input_source_metadata(s);
        const json_t *narrow = json_object_get(meta, "narrowing");
        CHECK_EQ_U64(json_integer_value(json_object_get(narrow, "max_admitted_value")), 65535);
        CHECK(json_is_object(json_object_get(json_object_get(meta, "arina"), "detector")));
        json_decref(meta);
    }
    qem_input_close(s);
    /* One count above the limit at an admitted pixel. */
    data[4 * PIXELS + 9] = 65536;
    char dir2[600];
    snprintf(dir2, sizeof dir2, "%s", test_path("arina32over"));
    CHECK(mkdir(dir2, 0755) == 0);
    fam.dir = dir2;
    CHECK(h5b_write_arina(&fam, master, sizeof master, NULL) == 0);
    s = inspect_ok(master, NULL);
    if (s) {
        uint16_t back[FRAMES * PIXELS];
        qem_error e = {0};
        CHECK_STATUS(read_u16(s, 0, FRAMES, back, &e), QEM_E_VALUE_RANGE, &e);
        /* frame 4 of a 2 x 3 scan is (1, 1); pixel 9 of 4 x 5 is (1, 4) */
        CHECK(strstr(e.message, "scan position (1, 1), detector pixel (1, 4) holds 65536") !=
              NULL);
    }
    qem_input_close(s);
    /* No pixel mask (frames copied whole when they fit): the same values
     * round trip, and the count above the limit is named the same way. */
    for (int k = 0; k < FRAMES * PIXELS; k++)
        data[k] = data[k] == UINT32_MAX ? 7 : data[k];
    fam.pixel_mask = NULL;
    for (int over = 0; over < 2; over++) {
        data[4 * PIXELS + 9] = over ? 65536 : 65535;
        char dir3[600];
        snprintf(dir3, sizeof dir3, "%s", test_path(over ? "arina32nomask_over" : "arina32nomask"));
        CHECK(mkdir(dir3, 0755) == 0);
        fam.dir = dir3;
        CHECK(h5b_write_arina(&fam, master, sizeof master, NULL) == 0);
        s = inspect_ok(master, NULL);
        if (s) {
            uint16_t back[FRAMES * PIXELS];
            qem_error e = {0};
            if (over) {
                CHECK_STATUS(read_u16(s, 0, FRAMES, back, &e), QEM_E_VALUE_RANGE, &e);
                CHECK(strstr(e.message,
                             "scan position (1, 1), detector pixel (1, 4) holds 65536") != NULL);
            } else {
                CHECK_OK(read_u16(s, 0, FRAMES, back, &e), &e);
                for (int k = 0; k < FRAMES * PIXELS; k++)
                    CHECK_EQ_U64(back[k], data[k]);
                CHECK_EQ_U64(s->max_admitted, 65535);
                CHECK_EQ_U64(s->flagged_clipped, 0);
            }
        }
        qem_input_close(s);
    }
}


/* --- shapes refused before work proportional to them (issue 27) --------- */

/* A .npy of `descr` and `shape` (a Python tuple's text): its header only,
 * then `data` bytes of zeros made by extending the file (sparse). */
static void write_npy_header(const char *path, const char *shape, uint64_t data)
{
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }",
                     shape);
    const int total = (10 + n + 1 + 63) / 64 * 64; /* the header padded to 64 bytes */
    char head[512];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)((total - 10) & 0xff);
    head[9] = (char)((total - 10) >> 8);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', (size_t)(total - 10 - n - 1));
    head[total - 1] = '\n';
    CHECK(write_file(path, head, (size_t)total));
    CHECK(truncate(path, (off_t)(total + data)) == 0);
}

static void test_absurd_shapes(void)
{
    /* A 128-byte .npy of shape (0, 1, 3000000, 3000000): the empty axis
     * is refused at once, before the 36 TB implicit mask would be hashed
     * (the alarm ends the test if it is not). */
    const char *p = strdup(test_path("empty_axis.npy"));
    write_npy_header(p, "(0, 1, 3000000, 3000000)", 0);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && sb.st_size == 128);
    alarm(60);
    inspect_refused(p, NULL, QEM_E_LAYOUT, "empty dimension (shape 0 x 1 x 3000000 x 3000000)");
    alarm(0);
    /* A detector just over the cap, the data present (sparse): refused
     * before anything proportional to it; the cap itself is accepted. */
    write_npy_header(p, "(1, 1, 8193, 8192)", 8193ull * 8192);
    inspect_refused(p, NULL, QEM_E_LIMIT, "detector of 8193 x 8192 pixels");
    write_npy_header(p, "(1, 1, 8192, 8192)", 8192ull * 8192);
    acquisition *a = NULL;
    qem_error e = {0};
    CHECK_OK(qem_input_open(p, NULL, &a, &e), &e);
    qem_input_close(a);
    CHECK(unlink(p) == 0);
    free((void *)p);
    /* An HDF5 dataset declared but never written: a 2 KiB file claiming
     * 4096 x 4096 frames of 64 x 64 bytes (64 GiB of fill values a save
     * would read) is refused when described. */
    const char *h = strdup(test_path("unwritten.h5"));
    const h5b_dataset dd = {.path = "/frames", .file_type = H5T_STD_U8LE,
                            .mem_type = H5T_NATIVE_UINT8, .rank = 4,
                            .dims = {4096, 4096, 64, 64}, .data = NULL};
    CHECK(h5b_write_dataset(h, &dd) == 0);
    inspect_refused(h, NULL, QEM_E_LAYOUT, "stores only 0 of its 68719476736 bytes");
    free((void *)h);
}

int main(void)
{
    test_identity_vectors();
    test_npy();
    test_hdf5_4d();
    test_hdf5_3d();
    test_hdf5_candidates();
    test_hdf5_refusals();
    test_hdf5_mask();
    test_arina();
    test_arina_gap();
    test_arina_damaged();
    test_arina_links();
    test_arina_uint32();
    test_absurd_shapes();
    return test_finish("unit_inputs");
}
