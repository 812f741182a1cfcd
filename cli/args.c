/* The options table and the one routine that parses every command's
 * arguments against it (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "terminal.h"

#define SCAN_INDEX_MAX (((int64_t)1 << 40) - 1)
#define BYTES_MAX ((int64_t)1 << 62)

/* The --threads help names the library's limit. */
_Static_assert(QEM_MAX_THREADS == 1024, "--threads says 1 to 1024");

/* clang-format off */
const option_spec option_specs[OPT_COUNT] = {
    [OPT_HELP] = {"--help", "-h", ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL, "this help"},
    [OPT_QUIET] = {"--quiet", "-q", ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                   "no progress or summary lines"},
    [OPT_THREADS] = {"--threads", NULL, ARG_INT, "N", 1, QEM_MAX_THREADS, 0, 0, 0, NULL,
                     "threads to use, 1 to 1024 (default: all cores)"},
    [OPT_JSON] = {"--json", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                  "machine-readable output (ASCII JSON)"},
    [OPT_CHUNK_SCANS] = {"--chunk-scans", NULL, ARG_INT, "N", 1, 1 << 24, 0, 0, 0, NULL,
                         "scan positions per chunk, 1 to 16777216 (default 512)"},
    [OPT_VALID] = {"--valid", NULL, ARG_PATH, "MASK.npy", 0, 0, 0, 0, 0, NULL,
                   "detector validity mask"},
    [OPT_DARK] = {"--dark", NULL, ARG_PATH, "DARK.npy", 0, 0, 0, 0, 0, NULL,
                  "mean-dark plane or stack of dark frames"},
    [OPT_CALIBRATION] = {"--calibration", NULL, ARG_PATH, "FILE.json", 0, 0, 0, 0, 0, NULL,
                         "recorded quantities and user overrides"},
    [OPT_CODES] = {"--codes", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                   "scaled .qem: the stored uint16 codes (as --raw)"},
    [OPT_RAW] = {"--raw", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL, "the stored values"},
    [OPT_TIMINGS] = {"--timings", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                     "packs: load and time every phase"},
    [OPT_EXPECT_SHA256] = {"--expect-sha256", NULL, ARG_SHA256, "HEX", 0, 0, 0, 0, 0, NULL,
                           "the whole-file SHA-256 FILE must have (.qem or pack)"},
    [OPT_OUTPUT] = {"--output", "-o", ARG_PATH, "OUT", 0, 0, 0, 0, 0, NULL,
                    "the output file; its extension picks the format"},
    [OPT_SCAN] = {"--scan", NULL, ARG_INT_PAIR, "ROW,COLUMN", 0, SCAN_INDEX_MAX, 0, 0, 0, NULL,
                  "one scan position"},
    [OPT_REGION] = {"--region", NULL, ARG_RANGES, "R0:R1,C0:C1", 0, SCAN_INDEX_MAX, 0, 0, 0,
                    NULL, "scan rows [R0, R1) x columns [C0, C1)"},
    [OPT_REDUCE] = {"--reduce", NULL, ARG_CHOICE, "sum|mean|max", 0, 0, 0, 0, 0, "sum|mean|max",
                    "how --region is reduced (default sum)"},
    [OPT_DATASET] = {"--dataset", NULL, ARG_TEXT, "/PATH", 0, 0, 0, 0, 0, NULL,
                     "HDF5 sources: the dataset holding the frames"},
    [OPT_SCAN_SHAPE] = {"--scan-shape", NULL, ARG_INT_PAIR, "ROWS,COLUMNS", 1, 4294967295LL, 0,
                        0, 0, NULL, "the scan shape of a 3D frame stack"},
    [OPT_PROFILE] = {"--profile", NULL, ARG_CHOICE, "u16-lz4|u8-bitpacked", 0, 0, 0, 0, 0,
                     "u16-lz4|u8-bitpacked", "the pack profile (default u16-lz4)"},
    [OPT_EXCLUDE] = {"--exclude", NULL, ARG_PATH, "MASK.npy", 0, 0, 0, 0, 0, NULL,
                     "detector pixels to exclude (0/1), besides the source's bad pixels"},
    [OPT_DEST] = {"--dest", NULL, ARG_PATH, "DEST.h5", 0, 0, 0, 0, 0, NULL,
                  "where the pack will go (for the disk figure; its folder must exist)"},
    [OPT_AVAILABLE_MEMORY] = {"--available-memory", NULL, ARG_INT, "BYTES", 1, BYTES_MAX, 0, 0,
                              0, NULL, "plan against this much memory (default: MemAvailable)"},
    [OPT_AVAILABLE_DISK] = {"--available-disk", NULL, ARG_INT, "BYTES", 1, BYTES_MAX, 0, 0, 0,
                            NULL, "plan against this much disk (default: measured)"},
    [OPT_MASK] = {"--mask", NULL, ARG_PATH, "MASK.npy", 0, 0, 0, 0, 0, NULL,
                  "a 0/1 detector mask"},
    [OPT_DETECTOR] = {"--detector", NULL, ARG_CHOICE, "NAME", 0, 0, 0, 0, 0,
                      "bf|abf|adf|haadf|df|annulus", "a named detector: bf, abf, adf, haadf, df "
                      "or annulus"},
    [OPT_CENTER] = {"--center", NULL, ARG_REAL_PAIR, "ROW,COL", 0, 0, -1e6, 1e6, 0, NULL,
                    "detector centre in pixels (default: the file's calibration, else the "
                    "estimate)"},
    [OPT_RADIUS] = {"--radius", NULL, ARG_REAL, "R", 0, 0, 0, 1e6, 1, NULL,
                    "bright-field radius r (px, or mrad with --unit mrad)"},
    [OPT_INNER] = {"--inner", NULL, ARG_REAL, "A", 0, 0, 0, 1e6, 0, NULL,
                   "inner bound of adf or annulus"},
    [OPT_OUTER] = {"--outer", NULL, ARG_REAL, "B", 0, 0, 0, 1e6, 1, NULL,
                   "outer bound of adf or annulus"},
    [OPT_UNIT] = {"--unit", NULL, ARG_CHOICE, "px|mrad", 0, 0, 0, 0, 0, "px|mrad",
                  "the unit of R, A and B (default px)"},
    [OPT_SEMIANGLE] = {"--semiangle", NULL, ARG_REAL, "MRAD", 0, 0, 0, 1000, 1, NULL,
                       "convergence semi-angle for --unit mrad (default: the file's)"},
    [OPT_ROTATION] = {"--rotation", NULL, ARG_REAL, "DEG", 0, 0, -360, 360, 0, NULL,
                      "a fixed rotation in degrees, -360 to 360, instead of the search"},
    [OPT_SUBTRACT_MEAN] = {"--subtract-mean", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                           "subtract the scan mean (the DPC components)"},
    [OPT_REFERENCE] = {"--reference", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                       "compute by decoding windows and summing densely (a check)"},
    [OPT_DEVICE] = {"--device", NULL, ARG_CHOICE, "cpu|cuda", 0, 0, 0, 0, 0, "cpu|cuda",
                    "where the sums run: cpu (default) or cuda (packs, on an NVIDIA GPU)"},
    [OPT_RAW_SHAPE] = {"--raw-shape", NULL, ARG_INT_QUAD, "R,C,DR,DC", 1, 4294967295LL, 0, 0, 0,
                       NULL, "raw binary: scan rows, scan columns, detector rows, detector "
                       "columns"},
    [OPT_RAW_DTYPE] = {"--raw-dtype", NULL, ARG_CHOICE, "TYPE", 0, 0, 0, 0, 0,
                       "uint8|uint16|uint32|float32|int8|int16|int32|float64|u1|<u2|>u2|<u4|"
                       ">u4|<f4|>f4|i1|<i2|>i2|<i4|>i4|<f8|>f8",
                       "raw binary: the sample type, little-endian unless >: uint8, uint16, "
                       "uint32, float32, int8, int16, int32, float64 or a descr (<u2, >i4, "
                       ">f8, ...); signed and float64 samples are stored exactly as uint16 "
                       "or float32, or refused"},
    [OPT_RAW_OFFSET] = {"--raw-offset", NULL, ARG_INT, "BYTES", 0, BYTES_MAX, 0, 0, 0, NULL,
                        "raw binary: bytes before the first frame (default 0)"},
    [OPT_RAW_FRAME_HEADER] = {"--raw-frame-header", NULL, ARG_INT, "BYTES", 0, 1 << 30, 0, 0, 0,
                              NULL, "raw binary: bytes before each frame (default 0)"},
    [OPT_PORT] = {"--port", NULL, ARG_INT, "N", 0, 65535, 0, 0, 0, NULL,
                  "TCP port, 0 to 65535 (default 0: any free port, printed)"},
    [OPT_BIND] = {"--bind", NULL, ARG_TEXT, "ADDR", 0, 0, 0, 0, 0, NULL,
                  "IPv4 address to listen on (default 127.0.0.1; localhost is the same);\n"
                  "any other than a 127.x address lets other machines reach the server\n"
                  "(they still need the token): a warning is printed"},
    [OPT_NO_OPEN] = {"--no-open", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                     "print the address only; do not start a browser"},
    [OPT_VERBOSE] = {"--verbose", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                     "one line per request on stderr (the token hidden)"},
    [OPT_KEEP_MASKS] = {"--keep-masks", NULL, ARG_INT, "MIB", 0, 1 << 20, 0, 0, 0, NULL,
                        "MiB of recent detectors' images each page keeps (count images\n"
                        "as uint16 when they fit), so a detector dragged back is a copy\n"
                        "(default 128; 0 = none)"},
    [OPT_COLUMN_CACHE] = {"--column-cache", NULL, ARG_INT, "MIB", 0, 1 << 20, 0, 0, 0, NULL,
                          "MiB of decoded pixel columns kept for .qem files, divided among\n"
                          "the files, so a detector moved over pixels it has crossed reads them\n"
                          "instead of decoding, until a packed copy answers (default 0 = none)"},
    [OPT_PACKED_COPY] = {"--packed-copy", NULL, ARG_INT, "MIB", 0, 1 << 20, 0, 0, 0, NULL,
                         "MiB of memory for bit-packed copies of the .qem files' counts, built\n"
                         "in the background once the bodies are checked, file by file while\n"
                         "they fit; each takes the place of its file's mapped body. Detector\n"
                         "moves and patterns then unpack bits instead of decoding, about 2.5x\n"
                         "faster (a 512 x 512 x 192 x 192 set at dose 4 takes 1.2 GB, so two\n"
                         "fit the default 2560; 0 = none)"},
    [OPT_FROM_DISK] = {"--from-disk", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                       ".qem files: read chunks from the file for each use instead of\n"
                       "holding the encoded body in memory (slower moves)"},
    [OPT_COPY_BODY] = {"--copy-body", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                       ".qem files: copy the encoded body into the server's own memory\n"
                       "instead of mapping the file (slower to open, but the file may\n"
                       "then be rewritten in place while it is served)"},
    [OPT_CACHE_DIR] = {"--cache-dir", NULL, ARG_PATH, "DIR", 0, 0, 0, 0, 0, NULL,
                       "where mean patterns and first images of files that do not record\n"
                       "them are kept between opens (default $XDG_CACHE_HOME/qem, else\n"
                       "~/.cache/qem)"},
    [OPT_NO_CACHE] = {"--no-cache", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                      "keep nothing between opens"},
    [OPT_QUEUE_MB] = {"--queue-mb", NULL, ARG_INT, "MIB", 1, 1 << 20, 0, 0, 0, NULL,
                      "frames wait in memory up to this many MiB, then in a spill file on\n"
                      "disk, never dropped (default 256)"},
    [OPT_SPILL_DIR] = {"--spill-dir", NULL, ARG_PATH, "DIR", 0, 0, 0, 0, 0, NULL,
                       "folder of the spill file (default: the output's folder)"},
    [OPT_CONNECT_TIMEOUT] = {"--connect-timeout", NULL, ARG_REAL, "S", 0, 0, 0, 86400, 1, NULL,
                             "seconds to wait for the detector's header (default 10)"},
    [OPT_IDLE_TIMEOUT] = {"--idle-timeout", NULL, ARG_REAL, "S", 0, 0, 0, 86400, 1, NULL,
                          "seconds without a frame after which the stream counts as ended\n"
                          "(default: wait for the end of the acquisition or Ctrl-C)"},
    [OPT_VIEW] = {"--view", NULL, ARG_FLAG, NULL, 0, 0, 0, 0, 0, NULL,
                  "serve the viewer on the recording as it fills in"},
};
/* clang-format on */

