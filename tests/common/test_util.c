#include <jansson.h>

#include "test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int test_failures = 0;
int test_checks = 0;
static char dir_buf[512];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int test_finish(const char *name)
{
    if (dir_buf[0])
        nftw(dir_buf, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (test_checks == 0) {
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    fprintf(stderr, "%s: %d checks, %d failed\n", name, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

const char *test_dir(void)
{
    if (!dir_buf[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir_buf, sizeof dir_buf, "%s/qem-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir_buf)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir_buf;
}

const char *test_path(const char *name)
{
    static char paths[8][768];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", test_dir(), name);
    return p;
}

const char *shared_dir(void)
{
    const char *d = getenv("QEM_SHARED_DIR");
#ifdef QEM_SHARED_DEFAULT
    if (!d || !*d)
        d = QEM_SHARED_DEFAULT;
#endif
    struct stat sb;
    if (!d || !*d || stat(d, &sb) != 0) {
        fprintf(stderr, "the shared specifications and fixtures folder is missing (set "
                        "QEM_SHARED_DIR); these tests need it\n");
        exit(2);
    }
    return d;
}

static const char *shared_sub(const char *sub, const char *relative)
{
    static char paths[8][768];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s/%s", shared_dir(), sub, relative);
    return p;
}

const char *fixture_path(const char *relative)
{
    return shared_sub("fixtures", relative);
}

const char *spec_path(const char *relative)
{
    return shared_sub("spec", relative);
}

uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data && size)
        *size = (size_t)n;
    return data;
}

int hdf5_after_block(const char *path, size_t block)
{
    size_t n = 0;
    uint8_t *b = read_file(path, &n);
    const int yes = b && n > block + 8 && memcmp(b + block, "\x89HDF\r\n\x1a\n", 8) == 0;
    free(b);
    return yes;
}

int write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

int rewrite_in_place(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return 0;
    const struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 5, 0}};
    /* Flushed first: a write after futimens would set the time to now,
     * which a fast rewrite can share with the first write. */
    const int ok = fwrite(data, 1, size, f) == size && fflush(f) == 0 &&
                   futimens(fileno(f), later) == 0;
    return fclose(f) == 0 && ok;
}

int file_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

uint64_t test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int write_npy4(const char *path, qem_dtype dtype, const uint64_t shape[4], const void *data)
{
    qem_npy_writer *w = NULL;
    qem_error e = {0};
    uint64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    int ok = qem_npy_writer_create(path, dtype, 4, shape, &w, &e) == QEM_OK &&
             qem_npy_writer_append(w, data, n, &e) == QEM_OK &&
             qem_npy_writer_finish(w, &e) == QEM_OK;
    if (!ok)
        fprintf(stderr, "write_npy4(%s): %s\n", path, e.message);
    qem_npy_writer_free(w);
    return ok;
}

int write_count_sources(const uint64_t shape[4], uint64_t seed, unsigned max_count,
                        uint64_t chunk_scans, const char *npy, const char *qem, const char *pack)
{
    const uint64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    uint16_t *data = malloc((size_t)n * 2);
    if (!data)
        return 0;
    for (uint64_t k = 0; k < n; k++)
        data[k] = (uint16_t)(test_rand(&seed) % max_count);
    int ok = write_npy4(npy, QEM_DTYPE_UINT16, shape, data);
    free(data);
    qem_error e = {0};
    if (ok && qem) {
        qem_save_options so;
        qem_save_options_init(&so);
        so.chunk_scans = chunk_scans;
        ok = qem_save_file(npy, qem, &so, &e) == QEM_OK;
    }
    if (ok && pack) {
        qem_pack_inspection *in = NULL;
        ok = qem_pack_inspect(npy, NULL, &in, &e) == QEM_OK &&
             qem_pack_produce(in, NULL, pack, NULL, &e) == QEM_OK;
        qem_pack_inspection_free(in);
    }
    if (!ok)
        fprintf(stderr, "write_count_sources(%s): %s\n", npy, e.message);
    return ok;
}

json_t *test_load_json(const char *path)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    if (!j)
        fprintf(stderr, "%s: %s\n", path, jerr.text);
    return j;
}

size_t npy_read_size(const qem_npy *npy, uint64_t count)
{
    qem_npy_info info = {.struct_size = sizeof info};
    if (qem_npy_get_info(npy, &info, NULL) != QEM_OK)
        return 0;
    return (size_t)(count * qem_dtype_size(info.dtype));
}

void test_damage_stream(uint8_t *span, size_t *size, int how)
{
    if (how == 1)
        *size -= 1;
    else if (how == 2)
        span[*size / 2] ^= 0x3c;
    else
        span[*size - 1] ^= 0x01;
}

qem_container *test_open_source(const char *path, int resident, uint64_t column_cache_bytes)
{
    qem_container_options o;
    qem_container_options_init(&o);
    o.resident = resident;
    o.column_cache_bytes = column_cache_bytes;
    qem_container *c = NULL;
    qem_error e = {0};
    CHECK_OK(qem_container_open(path, &o, &c, &e), &e);
    return c;
}

qem_products *test_products_path(qem_container *c, qem_products_path path)
{
    qem_products *p = NULL;
    qem_error e = {0};
    CHECK_OK(qem_products_open_path(c, NULL, path, &p, &e), &e);
    return p;
}
