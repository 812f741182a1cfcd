/* Saving never holds more than one chunk of scans: `qem save` of a 512 MiB
 * source must peak below 256 MiB of resident memory, and so must `qem
 * export` and `qem verify` of the result. `qem pack produce` of the same
 * source, in each profile, must peak within the plan's predicted peak
 * transient bytes plus 32 MiB. The CLI runs as a child process of a small
 * launcher so that its peak RSS (getrusage of the child) is measured alone.
 *
 * A Merlin .mib of the same size (12-bit, 16384 frames of 128 x 128 behind
 * their headers) saved to .qem peaks below 256 MiB as well, and holds its
 * counts exactly.
 *
 * Expected peak for the default 512-scan chunks of a 128x128 detector:
 * window 16 MiB + payload slots 16 MiB + sums and per-thread tiles, plus
 * the chunk's decoded scans (16 MiB) on export: well under 100 MiB. */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mib_build.h"
#include "test_util.h"

#define LIMIT_KIB (256 * 1024)

/* Linux counts a child's peak RSS from the memory it was forked with, so
 * children are started by a launcher forked while this process was still
 * small: later measurements leave out whatever this test holds by then. */
typedef struct {
    int to_launcher, from_launcher;
} launcher;

static int write_all(int fd, const void *p, size_t n)
{
    for (const char *c = p; n;) {
        ssize_t k = write(fd, c, n);
        if (k <= 0)
            return -1;
        c += k, n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    for (char *c = p; n;) {
        ssize_t k = read(fd, c, n);
        if (k <= 0)
            return -1;
        c += k, n -= (size_t)k;
    }
    return 0;
}

/* Runs one command line (a block of NUL-terminated strings) per request
 * and answers its peak RSS in KiB, or -1. */
static void launcher_serve(int in, int out)
{
    uint32_t n;
    while (read_all(in, &n, sizeof n) == 0) {
        char *block = malloc(n), *argv[16];
        int argc = 0;
        if (!block || read_all(in, block, n) != 0)
            _exit(1);
        for (size_t at = 0; at < n && argc < 15; at += strlen(block + at) + 1)
            argv[argc++] = block + at;
        argv[argc] = NULL;
        long rss = -1;
        pid_t pid = fork();
        if (pid == 0) {
            execv(argv[0], argv);
            _exit(127);
        }
        int status = 0;
        struct rusage ru;
        if (pid > 0 && wait4(pid, &status, 0, &ru) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            rss = ru.ru_maxrss;
        else
            fprintf(stderr, "%s %s exited with status %d\n", argv[0], argv[1], status);
        free(block);
        if (write_all(out, &rss, sizeof rss) != 0)
            _exit(1);
    }
    _exit(0);
}

static launcher launcher_start(void)
{
    int down[2], up[2];
    launcher l = {-1, -1};
    if (pipe(down) != 0 || pipe(up) != 0)
        return l;
    if (fork() == 0) {
        close(down[1]);
        close(up[0]);
        launcher_serve(down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    l.to_launcher = down[1];
    l.from_launcher = up[0];
    return l;
}

static long run_child(const launcher *l, char *const argv[])
{
    char block[4096];
    uint32_t n = 0;
    for (int i = 0; argv[i]; i++) {
        size_t k = strlen(argv[i]) + 1;
        if (n + k > sizeof block)
            return -1;
        memcpy(block + n, argv[i], k);
        n += (uint32_t)k;
    }
    long rss = -1;
    if (write_all(l->to_launcher, &n, sizeof n) != 0 || write_all(l->to_launcher, block, n) != 0 ||
        read_all(l->from_launcher, &rss, sizeof rss) != 0)
        return -1;
    fprintf(stderr, "%s %s: peak RSS %ld KiB\n", argv[0], argv[1], rss);
    return rss;
}

int main(void)
{
    /* Sanitizer runtimes keep freed memory in quarantine; keep that small
     * so that the measurement is about qem's own buffers. */
    setenv("ASAN_OPTIONS", "quarantine_size_mb=16:detect_leaks=0", 1);
    const launcher launch = launcher_start();

    const uint64_t shape[4] = {128, 128, 128, 128}; /* 512 MiB of uint16 */
    const uint64_t P = shape[2] * shape[3], scans = shape[0] * shape[1];
    const char *src = test_path("big.npy");
    qem_error e = {0};
    qem_npy_writer *w = NULL;
    CHECK_OK(qem_npy_writer_create(src, QEM_DTYPE_UINT16, 4, shape, &w, &e), &e);
    uint16_t *frames = calloc((size_t)(64 * P), sizeof *frames);
    uint64_t seed = 5;
    for (uint64_t s = 0; w && s < scans; s += 64) {
        memset(frames, 0, (size_t)(64 * P) * sizeof *frames);
        for (uint64_t k = 0; k < 64 * P / 16; k++) {
            uint64_t r = test_rand(&seed);
            frames[r % (64 * P)] = (uint16_t)(1 + (r >> 32) % 9);
        }
        CHECK_OK(qem_npy_writer_append(w, frames, 64 * P, &e), &e);
    }
    CHECK_OK(qem_npy_writer_finish(w, &e), &e);
    qem_npy_writer_free(w);
    free(frames);

    const char *dst = test_path("big.qem");
    char *save[] = {QEM_CLI, "save", (char *)src, (char *)dst, "--quiet", NULL};
    long rss = run_child(&launch, save);
    CHECK(rss > 0 && rss < LIMIT_KIB);

    char *verify[] = {QEM_CLI, "verify", (char *)dst, "--quiet", NULL};
    rss = run_child(&launch, verify);
    CHECK(rss > 0 && rss < LIMIT_KIB);

    const char *back = test_path("back.npy");
    char *export[] = {QEM_CLI, "export", (char *)dst, (char *)back, "--quiet", NULL};
    rss = run_child(&launch, export);
    CHECK(rss > 0 && rss < LIMIT_KIB);

    /* Packs: within the plan's predicted peak transient plus 32 MiB, and
     * the pack holds the source exactly. */
    static const char *const profiles[2] = {"u16-lz4", "u8-bitpacked"};
    for (int k = 0; k < 2; k++) {
        char pack[600];
        snprintf(pack, sizeof pack, "%s/big_%s.h5", test_dir(), profiles[k]);
        qem_pack_inspection *in = NULL;
        CHECK_OK(qem_pack_inspect(src, NULL, &in, &e), &e);
        qem_pack_plan_options po;
        qem_pack_plan_options_init(&po);
        po.profile = k ? QEM_PACK_UINT8_BITPACKED : QEM_PACK_UINT16_LZ4;
        po.destination = pack;
        qem_pack_plan plan = {.struct_size = sizeof plan};
        CHECK_OK(qem_pack_plan_make(in, &po, &plan, &e), &e);
        qem_pack_inspection_free(in);
        char *produce[] = {QEM_CLI, "pack",       "produce", (char *)src,
                           pack,    "--profile", (char *)profiles[k], "--quiet", NULL};
        rss = run_child(&launch, produce);
        long bound_kib = (long)(plan.peak_transient_bytes / 1024) + 32 * 1024;
#ifdef __SANITIZE_ADDRESS__
        /* AddressSanitizer adds shadow memory (1/8 of what is touched),
         * redzones and its own allocator's caching; the exact bound is the
         * release build's, this one only catches gross growth. */
        bound_kib += bound_kib / 2;
#endif
        fprintf(stderr, "  %s: predicted peak transient %llu KiB, bound %ld KiB\n", profiles[k],
                (unsigned long long)(plan.peak_transient_bytes / 1024), bound_kib);
        CHECK(rss > 0 && rss <= bound_kib);

        qem_pack *p = NULL;
        qem_npy *a = NULL;
        CHECK_OK(qem_pack_open(pack, NULL, &p, &e), &e);
        CHECK_OK(qem_pack_load(p, NULL, &e), &e);
        CHECK_OK(qem_npy_open(src, &a, &e), &e);
        uint16_t *x = malloc((size_t)P * 256 * 2), *y = malloc((size_t)P * 256 * 2);
        int differ = 0;
        for (uint64_t s = 0; p && a && s < scans; s += 256) {
            CHECK_OK(qem_npy_read(a, s * P, 256 * P, x, npy_read_size(a, 256 * P), &e), &e);
            CHECK_OK(qem_pack_read_scans(p, s, 256, QEM_VALUES_RAW, y, (size_t)P * 256 * 2, &e),
                     &e);
            differ += memcmp(x, y, (size_t)P * 256 * 2) != 0;
        }
        CHECK_EQ_U64(differ, 0);
        free(x);
        free(y);
        qem_npy_close(a);
        qem_pack_close(p);
    }

    /* And the bytes made it through unchanged. */
    qem_npy *a = NULL, *b = NULL;
    CHECK_OK(qem_npy_open(src, &a, &e), &e);
    CHECK_OK(qem_npy_open(back, &b, &e), &e);
    uint16_t *x = malloc((size_t)P * 256 * 2), *y = malloc((size_t)P * 256 * 2);
    int differ = 0;
    for (uint64_t s = 0; a && b && s < scans; s += 256) {
        CHECK_OK(qem_npy_read(a, s * P, 256 * P, x, npy_read_size(a, 256 * P), &e), &e);
        CHECK_OK(qem_npy_read(b, s * P, 256 * P, y, npy_read_size(b, 256 * P), &e), &e);
        differ += memcmp(x, y, (size_t)P * 256 * 2) != 0;
    }
    CHECK_EQ_U64(differ, 0);
    free(x);
    free(y);
    qem_npy_close(a);
    qem_npy_close(b);
    unlink(src);
    unlink(back);

    /* A 543 MB Merlin file (the input layer's streamed, hashed reads). */
    const char *mib = test_path("big.mib"), *mib_qem = test_path("big_mib.qem");
    const mibb_options mo = {.depth = 12, .width = 128, .height = 128, .frames = scans,
                             .max_value = 4095, .write_hdr = 1, .frames_per_trigger = 128};
    CHECK(mibb_write(mib, &mo) == 0);
    char *save_mib[] = {QEM_CLI, "save", (char *)mib, (char *)mib_qem, "--quiet", NULL};
    rss = run_child(&launch, save_mib);
    CHECK(rss > 0 && rss < LIMIT_KIB);
    qem_file *f = NULL;
    CHECK_OK(qem_open(mib_qem, NULL, &f, &e), &e);
    uint16_t *frame = malloc((size_t)P * 2);
    int wrong = 0;
    for (uint64_t s = 0; f && s < scans; s += 997) {
        CHECK_OK(qem_read_scans(f, s, 1, frame, (size_t)P * 2, &e), &e);
        for (uint64_t px = 0; px < P; px++)
            wrong += frame[px] != mibb_pattern(s, px, 4095);
    }
    CHECK_EQ_U64(wrong, 0);
    free(frame);
    qem_close(f);
    close(launch.to_launcher); /* the launcher exits at end of input */
    close(launch.from_launcher);
    wait(NULL);
    return test_finish("unit_bounded_memory");
}