/* Options every command takes, after its own. */
static const option_id common_options[] = {OPT_THREADS, OPT_QUIET, OPT_HELP};

int usage_fail(const char *command, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    fprintf(stderr, "qem %s: ", command);
    vfprintf(stderr, format, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'qem %s --help' for its usage.\n", command);
    return EXIT_USAGE;
}

static int takes(const command_spec *c, option_id id)
{
    for (size_t k = 0; k < sizeof common_options / sizeof common_options[0]; k++)
        if (common_options[k] == id)
            return 1;
    for (const command_option *o = c->options; o && o->id != OPT_NONE; o++)
        if (o->id == id)
            return 1;
    return 0;
}

static option_id find_option(const char *name, size_t length)
{
    for (int id = 1; id < OPT_COUNT; id++) {
        const option_spec *s = &option_specs[id];
        if ((strlen(s->name) == length && !strncmp(s->name, name, length)) ||
            (s->alias && strlen(s->alias) == length && !strncmp(s->alias, name, length)))
            return (option_id)id;
    }
    return OPT_NONE;
}

/* A whole number: optional '-', digits only, no overflow. */
static int parse_int(const char *text, const char *end, int64_t *out)
{
    const char *p = text;
    if (p < end && *p == '-')
        p++;
    if (p == end)
        return 0;
    for (const char *q = p; q < end; q++)
        if (*q < '0' || *q > '9')
            return 0;
    char buf[32];
    if ((size_t)(end - text) >= sizeof buf)
        return -1; /* more digits than any int64 */
    memcpy(buf, text, (size_t)(end - text));
    buf[end - text] = '\0';
    errno = 0;
    char *stop = NULL;
    const long long v = strtoll(buf, &stop, 10);
    if (errno == ERANGE)
        return -1;
    *out = v;
    return 1;
}

/* A finite decimal number (no inf, nan or hexadecimal forms). */
static int parse_real(const char *text, const char *end, double *out)
{
    if (text == end || (size_t)(end - text) >= 64)
        return 0;
    for (const char *q = text; q < end; q++)
        if (!strchr("0123456789.eE+-", *q))
            return 0;
    char buf[64];
    memcpy(buf, text, (size_t)(end - text));
    buf[end - text] = '\0';
    char *stop = NULL;
    errno = 0;
    const double v = strtod(buf, &stop);
    if (*stop || stop == buf || !isfinite(v) || errno == ERANGE)
        return 0;
    *out = v;
    return 1;
}

static int int_in_range(const option_spec *s, int64_t v)
{
    return v >= s->ilo && v <= s->ihi;
}

static int real_in_range(const option_spec *s, double v)
{
    return (s->rlo_open ? v > s->rlo : v >= s->rlo) && v <= s->rhi;
}

/* "from 1 to 16777216" / "greater than 0 and at most 1000000". */
static void describe_range(const option_spec *s, char *buf, size_t size)
{
    if (s->kind == ARG_REAL || s->kind == ARG_REAL_PAIR) {
        if (s->rlo_open)
            snprintf(buf, size, "greater than %.15g and at most %.15g", s->rlo, s->rhi);
        else
            snprintf(buf, size, "from %.15g to %.15g", s->rlo, s->rhi);
    } else {
        snprintf(buf, size, "from %lld to %lld", (long long)s->ilo, (long long)s->ihi);
    }
}

static int bad_value(const char *command, const option_spec *s, const char *value)
{
    char range[96];
    describe_range(s, range, sizeof range);
    switch (s->kind) {
    case ARG_INT:
        return usage_fail(command, "%s needs a whole number %s, not '%s'", s->name, range,
                          SAFE(value));
    case ARG_INT_PAIR:
        return usage_fail(command, "%s needs %s: two whole numbers %s, not '%s'", s->name,
                          s->metavar, range, SAFE(value));
    case ARG_INT_QUAD:
        return usage_fail(command, "%s needs %s: four whole numbers %s, not '%s'", s->name,
                          s->metavar, range, SAFE(value));
    case ARG_RANGES:
        return usage_fail(command,
                          "%s needs %s (half-open ranges, whole numbers %s, start <= stop), "
                          "not '%s'",
                          s->name, s->metavar, range, SAFE(value));
    case ARG_REAL:
        return usage_fail(command, "%s needs a finite number %s, not '%s'", s->name, range,
                          SAFE(value));
    case ARG_REAL_PAIR:
        return usage_fail(command, "%s needs %s: two finite numbers %s, not '%s'", s->name,
                          s->metavar, range, SAFE(value));
    case ARG_CHOICE:
        return usage_fail(command, "%s is one of %s, not '%s'", s->name, s->choices, SAFE(value));
    case ARG_SHA256:
        return usage_fail(command, "%s needs 64 hexadecimal digits, not '%s'", s->name,
                          SAFE(value));
    default:
        return usage_fail(command, "%s needs %s", s->name, s->metavar);
    }
}

static int is_choice(const char *choices, const char *value)
{
    const size_t n = strlen(value);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        const size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && n > 0 && !strncmp(p, value, n))
            return 1;
        p += k + (bar != NULL);
    }
    return 0;
}

