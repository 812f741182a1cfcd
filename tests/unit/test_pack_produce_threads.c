/* The pack producer on several threads: the same source produced at 1, 2,
 * 3 and 4 threads gives byte-identical packs and receipts equal but for
 * their timings (and the destination they name), in both profiles; the
 * packs verify and read back bit-exact; the upstream pack fixtures'
 * arrays re-produced at 1 and 4 threads verify and read back bit-exact;
 * a bad thread count is refused before anything is written. */
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "test_util.h"

/* Two shards in each profile; 24 x 20 pixels: several 64-pixel packing
 * blocks, a partial last one, and thousands of 128-byte LZ4 blocks. */
#define SR 64u
#define SC 128u
#define DR 24u
#define DC 20u
#define SCANS (SR * SC)
#define PIXELS (DR * DC)
#define HOT 77u /* excluded, raw 65535 at every scan */

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    uint8_t *x = read_file(a, &na), *y = read_file(b, &nb);
    const int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* The receipt without what may differ between runs: when, how long, and
 * the destination's own name. */
static json_t *receipt_facts(const char *pack)
{
    char path[700];
    snprintf(path, sizeof path, "%s.receipt.json", pack);
    json_t *r = json_load_file(path, 0, NULL);
    if (r) {
        json_object_del(r, "timing");
        json_object_del(r, "completedUTC");
        json_object_del(r, "destination");
    }
    return r;
}

/* Opens `pack` to verify it (every digest), then loads it and reads every
 * scan: raw equals `source`, working equals it with `excluded` zeroed. */
static void verify_and_read(const char *pack, const uint16_t *source, uint64_t scans,
                            uint64_t pixels, const uint8_t *excluded)
{
    qem_error e = {0};
    qem_container_options o;
    qem_container_options_init(&o);
    o.load = QEM_LOAD_LATER;
    qem_container *c = NULL;
    CHECK_OK(qem_container_open(pack, &o, &c, &e), &e);
    if (c)
        CHECK_OK(qem_container_verify(c, NULL, NULL, &e), &e);
    qem_container_close(c);

    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(pack, NULL, &p, &e), &e);
    if (!p)
        return;
    CHECK_OK(qem_pack_load(p, NULL, &e), &e);
    qem_pack_info info = {.struct_size = sizeof info};
    CHECK_OK(qem_pack_get_info(p, &info, &e), &e);
    const uint64_t n = scans * pixels;
    uint16_t *raw = malloc((size_t)n * 2);
    CHECK_OK(qem_pack_read_scans(p, 0, scans, QEM_VALUES_RAW, raw, (size_t)n * 2, &e), &e);
    CHECK(memcmp(raw, source, (size_t)n * 2) == 0);
    const size_t bytes = (size_t)qem_pack_read_bound(p, QEM_VALUES_WORKING, scans);
    uint8_t *work = malloc(bytes);
    CHECK_OK(qem_pack_read_scans(p, 0, scans, QEM_VALUES_WORKING, work, bytes, &e), &e);
    uint64_t wrong = 0;
    for (uint64_t k = 0; k < n; k++) {
        const uint32_t want = excluded[k % pixels] ? 0 : source[k];
        const uint32_t have =
            info.working_dtype == QEM_DTYPE_UINT8 ? work[k] : ((uint16_t *)work)[k];
        wrong += want != have;
    }
    CHECK_EQ_U64(wrong, 0);
    free(raw);
    free(work);
    qem_pack_close(p);
}

/* Produces `src` as dir/tTHREADS/NAME.h5; returns its path (static). */
static const char *produce_at(const char *src, const char *name, qem_pack_profile profile,
                              const uint8_t *exclude, int threads)
{
    static char dest[700];
    char dir[600];
    snprintf(dir, sizeof dir, "%s/t%d", test_dir(), threads);
    mkdir(dir, 0755);
    snprintf(dest, sizeof dest, "%s/%s.h5", dir, name);
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = profile;
    po.destination = dest;
    po.exclude = exclude;
    qem_pack_produce_options o;
    qem_pack_produce_options_init(&o);
    o.threads = threads;
    if (in)
        CHECK_OK(qem_pack_produce(in, &po, dest, &o, &e), &e);
    qem_pack_inspection_free(in);
    return dest;
}

/* Every thread count gives the one-thread pack and receipt. */
static void thread_counts(const char *src, const char *name, qem_pack_profile profile,
                          const uint16_t *source, uint64_t scans, uint64_t pixels,
                          const uint8_t *exclude)
{
    char first[700];
    snprintf(first, sizeof first, "%s", produce_at(src, name, profile, exclude, 1));
    json_t *want = receipt_facts(first);
    CHECK(want != NULL);
    verify_and_read(first, source, scans, pixels, exclude);
    for (int threads = 2; threads <= 4; threads++) {
        const char *pack = produce_at(src, name, profile, exclude, threads);
        if (!same_file(first, pack))
            fprintf(stderr, "  %s: %d threads differ from 1\n", name, threads);
        CHECK(same_file(first, pack));
        json_t *got = receipt_facts(pack);
        CHECK(got && json_equal(want, got));
        json_decref(got);
        if (threads == 4)
            verify_and_read(pack, source, scans, pixels, exclude);
    }
    json_decref(want);
}

