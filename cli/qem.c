/* The `qem` command: lossless, compact 4D-STEM data. It parses arguments,
 * calls libqem and prints; all format knowledge lives in the library. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "qem.h"


static const char *const main_help =
    "usage: qem <command> [options]\n"
    "\n"
    "Lossless, compact 4D-STEM data: every count kept exactly, far fewer bytes.\n"
    "Arrays are (scan_row, scan_column, detector_row, detector_column).\n"
    "\n"
    "commands:\n"
    "  save IN OUT.qem         store a 4D .npy (uint8/uint16 counts, float32) or\n"
    "                          re-save a .qem, losslessly\n"
    "  info FILE               container, codec/profile, shape, sizes, ratio, metadata\n"
    "  verify FILE             check every checksum, stream, digest and index\n"
    "  export FILE OUT.npy     decode to a 4D .npy, one chunk or shard at a time\n"
    "  dp FILE --scan R,C -o OUT   one diffraction pattern (or --region sum/mean/max)\n"
    "  mean FILE -o OUT        the mean diffraction pattern\n"
    "  virtual FILE -o OUT     a virtual image: --mask M.npy or --detector bf|adf|...\n"
    "  com FILE -o OUT         centre of mass per scan (--subtract-mean: DPC)\n"
    "  dpc FILE -o OUT         DPC rotation search and iDPC phase\n"
    "  calibrate FILE [-o NEW] detector centre and bright-field radius estimate\n"
    "                          (products: OUT .npy exact, .tif float32, .png 8-bit)\n"
    "  view FILE [FILE...]     open in the browser: live virtual detector (qem help view)\n"
    "  pack inspect|plan|produce SRC [DEST.h5]\n"
    "                          write a Lossless Pack Format v1 file (see qem help pack)\n"
    "FILE is a .qem file or a Lossless Pack Format v1 file (.h5), recognised by\n"
    "its signature.\n"
    "  help [COMMAND]          this text, or a command's own help\n"
    "\n"
    "options for every command: --quiet (no progress), --threads N (default:\n"
    "all cores), --help. Output files are written to a temporary name and\n"
    "appear complete or not at all; existing files are never overwritten.\n"
    "Exit status: 0 success, 1 the work failed (message on stderr), 2 usage.\n";

static const char *const save_help =
    "usage: qem save IN OUT.qem [--chunk-scans N] [--valid MASK.npy]\n"
    "                [--dark DARK.npy] [--calibration FILE.json]\n"
    "                [--threads N] [--quiet]\n"
    "\n"
    "Saves IN losslessly as .qem. IN is recognised by its signature:\n"
    "  - a C-order little-endian 4D .npy of uint8/uint16 counts (codec\n"
    "    runtime-column-rans-spatial-v2) or float32 values (codec\n"
    "    float32-bit-lanes-rans-v1: every bit pattern kept, NaN payloads\n"
    "    included); its header is kept under source_metadata;\n"
    "  - a .qem file, re-saved with its own codec, data and metadata.\n"
    "\n"
    "  --chunk-scans N     scan positions per chunk (default 512). Memory used\n"
    "                      is about 3 x N x detector pixels x 4 bytes.\n"
    "  --valid MASK.npy    detector validity mask (bool or uint8 0/1, detector\n"
    "                      shape; counts only): invalid pixels keep their\n"
    "                      counts but leave the spatial sums and products.\n"
    "  --dark DARK.npy     float32 data: record a mean-dark plane (a float32\n"
    "                      detector plane, or a stack of dark frames whose\n"
    "                      mean is taken). Products subtract it once; the\n"
    "                      stored measurements never change.\n"
    "  --calibration FILE  JSON with recorded quantities and user overrides\n"
    "                      (see doc/metadata.md); overrides never replace the\n"
    "                      record, they take precedence in calculations.\n"
    "  --threads N         encoding threads (default: all cores)\n"
    "  --quiet             no progress on stderr\n";




static const char *const info_help =
    "usage: qem info FILE [--json] [--timings] [--expect-sha256 HEX]\n"
    "\n"
    "A .qem file is validated (envelope, header checksum, layout, body\n"
    "checksums) and described: container, codec, shape, dtype, chunks, sizes,\n"
    "compression ratio, the scientific metadata with calibrated axes, recorded\n"
    "microscope quantities and user calibration overrides kept apart.\n"
    "A pack is opened cheaply (prelude, manifest CRC, index, every range, the\n"
    "manifest's agreement with the index) and described: profile, shape,\n"
    "shards, working dtype, exclusions, raw access mode, detector calibration.\n"
    "\n"
    "  --json               machine-readable output\n"
    "  --timings            packs: load (every shard authenticated), read the\n"
    "                       first pattern and a first detector image, and print\n"
    "                       each phase. The page cache is not dropped, so these\n"
    "                       are warm-cache timings. Where threads load whole\n"
    "                       shards, the phases are summed over the threads.\n"
    "  --expect-sha256 HEX  packs: the whole-file SHA-256 the file must have\n";

static const char *const verify_help =
    "usage: qem verify FILE [--expect-sha256 HEX] [--threads N] [--quiet]\n"
    "\n"
    "A .qem file: every body checksum, every count stream decoded to\n"
    "completion under every rule, every value within the dtype, every\n"
    "8x8/32x32 spatial sum recomputed from the decoded counts, and for float32\n"
    "the logical SHA-256 of the decoded bits.\n"
    "A pack: the full load (descriptors or compact headers, every LZ4 block,\n"
    "every shard digest) and, with --expect-sha256, the whole-file identity,\n"
    "which the uint8/bitpacked profile needs because its index does not hash\n"
    "the compact headers.\n"
    "Prints OK, or the first failure and exits 1.\n";

static const char *const export_help =
    "usage: qem export FILE OUT.npy [--raw] [--threads N] [--quiet]\n"
    "\n"
    "Decodes FILE into a 4D .npy, one chunk or shard at a time:\n"
    "  .qem: exact counts, the original float32 bits (checked against the\n"
    "        file's logical SHA-256 before OUT appears), or restored float32\n"
    "        intensities of a scaled file;\n"
    "  pack: the mask-applied working array in the file's working dtype\n"
    "        (excluded detector pixels read 0).\n"
    "\n"
    "  --raw    pack: the raw uint16 reconstruction (retained samples or\n"
    "           exclusion constants), refused where the file does not admit it;\n"
    "           scaled .qem: the stored uint16 codes (also --codes)\n";

static const char *const pack_help =
    "usage: qem pack inspect SRC [--dataset /PATH] [--scan-shape R,C] [--json]\n"
    "       qem pack plan SRC [--profile u16-lz4|u8-bitpacked] [--exclude MASK.npy]\n"
    "                     [--dest DEST.h5] [--available-memory B] [--available-disk B]\n"
    "       qem pack produce SRC DEST.h5 [--profile ...] [--exclude MASK.npy] [--quiet]\n"
    "\n"
    "Writes Lossless Pack Format v1 files (genuine HDF5 files whose 64 KiB user\n"
    "block indexes bit-packed shards) from a 4D .npy, a dense 3D/4D dataset in\n"
    "any HDF5 file (--dataset, and --scan-shape for 3D frame stacks), or a\n"
    "Dectris/Arina master with its bitshuffle/LZ4 data files. Counts are\n"
    "uint16, or uint8 for the u8-bitpacked profile.\n"
    "\n"
    "  inspect  authenticates every member (SHA-256, file stat before and after)\n"
    "           and reports shape, dtype, logical bytes, bad pixels and digests.\n"
    "  plan     shard size and predicted bounds (resident, peak transient,\n"
    "           output, receipt, disk); fails with required/available figures.\n"
    "  produce  re-authenticates the source, builds one shard at a time and\n"
    "           publishes DEST.receipt.json, then DEST; nothing is ever\n"
    "           overwritten, and a failure, Ctrl-C or kill leaves nothing\n"
    "           behind (see doc/pack-producer.md for the one exception).\n"
    "\n"
    "  --profile u16-lz4       exact uint16, LZ4 blocks (default); excluded\n"
    "                          pixels are retained exactly\n"
    "  --profile u8-bitpacked  exact uint8: every admitted count must be <= 255\n"
    "                          and each excluded pixel one constant raw value\n"
    "  --exclude MASK.npy      detector pixels to exclude (0/1), besides the\n"
    "                          source's own bad pixels\n";



static int cmd_save(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, save_help, 2, "chunk valid dark calibration", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    qem_error e = {0};
    qem_save_options so;
    qem_save_options_init(&so);
    so.threads = o.threads;
    so.chunk_scans = (uint32_t)o.chunk_scans;
    uint64_t shape[4];
    qem_dtype dtype;
    if (qem_source_shape(o.positional[0], shape, &dtype, &e) != QEM_OK)
        return fail("save", &e);
    const uint64_t pixels = shape[2] * shape[3];
    uint8_t *mask = NULL;
    float *dark = NULL;
    char *calibration = NULL;
    char identity[65];
    int code = EXIT_OK;
    if (o.valid) {
        mask = malloc((size_t)pixels);
        if (!mask || qem_npy_read_mask(o.valid, shape[2], shape[3], mask, &e) != QEM_OK)
            code = mask ? fail("save", &e) : EXIT_FAILED;
        so.valid = mask;
    }
    if (code == EXIT_OK && o.dark) {
        dark = malloc((size_t)pixels * sizeof *dark);
        if (!dark || qem_dark_from_npy(o.dark, shape[2], shape[3], dark, identity, &e) != QEM_OK)
            code = dark ? fail("save", &e) : EXIT_FAILED;
        so.dark = dark;
        so.dark_identity = identity;
    }
    if (code == EXIT_OK && o.calibration) {
        calibration = slurp(o.calibration);
        if (!calibration) {
            fprintf(stderr, "qem save: cannot read calibration file '%s'\n", o.calibration);
            code = EXIT_FAILED;
        }
        so.calibration_json = calibration;
    }
    if (code == EXIT_OK) {
        progress_state ps;
        progress_setup(&ps, "saving", &o, &so.progress, &so.progress_user);
        if (qem_save_file(o.positional[0], o.positional[1], &so, &e) != QEM_OK)
            code = fail("save", &e);
    }
    free(mask);
    free(dark);
    free(calibration);
    if (code != EXIT_OK)
        return code;
    qem_file *f = open_deferred("save", o.positional[1]); /* only sizes are needed */
    if (!f)
        return EXIT_FAILED;
    qem_file_info info;
    qem_get_info(f, &info);
    qem_close(f);
    if (!o.quiet)
        printf("saved %s (%s): %llu bytes of %s data in %llu bytes (ratio %.2fx)\n",
               o.positional[1], qem_codec_name(info.codec), (unsigned long long)info.logical_bytes,
               qem_dtype_name(info.dtype), (unsigned long long)info.file_bytes,
               (double)info.logical_bytes / (double)info.file_bytes);
    return EXIT_OK;
}

