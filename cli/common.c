/* Parts of the qem command every subcommand uses: option parsing, progress
 * and Ctrl-C, error printing, opening sources. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"


/* Set by Ctrl-C or SIGTERM; long work polls it through the progress
 * callback and stops cleanly, publishing nothing. A second Ctrl-C kills. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int signal_number)
{
    (void)signal_number;
    interrupted = 1;
}

void catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int show_progress(void *user, uint64_t done, uint64_t total)
{
    progress_state *p = user;
    if (interrupted) {
        if (p->active)
            fputc('\n', stderr);
        return 1;
    }
    if (!p->active)
        return 0;
    time_t now = time(NULL);
    if (done < total && now == p->last)
        return 0;
    p->last = now;
    fprintf(stderr, "\r%s: %3d%% (%llu of %llu %s)", p->label,
            total ? (int)(100 * done / total) : 100, (unsigned long long)done,
            (unsigned long long)total, p->unit);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

void progress_setup(progress_state *p, const char *label, const options *o,
                           qem_progress_fn *fn, void **user)
{
    p->label = label;
    p->unit = strstr(label, "shards") ? "shards" : "scan positions";
    p->last = 0;
    p->active = !o->quiet && isatty(STDERR_FILENO);
    *fn = show_progress; /* also how an interrupt reaches the library */
    *user = p;
}

int fail(const char *command, const qem_error *e)
{
    fprintf(stderr, "qem %s: %s\n", command,
            e->message[0] ? e->message : qem_strerror(e->status));
    return EXIT_FAILED;
}

int usage_error(const char *help, const char *fmt, const char *arg)
{
    fprintf(stderr, "qem: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", help);
    return EXIT_USAGE;
}

