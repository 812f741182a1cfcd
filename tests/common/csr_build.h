/* Test-side writer of sparse acquisitions in LiberTEM's raw_csr layout,
 * with nothing but libc: a TOML descriptor and the indptr, indices and data
 * files it names. Built from the layout's published description (LiberTEM's
 * RawCSRDataSet docstring, src/libertem/io/dataset/raw_csr.py: the
 * descriptor's keys; indptr holds frames + 1 row pointers, indices the flat
 * detector pixel of each entry, data its value; numpy dtype strings). The
 * unit test and the fuzz seeds build their inputs with it. Functions
 * return 0 on success and -1 on failure (with a line on stderr). */
#ifndef QEM_TEST_CSR_BUILD_H
#define QEM_TEST_CSR_BUILD_H

#include <stddef.h>
#include <stdint.h>

/* A CSR set in memory: row pointers, flat pixel indices, and values in the
 * host's order of `kind` ('u', 'i' or 'f') and `size` bytes. */
typedef struct csrb_set {
    uint64_t frames, pixels, entries;
    uint64_t *indptr;  /* frames + 1 */
    uint64_t *indices; /* entries */
    uint8_t *values;   /* entries x size bytes */
    char kind;
    size_t size;
} csrb_set;

/* The CSR of `frames` dense frames of `pixels` samples (`kind`, `size`, host
 * order), as scipy.sparse.csr_matrix(dense) builds it: per frame, the
 * entries whose bytes are not all zero, in pixel order, or shuffled within
 * each frame (CSR does not require sorted indices) when `shuffle_seed` is
 * not 0. */
int csrb_from_dense(csrb_set *s, const void *dense, char kind, size_t size, uint64_t frames,
                    uint64_t pixels, uint64_t shuffle_seed);
/* A set of explicit entries (duplicates allowed): frame f holds entries
 * [indptr[f], indptr[f + 1]). Copies the arrays. */
int csrb_from_entries(csrb_set *s, char kind, size_t size, uint64_t frames, uint64_t pixels,
                      const uint64_t *indptr, const uint64_t *indices, const void *values);
void csrb_free(csrb_set *s);

typedef struct csrb_options {
    /* File names; NULL: indptr.raw, coords.raw, values.raw. */
    const char *indptr_file, *indices_file, *data_file;
    /* numpy dtype strings; NULL: "<i4", "<i4", the set's type little-endian. */
    const char *indptr_dtype, *indices_dtype, *data_dtype;
    const char *filetype;  /* NULL: "raw_csr" (also the table's name) */
    const char *nav_shape; /* a TOML array as text; NULL: "[1, frames]" */
    const char *sig_shape; /* NULL: "[1, pixels]" */
    const char *extra;     /* appended to the descriptor, or NULL */
    int no_files;          /* write the descriptor only */
} csrb_options;

/* Writes the descriptor `path` and the three files beside it, each array
 * encoded in its dtype (kind, size and byte order of the numpy string). */
int csrb_write(const char *path, const csrb_set *s, const csrb_options *o);
/* Encodes `count` integers as the numpy integer dtype `dtype` into `out`
 * (count x its size bytes); the size, or 0 if `dtype` is not one. */
size_t csrb_encode_integers(const char *dtype, const uint64_t *v, size_t count, uint8_t *out);

#endif