/* The shortest decimal that reads back as the same double. */
static const char *shortest(double v, char *buf, size_t size)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

static void print_quantities(const char *title, const json_t *object)
{
    if (!json_is_object(object) || json_object_size(object) == 0) {
        printf("%-18s none\n", title);
        return;
    }
    const char *key;
    json_t *q;
    int first = 1;
    json_object_foreach((json_t *)object, key, q) {
        json_t *unit = json_object_get(q, "unit"), *prov = json_object_get(q, "provenance");
        char number[32];
        printf("%-18s %s = %s %s (%s)\n", first ? title : "", key,
               shortest(json_number_value(json_object_get(q, "value")), number, sizeof number),
               json_is_string(unit) ? json_string_value(unit) : "",
               json_is_string(prov) ? json_string_value(prov) : "no provenance");
        first = 0;
    }
}

static void print_summary(const json_t *s)
{
    const json_t *shape = json_object_get(s, "shape");
    const json_t *sm = json_object_get(s, "scientific_metadata");
    long long file = json_integer_value(json_object_get(s, "file_bytes"));
    printf("%-18s %s\n", "file", json_string_value(json_object_get(s, "path")));
    printf("%-18s quantem.qem, container version %lld\n", "container",
           json_integer_value(json_object_get(s, "container_version")));
    printf("%-18s %s (version %lld)\n", "codec", json_string_value(json_object_get(s, "codec")),
           json_integer_value(json_object_get(s, "codec_version")));
    printf("%-18s %lld x %lld scan positions, %lld x %lld detector pixels\n", "shape",
           json_integer_value(json_array_get(shape, 0)), json_integer_value(json_array_get(shape, 1)),
           json_integer_value(json_array_get(shape, 2)), json_integer_value(json_array_get(shape, 3)));
    printf("%-18s %s\n", "dtype", json_string_value(json_object_get(s, "dtype")));
    const json_t *chunks = json_object_get(s, "chunks");
    long long most = 0;
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c) {
        long long n = json_integer_value(json_object_get(c, "scans"));
        most = n > most ? n : most;
    }
    printf("%-18s %zu (up to %lld scan positions each)\n", "chunks", json_array_size(chunks), most);
    printf("%-18s %lld of %lld detector pixels\n", "valid pixels",
           json_integer_value(json_object_get(json_object_get(s, "valid_pixels"), "valid")),
           json_integer_value(json_object_get(json_object_get(s, "valid_pixels"), "total")));
    printf("%-18s %lld bytes (header %lld, body %lld)\n", "file size", file,
           json_integer_value(json_object_get(s, "header_bytes")),
           json_integer_value(json_object_get(s, "body_bytes")));
    printf("%-18s %lld bytes\n", "uncompressed",
           json_integer_value(json_object_get(s, "logical_bytes")));
    printf("%-18s %.2fx\n", "compression ratio",
           json_number_value(json_object_get(s, "compression_ratio")));
    printf("%-18s %s, source %s, coverage %s\n", "metadata",
           json_string_value(json_object_get(sm, "schema")),
           json_is_string(json_object_get(sm, "source_format"))
               ? json_string_value(json_object_get(sm, "source_format"))
               : "unknown",
           json_string_value(json_object_get(sm, "source_metadata_coverage")));
    json_array_foreach(json_object_get(sm, "processing"), i, c) {
        printf("%-18s %s%s\n", i == 0 ? "processing" : "",
               json_string_value(json_object_get(c, "operation")),
               json_is_true(json_object_get(c, "changes_measurements")) ? " (changes measurements)"
                                                                         : "");
    }
    const json_t *dark = json_object_get(s, "dark");
    if (json_is_object(dark))
        printf("%-18s mean-dark plane recorded (%s, identity %.16s...); products subtract it "
               "once, raw reads never\n",
               "dark", json_string_value(json_object_get(dark, "schema")),
               json_string_value(json_object_get(dark, "identity")));
    else if (dark)
        printf("%-18s none recorded\n", "dark");
    json_array_foreach(json_object_get(s, "regions"), i, c) {
        char scale[32], offset[32];
        printf("%-18s frames [%lld, %lld): value = code x %s + %s\n",
               i == 0 ? "scaled regions" : "",
               json_integer_value(json_object_get(c, "first_frame")),
               json_integer_value(json_object_get(c, "stop_frame")),
               shortest(json_number_value(json_object_get(c, "scale")), scale, sizeof scale),
               shortest(json_number_value(json_object_get(c, "offset")), offset, sizeof offset));
    }
    print_quantities("calibrated axes", json_object_get(sm, "calibrated_axes"));
    print_quantities("microscope", json_object_get(sm, "electron_microscope"));
    print_quantities("overrides", json_object_get(sm, "calibration_overrides"));
}




