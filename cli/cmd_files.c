/* The file commands: save, info, verify, export. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qem_experimental.h" /* qem info --timings */
#include "summary_print.h"
#include "terminal.h"

static int threads_of(const args *a)
{
    return (int)a->v[OPT_THREADS].i[0];
}

/* --- save ------------------------------------------------------------------- */

/* The shape and stored dtype of what `qem save` reads: a container to
 * re-save (described without loading), or an acquisition (left open in
 * *acq). */
static int save_input(const args *a, const char *in, qem_acquisition **acq,
                      progress_state *hashing, uint64_t shape[4], qem_dtype *stored)
{
    *acq = NULL;
    qem_file_kind kind;
    if (!identify("save", in, &kind))
        return EXIT_FAILED;
    qem_error e = {0};
    if (qem_file_kind_is_container(kind)) {
        if (has_acquisition_options(a))
            return usage_fail("save",
                              "'%s' is a %s file, not an acquisition; --dataset, --scan-shape "
                              "and --raw-* apply to acquisitions",
                              SAFE(in), qem_file_kind_name(kind));
        qem_container_options o;
        qem_container_options_init(&o);
        o.body_check = QEM_BODY_CHECK_ON_READ; /* the save reads every block */
        o.load = QEM_LOAD_LATER;
        qem_container *s = open_container("save", in, &o);
        if (!s)
            return EXIT_FAILED;
        qem_container_info info = {.struct_size = sizeof info};
        const qem_status st = qem_container_get_info(s, &info, &e);
        qem_container_close(s);
        if (st != QEM_OK)
            return fail("save", &e);
        memcpy(shape, info.shape, 4 * sizeof *shape);
        *stored = info.working_dtype;
        return EXIT_OK;
    }
    qem_acquisition_options ao;
    acquisition_options(a, &ao, hashing);
    if (qem_acquisition_open(in, &ao, acq, &e) != QEM_OK)
        return fail("save", &e);
    qem_acquisition_info info = {.struct_size = sizeof info};
    if (qem_acquisition_get_info(*acq, &info, &e) != QEM_OK)
        return fail("save", &e);
    memcpy(shape, info.shape, 4 * sizeof *shape);
    *stored = info.stored_dtype;
    return EXIT_OK;
}

/* "saved OUT (codec): N bytes of DTYPE data in M bytes (ratio R)". */
static int print_saved(const char *out)
{
    qem_container_options o;
    qem_container_options_init(&o);
    o.body_check = QEM_BODY_CHECK_ON_READ; /* only sizes are needed */
    qem_container *s = open_container("save", out, &o);
    if (!s)
        return EXIT_FAILED;
    qem_error e = {0};
    qem_container_info info = {.struct_size = sizeof info};
    char *text = qem_container_get_info(s, &info, &e) == QEM_OK
                     ? qem_container_details_json(s, &e)
                     : NULL;
    qem_container_close(s);
    json_t *d = text ? json_loads(text, 0, NULL) : NULL;
    qem_free(text);
    if (!d)
        return fail("save", &e);
    const long long logical = json_integer_value(json_object_get(d, "logical_bytes"));
    const long long file = json_integer_value(json_object_get(d, "file_bytes"));
    printf("saved %s (%s): %lld bytes of %s data in %lld bytes (ratio %.2fx)\n", SAFE(out),
           json_string_value(json_object_get(d, "codec")), logical,
           qem_dtype_name(info.working_dtype), file, (double)logical / (double)file);
    json_decref(d);
    return EXIT_OK;
}