/* Parses `value` for option `s` into `v`; 0, or an exit status. */
static int parse_value(const char *command, const option_spec *s, const char *value,
                       arg_value *v)
{
    const char *end = value + strlen(value);
    v->text = value;
    switch (s->kind) {
    case ARG_FLAG:
        return 0;
    case ARG_PATH:
    case ARG_TEXT:
        if (!*value)
            return usage_fail(command, "%s needs %s, not an empty string", s->name, s->metavar);
        return 0;
    case ARG_CHOICE:
        return is_choice(s->choices, value) ? 0 : bad_value(command, s, value);
    case ARG_SHA256: {
        size_t n = 0;
        for (const char *p = value; *p; p++, n++)
            if (!strchr("0123456789abcdefABCDEF", *p))
                return bad_value(command, s, value);
        return n == 64 ? 0 : bad_value(command, s, value);
    }
    case ARG_INT:
        return parse_int(value, end, &v->i[0]) == 1 && int_in_range(s, v->i[0])
                   ? 0
                   : bad_value(command, s, value);
    case ARG_INT_PAIR: {
        const char *comma = strchr(value, ',');
        if (!comma || strchr(comma + 1, ',') || parse_int(value, comma, &v->i[0]) != 1 ||
            parse_int(comma + 1, end, &v->i[1]) != 1 || !int_in_range(s, v->i[0]) ||
            !int_in_range(s, v->i[1]))
            return bad_value(command, s, value);
        return 0;
    }
    case ARG_INT_QUAD: {
        const char *p = value;
        for (int k = 0; k < 4; k++) {
            const char *comma = k < 3 ? strchr(p, ',') : end;
            if (!comma || parse_int(p, comma, &v->i[k]) != 1 || !int_in_range(s, v->i[k]))
                return bad_value(command, s, value);
            p = comma + 1;
        }
        return 0;
    }
    case ARG_RANGES: {
        /* R0:R1,C0:C1 */
        const char *comma = strchr(value, ',');
        const char *c1 = strchr(value, ':');
        const char *c2 = comma ? strchr(comma + 1, ':') : NULL;
        if (!comma || !c1 || c1 > comma || !c2 || strchr(c2 + 1, ':') || strchr(comma + 1, ',') ||
            parse_int(value, c1, &v->i[0]) != 1 || parse_int(c1 + 1, comma, &v->i[1]) != 1 ||
            parse_int(comma + 1, c2, &v->i[2]) != 1 || parse_int(c2 + 1, end, &v->i[3]) != 1)
            return bad_value(command, s, value);
        for (int k = 0; k < 4; k++)
            if (!int_in_range(s, v->i[k]))
                return bad_value(command, s, value);
        if (v->i[0] > v->i[1] || v->i[2] > v->i[3])
            return bad_value(command, s, value);
        return 0;
    }
    case ARG_REAL:
        return parse_real(value, end, &v->r[0]) && real_in_range(s, v->r[0])
                   ? 0
                   : bad_value(command, s, value);
    case ARG_REAL_PAIR: {
        const char *comma = strchr(value, ',');
        if (!comma || strchr(comma + 1, ',') || !parse_real(value, comma, &v->r[0]) ||
            !parse_real(comma + 1, end, &v->r[1]) || !real_in_range(s, v->r[0]) ||
            !real_in_range(s, v->r[1]))
            return bad_value(command, s, value);
        return 0;
    }
    }
    return 0;
}