static int print_json(const char *command, char *text, int json,
                      void (*human)(const json_t *summary))
{
    if (!text) {
        fprintf(stderr, "qem %s: out of memory\n", command);
        return EXIT_FAILED;
    }
    if (json) {
        printf("%s\n", text);
    } else {
        json_t *s = json_loads(text, 0, NULL);
        if (s)
            human(s);
        json_decref(s);
    }
    qem_free(text);
    return EXIT_OK;
}

static void print_ms(const char *label, const json_t *v)
{
    if (json_is_number(v))
        printf("  %-26s %10.3f ms\n", label, json_number_value(v));
    else
        printf("  %-26s %10s\n", label, "not run");
}

static void print_pack_summary(const json_t *s)
{
    const json_t *shape = json_object_get(s, "shape");
    printf("%-18s %s\n", "file", json_string_value(json_object_get(s, "path")));
    printf("%-18s %s, profile %s (legacy binary revision %lld)\n", "format",
           json_string_value(json_object_get(s, "format")),
           json_string_value(json_object_get(s, "profile")),
           json_integer_value(json_object_get(s, "legacy_binary_revision")));
    printf("%-18s %s\n", "schema", json_string_value(json_object_get(s, "schema")));
    printf("%-18s %lld x %lld scan positions, %lld x %lld detector pixels\n", "shape",
           json_integer_value(json_array_get(shape, 0)), json_integer_value(json_array_get(shape, 1)),
           json_integer_value(json_array_get(shape, 2)), json_integer_value(json_array_get(shape, 3)));
    printf("%-18s %lld of %lld scan positions each\n", "shards",
           json_integer_value(json_object_get(s, "shard_count")),
           json_integer_value(json_object_get(s, "scans_per_shard")));
    printf("%-18s %s (excluded pixels read 0)\n", "working dtype",
           json_string_value(json_object_get(s, "working_dtype")));
    printf("%-18s %lld detector pixels\n", "excluded",
           json_integer_value(json_object_get(s, "excluded_count")));
    printf("%-18s %s\n", "raw access", json_string_value(json_object_get(s, "raw_access")));
    printf("%-18s %lld bytes (resident once loaded: %lld)\n", "file size",
           json_integer_value(json_object_get(s, "file_bytes")),
           json_integer_value(json_object_get(s, "resident_bytes")));
    printf("%-18s %.2fx of uint16\n", "compression ratio",
           json_number_value(json_object_get(s, "compression_ratio")));
    printf("%-18s %s\n", "source identity",
           json_string_value(json_object_get(s, "source_identity_sha256")));
    if (!json_is_true(json_object_get(s, "headers_hashed_by_index")))
        printf("%-18s compact headers are not hashed by the index; qualify the file with "
               "--expect-sha256\n",
               "integrity");
    const json_t *cal = json_object_get(s, "detector_calibration");
    if (json_is_object(cal)) {
        const json_t *c = json_object_get(cal, "detector_center_px");
        char r[32], col[32], rad[32];
        printf("%-18s centre (%s, %s) px, bright-field radius %s px, method %s\n",
               "detector calib.", shortest(json_number_value(json_array_get(c, 0)), r, sizeof r),
               shortest(json_number_value(json_array_get(c, 1)), col, sizeof col),
               shortest(json_number_value(json_object_get(cal, "bright_field_radius_px")), rad,
                        sizeof rad),
               json_string_value(json_object_get(cal, "method")));
        if (json_object_get(cal, "dpc_rotation_degrees"))
            printf("%-18s DPC rotation %s degrees, components %sexchanged\n", "",
                   shortest(json_number_value(json_object_get(cal, "dpc_rotation_degrees")), r,
                            sizeof r),
                   json_is_true(json_object_get(cal, "dpc_component_order_exchanged")) ? "" : "not ");
    } else {
        printf("%-18s none\n", "detector calib.");
    }
    const json_t *t = json_object_get(s, "timings_ms");
    if (json_is_object(t)) {
        printf("timings (warm page cache; not a cold run; phases summed over loading "
               "threads):\n");
        print_ms("metadata", json_object_get(t, "metadata"));
        print_ms("whole-file integrity", json_object_get(t, "whole_file_integrity"));
        print_ms("source read", json_object_get(t, "source_read"));
        print_ms("header validation", json_object_get(t, "header_validation"));
        print_ms("payload integrity", json_object_get(t, "payload_integrity"));
        print_ms("descriptor preparation", json_object_get(t, "descriptor_preparation"));
        print_ms("LZ4 decode", json_object_get(t, "decode"));
        print_ms("resident copy", json_object_get(t, "resident_copy"));
        print_ms("resident ready", json_object_get(t, "resident_ready"));
        print_ms("first diffraction pattern", json_object_get(t, "first_diffraction"));
        print_ms("first detector image", json_object_get(t, "first_detector"));
        printf("  %-26s %10lld bytes\n", "peak transient staging",
               json_integer_value(json_object_get(s, "peak_transient_bytes")));
    }
}

