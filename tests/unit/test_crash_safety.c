/* Crash-safe publication, seen from outside the process: `qem save` and
 * `qem pack produce` SIGKILLed at random points, destinations that exist
 * before the run or appear during it, and a disk that fills. After every
 * run the destination is absent, or complete and verifying; no receipt
 * stands without its pack (the final two links are made by a child the
 * kill does not reach, also tested by killing the moment the receipt
 * appears); no temporary name is left; a file that was there first keeps
 * its bytes. A receipt without its pack (left by a power loss between the
 * links) is named and refused by a rerun.
 *
 * Disk full is a write failure injected with RLIMIT_FSIZE (writes past the
 * limit fail with EFBIG once SIGXFSZ is ignored): it works on any
 * filesystem, so nothing is mounted and no tmpfs or loop device is needed.
 *
 * Kill delays are fractions of a measured uninterrupted run, so the test
 * adapts to a sanitized (slower) CLI. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/sha256.h"
#include "test_util.h"

#define SR 32u
#define SC 64u
#define DR 64u
#define DC 64u
#define SCANS ((uint64_t)SR * SC)
#define PIXELS ((uint64_t)DR * DC)
#define SAMPLES (SCANS * PIXELS) /* 8 Mi uint16 samples: 16 MiB */

#define KILLED_FRESH 20   /* SIGKILLed runs into a free destination, per part */
#define KILLED_EXISTING 4 /* SIGKILLed runs onto a file that was there first */
#define APPEARING 4       /* uninterrupted runs whose destination appears meanwhile */

static uint16_t *source;   /* the counts in src.npy */
static uint16_t *readback; /* a whole read of an output */
static char src_path[600];
static uint64_t kill_seed = 2024; /* fixed: the same kill points every run */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* A uniform fraction in [0, 1) from the fixed kill seed. */
static double unit_rand(void)
{
    return (double)(test_rand(&kill_seed) >> 11) / 9007199254740992.0;
}

/* Starts the CLI with stderr into `err_path` (when given) and, when
 * `fsize` is nonzero, a file-size limit: SIGXFSZ is ignored so that a
 * write past the limit fails with EFBIG, as on a full disk. */
static pid_t spawn(char *const argv[], const char *err_path, rlim_t fsize)
{
    pid_t pid = fork();
    if (pid < 0) {
        /* Never go on: kill(-1, ...) would reach every process. */
        perror("fork");
        exit(2);
    }
    if (pid != 0) {
        setpgid(pid, pid);
        return pid;
    }
    /* Its own process group, so the linking child it may fork can be
     * waited for after the kill (reap_group). */
    setpgid(0, 0);
    if (err_path) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(126);
    }
    if (fsize) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {fsize, fsize};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(126);
    }
    /* A crashing child must not leave core files wherever ctest runs. */
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    execv(argv[0], argv);
    _exit(127);
}

/* After `pid` (a group leader from spawn) was reaped: waits for what is
 * left of its group, the child that makes the final links among them.
 * This process is a subreaper, so such orphans are its own children; a
 * check made before they finish would race with their links. */
static void reap_group(pid_t pid)
{
    while (waitpid(-pid, NULL, 0) > 0 || errno == EINTR)
        ;
}

/* Waits for `pid` at most `limit_s` seconds; a child still running then is
 * a hang: it is reported, killed and reaped, and 0 is returned. */
static int wait_child(pid_t pid, double limit_s, int *status)
{
    const double deadline = now_s() + limit_s;
    for (;;) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid)
            return 1;
        if (got < 0 && errno != EINTR) {
            CHECK(!"waitpid failed");
            return 0;
        }
        if (now_s() > deadline) {
            fprintf(stderr, "HANG: pid %d still running after %.1f s; killing it\n", (int)pid,
                    limit_s);
            CHECK(!"the CLI hung");
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return 0;
        }
        sleep_s(0.002);
    }
}

static int exited_with(int status, int code)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

