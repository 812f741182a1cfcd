/* Minimal test harness: checks that report file:line and keep going, a
 * per-process temporary folder, and helpers to build .qem files. */
#ifndef QEM_TEST_UTIL_H
#define QEM_TEST_UTIL_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qem.h"
#include "qem_experimental.h"

extern int test_failures;
extern int test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                         \
    do {                                                                                           \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);                               \
        test_checks++;                                                                             \
        if (check_a_ != check_b_) {                                                                \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 "\n", __FILE__,      \
                    __LINE__, #a, #b, check_a_, check_b_);                                         \
        }                                                                                          \
    } while (0)

static inline const char *test_message(const qem_error *e)
{
    return e ? e->message : "";
}

/* Asserts a status and, on mismatch, prints the error message. */
#define CHECK_STATUS(expr, expected, err)                                                          \
    do {                                                                                           \
        qem_status check_s_ = (expr);                                                              \
        test_checks++;                                                                             \
        if (check_s_ != (expected)) {                                                              \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s); message: %s\n",         \
                    __FILE__, __LINE__, #expr, (int)check_s_, qem_strerror(check_s_),              \
                    (int)(expected), qem_strerror(expected), test_message(err));                \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr, err) CHECK_STATUS(expr, QEM_OK, err)

/* Breaks an rANS stream of *size bytes at `span` one of three ways:
 * 1 one byte short, 2 a byte in the middle flipped, 3 its final state's
 * last byte changed. */
void test_damage_stream(uint8_t *span, size_t *size, int how);

/* Ends main(): prints a summary and returns the exit status. */
int test_finish(const char *name);

/* A fresh folder for this test process, removed by test_finish(). */
const char *test_dir(void);
/* test_dir()/name in a static rotating buffer. */
const char *test_path(const char *name);

/* The shared folder with the specifications and upstream fixtures
 * (QEM_SHARED_DIR, else the one found at configure time). Exits with a
 * clear message when it is missing: these tests never pass without it. */
const char *shared_dir(void);
/* shared_dir()/fixtures/relative and shared_dir()/spec/relative. */
const char *fixture_path(const char *relative);
const char *spec_path(const char *relative);

/* Reads a whole file; returns NULL on failure. Caller frees. */
uint8_t *read_file(const char *path, size_t *size);
/* 1 if the file holds the HDF5 signature at byte `block` (a pack whose
 * body is genuine HDF5 after its user block). */
int hdf5_after_block(const char *path, size_t block);

/* Bytes of `count` elements of an open .npy: the out_size of a read into
 * a buffer allocated for exactly that many of the file's elements. */
size_t npy_read_size(const qem_npy *npy, uint64_t count);
int write_file(const char *path, const void *data, size_t size);
/* Writes `data` over the start of the existing file `path` (the same
 * inode, as an editor saving in place does) and sets its modification time
 * 5 s ahead, as a writer's clock gives it (the clock's tick may not have
 * passed since the first write), so that a stamp check sees the change.
 * 1 on success. */
int rewrite_in_place(const char *path, const void *data, size_t size);
int file_exists(const char *path);
/* Number of entries in `dir` whose name starts with `prefix`. */
int count_entries(const char *dir, const char *prefix);

/* Parses a JSON file (a fixture's facts); prints why and returns NULL on
 * failure. The caller releases it with json_decref. */
struct json_t;
struct json_t *test_load_json(const char *path);

/* Deterministic pseudo-random numbers for test data. */
uint64_t test_rand(uint64_t *state);

/* Writes a 4D .npy from memory through the library's writer. */
int write_npy4(const char *path, qem_dtype dtype, const uint64_t shape[4], const void *data);

/* `path` opened with qem_open_options.resident `resident` and a decoded-
 * column cache of `column_cache_bytes` (0: none); NULL (counted as a
 * failed check) when the open fails. */
qem_container *test_open_source(const char *path, int resident, uint64_t column_cache_bytes);
/* Products of `c` on `path` (QEM_PATH_FAST or QEM_PATH_REFERENCE). */
qem_products *test_products_path(qem_container *c, qem_products_path path);

/* Uniform random uint16 counts below max_count of `shape` as the .npy
 * `npy`, saved as the .qem `qem` in chunks of chunk_scans scans (0: the
 * default) and produced as the uint16/LZ4 pack `pack` (either may be
 * NULL). 1 on success; prints why not. */
int write_count_sources(const uint64_t shape[4], uint64_t seed, unsigned max_count,
                        uint64_t chunk_scans, const char *npy, const char *qem, const char *pack);

#endif