static int cmd_info(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, info_help, 1, "json timings expect", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    qem_error e = {0};
    qem_file_kind kind;
    if (qem_identify(o.positional[0], &kind, &e) != QEM_OK)
        return fail("info", &e);
    if (kind == QEM_KIND_PACK) {
        qem_pack *p = NULL;
        if (qem_pack_open(o.positional[0], &p, &e) != QEM_OK)
            return fail("info", &e);
        if (o.timings || o.expect_sha256) {
            qem_pack_load_options lo;
            qem_pack_load_options_init(&lo);
            lo.threads = o.threads;
            lo.expect_sha256 = o.expect_sha256;
            if (qem_pack_load(p, &lo, &e) != QEM_OK ||
                qem_pack_time_first_access(p, &e) != QEM_OK) {
                qem_pack_close(p);
                return fail("info", &e);
            }
        }
        char *text = qem_pack_summary_json(p);
        qem_pack_close(p);
        return print_json("info", text, o.json, print_pack_summary);
    }
    qem_file *f = NULL;
    if (qem_open(o.positional[0], NULL, &f, &e) != QEM_OK)
        return fail("info", &e);
    char *text = qem_summary_json(f);
    qem_close(f);
    return print_json("info", text, o.json, print_summary);
}

static int verify_pack(const options *o)
{
    qem_error e = {0};
    qem_pack *p = NULL;
    if (qem_pack_open(o->positional[0], &p, &e) != QEM_OK)
        return fail("verify", &e);
    qem_pack_load_options lo;
    qem_pack_load_options_init(&lo);
    lo.threads = o->threads;
    lo.expect_sha256 = o->expect_sha256;
    lo.check_stored_digests = 1;
    progress_state ps;
    progress_setup(&ps, "verifying shards", o, &lo.progress, &lo.progress_user);
    if (qem_pack_load(p, &lo, &e) != QEM_OK) {
        qem_pack_close(p);
        return fail("verify", &e);
    }
    qem_pack_info info;
    qem_pack_get_info(p, &info);
    qem_pack_timings t;
    qem_pack_get_timings(p, &t);
    qem_pack_close(p);
    printf("OK %s: %llu shards loaded, %llu payload digests verified%s\n", o->positional[0],
           (unsigned long long)info.shard_count, (unsigned long long)t.decoded_digests_checked,
           o->expect_sha256 ? ", whole-file identity verified"
           : info.profile == QEM_PACK_UINT8_BITPACKED
               ? "; compact headers are not hashed by the index, give --expect-sha256 to "
                 "qualify the file"
               : "");
    return EXIT_OK;
}