int parse_long(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || !end || *end || end == text || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* Parses options common to all commands plus those `allowed` names. */
int parse_args(int argc, char **argv, const char *help, int max_positional,
                      const char *allowed, options *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return -1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--threads")) {
            long v;
            if (i + 1 >= argc || !parse_long(argv[i + 1], 1, 4096, &v))
                return usage_error(help, "--threads needs a number from 1 to 4096%s", "");
            o->threads = (int)v;
            i++;
        } else if (!strcmp(a, "--json") && strstr(allowed, "json")) {
            o->json = 1;
        } else if (!strcmp(a, "--chunk-scans") && strstr(allowed, "chunk")) {
            if (i + 1 >= argc || !parse_long(argv[i + 1], 1, 1L << 24, &o->chunk_scans))
                return usage_error(help, "--chunk-scans needs a positive number of scans%s", "");
            i++;
        } else if (!strcmp(a, "--valid") && strstr(allowed, "valid")) {
            if (i + 1 >= argc)
                return usage_error(help, "--valid needs a mask .npy file%s", "");
            o->valid = argv[++i];
        } else if (!strcmp(a, "--dark") && strstr(allowed, "dark")) {
            if (i + 1 >= argc)
                return usage_error(help, "--dark needs a dark .npy file%s", "");
            o->dark = argv[++i];
        } else if (!strcmp(a, "--calibration") && strstr(allowed, "calibration")) {
            if (i + 1 >= argc)
                return usage_error(help, "--calibration needs a JSON file%s", "");
            o->calibration = argv[++i];
        } else if (!strcmp(a, "--codes") && strstr(allowed, "codes")) {
            o->codes = 1;
        } else if (!strcmp(a, "--raw") && strstr(allowed, "raw")) {
            o->raw = 1;
        } else if (!strcmp(a, "--timings") && strstr(allowed, "timings")) {
            o->timings = 1;
        } else if (!strcmp(a, "--expect-sha256") && strstr(allowed, "expect")) {
            if (i + 1 >= argc || strlen(argv[i + 1]) != 64)
                return usage_error(help, "--expect-sha256 needs 64 hexadecimal digits%s", "");
            o->expect_sha256 = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && strstr(allowed, "output")) {
            if (i + 1 >= argc)
                return usage_error(help, "-o needs an output file%s", "");
            o->output = argv[++i];
        } else if (!strcmp(a, "--dataset") && strstr(allowed, "dataset")) {
            if (i + 1 >= argc)
                return usage_error(help, "--dataset needs an HDF5 path such as /entry/data%s", "");
            o->dataset = argv[++i];
        } else if (!strcmp(a, "--scan-shape") && strstr(allowed, "shape")) {
            unsigned long long r = 0, c = 0;
            char tail = 0;
            if (i + 1 >= argc || sscanf(argv[i + 1], "%llu,%llu%c", &r, &c, &tail) != 2 || !r || !c)
                return usage_error(help, "--scan-shape needs ROWS,COLUMNS%s", "");
            o->scan_shape[0] = r;
            o->scan_shape[1] = c;
            i++;
        } else if (!strcmp(a, "--profile") && strstr(allowed, "profile")) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "u16-lz4") && strcmp(argv[i + 1], "u8-bitpacked")))
                return usage_error(help, "--profile is u16-lz4 or u8-bitpacked%s", "");
            o->profile = argv[++i];
        } else if (!strcmp(a, "--exclude") && strstr(allowed, "exclude")) {
            if (i + 1 >= argc)
                return usage_error(help, "--exclude needs a detector mask .npy%s", "");
            o->exclude = argv[++i];
        } else if (!strcmp(a, "--dest") && strstr(allowed, "dest")) {
            if (i + 1 >= argc)
                return usage_error(help, "--dest needs the planned destination%s", "");
            o->dest = argv[++i];
        } else if ((!strcmp(a, "--available-disk") || !strcmp(a, "--available-memory")) &&
                   strstr(allowed, "available")) {
            char *end = NULL;
            unsigned long long v = i + 1 < argc ? strtoull(argv[i + 1], &end, 10) : 0;
            if (!end || *end || !v)
                return usage_error(help, "%s needs a positive number of bytes", a);
            if (a[12] == 'd')
                o->available_disk = v;
            else
                o->available_memory = v;
            i++;
        } else if (!strcmp(a, "--scan") && strstr(allowed, "scan")) {
            char *end = NULL;
            if (i + 1 >= argc)
                return usage_error(help, "--scan needs ROW,COLUMN%s", "");
            o->scan_row = strtol(argv[i + 1], &end, 10);
            if (!end || *end != ',' || o->scan_row < 0)
                return usage_error(help, "--scan needs ROW,COLUMN, e.g. --scan 12,40%s", "");
            o->scan_column = strtol(end + 1, &end, 10);
            if (!end || *end || o->scan_column < 0)
                return usage_error(help, "--scan needs ROW,COLUMN, e.g. --scan 12,40%s", "");
            o->have_scan = 1;
            i++;
        } else if (!strcmp(a, "--mask") && strstr(allowed, "mask")) {
            if (i + 1 >= argc)
                return usage_error(help, "--mask needs a 0/1 detector mask .npy%s", "");
            o->mask = argv[++i];
        } else if (!strcmp(a, "--detector") && strstr(allowed, "detector")) {
            if (i + 1 >= argc)
                return usage_error(help, "--detector is bf, abf, adf, haadf, df or annulus%s", "");
            o->detector = argv[++i];
        } else if (!strcmp(a, "--center") && strstr(allowed, "center")) {
            char tail = 0;
            if (i + 1 >= argc ||
                sscanf(argv[i + 1], "%lf,%lf%c", &o->center[0], &o->center[1], &tail) != 2)
                return usage_error(help, "--center needs ROW,COLUMN in detector pixels%s", "");
            o->have_center = 1;
            i++;
        } else if ((!strcmp(a, "--radius") || !strcmp(a, "--inner") || !strcmp(a, "--outer") ||
                    !strcmp(a, "--semiangle") || !strcmp(a, "--rotation")) &&
                   strstr(allowed, a + 2)) {
            char *end = NULL;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
            if (!end || *end || end == argv[i + 1])
                return usage_error(help, "%s needs a number", a);
            if (!strcmp(a, "--radius")) {
                o->radius = v;
                o->have_radius = 1;
            } else if (!strcmp(a, "--inner")) {
                o->inner = v;
                o->have_inner = 1;
            } else if (!strcmp(a, "--outer")) {
                o->outer = v;
                o->have_outer = 1;
            } else if (!strcmp(a, "--semiangle")) {
                o->semiangle = v;
            } else {
                o->rotation = v;
                o->have_rotation = 1;
            }
            i++;
        } else if (!strcmp(a, "--unit") && strstr(allowed, "unit")) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "px") && strcmp(argv[i + 1], "mrad")))
                return usage_error(help, "--unit is px or mrad%s", "");
            o->unit = argv[++i];
        } else if (!strcmp(a, "--subtract-mean") && strstr(allowed, "subtract")) {
            o->subtract_mean = 1;
        } else if (!strcmp(a, "--region") && strstr(allowed, "region")) {
            unsigned long long v[4];
            char tail = 0;
            if (i + 1 >= argc || sscanf(argv[i + 1], "%llu:%llu,%llu:%llu%c", &v[0], &v[1], &v[2],
                                        &v[3], &tail) != 4)
                return usage_error(help, "--region needs R0:R1,C0:C1 (half-open scan ranges)%s",
                                   "");
            for (int k = 0; k < 4; k++)
                o->region[k] = v[k];
            o->have_region = 1;
            i++;
        } else if (!strcmp(a, "--reduce") && strstr(allowed, "reduce")) {
            if (i + 1 >= argc || (strcmp(argv[i + 1], "sum") && strcmp(argv[i + 1], "mean") &&
                                  strcmp(argv[i + 1], "max")))
                return usage_error(help, "--reduce is sum, mean or max%s", "");
            o->reduce = argv[++i];
        } else if (!strcmp(a, "--reference") && strstr(allowed, "reference")) {
            o->reference_path = "reference";
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error(help, "unknown option '%s'", a);
        } else {
            if (o->npositional >= max_positional)
                return usage_error(help, "unexpected argument '%s'", a);
            o->positional[o->npositional++] = a;
        }
    }
    if (o->npositional != max_positional)
        return usage_error(help, "missing file argument%s", "");
    return 0;
}