static int run_save(const args *a)
{
    const char *in = a->positional[0], *out = a->positional[1];
    int rc = need_destination("save", out, "qem", "save writes .qem files");
    if (rc)
        return rc;
    qem_error e = {0};
    uint64_t shape[4] = {0, 0, 0, 0};
    qem_dtype dtype = QEM_DTYPE_NONE;
    qem_acquisition *acq = NULL;
    progress_state hashing;
    if ((rc = save_input(a, in, &acq, &hashing, shape, &dtype))) {
        qem_acquisition_close(acq);
        return rc;
    }
    /* Options that cannot apply to this data are refused, never ignored. */
    const int counts = dtype == QEM_DTYPE_UINT8 || dtype == QEM_DTYPE_UINT16;
    if (given(a, OPT_VALID) && !counts)
        rc = usage_fail("save",
                        "--valid applies to uint8/uint16 counts; '%s' holds %s values, whose "
                        "codec stores no validity mask",
                        SAFE(in), qem_dtype_name(dtype));
    else if (given(a, OPT_DARK) && dtype != QEM_DTYPE_FLOAT32)
        rc = usage_fail("save",
                        "--dark applies to float32 data; '%s' holds %s counts, which are "
                        "stored without a dark recipe",
                        SAFE(in), qem_dtype_name(dtype));
    if (rc) {
        qem_acquisition_close(acq);
        return rc;
    }
    qem_save_options so;
    qem_save_options_init(&so);
    so.threads = threads_of(a);
    so.chunk_scans = (uint32_t)a->v[OPT_CHUNK_SCANS].i[0];
    const uint64_t pixels = shape[2] * shape[3];
    uint8_t *mask = NULL;
    float *dark = NULL;
    char *calibration = NULL;
    char identity[65];
    int code = EXIT_OK;
    if (given(a, OPT_VALID)) {
        mask = malloc((size_t)pixels);
        if (!mask || qem_npy_read_mask(text_of(a, OPT_VALID), shape[2], shape[3], mask,
                                       (size_t)pixels, &e) != QEM_OK)
            code = mask ? fail("save", &e) : EXIT_FAILED;
        so.valid = mask;
    }
    if (code == EXIT_OK && given(a, OPT_DARK)) {
        dark = malloc((size_t)pixels * sizeof *dark);
        if (!dark || qem_dark_from_npy(text_of(a, OPT_DARK), shape[2], shape[3], dark,
                                       (size_t)pixels * sizeof *dark, identity, sizeof identity,
                                       &e) != QEM_OK)
            code = dark ? fail("save", &e) : EXIT_FAILED;
        so.dark = dark;
        so.dark_identity = identity;
    }
    if (code == EXIT_OK && given(a, OPT_CALIBRATION)) {
        calibration = read_text_file("save", "the calibration file", text_of(a, OPT_CALIBRATION));
        if (!calibration)
            code = EXIT_FAILED;
        so.calibration_json = calibration;
    }
    if (code == EXIT_OK) {
        progress_state ps;
        progress_setup(&ps, "saving", "scan positions", given(a, OPT_QUIET), &so.progress,
                       &so.progress_user);
        const qem_status st = acq ? qem_save_acquisition(acq, out, &so, &e)
                                  : qem_save_file(in, out, &so, &e);
        if (st != QEM_OK)
            code = fail("save", &e);
    }
    qem_acquisition_close(acq);
    free(mask);
    free(dark);
    free(calibration);
    if (code != EXIT_OK || given(a, OPT_QUIET))
        return code;
    return print_saved(out);
}

/* --- inspect ---------------------------------------------------------------- */

static int run_inspect(const args *a)
{
    const char *in = a->positional[0];
    qem_acquisition_options ao;
    progress_state hashing;
    acquisition_options(a, &ao, &hashing);
    qem_error e = {0};
    qem_acquisition *acq = NULL;
    if (qem_acquisition_open(in, &ao, &acq, &e) != QEM_OK ||
        qem_acquisition_authenticate(acq, &e) != QEM_OK) {
        qem_acquisition_close(acq);
        return fail("inspect", &e);
    }
    char *text = qem_acquisition_json(acq, &e);
    qem_acquisition_close(acq);
    if (!text)
        return fail("inspect", &e);
    int rc = EXIT_OK;
    if (given(a, OPT_JSON)) {
        rc = print_json_text(text);
    } else {
        json_t *j = json_loads(text, 0, NULL);
        json_t *safe = j ? term_safe_json(j) : NULL;
        if (safe)
            print_acquisition(safe, in);
        json_decref(safe);
        json_decref(j);
    }
    qem_free(text);
    return rc;
}

