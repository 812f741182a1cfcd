/* The pack commands: pack inspect, pack plan, pack produce. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "summary_print.h"
#include "terminal.h"

#define PACK_EXTENSIONS "h5|hdf5"

/* Inspects SRC: every member hashed, with progress (Ctrl-C stops it). */
static qem_pack_inspection *inspect_source(const args *a, progress_state *ps)
{
    qem_acquisition_options ao;
    acquisition_options(a, &ao, ps);
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    if (qem_pack_inspect(a->positional[0], &ao, &in, &e) != QEM_OK) {
        fail(a->command, &e);
        return NULL;
    }
    return in;
}

/* Plan options from the command line; *mask is the --exclude mask. */
static int plan_setup(const args *a, const qem_pack_inspection *in, const char *dest,
                      qem_pack_plan_options *po, uint8_t **mask)
{
    qem_pack_plan_options_init(po);
    const char *profile = text_of(a, OPT_PROFILE);
    po->profile = profile && !strcmp(profile, "u8-bitpacked") ? QEM_PACK_UINT8_BITPACKED
                                                              : QEM_PACK_UINT16_LZ4;
    po->destination = dest ? dest : ".";
    po->available_disk = (uint64_t)a->v[OPT_AVAILABLE_DISK].i[0];
    po->available_memory = (uint64_t)a->v[OPT_AVAILABLE_MEMORY].i[0];
    *mask = NULL;
    if (!given(a, OPT_EXCLUDE))
        return EXIT_OK;
    char *text = qem_pack_inspection_json(in, NULL);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    qem_free(text);
    const json_t *shape = json_object_get(j, "shape");
    const uint64_t rows = (uint64_t)json_integer_value(json_array_get(shape, 2));
    const uint64_t cols = (uint64_t)json_integer_value(json_array_get(shape, 3));
    json_decref(j);
    *mask = rows && cols ? malloc((size_t)(rows * cols)) : NULL;
    qem_error e = {0};
    if (!*mask)
        return EXIT_FAILED;
    if (qem_npy_read_mask(text_of(a, OPT_EXCLUDE), rows, cols, *mask, (size_t)(rows * cols), &e) !=
        QEM_OK)
        return fail(a->command, &e);
    po->exclude = *mask;
    return EXIT_OK;
}

static int run_inspect(const args *a)
{
    progress_state ps;
    qem_pack_inspection *in = inspect_source(a, &ps);
    if (!in)
        return interrupted_by() ? interrupt_exit_status() : EXIT_FAILED;
    qem_error e = {0};
    char *text = qem_pack_inspection_json(in, &e);
    qem_pack_inspection_free(in);
    return print_summary("pack inspect", text, &e, given(a, OPT_JSON), print_inspection);
}