int args_parse(const command_spec *c, int argc, char **argv, args *a)
{
    memset(a, 0, sizeof *a);
    a->command = c->name;
    /* --help wins wherever it stands before "--". */
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            command_help(c, stdout);
            return ARGS_HELP_SHOWN;
        }
    int options_end = 0;
    for (int i = 0; i < argc; i++) {
        const char *word = argv[i];
        if (!options_end && !strcmp(word, "--")) {
            options_end = 1;
            continue;
        }
        if (options_end || word[0] != '-' || word[1] == '\0') {
            if (a->npositional >= c->max_positional)
                return usage_fail(c->name,
                                  "unexpected argument '%s': qem %s takes at most %d argument%s",
                                  SAFE(word), c->name, c->max_positional,
                                  c->max_positional == 1 ? "" : "s");
            a->positional[a->npositional++] = word;
            continue;
        }
        const char *equals = word[1] == '-' ? strchr(word, '=') : NULL;
        const size_t length = equals ? (size_t)(equals - word) : strlen(word);
        const option_id id = find_option(word, length);
        if (id == OPT_NONE)
            return usage_fail(c->name, "unknown option '%s'", SAFE(word));
        const option_spec *s = &option_specs[id];
        if (!takes(c, id))
            return usage_fail(c->name, "%s is not an option of qem %s", s->name, c->name);
        arg_value *v = &a->v[id];
        if (v->given)
            return usage_fail(c->name, "%s is given twice; give it once", s->name);
        v->given = 1;
        const char *value = NULL;
        if (s->kind == ARG_FLAG) {
            if (equals)
                return usage_fail(c->name, "%s takes no value", s->name);
        } else if (equals) {
            value = equals + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            return usage_fail(c->name, "%s needs %s", s->name, s->metavar);
        }
        const int rc = value ? parse_value(c->name, s, value, v) : 0;
        if (rc)
            return rc;
    }
    if (a->npositional < c->min_positional)
        return usage_fail(c->name, "qem %s needs %s", c->name, c->positional_names);
    return ARGS_OK;
}

