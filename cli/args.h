/* The qem command's commands and options as tables, parsed by one routine:
 * every option has one name, one kind of argument and one allowed range;
 * unknown and repeated options are refused, "--" ends the options, and
 * numbers are parsed strictly (whole string, range, finiteness, overflow).
 * The help text of every command is generated from the same tables. */
#ifndef QEM_CLI_ARGS_H
#define QEM_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

/* Every option any command takes. */
typedef enum option_id {
    OPT_NONE = 0,
    OPT_HELP,
    OPT_QUIET,
    OPT_THREADS,
    OPT_JSON,
    OPT_CHUNK_SCANS,
    OPT_VALID,
    OPT_DARK,
    OPT_CALIBRATION,
    OPT_CODES,
    OPT_RAW,
    OPT_TIMINGS,
    OPT_EXPECT_SHA256,
    OPT_OUTPUT,
    OPT_SCAN,
    OPT_REGION,
    OPT_REDUCE,
    OPT_DATASET,
    OPT_SCAN_SHAPE,
    OPT_PROFILE,
    OPT_EXCLUDE,
    OPT_DEST,
    OPT_AVAILABLE_MEMORY,
    OPT_AVAILABLE_DISK,
    OPT_MASK,
    OPT_DETECTOR,
    OPT_CENTER,
    OPT_RADIUS,
    OPT_INNER,
    OPT_OUTER,
    OPT_UNIT,
    OPT_SEMIANGLE,
    OPT_ROTATION,
    OPT_SUBTRACT_MEAN,
    OPT_REFERENCE,
    OPT_RAW_SHAPE,
    OPT_RAW_DTYPE,
    OPT_RAW_OFFSET,
    OPT_RAW_FRAME_HEADER,
    OPT_PORT,
    OPT_BIND,
    OPT_NO_OPEN,
    OPT_VERBOSE,
    OPT_KEEP_MASKS,
    OPT_COLUMN_CACHE,
    OPT_PACKED_COPY,
    OPT_FROM_DISK,
    OPT_COPY_BODY,
    OPT_CACHE_DIR,
    OPT_NO_CACHE,
    OPT_QUEUE_MB,
    OPT_SPILL_DIR,
    OPT_CONNECT_TIMEOUT,
    OPT_IDLE_TIMEOUT,
    OPT_VIEW,
    OPT_DEVICE,
    OPT_COUNT
} option_id;

typedef enum arg_kind {
    ARG_FLAG,      /* no value */
    ARG_PATH,      /* a file name */
    ARG_TEXT,      /* free text (an HDF5 dataset path) */
    ARG_CHOICE,    /* one word of `choices` */
    ARG_INT,       /* a whole number in [ilo, ihi] */
    ARG_INT_PAIR,  /* A,B: whole numbers in [ilo, ihi] */
    ARG_INT_QUAD,  /* A,B,C,D: whole numbers in [ilo, ihi] */
    ARG_RANGES,    /* R0:R1,C0:C1: whole numbers in [ilo, ihi] */
    ARG_REAL,      /* a finite number in [rlo, rhi] (above rlo if rlo_open) */
    ARG_REAL_PAIR, /* A,B: finite numbers in [rlo, rhi] */
    ARG_SHA256     /* 64 hexadecimal digits */
} arg_kind;

typedef struct option_spec {
    const char *name;    /* "--chunk-scans" */
    const char *alias;   /* "-o", or NULL */
    arg_kind kind;
    const char *metavar; /* "N" */
    int64_t ilo, ihi;
    double rlo, rhi;
    int rlo_open;
    const char *choices; /* "u16-lz4|u8-bitpacked" */
    const char *help;    /* default help text ("\n" starts a new help line) */
} option_spec;

/* What was given for one option. */
typedef struct arg_value {
    int given;
    const char *text; /* the argument as typed */
    int64_t i[4];
    double r[2];
} arg_value;

/* The most positional arguments any command takes (qem view's files). */
#define ARGS_MAX_POSITIONAL 64

typedef struct args {
    const char *command; /* "save", "pack produce" */
    const char *positional[ARGS_MAX_POSITIONAL];
    int npositional;
    arg_value v[OPT_COUNT];
} args;

/* An option a command takes, with its help text there (NULL: the default). */
typedef struct command_option {
    option_id id;
    const char *help;
} command_option;

typedef struct command_spec {
    const char *name;        /* "save" or "pack produce" */
    const char *synopsis;    /* what follows the name in the usage line */
    const char *summary;     /* one line for `qem --help` */
    const char *description; /* the paragraphs of `qem help NAME` */
    int min_positional, max_positional;
    const char *positional_names; /* "IN and OUT.qem", for "needs ..." */
    const command_option *options; /* ends with {OPT_NONE, NULL} */
    int (*run)(const args *a);
} command_spec;

extern const option_spec option_specs[OPT_COUNT];

enum { ARGS_OK = 0, ARGS_HELP_SHOWN = -1 };

/* Parses argv (after the command's name) against `c`: ARGS_OK, ARGS_HELP_SHOWN
 * after printing the help, or EXIT_USAGE after printing the error and one
 * line pointing to --help. */
int args_parse(const command_spec *c, int argc, char **argv, args *a);

/* "  LEFT   text" with the text word-wrapped to 79 columns in a column
 * starting after `column` characters (LEFT on a line of its own when
 * longer). */
void print_wrapped(FILE *out, const char *left, int column, const char *text);

/* The command's help: usage, description, its options and the common ones. */
void command_help(const command_spec *c, FILE *out);

static inline int given(const args *a, option_id id)
{
    return a->v[id].given;
}
static inline const char *text_of(const args *a, option_id id)
{
    return a->v[id].given ? a->v[id].text : NULL;
}

/* Prints "qem COMMAND: <message>" and the --help pointer; returns EXIT_USAGE.
 * `%s` arguments are escaped for the terminal by the caller (SAFE). */
int usage_fail(const char *command, const char *format, ...) __attribute__((format(printf, 2, 3)));

#endif