/* "exit N" or "signal N (NAME)", for messages. */
static const char *describe(int status)
{
    static char text[64];
    if (WIFEXITED(status))
        snprintf(text, sizeof text, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(text, sizeof text, "signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(text, sizeof text, "status %d", status);
    return text;
}

/* A whole file as a NUL-terminated string (read_file's bytes are not). */
static char *read_text(const char *path, size_t *n)
{
    *n = 0;
    uint8_t *bytes = read_file(path, n);
    char *text = bytes ? realloc(bytes, *n + 1) : NULL;
    if (!text) {
        free(bytes);
        *n = 0;
        return NULL;
    }
    text[*n] = 0;
    return text;
}

/* A clean refusal: stderr is one line from the CLI ("qem CMD: why"), so
 * no sanitizer report or crash trace came with it (a sanitized CLI that
 * crashes also exits 1). */
static int one_error_line(const char *text, size_t n)
{
    return text && n > 5 && !strncmp(text, "qem ", 4) && memchr(text, '\n', n) == text + n - 1;
}

static void show_stderr(const char *err_path)
{
    size_t n = 0;
    char *text = read_text(err_path, &n);
    if (text && n)
        fprintf(stderr, "  child stderr: %.*s", (int)n, text);
    free(text);
}

/* Names in `dir` other than . and ..; `hidden` gets how many start with a
 * dot (a fallback temporary is ".qem-XXXXXX"). */
static int names_in(const char *dir, int *hidden)
{
    DIR *d = opendir(dir);
    int n = 0;
    *hidden = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        *hidden += e->d_name[0] == '.';
    }
    if (d)
        closedir(d);
    return d ? n : -1;
}

/* The folder holds exactly `expected` names, none of them temporaries. */
static void check_folder(const char *dir, int expected, const char *what, int run)
{
    int hidden = 0;
    const int n = names_in(dir, &hidden);
    test_checks++;
    if (n != expected || hidden != 0 || count_entries(dir, ".qem-") != 0) {
        test_failures++;
        fprintf(stderr, "%s run %d: '%s' holds %d names (%d hidden), expected %d and none hidden\n",
                what, run, dir, n, hidden, expected);
    }
}

/* Known bytes for a file that must survive untouched. */
static uint8_t *existing_bytes(uint64_t tag, size_t *n)
{
    *n = 3000 + (size_t)(tag % 97);
    uint8_t *b = malloc(*n);
    uint64_t s = tag * 31 + 7;
    for (size_t k = 0; b && k < *n; k++)
        b[k] = (uint8_t)test_rand(&s);
    return b;
}

static int has_bytes(const char *path, const uint8_t *want, size_t n)
{
    size_t got_n = 0;
    uint8_t *got = read_file(path, &got_n);
    const int same = got && got_n == n && !memcmp(got, want, n);
    free(got);
    return same;
}

/* Creates `path` only if nothing is there (O_EXCL), with `bytes`. Returns 1
 * when it created it, 0 when the name already existed. */
static int create_exclusive(const char *path, const uint8_t *bytes, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        CHECK(errno == EEXIST);
        return 0;
    }
    CHECK(write(fd, bytes, n) == (ssize_t)n);
    close(fd);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Checking outputs                                                         */

/* A published .qem: opens with every body block checked, verifies in full,
 * and reads back the source exactly. */
static int qem_complete(const char *path)
{
    qem_error e = {0};
    qem_file *f = NULL;
    const int before = test_failures;
    CHECK_OK(qem_open(path, NULL, &f, &e), &e);
    if (!f)
        return 0;
    qem_file_info info = {.struct_size = sizeof info};
    qem_get_info(f, &info, NULL);
    CHECK(info.dtype == QEM_DTYPE_UINT16 && info.shape[0] == SR && info.shape[1] == SC &&
          info.shape[2] == DR && info.shape[3] == DC);
    qem_verify_report report = {.struct_size = sizeof report};
    CHECK_OK(qem_verify(f, NULL, &report, &e), &e);
    memset(readback, 0, SAMPLES * 2);
    CHECK_OK(qem_read_scans(f, 0, SCANS, readback, SAMPLES * 2, &e), &e);
    CHECK(memcmp(readback, source, SAMPLES * 2) == 0);
    qem_close(f);
    return test_failures == before;
}

static void file_sha_hex(const char *path, char out[65])
{
    size_t n = 0;
    uint8_t *bytes = read_file(path, &n), d[QEM_SHA256_BYTES];
    out[0] = 0;
    if (!bytes)
        return;
    qem_sha256_oneshot(bytes, n, d);
    qem_sha256_hex(d, out);
    free(bytes);
}

/* A published pack with its receipt: the receipt names the pack's SHA-256,
 * the pack loads as `qem verify --expect-sha256` would check it (every
 * digest, stored ones too, and the whole-file identity), and it reads back
 * the source exactly. */
static int pack_complete(const char *pack, const char *receipt, qem_pack_profile profile)
{
    const int before = test_failures;
    json_error_t jerr;
    json_t *r = json_load_file(receipt, 0, &jerr);
    CHECK(r != NULL);
    const char *out_sha = json_string_value(json_object_get(r, "outputSHA256"));
    char sha[65];
    file_sha_hex(pack, sha);
    CHECK(out_sha && !strcmp(out_sha, sha));
    qem_error e = {0};
    qem_pack *p = NULL;
    CHECK_OK(qem_pack_open(pack, NULL, &p, &e), &e);
    if (p) {
        qem_pack_options lo;
        qem_pack_options_init(&lo);
        lo.expect_sha256 = out_sha;
        lo.check_stored_digests = 1;
        CHECK_OK(qem_pack_load(p, &lo, &e), &e);
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        CHECK(info.loaded && info.profile == profile);
        memset(readback, 0, SAMPLES * 2);
        CHECK_OK(qem_pack_read_scans(p, 0, SCANS, QEM_VALUES_RAW, readback, SAMPLES * 2, &e), &e);
        CHECK(memcmp(readback, source, SAMPLES * 2) == 0);
    }
    qem_pack_close(p);
    json_decref(r);
    return test_failures == before;
}

/* The receipt a kill between the two final links leaves: a rerun refuses
 * with QEM_E_EXISTS naming it, and changes nothing. */
static void orphan_receipt_refused(const char *dest, const char *receipt)
{
    size_t n = 0;
    uint8_t *kept = read_file(receipt, &n);
    qem_pack_inspection *in = NULL;
    qem_error e = {0};
    CHECK_OK(qem_pack_inspect(src_path, NULL, &in, &e), &e);
    CHECK_STATUS(qem_pack_produce(in, NULL, dest, NULL, &e), QEM_E_EXISTS, &e);
    CHECK(strstr(e.message, receipt) != NULL);
    /* doc/pack-producer.md: the refusal explains the leftover receipt and
     * says to remove it, rather than only "choose another name". */
    test_checks++;
    if (!strstr(e.message, "no pack commits")) {
        test_failures++;
        fprintf(stderr, "rerun over a receipt without its pack does not explain it: %s\n",
                e.message);
    }
    qem_pack_inspection_free(in);
    CHECK(!file_exists(dest));
    CHECK(kept && has_bytes(receipt, kept, n));
    free(kept);
}

/* ------------------------------------------------------------------------ */
/* Runs                                                                     */

typedef enum { KIND_SAVE, KIND_PACK } run_kind;

typedef struct tally {
    int empty, complete, orphaned;         /* SIGKILLed runs into a free name */
    int existing_killed, existing_refused; /* a file there first, kept either way */
    int appeared_at_start, appeared_at_link, published_first; /* a name appearing */
} tally;

static const char *profile_name(qem_pack_profile p)
{
    return p == QEM_PACK_UINT8_BITPACKED ? "u8-bitpacked" : "u16-lz4";
}

static void argv_for(run_kind kind, const char *dest, qem_pack_profile profile, char *argv[10])
{
    memset(argv, 0, 10 * sizeof *argv);
    if (kind == KIND_SAVE) {
        char *const a[] = {QEM_CLI, "save", src_path, (char *)dest, "--quiet", NULL};
        memcpy(argv, a, sizeof a);
    } else {
        char *const a[] = {QEM_CLI,     "pack",    "produce",
                           src_path,    (char *)dest, "--profile",
                           (char *)profile_name(profile), "--quiet", NULL};
        memcpy(argv, a, sizeof a);
    }
}

/* One uninterrupted run; returns its wall time, or a negative value if it
 * failed. Its output is checked like any other. Callers take the faster of
 * two, so that a slow first start does not push kills past the work. */
static double timed_run(run_kind kind, const char *dest, qem_pack_profile profile,
                        const char *err_path)
{
    char *argv[10] = {0};
    argv_for(kind, dest, profile, argv);
    const double t0 = now_s();
    pid_t pid = spawn(argv, err_path, 0);
    int status = 0;
    const int ended = pid > 0 && wait_child(pid, 900, &status);
    const double span = now_s() - t0;
    CHECK(ended && exited_with(status, 0));
    if (!ended || !exited_with(status, 0)) {
        show_stderr(err_path);
        return -1;
    }
    char receipt[700];
    snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
    CHECK(kind == KIND_SAVE ? qem_complete(dest) : pack_complete(dest, receipt, profile));
    return span;
}

/* The faster of two timed runs; negative if either failed. */
static double faster(double a, double b)
{
    return a < 0 || b < 0 ? -1 : a < b ? a : b;
}

static void print_tally(const char *what, const tally *t, double seconds)
{
    fprintf(stderr,
            "%s: %d SIGKILLed runs into a free name: %d left nothing, %d had finished (complete, "
            "verified), %d left a receipt without its pack; "
            "%d onto a file there first: %d killed, %d refused with exit 1, the file kept; %d "
            "whose name appeared mid-run: %d refused at the start, %d at the final link, %d had "
            "published first; %.1f s in all\n",
            what, KILLED_FRESH, t->empty, t->complete, t->orphaned, KILLED_EXISTING,
            t->existing_killed, t->existing_refused, APPEARING, t->appeared_at_start,
            t->appeared_at_link, t->published_first, seconds);
}

/* Outcome of a fresh run that was SIGKILLed (or finished first). */
static void judge_fresh(run_kind kind, const char *dir, const char *dest, qem_pack_profile profile,
                        int status, int run, tally *t, const char *err_path)
{
    char receipt[900];
    snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
    const char *what = kind == KIND_SAVE ? "save" : "pack produce";
    /* It either died by the kill or finished successfully first. */
    test_checks++;
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) && !exited_with(status, 0)) {
        test_failures++;
        fprintf(stderr, "%s run %d: killed at a random point, ended with %s\n", what, run,
                describe(status));
        show_stderr(err_path);
    }
    /* The final links are made by a child of the killed run: give it a
     * moment to finish the pair it has started. */
    for (int wait = 0; wait < 200 && kind == KIND_PACK && file_exists(receipt) &&
                       !file_exists(dest);
         wait++)
        sleep_s(0.01);
    const int has_dest = file_exists(dest);
    const int has_receipt = kind == KIND_PACK && file_exists(receipt);
    if (exited_with(status, 0))
        CHECK(has_dest);
    if (has_dest) {
        /* The pack is the commit marker: its receipt was linked first. */
        if (kind == KIND_PACK)
            CHECK(has_receipt);
        const int ok =
            kind == KIND_SAVE ? qem_complete(dest) : pack_complete(dest, receipt, profile);
        if (!ok)
            fprintf(stderr, "%s run %d: a published '%s' is not complete\n", what, run, dest);
        t->complete++;
    } else if (has_receipt) {
        fprintf(stderr, "%s run %d: a receipt stands without its pack\n", what, run);
        orphan_receipt_refused(dest, receipt);
        t->orphaned++;
    } else {
        t->empty++;
    }
    check_folder(dir, has_dest + has_receipt, what, run);
    remove(dest);
    remove(receipt);
}