/* --- info ------------------------------------------------------------------- */


static int run_info(const args *a)
{
    const char *path = a->positional[0];
    qem_container_options o;
    qem_container_options_init(&o);
    o.threads = threads_of(a);
    o.expect_sha256 = text_of(a, OPT_EXPECT_SHA256);
    o.load = QEM_LOAD_LATER; /* described cheaply; loaded only for what asks */
    progress_state ps;
    progress_setup(&ps, "loading", NULL, given(a, OPT_QUIET), &o.progress, &o.progress_user);
    qem_container *s = open_container("info", path, &o);
    if (!s)
        return EXIT_FAILED;
    qem_error e = {0};
    qem_container_info info = {.struct_size = sizeof info};
    qem_status st = qem_container_get_info(s, &info, &e);
    if (st == QEM_OK && given(a, OPT_TIMINGS) && !info.has_load_phase) {
        qem_container_close(s);
        return usage_fail("info",
                          "--timings applies to files with a load phase (packs); '%s' is a %s "
                          "file (time it with qem verify or qem export)",
                          SAFE(path), qem_file_kind_name(info.kind));
    }
    if (st == QEM_OK && (given(a, OPT_TIMINGS) || given(a, OPT_EXPECT_SHA256)))
        st = qem_container_load(s, &e);
    if (st == QEM_OK && given(a, OPT_TIMINGS))
        st = qem_container_time_first_access(s, &e);
    char *text = st == QEM_OK ? qem_container_summary_json(s, &e) : NULL;
    qem_container_close(s);
    return print_summary("info", text, &e, given(a, OPT_JSON), print_container_summary);
}

/* --- verify ----------------------------------------------------------------- */

static int run_verify(const args *a)
{
    const char *path = a->positional[0];
    qem_container_options o;
    qem_container_options_init(&o);
    o.threads = threads_of(a);
    o.expect_sha256 = text_of(a, OPT_EXPECT_SHA256);
    o.body_check = QEM_BODY_CHECK_ON_READ; /* verify checks every block once */
    o.load = QEM_LOAD_LATER;                /* verify is the load */
    qem_container *s = open_container("verify", path, &o);
    if (!s)
        return EXIT_FAILED;
    qem_verify_options vo;
    qem_verify_options_init(&vo);
    vo.threads = threads_of(a);
    progress_state ps;
    progress_setup(&ps, "verifying", NULL, given(a, OPT_QUIET), &vo.progress, &vo.progress_user);
    qem_verify_report report = {.struct_size = sizeof report};
    qem_error e = {0};
    const qem_status st = qem_container_verify(s, &vo, &report, &e);
    qem_container_close(s);
    if (st != QEM_OK)
        return fail("verify", &e);
    printf("OK %s: %s%s\n", SAFE(path), report.summary,
           report.identity_needed ? " (give --expect-sha256)" : "");
    return EXIT_OK;
}

/* --- export ----------------------------------------------------------------- */

static int run_export(const args *a)
{
    const char *out = a->positional[1];
    int rc = need_destination("export", out, "npy", "export writes a .npy array");
    if (rc)
        return rc;
    if (given(a, OPT_RAW) && given(a, OPT_CODES))
        return usage_fail("export", "give --raw or --codes, not both (they are one request)");
    qem_container *s = open_source(a);
    if (!s)
        return EXIT_FAILED;
    if (given(a, OPT_CODES)) {
        /* Codes: integer raw values standing for float32 working values
         * (a scaled .qem file's calibrated codes). */
        qem_container_info info = {.struct_size = sizeof info};
        if (qem_container_get_info(s, &info, NULL) != QEM_OK ||
            info.working_dtype != QEM_DTYPE_FLOAT32 || info.raw_dtype != QEM_DTYPE_UINT16) {
            qem_container_close(s);
            return usage_fail("export",
                              "--codes applies to scaled .qem files (their stored codes); use "
                              "--raw for the stored values of this file");
        }
    }
    qem_export_options xo;
    qem_export_options_init(&xo);
    xo.values = given(a, OPT_RAW) || given(a, OPT_CODES) ? QEM_VALUES_RAW : QEM_VALUES_WORKING;
    progress_state ps;
    progress_setup(&ps, "exporting", "scan positions", given(a, OPT_QUIET), &xo.progress,
                   &xo.progress_user);
    qem_error e = {0};
    qem_status st = qem_container_export_npy(s, out, &xo, &e);
    qem_container_close(s);
    return st == QEM_OK ? EXIT_OK : fail("export", &e);
}