/* --dest: a pack name in a folder that exists. */
static int check_planned_dest(const char *dest)
{
    int rc = need_destination("pack plan", dest, PACK_EXTENSIONS, "packs are HDF5 files");
    if (rc)
        return rc;
    const char *slash = strrchr(dest, '/');
    char folder[4096];
    snprintf(folder, sizeof folder, "%.*s", slash ? (int)(slash - dest) + (slash == dest) : 1,
             slash ? dest : ".");
    struct stat sb;
    if (stat(folder, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return usage_fail("pack plan", "--dest '%s' is in '%s', which is not a folder (%s)",
                          SAFE(dest), SAFE(folder),
                          stat(folder, &sb) != 0 ? strerror(errno) : "not a directory");
    return 0;
}

static int run_plan(const args *a)
{
    const char *dest = text_of(a, OPT_DEST);
    int rc = dest ? check_planned_dest(dest) : 0;
    if (rc)
        return rc;
    progress_state ps;
    qem_pack_inspection *in = inspect_source(a, &ps);
    if (!in)
        return interrupted_by() ? interrupt_exit_status() : EXIT_FAILED;
    qem_pack_plan_options po;
    uint8_t *mask = NULL;
    int code = plan_setup(a, in, dest, &po, &mask);
    if (code == EXIT_OK) {
        qem_error e = {0};
        qem_pack_plan plan = {.struct_size = sizeof plan};
        if (qem_pack_plan_make(in, &po, &plan, &e) != QEM_OK)
            code = fail("pack plan", &e);
        else
            print_plan(&plan);
    }
    free(mask);
    qem_pack_inspection_free(in);
    return code;
}

static int run_produce(const args *a)
{
    const char *dest = a->positional[1];
    int rc = need_destination("pack produce", dest, PACK_EXTENSIONS, "packs are HDF5 files");
    if (rc)
        return rc;
    progress_state ps;
    qem_pack_inspection *in = inspect_source(a, &ps);
    if (!in)
        return interrupted_by() ? interrupt_exit_status() : EXIT_FAILED;
    qem_pack_plan_options po;
    uint8_t *mask = NULL;
    int code = plan_setup(a, in, dest, &po, &mask);
    if (code == EXIT_OK) {
        qem_pack_produce_options pr;
        qem_pack_produce_options_init(&pr);
        pr.threads = (int)a->v[OPT_THREADS].i[0];
        progress_state hash_ps, shard_ps;
        progress_setup(&hash_ps, "re-hashing the source", "bytes", given(a, OPT_QUIET),
                       &pr.hash_progress, &pr.hash_progress_user);
        progress_setup(&shard_ps, "packing shards", "shards", given(a, OPT_QUIET), &pr.progress,
                       &pr.progress_user);
        qem_error e = {0};
        if (qem_pack_produce(in, &po, dest, &pr, &e) != QEM_OK)
            code = fail("pack produce", &e);
        else if (!given(a, OPT_QUIET))
            printf("produced %s and %s.receipt.json\n", SAFE(dest), SAFE(dest));
    }
    free(mask);
    qem_pack_inspection_free(in);
    return code;
}

#define SOURCE_OPTIONS                                                                             \
    {OPT_DATASET, NULL}, {OPT_SCAN_SHAPE, NULL}, {OPT_RAW_SHAPE, NULL}, {OPT_RAW_DTYPE, NULL},   \
        {OPT_RAW_OFFSET, NULL}, {OPT_RAW_FRAME_HEADER, NULL}
#define PLAN_OPTIONS                                                                               \
    {OPT_PROFILE, "u16-lz4: exact uint16, LZ4 blocks (default); excluded pixels\n"                 \
                  "are retained exactly. u8-bitpacked: exact uint8, every admitted\n"             \
                  "count <= 255 and each excluded pixel one constant raw value"},                  \
        {OPT_EXCLUDE, NULL}

static const command_option inspect_options[] = {SOURCE_OPTIONS, {OPT_JSON, NULL},
                                                 {OPT_NONE, NULL}};
static const command_option plan_options[] = {SOURCE_OPTIONS,
                                              PLAN_OPTIONS,
                                              {OPT_DEST, NULL},
                                              {OPT_AVAILABLE_MEMORY, NULL},
                                              {OPT_AVAILABLE_DISK, NULL},
                                              {OPT_NONE, NULL}};
static const command_option produce_options[] = {SOURCE_OPTIONS, PLAN_OPTIONS, {OPT_NONE, NULL}};

#define PACK_SOURCES                                                                               \
    "SRC is any detector file qem save reads (see qem help inspect) that holds\n"                  \
    "counts: uint8 or uint16, or uint32 stored as uint16 when every admitted\n"                    \
    "value fits. Pixels the detector flags are excluded. float32 data are\n"                      \
    "refused (save them as .qem). The u8-bitpacked profile needs every\n"                         \
    "admitted count <= 255.\n"

const command_spec pack_commands[] = {
    {"pack inspect", "SRC [options]", "authenticate a source and describe it",
     "Authenticates every member of SRC (SHA-256 of every byte, the file's stat\n"
     "before and after) and reports shape, dtype, logical bytes, bad pixels and\n"
     "digests.\n" PACK_SOURCES,
     1, 1, "SRC", inspect_options, run_inspect},
    {"pack plan", "SRC [options]", "shard size and predicted bounds of a pack",
     "Shard size and predicted bounds (resident, peak transient, output,\n"
     "receipt, disk); fails with the required and available figures.\n" PACK_SOURCES,
     1, 1, "SRC", plan_options, run_plan},
    {"pack produce", "SRC DEST.h5 [options]", "write a Lossless Pack Format v1 file",
     "Re-authenticates the source, builds one shard at a time and publishes\n"
     "DEST.receipt.json, then DEST; nothing is ever overwritten, and a failure,\n"
     "Ctrl-C or kill leaves nothing behind (see doc/pack-producer.md for the\n"
     "one exception). --threads N encodes each shard's tiles and blocks on N\n"
     "threads and, from 2, reads the next shard and hashes the source beside\n"
     "them; the pack is the same, byte for byte, for every N.\n" PACK_SOURCES,
     2, 2, "SRC and DEST.h5", produce_options, run_produce},
    {NULL, NULL, NULL, NULL, 0, 0, NULL, NULL, NULL}};