static int cmd_verify(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, verify_help, 1, "expect", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    qem_error e = {0};
    qem_file_kind kind;
    if (qem_identify(o.positional[0], &kind, &e) != QEM_OK)
        return fail("verify", &e);
    if (kind == QEM_KIND_PACK)
        return verify_pack(&o);
    qem_file *f = open_deferred("verify", o.positional[0]);
    if (!f)
        return EXIT_FAILED;
    qem_verify_options vo;
    qem_verify_options_init(&vo);
    vo.threads = o.threads;
    progress_state ps;
    progress_setup(&ps, "verifying", &o, &vo.progress, &vo.progress_user);
    qem_verify_report report;
    qem_status st = qem_verify(f, &vo, &report, &e);
    qem_close(f);
    if (st != QEM_OK)
        return fail("verify", &e);
    printf("OK %s: %llu body blocks, %llu streams (%llu counts), %llu spatial sums verified\n",
           o.positional[0], (unsigned long long)report.body_blocks_checked,
           (unsigned long long)report.streams_decoded, (unsigned long long)report.samples_decoded,
           (unsigned long long)report.spatial_values_checked);
    return EXIT_OK;
}


static int cmd_export(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, export_help, 2, "codes raw expect", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    qem_error e = {0};
    qem_source *s = open_source("export", &o);
    if (!s)
        return EXIT_FAILED;
    progress_state ps;
    qem_progress_fn fn;
    void *user;
    progress_setup(&ps, "exporting", &o, &fn, &user);
    qem_status st = qem_source_export_npy(s, o.positional[1],
                                          o.raw || o.codes ? QEM_VALUES_RAW : QEM_VALUES_WORKING,
                                          fn, user, &e);
    qem_source_close(s);
    if (st != QEM_OK)
        return fail("export", &e);
    return EXIT_OK;
}


