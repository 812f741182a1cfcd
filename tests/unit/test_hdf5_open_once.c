/* libhdf5 opens an HDF5 source once while it is recognised and described:
 * the Arina family's claim keeps the file it opened for the describe that
 * follows, whichever HDF5 family that is (it opened it twice before). This
 * test defines H5Fopen itself, which the statically linked library then
 * calls, and counts the opens of each path; reads open their parts afresh
 * and are not counted. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "h5_build.h"
#include "input/input.h"
#include "test_util.h"

static const char *watched;
static int watched_opens;

hid_t H5Fopen(const char *name, unsigned flags, hid_t fapl)
{
    hid_t (*real)(const char *, unsigned, hid_t) = NULL;
    void *symbol = dlsym(RTLD_NEXT, "H5Fopen");
    memcpy(&real, &symbol, sizeof real);
    /* By file name: the library may spell the folder differently. */
    const char *base = strrchr(name, '/');
    if (watched && strcmp(base ? base + 1 : name, watched) == 0)
        watched_opens++;
    return real(name, flags, fapl);
}

/* Opens of `path` while qem_input_open recognises and describes `source`. */
static int opens_while_described(const char *source, const char *path, const input_options *o,
                                 const char *family)
{
    const char *base = strrchr(path, '/');
    watched = base ? base + 1 : path;
    watched_opens = 0;
    qem_error e = {0};
    acquisition *a = NULL;
    const qem_status st = qem_input_open(source, o, &a, &e);
    watched = NULL;
    CHECK_OK(st, &e);
    if (a)
        CHECK(strcmp(a->family->name, family) == 0);
    qem_input_close(a);
    return watched_opens;
}

int main(void)
{
    /* A dense 4D dataset: the Arina claim declines it, the dataset family
     * describes the file the claim opened. */
    enum { R = 2, C = 3, H = 4, W = 5 };
    static uint16_t frames[R * C * H * W];
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++)
        frames[i] = (uint16_t)(i * 7 % 1000);
    char *plain = strdup(test_path("plain.h5"));
    CHECK(h5b_create(plain, 0) == 0);
    h5b_dataset d = {.path = "/frames", .file_type = H5T_STD_U16LE,
                     .mem_type = H5T_NATIVE_UINT16, .rank = 4, .dims = {R, C, H, W},
                     .data = frames};
    CHECK(h5b_write_dataset(plain, &d) == 0);
    input_options o;
    memset(&o, 0, sizeof o);
    CHECK_EQ_U64(opens_while_described(plain, plain, &o, "hdf5"), 1);

    /* A Dectris/Arina master with two data files: the master once, each
     * data file once (describe checks its dataset). */
    const uint64_t per_file[2] = {4, 2};
    char master[512], data[2][512];
    char *dir = strdup(test_path("x"));
    dir[strlen(dir) - 2] = '\0';
    h5b_arina arina = {.dir = dir, .stem = "scan", .files = 2, .frames = per_file,
                       .rows = H, .columns = W, .data = frames, .scan_rows = 2,
                       .scan_columns = 3};
    CHECK(h5b_write_arina(&arina, master, sizeof master, data) == 0);
    CHECK_EQ_U64(opens_while_described(master, master, &o, "arina"), 1);
    CHECK_EQ_U64(opens_while_described(master, data[0], &o, "arina"), 1);
    CHECK_EQ_U64(opens_while_described(master, data[1], &o, "arina"), 1);

    /* And reading still works: the parts open as before. */
    qem_error e = {0};
    acquisition *a = NULL;
    CHECK_OK(qem_input_open(plain, &o, &a, &e), &e);
    if (a) {
        uint16_t got[H * W * 2];
        CHECK_OK(qem_input_read(a, 1, 2, QEM_DTYPE_UINT16, got, sizeof got, &e), &e);
        CHECK(memcmp(got, frames + H * W, sizeof got) == 0);
    }
    qem_input_close(a);
    fprintf(stderr, "HDF5 sources: libhdf5 opens the master once to recognise and describe it\n");
    free(plain);
    free(dir);
    return test_finish("unit_hdf5_open_once");
}
