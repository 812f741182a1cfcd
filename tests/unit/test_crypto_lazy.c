/* libcrypto is loaded on the first digest, never linked (issue 28): the
 * files given on the command line (libqem.so, the qem command) NEED no
 * libcrypto; this process has none mapped until it hashes; the lazy path
 * gives the known digests and base64 texts; first use from several
 * threads at once and from a forked child works; a library that cannot be
 * loaded is reported by name. */
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/crypto_loader.h"
#include "common/sha256.h"
#include "test_util.h"

/* 1 if this process maps a library whose path holds `name`. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, name) != NULL;
    fclose(f);
    return found;
}

/* The DT_NEEDED names of a 64-bit ELF file, written to `out` separated by
 * spaces; -1 if it is not one we can read. */
static int elf_needed(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const size_t len = (size_t)st.st_size;
    const unsigned char *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    const Elf64_Ehdr *eh = (const void *)m;
    int rc = -1;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_phoff > len || eh->e_phnum > (len - eh->e_phoff) / sizeof(Elf64_Phdr))
        goto done;
    const Elf64_Phdr *ph = (const void *)(m + eh->e_phoff);
    const Elf64_Phdr *dyn = NULL;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            dyn = &ph[i];
    if (!dyn || dyn->p_offset > len || dyn->p_filesz > len - dyn->p_offset)
        goto done;
    const Elf64_Dyn *d = (const void *)(m + dyn->p_offset);
    const size_t nd = dyn->p_filesz / sizeof *d;
    uint64_t strtab = 0;
    for (size_t i = 0; i < nd && d[i].d_tag != DT_NULL; i++)
        if (d[i].d_tag == DT_STRTAB)
            strtab = d[i].d_un.d_ptr;
    /* DT_STRTAB is an address: find the file offset of the load segment
     * that holds it. */
    uint64_t stroff = UINT64_MAX;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr &&
            strtab < ph[i].p_vaddr + ph[i].p_filesz)
            stroff = strtab - ph[i].p_vaddr + ph[i].p_offset;
    if (stroff >= len)
        goto done;
    size_t n = 0;
    for (size_t i = 0; i < nd && d[i].d_tag != DT_NULL; i++)
        if (d[i].d_tag == DT_NEEDED && d[i].d_un.d_val < len - stroff) {
            const char *name = (const char *)m + stroff + d[i].d_un.d_val;
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%.*s ",
                                  (int)strnlen(name, len - stroff - d[i].d_un.d_val), name);
        }
    rc = n < size ? 0 : -1;
done:
    munmap((void *)m, len);
    return rc;
}

static void hex_of(const uint8_t d[QEM_SHA256_BYTES], char hex[65])
{
    qem_sha256_hex(d, hex);
}

#define THREADS 8

typedef struct first_use {
    pthread_barrier_t *start;
    char hex[65];
} first_use;

static void *hash_abc(void *arg)
{
    first_use *u = arg;
    pthread_barrier_wait(u->start);
    uint8_t d[QEM_SHA256_BYTES] = {0};
    if (qem_sha256_oneshot("abc", 3, d) == 0)
        hex_of(d, u->hex);
    return NULL;
}