static int pack_source_setup(const options *o, qem_pack_inspection **in, qem_error *e)
{
    qem_pack_source_options so;
    qem_pack_source_options_init(&so);
    so.dataset = o->dataset;
    so.scan_shape[0] = o->scan_shape[0];
    so.scan_shape[1] = o->scan_shape[1];
    return qem_pack_inspect(o->positional[1], &so, in, e) == QEM_OK;
}

/* Plan options from the command line; *mask is the --exclude mask. */
static int pack_plan_setup(const options *o, const qem_pack_inspection *in,
                           qem_pack_plan_options *po, uint8_t **mask, qem_error *e)
{
    qem_pack_plan_options_init(po);
    po->profile = o->profile && !strcmp(o->profile, "u8-bitpacked") ? QEM_PACK_UINT8_BITPACKED
                                                                    : QEM_PACK_UINT16_LZ4;
    po->destination = o->dest ? o->dest : (o->npositional > 2 ? o->positional[2] : ".");
    po->available_disk = o->available_disk;
    po->available_memory = o->available_memory;
    *mask = NULL;
    if (o->exclude) {
        char *text = qem_pack_inspection_json(in);
        json_t *j = text ? json_loads(text, 0, NULL) : NULL;
        qem_free(text);
        const json_t *shape = json_object_get(j, "shape");
        const uint64_t rows = (uint64_t)json_integer_value(json_array_get(shape, 2));
        const uint64_t cols = (uint64_t)json_integer_value(json_array_get(shape, 3));
        json_decref(j);
        *mask = rows && cols ? malloc((size_t)(rows * cols)) : NULL;
        if (!*mask || qem_npy_read_mask(o->exclude, rows, cols, *mask, e) != QEM_OK)
            return 0;
        po->exclude = *mask;
    }
    return 1;
}