/* SIGKILLs at random points of [0, 1.1 span): fresh destinations, then
 * destinations holding a file first, then destinations that appear while
 * the run works (caught by the final link, which never replaces). */
static void kill_runs(run_kind kind, const char *name, double span_u16, double span_u8, tally *t)
{
    char dir[700], err_path[700];
    snprintf(dir, sizeof dir, "%s/%s", test_dir(), name);
    snprintf(err_path, sizeof err_path, "%s/%s.stderr", test_dir(), name);
    CHECK(mkdir(dir, 0755) == 0);
    const char *ext = kind == KIND_SAVE ? "qem" : "h5";
    const char *what = kind == KIND_SAVE ? "save" : "pack produce";
    char *argv[10] = {0};
    int status = 0;
    for (int run = 0; run < KILLED_FRESH + KILLED_EXISTING + APPEARING; run++) {
        /* Pack runs alternate the two profiles. */
        const qem_pack_profile profile = run % 2 ? QEM_PACK_UINT8_BITPACKED : QEM_PACK_UINT16_LZ4;
        const double span = kind == KIND_PACK && run % 2 ? span_u8 : span_u16;
        char dest[800], receipt[900];
        snprintf(dest, sizeof dest, "%s/out%d.%s", dir, run, ext);
        snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
        argv_for(kind, dest, profile, argv);
        size_t n = 0;
        uint8_t *mine = existing_bytes((uint64_t)run + (kind == KIND_PACK ? 1000 : 0), &n);

        if (run < KILLED_FRESH) {
            pid_t pid = spawn(argv, err_path, 0);
            sleep_s(unit_rand() * 1.1 * span);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            reap_group(pid);
            judge_fresh(kind, dir, dest, profile, status, run, t, err_path);
        } else if (run < KILLED_FRESH + KILLED_EXISTING) {
            /* A file is there first (for packs: the pack or, every other
             * run, only the receipt): refused at once, or killed before
             * that; either way its bytes stand and nothing else appears. */
            const char *taken = kind == KIND_PACK && run % 2 ? receipt : dest;
            CHECK(write_file(taken, mine, n));
            pid_t pid = spawn(argv, err_path, 0);
            sleep_s(unit_rand() * 1.1 * span);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            reap_group(pid);
            const int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            size_t en = 0;
            char *text = read_text(err_path, &en);
            test_checks++;
            if (!killed && !(exited_with(status, 1) && one_error_line(text, en))) {
                test_failures++;
                fprintf(stderr, "%s run %d: '%s' was there first; %s, expected exit 1\n", what,
                        run, taken, describe(status));
                show_stderr(err_path);
            }
            free(text);
            CHECK(has_bytes(taken, mine, n));
            check_folder(dir, 1, what, run);
            t->existing_killed += killed;
            t->existing_refused += !killed;
            remove(taken);
        } else {
            /* The destination (for packs, alternately the receipt's name)
             * appears at a random point; the run is let finish. */
            const char *taken = kind == KIND_PACK && run % 2 ? receipt : dest;
            pid_t pid = spawn(argv, err_path, 0);
            sleep_s(unit_rand() * span);
            const int mine_first = create_exclusive(taken, mine, n);
            const int ended = wait_child(pid, 20 * span + 60, &status);
            if (mine_first) {
                /* Refused: exit 1, our file intact, nothing else
                 * published (a receipt already linked is removed). */
                size_t en = 0;
                char *text = read_text(err_path, &en);
                test_checks++;
                if (!ended || !exited_with(status, 1) || !one_error_line(text, en)) {
                    test_failures++;
                    fprintf(stderr, "%s run %d: '%s' appeared mid-run; %s, expected exit 1\n",
                            what, run, taken, describe(status));
                    show_stderr(err_path);
                }
                /* Before the run claimed the name, or caught by the final
                 * link, which never replaces. */
                const int at_link = text && strstr(text, "appeared while writing");
                free(text);
                CHECK(has_bytes(taken, mine, n));
                check_folder(dir, 1, what, run);
                t->appeared_at_link += at_link;
                t->appeared_at_start += !at_link;
            } else {
                /* The run published first: a normal complete outcome. */
                CHECK(ended);
                judge_fresh(kind, dir, dest, profile, status, run, t, err_path);
                t->complete--; /* counted apart */
                t->published_first++;
            }
            remove(dest);
            remove(receipt);
        }
        free(mine);
    }
    check_folder(dir, 0, what, -1);
}