static const char ABC[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char EMPTY[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/* One million 'a': the NIST long-message vector. */
static const char MILLION_A[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

int main(int argc, char **argv)
{
    /* 1. Neither this test (linked with libqem.a) nor anything given on
     * the command line NEEDs libcrypto. */
    for (int i = 0; i < argc; i++) {
        const char *path = i == 0 ? "/proc/self/exe" : argv[i];
        char needed[8192];
        CHECK(elf_needed(path, needed, sizeof needed) == 0);
        if (strstr(needed, "libcrypto")) {
            fprintf(stderr, "%s NEEDs libcrypto: %s\n", path, needed);
            CHECK(!"libcrypto linked eagerly");
        }
        CHECK(strstr(needed, "libc.so") != NULL); /* the reader did see the list */
    }

    /* 2. Not mapped until the first digest... unless a library linked at
     * start brought it: Debian's libhdf5 needs libcurl, which needs it. */
    const int at_start = mapped("/libcrypto.so");
    if (at_start && mapped("/libcurl.so") == 1)
        fprintf(stderr, "libcrypto mapped at start by libcurl (libhdf5): map check skipped\n");
    else
        CHECK(at_start == 0);

    /* 3. ...which several threads make at once. */
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t th[THREADS];
    first_use uses[THREADS];
    for (int i = 0; i < THREADS; i++) {
        uses[i] = (first_use){.start = &start};
        CHECK(pthread_create(&th[i], NULL, hash_abc, &uses[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(!strcmp(uses[i].hex, ABC));
    }
    pthread_barrier_destroy(&start);
    CHECK(mapped("/libcrypto.so") == 1);
    qem_error e = {0};
    CHECK_OK(qem_crypto_require(&e), &e);

    /* 4. The NIST vectors, one-shot and streamed. */
    uint8_t d[QEM_SHA256_BYTES];
    char hex[65];
    CHECK(qem_sha256_oneshot("", 0, d) == 0);
    hex_of(d, hex);
    CHECK(!strcmp(hex, EMPTY));
    qem_sha256 *ctx = qem_sha256_new();
    CHECK(ctx != NULL);
    if (!ctx)
        return 1;
    CHECK(qem_sha256_final(ctx, d) == 0); /* nothing fed */
    hex_of(d, hex);
    CHECK(!strcmp(hex, EMPTY));
    CHECK(qem_sha256_update(ctx, "a", 1) == 0 && qem_sha256_update(ctx, "bc", 2) == 0);
    CHECK(qem_sha256_final(ctx, d) == 0);
    hex_of(d, hex);
    CHECK(!strcmp(hex, ABC));
    CHECK(qem_sha256_update(ctx, "junk", 4) == 0 && qem_sha256_reset(ctx) == 0);
    char as[1000];
    memset(as, 'a', sizeof as);
    for (int i = 0; i < 1000; i++)
        CHECK(qem_sha256_update(ctx, as, sizeof as) == 0 || !"update");
    CHECK(qem_sha256_final(ctx, d) == 0);
    hex_of(d, hex);
    CHECK(!strcmp(hex, MILLION_A));

    /* 5. 200 MB streamed in uneven pieces (across every 64-byte block and
     * 4 MiB piece edge) against one shot and the block hasher. */
    const size_t big = 200u * 1000 * 1000 + 13;
    uint8_t *buf = malloc(big);
    CHECK(buf != NULL);
    if (!buf)
        return 1;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < big; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    uint8_t one[QEM_SHA256_BYTES], streamed[QEM_SHA256_BYTES];
    CHECK(qem_sha256_oneshot(buf, big, one) == 0);
    static const size_t steps[] = {1, 63, 64, 65, 4093, (4u << 20) - 1, (4u << 20) + 1, 7u << 20};
    for (size_t at = 0, k = 0; at < big; k++) {
        const size_t n = steps[k % 8] < big - at ? steps[k % 8] : big - at;
        CHECK(qem_sha256_update(ctx, buf + at, n) == 0 || !"update");
        at += n;
    }
    CHECK(qem_sha256_final(ctx, streamed) == 0);
    CHECK(!memcmp(one, streamed, sizeof one));
    qem_block_hasher h;
    CHECK_OK(qem_block_hasher_init(&h, 64u << 20, &e), &e);
    CHECK_OK(qem_block_hasher_update(&h, buf, big / 3, &e), &e);
    CHECK_OK(qem_block_hasher_update(&h, buf + big / 3, big - big / 3, &e), &e);
    CHECK_OK(qem_block_hasher_finish(&h, &e), &e);
    CHECK_EQ_U64(h.count, 3); /* 200 MB in 64 MiB blocks: 2 full, 1 short */
    for (size_t b = 0; b < h.count; b++) {
        const size_t from = b * (64u << 20);
        const size_t n = big - from < (64u << 20) ? big - from : (64u << 20);
        CHECK(qem_sha256_oneshot(buf + from, n, d) == 0);
        CHECK(!memcmp(d, h.digests[b], sizeof d));
    }
    qem_block_hasher_free(&h);
    free(buf);

    /* 6. Base64: the RFC 4648 vectors both ways. */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                        "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char *t = qem_base64_encode(plain[i], strlen(plain[i]));
        CHECK(t && !strcmp(t, coded[i]));
        free(t);
        size_t size = 99;
        uint8_t *p = qem_base64_decode(coded[i], strlen(coded[i]), &size);
        CHECK(p && size == strlen(plain[i]) && !memcmp(p, plain[i], size));
        free(p);
    }

    /* 7. A forked child hashes with the parent's table. */
    pid_t pid = fork();
    if (pid == 0) {
        uint8_t c[QEM_SHA256_BYTES];
        char ch[65];
        if (qem_sha256_oneshot("abc", 3, c) != 0)
            _exit(2);
        hex_of(c, ch);
        _exit(strcmp(ch, ABC) ? 3 : 0);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* 8. A library that is not there is named, with dlopen's reason. */
    qem_crypto t;
    char why[400] = "";
    CHECK(qem_crypto_bind("libqem-no-such-crypto.so.3", &t, why, sizeof why) == -1);
    CHECK(strstr(why, "libqem-no-such-crypto.so.3") != NULL);
    CHECK(t.digest == NULL);
    /* A library without the symbols: libc. */
    CHECK(qem_crypto_bind("libc.so.6", &t, why, sizeof why) == -1);
    CHECK(strstr(why, "EVP_") != NULL);

    qem_sha256_free(ctx);
    return test_finish("unit_crypto_lazy");
}
