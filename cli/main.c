/* The `qem` command: lossless, compact 4D-STEM data. main() finds the
 * command in the families' tables and runs it; all format knowledge lives
 * in the library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qem_experimental.h"
#include "terminal.h"

static const command_spec *const families[] = {file_commands, product_commands, view_commands,
                                                pack_commands, record_commands};

static const command_spec *find_command(const char *name)
{
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const command_spec *c = families[f]; c->name; c++)
            if (!strcmp(c->name, name))
                return c;
    return NULL;
}

static void main_help(FILE *out)
{
    fputs("usage: qem <command> [options]\n"
          "\n"
          "Lossless, compact 4D-STEM data: every count kept exactly, far fewer bytes.\n"
          "Arrays are (scan_row, scan_column, detector_row, detector_column).\n"
          "\n"
          "commands:\n",
          out);
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const command_spec *c = families[f]; c->name; c++) {
            char left[96];
            snprintf(left, sizeof left, "%s %s", c->name, c->synopsis);
            /* The synopsis without its trailing "[options]". */
            char *opt = strstr(left, " [options]");
            if (opt)
                *opt = '\0';
            print_wrapped(out, left, 26, c->summary);
        }
    fputs("  help [COMMAND]             this text, or a command's own help\n"
          "\n"
          "FILE is a .qem file or a Lossless Pack Format v1 file (.h5), recognised by\n"
          "its signature. Products are written by OUT's extension: .npy exact, .tif\n"
          "32-bit float, .png 8-bit.\n"
          "Every command takes --quiet (no progress), --threads N (default: all\n"
          "cores) and --help; \"--\" ends the options. Output files are written to an\n"
          "unnamed file and appear complete or not at all; existing files are never\n"
          "overwritten. Ctrl-C stops any command at once, leaving nothing behind.\n"
          "Exit status: 0 success, 1 the work failed (message on stderr), 2 usage,\n"
          "128 + the signal when interrupted.\n",
          out);
}

static void pack_help(FILE *out)
{
    fputs("usage: qem pack inspect|plan|produce SRC [DEST.h5] [options]\n"
          "\n"
          "Writes Lossless Pack Format v1 files (genuine HDF5 files whose 64 KiB user\n"
          "block indexes bit-packed shards).\n\n",
          out);
    for (const command_spec *c = pack_commands; c->name; c++)
        fprintf(out, "  %-14s %s\n", c->name + 5, c->summary);
    fputs("\nproduce re-authenticates the source before it packs it.\n"
          "See 'qem help pack inspect', 'qem help pack plan', 'qem help pack produce'.\n",
          out);
}

/* QEM_RANS_PATH forces a decode path; a value qem does not know is a usage
 * error, never a silent fallback. */
static int check_environment(void)
{
    const char *path = getenv("QEM_RANS_PATH");
    qem_decode_path known;
    if (path && *path && !qem_decode_path_from_name(path, &known)) {
        fprintf(stderr,
                "qem: QEM_RANS_PATH is '%s'; it must be scalar, avx2, avx2-loads, avx512 or "
                "auto (or unset)\n",
                SAFE(path));
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

static int run_help(int argc, char **argv)
{
    if (argc == 0) {
        main_help(stdout);
        return EXIT_OK;
    }
    char name[64];
    snprintf(name, sizeof name, "%s%s%s", argv[0], argc > 1 ? " " : "", argc > 1 ? argv[1] : "");
    if (argc <= 2 && !strcmp(name, "pack")) {
        pack_help(stdout);
        return EXIT_OK;
    }
    const command_spec *c = argc <= 2 ? find_command(name) : NULL;
    if (!c) {
        fprintf(stderr, "qem help: no command '%s'\nRun 'qem --help' for the commands.\n",
                SAFE(name));
        return EXIT_USAGE;
    }
    command_help(c, stdout);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    signals_setup();
    if (argc < 2) {
        main_help(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
        main_help(stdout);
        return EXIT_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("qem %s\n", qem_version());
        return EXIT_OK;
    }
    if (!strcmp(name, "help"))
        return run_help(argc - 2, argv + 2);
    int skip = 2;
    const command_spec *c = NULL;
    if (!strcmp(name, "pack")) {
        const char *sub = argc > 2 ? argv[2] : "";
        if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
            pack_help(stdout);
            return EXIT_OK;
        }
        char full[64];
        snprintf(full, sizeof full, "pack %s", sub);
        c = find_command(full);
        if (!c) {
            fprintf(stderr,
                    "qem pack: needs inspect, plan or produce%s%s%s\nRun 'qem pack --help' "
                    "for its usage.\n",
                    *sub ? ", not '" : "", *sub ? SAFE(sub) : "", *sub ? "'" : "");
            return EXIT_USAGE;
        }
        skip = 3;
    } else {
        c = find_command(name);
    }
    if (!c) {
        fprintf(stderr, "qem: unknown command '%s'\nRun 'qem --help' for the commands.\n",
                SAFE(name));
        return EXIT_USAGE;
    }
    args a;
    int rc = args_parse(c, argc - skip, argv + skip, &a);
    if (rc == ARGS_HELP_SHOWN)
        return EXIT_OK;
    if (rc)
        return rc;
    if ((rc = check_environment()))
        return rc;
    if (!strcmp(c->name, "view"))
        view_exec_with_passive_wait(argv);
    rc = c->run(&a);
    return interrupted_by() ? interrupt_exit_status() : rc;
}