void print_wrapped(FILE *out, const char *left, int column, const char *text)
{
    enum { WIDTH = 79 };
    const int room = WIDTH - column - 3 > 20 ? WIDTH - column - 3 : 20;
    if ((int)strlen(left) > column)
        fprintf(out, "  %s\n", left);
    int first = (int)strlen(left) <= column;
    const char *p = text;
    while (*p == ' ' || *p == '\n')
        p++;
    do {
        /* The longest run of whole words that fits, newlines read as spaces. */
        int n = 0, cut = 0;
        while (p[n] && n <= room) {
            if (p[n] == ' ' || p[n] == '\n')
                cut = n;
            n++;
        }
        if (!p[n] && n <= room)
            cut = n;
        if (cut == 0)
            cut = n; /* one word longer than the room */
        char piece[256];
        snprintf(piece, sizeof piece, "%.*s", cut, p);
        for (char *q = piece; *q; q++)
            if (*q == '\n')
                *q = ' ';
        fprintf(out, "  %-*s %s\n", column, first ? left : "", piece);
        first = 0;
        p += cut;
        while (*p == ' ' || *p == '\n')
            p++;
    } while (*p);
}

/* One option's help: "  -o, --output OUT   text", wrapped. */
static void option_help(FILE *out, const option_spec *s, const char *help)
{
    char left[64];
    snprintf(left, sizeof left, "%s%s%s%s%s", s->alias ? s->alias : "", s->alias ? ", " : "",
             s->name, s->metavar ? " " : "", s->metavar ? s->metavar : "");
    print_wrapped(out, left, 24, help ? help : s->help);
}

void command_help(const command_spec *c, FILE *out)
{
    fprintf(out, "usage: qem %s %s\n\n%s", c->name, c->synopsis, c->description);
    int any = 0;
    for (const command_option *o = c->options; o && o->id != OPT_NONE; o++) {
        if (!any)
            fputs("\noptions:\n", out);
        any = 1;
        option_help(out, &option_specs[o->id], o->help);
    }
    fputs(any ? "" : "\n", out);
    fputs("\ncommon options:\n", out);
    for (size_t k = 0; k < sizeof common_options / sizeof common_options[0]; k++)
        option_help(out, &option_specs[common_options[k]], NULL);
}