/* --- the table ---------------------------------------------------------------- */

#define ACQUISITION_OPTIONS                                                                        \
    {OPT_DATASET, NULL}, {OPT_SCAN_SHAPE, NULL}, {OPT_RAW_SHAPE, NULL}, {OPT_RAW_DTYPE, NULL},   \
        {OPT_RAW_OFFSET, NULL}, {OPT_RAW_FRAME_HEADER, NULL}

static const command_option save_options[] = {
    ACQUISITION_OPTIONS,
    {OPT_CHUNK_SCANS, "scan positions per chunk, 1 to 16777216 (default 512); memory\n"
                      "used is about 3 x N x detector pixels x 4 bytes"},
    {OPT_VALID, "detector validity mask (bool or uint8 0/1, detector shape;\n"
                "counts only): invalid pixels keep their counts but leave the\n"
                "spatial sums and products"},
    {OPT_DARK, "float32 data: record a mean-dark plane (a float32 detector\n"
               "plane, or a stack of dark frames whose mean is taken); products\n"
               "subtract it once, the stored measurements never change"},
    {OPT_CALIBRATION, "JSON with recorded quantities and user overrides (see\n"
                      "doc/metadata.md); overrides never replace the record"},
    {OPT_NONE, NULL}};

static const command_option inspect_options[] = {ACQUISITION_OPTIONS, {OPT_JSON, NULL},
                                                 {OPT_NONE, NULL}};

static const command_option info_options[] = {
    {OPT_JSON, NULL},
    {OPT_TIMINGS, "packs: load (every shard authenticated), read the first pattern\n"
                  "and a first detector image, and print each phase (warm page\n"
                  "cache; phases summed over the loading threads)"},
    {OPT_EXPECT_SHA256, NULL},
    {OPT_NONE, NULL}};

static const command_option verify_options[] = {{OPT_EXPECT_SHA256, NULL}, {OPT_NONE, NULL}};

static const command_option export_options[] = {
    {OPT_RAW, "pack: the raw uint16 reconstruction (retained samples or\n"
              "exclusion constants), refused where the file does not admit it;\n"
              ".qem: the stored values (scaled files: the uint16 codes)"},
    {OPT_CODES, NULL},
    {OPT_EXPECT_SHA256, NULL},
    {OPT_NONE, NULL}};

#define ACQUISITION_KINDS                                                                          \
    "  - a 4D .npy, or a 3D frame stack with --scan-shape (uint8, uint16,\n"                       \
    "    uint32 or float32, either byte order);\n"                                                 \
    "  - a dense 3D/4D dataset in an HDF5 file (--dataset), any filter\n"                          \
    "    libhdf5 decodes here;\n"                                                                  \
    "  - a Dectris Arina/Eiger master with its data files (beside it);\n"                          \
    "  - a Quantum Detectors Merlin .mib (its .hdr beside it, when present);\n"                    \
    "  - an EMPAD acquisition .xml with the .raw it names;\n"                                      \
    "  - Berkeley EMD / py4DSTEM (--dataset among several 4D groups), Velox .emd;\n"               \
    "  - Gatan DM3/DM4 (a 4D STEMx image, or a stack with --scan-shape);\n"                        \
    "  - Thermo Fisher/FEI TIA .ser (its .emi beside it), NanoMegas .blo, MRC,\n"                  \
    "    TVIPS (its numbered parts), StreamPix/Direct Electron .seq (Celeritas\n"                  \
    "    halves paired), Gatan K2 IS sector .bin files, PNDetector FRMS6 (.hdr\n"                  \
    "    beside it), LiberTEM raw_csr sparse sets (the .toml descriptor);\n"                       \
    "  - raw binary: --raw-shape and --raw-dtype (--raw-offset, --raw-frame-header).\n"