/* SIGKILL between the two final links: the library holds the gap open
 * (QEM_FAULT_LINK_PAUSE_MS, a fault-injection knob), the test kills the
 * run once the receipt's name is there and the pack's is not, and the
 * pack must still follow, complete (its link is made by a child). */
static void kill_at_receipt(int runs)
{
    char dir[700], err_path[700];
    snprintf(dir, sizeof dir, "%s/at_receipt", test_dir());
    snprintf(err_path, sizeof err_path, "%s/at_receipt.stderr", test_dir());
    CHECK(mkdir(dir, 0755) == 0);
    setenv("QEM_FAULT_LINK_PAUSE_MS", "300", 1);
    int in_gap = 0;
    for (int run = 0; run < runs; run++) {
        char dest[800], receipt[900];
        snprintf(dest, sizeof dest, "%s/out%d.h5", dir, run);
        snprintf(receipt, sizeof receipt, "%s.receipt.json", dest);
        char *argv[10];
        argv_for(KIND_PACK, dest, QEM_PACK_UINT16_LZ4, argv);
        pid_t pid = spawn(argv, err_path, 0);
        int status = 0;
        pid_t reaped = 0;
        while (!file_exists(receipt) && (reaped = waitpid(pid, &status, WNOHANG)) == 0)
            sleep_s(0.001);
        if (reaped == 0) { /* still running, the receipt there */
            in_gap += !file_exists(dest);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        reap_group(pid);
        tally t = {0};
        judge_fresh(KIND_PACK, dir, dest, QEM_PACK_UINT16_LZ4, status, run, &t, err_path);
        CHECK_EQ_U64(t.orphaned, 0);
        CHECK(t.complete == 1);
    }
    unsetenv("QEM_FAULT_LINK_PAUSE_MS");
    CHECK_EQ_U64(in_gap, runs);
    fprintf(stderr, "qem pack produce killed between its final links: %d of %d runs, each "
                    "completed by the linking child, no receipt without its pack\n",
            in_gap, runs);
    check_folder(dir, 0, "pack produce", -1);
}

/* ------------------------------------------------------------------------ */
/* Disk full                                                                */

/* `argv` with file size limited to `limit` bytes must fail with status 1,
 * say why on stderr, and leave `dir` empty. */
static void disk_full_case(const char *label, char *const argv[], const char *dir, rlim_t limit)
{
    char err_path[700];
    snprintf(err_path, sizeof err_path, "%s/full.stderr", test_dir());
    pid_t pid = spawn(argv, err_path, limit);
    int status = 0;
    const int ended = wait_child(pid, 600, &status);
    size_t n = 0;
    char *text = read_text(err_path, &n);
    /* Exit 1 with one line saying that writing failed. */
    int says_write = 0;
    for (size_t k = 0; text && k + 4 <= n && !says_write; k++)
        says_write = !strncasecmp(text + k, "writ", 4);
    test_checks++;
    if (!ended || !exited_with(status, 1) || !one_error_line(text, n) || !says_write) {
        test_failures++;
        fprintf(stderr, "disk full, %s: FAILED: %s, %zu bytes of stderr: %.*s\n", label,
                describe(status), n, (int)n, text ? text : "");
    } else {
        /* Whether the system's reason reached the user is reported, not
         * required (libtiff and HDF5 keep errno to themselves). */
        fprintf(stderr, "disk full, %s: exit 1%s: %.*s", label,
                strstr(text, strerror(EFBIG)) ? "" : " (the cause, EFBIG, is not named)", (int)n,
                text);
    }
    free(text);
    check_folder(dir, 0, label, 0);
}

static void disk_full(const char *saved)
{
    char dir[700], out[800];
    snprintf(dir, sizeof dir, "%s/full", test_dir());
    CHECK(mkdir(dir, 0755) == 0);
    const rlim_t mib = 1 << 20;

    snprintf(out, sizeof out, "%s/out.qem", dir);
    char *save[] = {QEM_CLI, "save", src_path, out, "--quiet", NULL};
    disk_full_case("qem save", save, dir, mib);

    snprintf(out, sizeof out, "%s/out.npy", dir);
    char *export[] = {QEM_CLI, "export", (char *)saved, out, "--quiet", NULL};
    disk_full_case("qem export", export, dir, mib);

    snprintf(out, sizeof out, "%s/out.h5", dir);
    char *produce[] = {QEM_CLI, "pack", "produce", src_path, out, "--quiet", NULL};
    disk_full_case("qem pack produce", produce, dir, mib);
    char *produce8[] = {QEM_CLI, "pack",         "produce", src_path, out, "--profile",
                        "u8-bitpacked", "--quiet", NULL};
    disk_full_case("qem pack produce u8", produce8, dir, mib);

    /* Products are detector-sized (64 x 64: 16 KiB as float32), so their
     * limit is 4 KiB. First the same product without a limit works. */
    static const char *const exts[] = {"npy", "tif"};
    for (int k = 0; k < 2; k++) {
        snprintf(out, sizeof out, "%s/mean.%s", dir, exts[k]);
        char *mean[] = {QEM_CLI, "mean", (char *)saved, "-o", out, NULL};
        pid_t pid = spawn(mean, NULL, 0);
        int status = 0;
        CHECK(wait_child(pid, 600, &status) && exited_with(status, 0));
        CHECK(file_exists(out));
        remove(out);
        char label[64];
        snprintf(label, sizeof label, "qem mean -o .%s", exts[k]);
        disk_full_case(label, mean, dir, 4096);
    }
}

int main(void)
{
    /* Orphans of the killed CLI (its linking child) become ours. */
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    source = malloc(SAMPLES * 2);
    readback = malloc(SAMPLES * 2);
    CHECK(source && readback);
    if (!source || !readback)
        return test_finish("unit_crash_safety");
    /* Sparse counts below 200, so both pack profiles take them. */
    uint64_t seed = 77;
    for (uint64_t k = 0; k < SAMPLES; k++) {
        const uint64_t r = test_rand(&seed);
        source[k] = (uint16_t)(r % 4 ? r % 7 : (r >> 8) % 200);
    }
    snprintf(src_path, sizeof src_path, "%s", test_path("src.npy"));
    const uint64_t shape[4] = {SR, SC, DR, DC};
    CHECK(write_npy4(src_path, QEM_DTYPE_UINT16, shape, source));
    char err_path[700];
    snprintf(err_path, sizeof err_path, "%s/timed.stderr", test_dir());

    /* 1 and 3: qem save. */
    const double t_save = now_s();
    char saved[700];
    snprintf(saved, sizeof saved, "%s", test_path("timed.qem"));
    const double span_save =
        faster(timed_run(KIND_SAVE, saved, QEM_PACK_UINT16_LZ4, err_path),
             timed_run(KIND_SAVE, test_path("timed2.qem"), QEM_PACK_UINT16_LZ4, err_path));
    tally ts = {0};
    if (span_save > 0)
        kill_runs(KIND_SAVE, "save", span_save, span_save, &ts);
    fprintf(stderr, "qem save: uninterrupted run %.2f s\n", span_save);
    print_tally("qem save", &ts, now_s() - t_save);
    CHECK(ts.empty > 0);
    CHECK_EQ_U64(ts.empty + ts.complete, KILLED_FRESH);
    CHECK_EQ_U64(ts.orphaned, 0);

    /* 2 and 3: qem pack produce, both profiles. */
    const double t_pack = now_s();
    const double span_u16 =
        faster(timed_run(KIND_PACK, test_path("timed16.h5"), QEM_PACK_UINT16_LZ4, err_path),
             timed_run(KIND_PACK, test_path("timed16b.h5"), QEM_PACK_UINT16_LZ4, err_path));
    const double span_u8 =
        faster(timed_run(KIND_PACK, test_path("timed8.h5"), QEM_PACK_UINT8_BITPACKED, err_path),
             timed_run(KIND_PACK, test_path("timed8b.h5"), QEM_PACK_UINT8_BITPACKED, err_path));
    /* The state a power loss between the final two links could leave,
     * made by hand: the receipt without its pack. A rerun, in the library
     * and in the CLI, refuses and names it. */
    {
        char pack[700], receipt[800];
        snprintf(pack, sizeof pack, "%s", test_path("timed16.h5"));
        snprintf(receipt, sizeof receipt, "%s.receipt.json", pack);
        CHECK(remove(pack) == 0);
        orphan_receipt_refused(pack, receipt);
        char *argv[10];
        argv_for(KIND_PACK, pack, QEM_PACK_UINT16_LZ4, argv);
        int status = 0;
        CHECK(wait_child(spawn(argv, err_path, 0), 600, &status) && exited_with(status, 1));
        size_t n = 0;
        char *text = read_text(err_path, &n);
        CHECK(one_error_line(text, n) && strstr(text, receipt));
        test_checks++;
        if (!text || !strstr(text, "no pack commits")) {
            test_failures++;
            fprintf(stderr, "qem pack produce over a receipt without its pack does not explain "
                            "it: %s", text ? text : "(no stderr)\n");
        }
        free(text);
        CHECK(!file_exists(pack) && file_exists(receipt));
    }
    tally tp = {0};
    if (span_u16 > 0 && span_u8 > 0)
        kill_runs(KIND_PACK, "pack", span_u16, span_u8, &tp);
    fprintf(stderr, "qem pack produce: uninterrupted runs u16-lz4 %.2f s, u8-bitpacked %.2f s\n",
            span_u16, span_u8);
    print_tally("qem pack produce", &tp, now_s() - t_pack);
    CHECK(tp.empty > 0);
    CHECK_EQ_U64(tp.empty + tp.complete, KILLED_FRESH);
    CHECK_EQ_U64(tp.orphaned, 0);
    kill_at_receipt(5);

    /* 4: disk full. */
    disk_full(saved);

    free(source);
    free(readback);
    return test_finish("unit_crash_safety");
}