/* The inspection report for people; --json prints the full object. */
static void print_inspection(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    const json_t *shape = json_object_get(j, "shape"), *bad = json_object_get(j, "bad_pixels");
    printf("%-24s %s, %s\n", "source", json_string_value(json_object_get(j, "kind")),
           json_string_value(json_object_get(j, "dtype")));
    printf("%-24s (%lld, %lld, %lld, %lld)\n", "shape",
           (long long)json_integer_value(json_array_get(shape, 0)),
           (long long)json_integer_value(json_array_get(shape, 1)),
           (long long)json_integer_value(json_array_get(shape, 2)),
           (long long)json_integer_value(json_array_get(shape, 3)));
    printf("%-24s %lld bytes\n", "logical size",
           (long long)json_integer_value(json_object_get(j, "logical_bytes")));
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(j, "members"), i, m)
    {
        printf("%-24s %s, %lld bytes, SHA-256 %s\n",
               json_string_value(json_object_get(m, "role")),
               json_string_value(json_object_get(m, "path")),
               (long long)json_integer_value(json_object_get(m, "bytes")),
               json_string_value(json_object_get(m, "sha256")));
    }
    printf("%-24s %zu", "bad pixels", json_array_size(bad));
    for (i = 0; i < json_array_size(bad) && i < 8; i++)
        printf("%s%lld", i ? ", " : " (", (long long)json_integer_value(json_array_get(bad, i)));
    printf("%s\n", json_array_size(bad) > 8 ? ", ...)" : json_array_size(bad) ? ")" : "");
    printf("%-24s %s\n", "bad pixels SHA-256",
           json_string_value(json_object_get(j, "bad_pixels_sha256")));
    printf("%-24s %s (%s)\n", "detector mask SHA-256",
           json_string_value(json_object_get(j, "detector_mask_sha256")),
           json_string_value(json_object_get(j, "detector_mask_origin")));
    printf("%-24s %s\n", "source identity",
           json_string_value(json_object_get(j, "source_identity_sha256")));
    json_decref(j);
}

static void print_plan(const qem_pack_plan *p)
{
    printf("%-24s %s\n", "profile",
           p->profile == QEM_PACK_UINT8_BITPACKED ? "u8-bitpacked (exact uint8, 32-scan tiles)"
                                                  : "u16-lz4 (exact uint16, 128-scan tiles, LZ4)");
    printf("%-24s %llu shards of %llu scan positions\n", "shards",
           (unsigned long long)p->shard_count, (unsigned long long)p->scans_per_shard);
    printf("%-24s %llu\n", "excluded pixels", (unsigned long long)p->excluded_count);
    printf("%-24s %llu bytes at most\n", "resident once loaded",
           (unsigned long long)p->resident_bytes);
    printf("%-24s %llu bytes (available %llu)\n", "peak transient memory",
           (unsigned long long)p->peak_transient_bytes, (unsigned long long)p->available_memory);
    printf("%-24s %llu bytes at most\n", "output", (unsigned long long)p->output_max_bytes);
    printf("%-24s %llu bytes at most\n", "receipt", (unsigned long long)p->receipt_max_bytes);
    printf("%-24s %llu bytes (available %llu)\n", "disk need",
           (unsigned long long)p->disk_need_bytes, (unsigned long long)p->available_disk);
}