const command_spec file_commands[] = {
    {"save", "SRC OUT.qem [options]",
     "store any detector file (or re-save a .qem) losslessly as .qem",
     "Saves SRC losslessly as .qem. SRC is recognised by its content:\n"
     ACQUISITION_KINDS
     "  - a .qem file, re-saved with its own codec, data and metadata.\n"
     "uint8/uint16 counts take the integer codec, uint32 counts are stored as\n"
     "uint16 when every admitted value fits (else refused, naming the scan\n"
     "position, pixel and value), float32 values the float codec (every bit\n"
     "kept). Signed, 64-bit and float64 samples (DM, TIA, MRC, EMD, ...) are\n"
     "stored as uint16 when every value is an integer in 0..65535, else as\n"
     "float32 when every value is exactly a float32, else refused with the\n"
     "range found. Pixels the detector flags are marked invalid. The source's\n"
     "family, files, digests and facts go to source_metadata, and its\n"
     "certain calibration (scan step, camera length, voltage, ...) to the\n"
     "scientific metadata, beneath --calibration. SRC is authenticated while\n"
     "it is read (every byte hashed, each file's stat compared before and\n"
     "after): a source that changes during the save is refused and nothing\n"
     "is written.\n",
     2, 2, "SRC and OUT.qem", save_options, run_save},
    {"inspect", "SRC [options]", "describe any detector file: shape, type, flagged pixels, sizes",
     "Recognises SRC by its content, authenticates every file it consists of\n"
     "(SHA-256, stat before and after) and describes it: family, shape,\n"
     "sample type and what a .qem would store, flagged pixels, files and\n"
     "digests, source identity, the facts read from it, calibration, and a\n"
     "bound on the .qem size. SRC is:\n" ACQUISITION_KINDS,
     1, 1, "SRC", inspect_options, run_inspect},
    {"info", "FILE [options]", "container, codec/profile, shape, sizes, ratio, metadata",
     "A .qem file is validated (envelope, header checksum, layout, body\n"
     "checksums) and described: container, codec, shape, dtype, chunks, sizes,\n"
     "compression ratio, the scientific metadata with calibrated axes, recorded\n"
     "microscope quantities and user calibration overrides kept apart.\n"
     "A pack is opened cheaply (prelude, manifest CRC, index, every range, the\n"
     "manifest's agreement with the index) and described: profile, shape,\n"
     "shards, working dtype, exclusions, raw access mode, detector calibration.\n",
     1, 1, "FILE", info_options, run_info},
    {"verify", "FILE [options]", "check every checksum, stream, digest and index",
     "A .qem file: every body checksum, every count stream decoded to\n"
     "completion under every rule, every value within the dtype, every\n"
     "8x8/32x32 spatial sum recomputed from the decoded counts, and for float32\n"
     "the logical SHA-256 of the decoded bits.\n"
     "A pack: the full load (descriptors or compact headers, every LZ4 block,\n"
     "every shard digest) and, with --expect-sha256, the whole-file identity,\n"
     "which the uint8/bitpacked profile needs because its index does not hash\n"
     "the compact headers.\n"
     "Prints OK, or the first failure and exits 1.\n",
     1, 1, "FILE", verify_options, run_verify},
    {"export", "FILE OUT.npy [options]", "decode to a 4D .npy, one chunk or shard at a time",
     "Decodes FILE into a 4D .npy, one chunk or shard at a time:\n"
     "  .qem: exact counts, the original float32 bits (checked against the\n"
     "        file's logical SHA-256 before OUT appears), or restored float32\n"
     "        intensities of a scaled file;\n"
     "  pack: the mask-applied working array in the file's working dtype\n"
     "        (excluded detector pixels read 0).\n",
     2, 2, "FILE and OUT.npy", export_options, run_export},
    {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL}};