static void synthetic(void)
{
    const uint64_t n = (uint64_t)SCANS * PIXELS;
    uint16_t *v = malloc(n * 2);
    uint64_t seed = 31;
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t s = k / PIXELS, p = k % PIXELS;
        /* All-zero scans, a bright disk of wide values, sparse counts. */
        const int r = (int)(p / DC) - 12, c = (int)(p % DC) - 10;
        v[k] = s % 89 == 3          ? 0
               : r * r + c * c < 20 ? (uint16_t)(150 + test_rand(&seed) % 100)
                                    : (uint16_t)(test_rand(&seed) % 7 == 0 ? test_rand(&seed) % 9 : 0);
        if (p == HOT)
            v[k] = 65535;
    }
    const uint64_t shape[4] = {SR, SC, DR, DC};
    char src[600];
    snprintf(src, sizeof src, "%s/synthetic.npy", test_dir());
    CHECK(write_npy4(src, QEM_DTYPE_UINT16, shape, v));
    uint8_t exclude[PIXELS] = {0};
    exclude[HOT] = 1;
    thread_counts(src, "synthetic_u16", QEM_PACK_UINT16_LZ4, v, SCANS, PIXELS, exclude);
    thread_counts(src, "synthetic_u8", QEM_PACK_UINT8_BITPACKED, v, SCANS, PIXELS, exclude);
    free(v);
}

/* The upstream fixtures' arrays, with their exclusions, in their profile. */
static void fixtures(void)
{
    static const char *const names[] = {"v1_u16_4x32_16x16", "v1_u16_excluded_retained",
                                        "v3_upstream_test_writer_legacy_nonportable",
                                        "v3_upstream_test_writer_notes_v3"};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        char rel[200];
        qem_error e = {0};
        snprintf(rel, sizeof rel, "pack/%s.npy", names[f]);
        char src[600];
        snprintf(src, sizeof src, "%s", fixture_path(rel));
        snprintf(rel, sizeof rel, "pack/%s.excluded.json", names[f]);
        json_t *excl = json_load_file(fixture_path(rel), 0, NULL);
        qem_npy *npy = NULL;
        CHECK_OK(qem_npy_open(src, &npy, &e), &e);
        if (!excl || !npy) {
            json_decref(excl);
            qem_npy_close(npy);
            continue;
        }
        qem_npy_info ni = {.struct_size = sizeof ni};
        CHECK_OK(qem_npy_get_info(npy, &ni, &e), &e);
        const uint64_t pixels = ni.shape[2] * ni.shape[3], scans = ni.shape[0] * ni.shape[1];
        uint16_t *source = malloc((size_t)ni.elements * 2);
        CHECK_OK(qem_npy_read(npy, 0, ni.elements, source, (size_t)ni.elements * 2, &e), &e);
        qem_npy_close(npy);
        uint8_t *exclude = calloc((size_t)pixels, 1);
        const json_t *flat = json_object_get(excl, "flat_row_major");
        for (size_t i = 0; i < json_array_size(flat); i++)
            exclude[json_integer_value(json_array_get(flat, i))] = 1;
        const qem_pack_profile profile =
            names[f][1] == '3' ? QEM_PACK_UINT8_BITPACKED : QEM_PACK_UINT16_LZ4;
        const char *one = produce_at(src, names[f], profile, exclude, 1);
        char first[700];
        snprintf(first, sizeof first, "%s", one);
        const char *four = produce_at(src, names[f], profile, exclude, 4);
        CHECK(same_file(first, four));
        verify_and_read(first, source, scans, pixels, exclude);
        verify_and_read(four, source, scans, pixels, exclude);
        free(exclude);
        free(source);
        json_decref(excl);
    }
}

/* Runs the CLI; its exit status, stderr into `err`. */
static int cli(const char *args, char *err, size_t size)
{
    char cmd[1800], errpath[700];
    snprintf(errpath, sizeof errpath, "%s/cli.err", test_dir());
    snprintf(cmd, sizeof cmd, "%s %s --quiet 2>%s >/dev/null", QEM_CLI, args, errpath);
    const int status = system(cmd);
    size_t n = 0;
    uint8_t *text = read_file(errpath, &n);
    snprintf(err, size, "%.*s", text ? (int)n : 0, text ? (const char *)text : "");
    free(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void refusals(void)
{
    char src[600], dest[700], args[1600], err[2048];
    snprintf(src, sizeof src, "%s/synthetic.npy", test_dir());
    snprintf(dest, sizeof dest, "%s/refused.h5", test_dir());
    static const char *const bad[] = {"0", "-2", "two", "1025", ""};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(args, sizeof args, "pack produce '%s' '%s' --threads '%s'", src, dest, bad[k]);
        CHECK_EQ_U64(cli(args, err, sizeof err), 2);
        CHECK(strstr(err, "--threads") != NULL);
        CHECK(access(dest, F_OK) != 0);
    }
    /* The CLI passes the count on: 1 and 3 threads, the same pack. */
    char one[700];
    snprintf(one, sizeof one, "%s/cli_1.h5", test_dir());
    snprintf(args, sizeof args, "pack produce '%s' '%s' --threads 1", src, one);
    CHECK_EQ_U64(cli(args, err, sizeof err), 0);
    snprintf(args, sizeof args, "pack produce '%s' '%s' --threads 3", src, dest);
    CHECK_EQ_U64(cli(args, err, sizeof err), 0);
    CHECK(same_file(one, dest));

    /* The library refuses it too, naming the field, and writes nothing. */
    snprintf(dest, sizeof dest, "%s/refused_api.h5", test_dir());
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
    qem_pack_produce_options o;
    qem_pack_produce_options_init(&o);
    o.threads = -1;
    CHECK_STATUS(qem_pack_produce(in, NULL, dest, &o, &e), QEM_E_INVALID_ARGUMENT, &e);
    CHECK(strstr(e.message, "qem_pack_produce_options.threads") != NULL);
    CHECK(access(dest, F_OK) != 0);
    qem_pack_inspection_free(in);
}

int main(void)
{
    synthetic();
    fixtures();
    refusals();
    return test_finish("unit_pack_produce_threads");
}