/* Opens without hashing the body up front: the command that follows reads
 * every block, and each block is authenticated before it is decoded. */
qem_file *open_deferred(const char *command, const char *path)
{
    qem_error e = {0};
    qem_file *f = NULL;
    qem_open_options oo;
    qem_open_options_init(&oo);
    oo.body_check = QEM_BODY_CHECK_ON_READ;
    if (qem_open(path, &oo, &f, &e) != QEM_OK)
        fail(command, &e);
    return f;
}

/* Reads a whole (small) text file, e.g. a calibration JSON. */
char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t size = 0, used = 0;
    for (;;) {
        if (used + 4096 + 1 > size) {
            size = size ? 2 * size : 8192;
            char *grown = size <= (64u << 20) ? realloc(text, size) : NULL;
            if (!grown) {
                free(text);
                fclose(f);
                return NULL;
            }
            text = grown;
        }
        size_t got = fread(text + used, 1, 4096, f);
        used += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    text[used] = '\0';
    return text;
}

qem_source *open_source(const char *command, const options *o)
{
    qem_error e = {0};
    qem_source *s = NULL;
    qem_source_options so;
    qem_source_options_init(&so);
    so.threads = o->threads;
    so.expect_sha256 = o->expect_sha256;
    if (qem_source_open(o->positional[0], &so, &s, &e) != QEM_OK)
        fail(command, &e);
    return s;
}
