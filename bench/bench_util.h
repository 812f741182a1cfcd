#ifndef QEM_BENCH_UTIL_H
#define QEM_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "qem.h"
#include "qem_experimental.h"

#define MAX_RUNS 16
#define BEGIN_MARK "<!-- qem-bench:begin -->"
#define END_MARK "<!-- qem-bench:end -->"

typedef struct config {
    int runs;
    int threads[2];
    const char *only;
    const char *workdir;
    const char *markdown;
} config;

double now(void);
int cmp_double(const void *a, const void *b);
/* Min and median of `n` timings (sorts them). */
void summarise(double *t, int n, double *min, double *median);
uint64_t file_size(const char *path);
/* Prints the failure and returns 1. */
int die(const char *what, const qem_error *e);
void cpu_model(char *out, size_t size);
/* Best memcpy bandwidth (GB/s copied) of a 256 MiB buffer split over
 * `threads`: the ceiling that memory-bound paths scale against. */
double memcpy_gbs(int threads);
/* Replaces the text between the markers in `path` (appends if absent). */
int write_markdown(const char *path, const char *section);
/* Replaces what lies between the markers `begin` and `end` in `path` with
 * `section`, or appends `heading` (may be NULL), the markers and
 * `section` where the file has no such markers; 0 on success. */
int write_markdown_section(const char *path, const char *begin, const char *end,
                           const char *heading, const char *section);

/* One format's row in a set's comparison: bytes, encode and full-decode
 * seconds (min and median; index 0 one thread, 1 two; NAN where not
 * measured), and a note (why it is absent, how it was measured). */
typedef struct format_row {
    char name[48];
    uint64_t bytes;
    double enc_min[2], enc_med[2], dec_min[2], dec_med[2];
    char note[160];
    char path[600];
} format_row;

/* The writers of one set's save table, on 1 and 2 threads ([0], [1]):
 * `qem save` (the command), HDF5 bitshuffle/LZ4 through h5py's filter
 * (one thread only: NAN at [1]) and by direct chunk writes, and zstd -3.
 * Seconds are min and median of the runs; bytes the file written. */
enum { SAVE_QEM, SAVE_H5_FILTER, SAVE_H5_DIRECT, SAVE_ZSTD, SAVE_WRITERS };
typedef struct save_compare {
    const char *name[SAVE_WRITERS];
    double min[SAVE_WRITERS][2], med[SAVE_WRITERS][2];
    uint64_t bytes[SAVE_WRITERS][2];
    int measured[SAVE_WRITERS];
    /* qem save: user + system CPU seconds of the process (read-ahead
     * thread included), min over the runs. */
    double qem_cpu_min[2];
    int qem_identical; /* the 1- and 2-thread .qem files, byte for byte */
    int h5_identical;  /* the filter's file and the direct chunks' file */
    /* Kept for the decode comparisons ("" where not written): the .qem,
     * the HDF5 file (the filter's) and zstd's (-T1). */
    char qem_path[600], h5_path[600], zst_path[600];
} save_compare;

/* Times every writer on `npy`, the runs interleaved (run r times each
 * writer on 1, then 2 threads) so that load drift touches all alike;
 * 0 or 1 (qem save failed). */
int bench_save_compare(const config *c, const char *dir, const char *npy, save_compare *out);

/* The MHz /proc/cpuinfo reports for the first CPU (the conditions line's
 * figure on a guest without cpufreq), or 0. */
double bench_cpu_mhz(void);

/* Packs (where admissible), HDF5 bitshuffle/LZ4 and zstd -3 of `npy`: the
 * latter two's files and encode times come from `saved`; returns the rows
 * written or -1. */
int bench_formats(const config *c, const char *dir, const char *npy, qem_dtype dtype,
                  const save_compare *saved, format_row *rows, int max_rows);

/* The pack load benchmark: builds a uint16/LZ4 pack of the synthetic set
 * and appends its table to `out`; returns characters written or -1. */
int bench_pack_load(const config *c, const char *dir, char *out, size_t size);

/* The pack production benchmark: both profiles beside h5repack to HDF5
 * bitshuffle/LZ4 of the same array; appends its table to `out`. */
int bench_pack_produce(const config *c, const char *dir, char *out, size_t size);

/* Virtual images (BF, ADF) from .qem, the pack resident, the dense cube in
 * RAM and numpy; appends its table to `out`. */
int bench_products(const config *c, const char *dir, char *out, size_t size);

/* qem save from a .npy, a Merlin .mib and an Arina-style HDF5 family of
 * the same counts, beside sha256sum of the files; appends its table. */
int bench_ingest(const config *c, const char *dir, char *out, size_t size);

/* The conditions that change the figures (CPU and flags, decode paths,
 * transparent huge pages, frequency, load) as one line; returns its
 * length. */
int bench_conditions(char *out, size_t size);
/* This process's memory in transparent huge pages (kB), or -1. */
long bench_anon_huge_kib(void);
/* Huge-page memory (kB) of the mappings that hold [p, p + size). */
long bench_buffer_huge_kib(const void *p, size_t size);

/* One full decode of an integer .qem on `threads` and `decode_path`:
 * seconds to open and to decode every scan; how much of the caller's
 * buffer got huge pages (kB). `huge_out` asks for 2 MiB pages (madvise). */
int bench_decode_once(const char *path, int threads, qem_decode_path decode_path, int huge_out,
                      double *open_sec, double *sec, long *huge_kib, size_t *buffer_bytes);
/* Mean pattern and centre of mass of a file on `threads`, best of runs. */
int bench_mean_com(const config *c, const char *path, int threads, double *mean_s, double *com_s);
/* The table of `qem-bench --decode FILE`: every path, 1 and 2 threads,
 * mean and CoM; returns characters written or -1. */
int bench_decode_file(const config *c, const char *path, int huge_out, char *out, size_t size);

/* The decoder alone, in cache, on every path (`--kernel`). */
int bench_kernel(char *out, size_t size);

/* 1 when both files can be read and hold the same bytes. */
int bench_same_bytes(const char *a, const char *b);

#endif