static int cmd_pack(int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";
    const int produce = !strcmp(sub, "produce");
    if (strcmp(sub, "inspect") && strcmp(sub, "plan") && !produce) {
        if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
            fputs(pack_help, stdout);
            return EXIT_OK;
        }
        return usage_error(pack_help, "qem pack needs inspect, plan or produce%s", "");
    }
    options o;
    int rc = parse_args(argc, argv, pack_help, produce ? 3 : 2,
                        "dataset shape profile exclude dest available json", &o);
    if (rc)
        return rc < 0 ? EXIT_OK : rc;
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    if (!pack_source_setup(&o, &in, &e))
        return fail("pack", &e);
    int code = EXIT_OK;
    if (!strcmp(sub, "inspect")) {
        char *text = qem_pack_inspection_json(in);
        if (o.json || !text)
            printf("%s\n", text ? text : "{}");
        else
            print_inspection(text);
        qem_free(text);
        qem_pack_inspection_free(in);
        return EXIT_OK;
    }
    qem_pack_plan_options po;
    uint8_t *mask = NULL;
    if (!pack_plan_setup(&o, in, &po, &mask, &e)) {
        code = fail("pack", &e);
    } else if (!produce) {
        qem_pack_plan plan;
        if (qem_pack_plan_make(in, &po, &plan, &e) != QEM_OK)
            code = fail("pack plan", &e);
        else
            print_plan(&plan);
    } else {
        qem_pack_produce_options pr;
        qem_pack_produce_options_init(&pr);
        progress_state ps;
        progress_setup(&ps, "packing shards", &o, &pr.progress, &pr.progress_user);
        if (qem_pack_produce(in, &po, o.positional[2], &pr, &e) != QEM_OK)
            code = fail("pack produce", &e);
        else if (!o.quiet)
            printf("produced %s and %s.receipt.json\n", o.positional[2], o.positional[2]);
    }
    free(mask);
    qem_pack_inspection_free(in);
    return code;
}

int main(int argc, char **argv)
{
    catch_interrupts();
    if (argc < 2) {
        fputs(main_help, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        fputs(main_help, stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("qem %s\n", qem_version());
        return EXIT_OK;
    }
    if (!strcmp(cmd, "help")) {
        const char *topic = argc > 2 ? argv[2] : "";
        fputs(!strcmp(topic, "save")     ? save_help
              : !strcmp(topic, "info")   ? info_help
              : !strcmp(topic, "verify") ? verify_help
              : !strcmp(topic, "export") ? export_help
              : !strcmp(topic, "pack")   ? pack_help
              : !strcmp(topic, "dp")     ? dp_help
              : !strcmp(topic, "mean")   ? mean_help
              : !strcmp(topic, "virtual") ? virtual_help
              : !strcmp(topic, "com")    ? com_help
              : !strcmp(topic, "dpc")    ? dpc_help
              : !strcmp(topic, "calibrate") ? calibrate_help
              : !strcmp(topic, "view")   ? view_help
                                         : main_help,
              stdout);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "save"))
        return cmd_save(argc - 2, argv + 2);
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "verify"))
        return cmd_verify(argc - 2, argv + 2);
    if (!strcmp(cmd, "export"))
        return cmd_export(argc - 2, argv + 2);
    if (!strcmp(cmd, "dp"))
        return cmd_dp(argc - 2, argv + 2);
    if (!strcmp(cmd, "mean"))
        return cmd_mean(argc - 2, argv + 2);
    if (!strcmp(cmd, "virtual"))
        return cmd_virtual(argc - 2, argv + 2);
    if (!strcmp(cmd, "com"))
        return cmd_com(argc - 2, argv + 2);
    if (!strcmp(cmd, "dpc"))
        return cmd_dpc(argc - 2, argv + 2);
    if (!strcmp(cmd, "calibrate"))
        return cmd_calibrate(argc - 2, argv + 2);
    if (!strcmp(cmd, "pack"))
        return cmd_pack(argc - 2, argv + 2);
    if (!strcmp(cmd, "view"))
        return cmd_view(argc - 2, argv + 2);
    fprintf(stderr, "qem: unknown command '%s'\n\n%s", cmd, main_help);
    return EXIT_USAGE;
}
