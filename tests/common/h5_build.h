/* Test-side writers of HDF5 pack sources through libhdf5 itself: plain
 * files with datasets and attributes, and Dectris/Arina families (a master
 * whose /entry/data links data_000001, ... name bitshuffle/LZ4 data files).
 * Every function returns 0 on success and -1 on failure (with a line on
 * stderr saying what failed). */
#ifndef QEM_TEST_H5_BUILD_H
#define QEM_TEST_H5_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* HDF5's registered id of the bitshuffle filter. */
#define H5B_BITSHUFFLE 32008

typedef struct h5b_dataset {
    const char *path;   /* e.g. "/entry/data/data"; missing groups are created */
    hid_t file_type;    /* e.g. H5T_STD_U16LE */
    hid_t mem_type;     /* type of `data`, e.g. H5T_NATIVE_UINT16 */
    int rank;           /* 1..4 */
    uint64_t dims[4];
    uint64_t chunk[4];  /* all zero: contiguous */
    int bitshuffle_lz4; /* chunked only: filter 32008 with LZ4 (cd_values {0, 2}) */
    int deflate;        /* chunked only: gzip level, 0 = none */
    unsigned optional_filter; /* chunked only: an optional filter id (may be unregistered) */
    const void *data;   /* NULL: created but never written */
} h5b_dataset;

/* Creates `file` (with an HDF5 user block of `userblock` bytes, 0 for
 * none); fails if it exists. */
int h5b_create(const char *file, uint64_t userblock);

/* Adds a dataset to `file` (created first when absent). */
int h5b_write_dataset(const char *file, const h5b_dataset *d);

/* Sets a 2-element int64 attribute `scan_shape` on a group or dataset. */
int h5b_set_scan_shape(const char *file, const char *object, uint64_t rows, uint64_t columns);

/* Creates the group `group` (and missing parents) in `file`. */
int h5b_group(const char *file, const char *group);
/* Sets a scalar attribute on a group or dataset: an int64, or a string
 * (fixed length, or variable length as h5py writes a str). */
int h5b_attr_int(const char *file, const char *object, const char *name, int64_t value);
int h5b_attr_string(const char *file, const char *object, const char *name, const char *value,
                    int variable);
/* A one-element variable-length string dataset (h5py's object dtype, as
 * Velox writes /Version). */
int h5b_string_dataset(const char *file, const char *path, const char *value);

/* Creates an external link `link` in `file` to `target_object` inside
 * `target_file` (stored as given: relative names resolve beside `file`). */
int h5b_external_link(const char *file, const char *link, const char *target_file,
                      const char *target_object);

/* Creates a soft link `link` in `file` to `target` (a path in `file`). */
int h5b_soft_link(const char *file, const char *link, const char *target);

/* Creates a virtual dataset `path` in `file` of type uint16 and shape
 * `dims` (rank 3) mapping all of `source_dataset` in `source_file`. */
int h5b_virtual(const char *file, const char *path, const uint64_t dims[3],
                const char *source_file, const char *source_dataset);

/* The first filter of a dataset: its id and its stored cd_values. */
int h5b_first_filter(const char *file, const char *dataset, unsigned *id, unsigned cd[8],
                     size_t *ncd);

/* The number of stored chunks and the largest stored chunk in bytes, found
 * with H5Dget_num_chunks/H5Dget_chunk_info (not the library's method). */
int h5b_chunk_sizes(const char *file, const char *dataset, uint64_t *count, uint64_t *largest);

/* A Dectris/Arina family in `dir`: STEM_master.h5 and STEM_data_%06u.h5.
 * Data file k holds frames[k] frames of rows x columns uint16 in
 * /entry/data/data, chunked one frame per chunk with bitshuffle/LZ4; the
 * master's /entry/data/data_%06u are external links to them, in order.
 * The master carries the scan_shape attribute on /entry/data when
 * scan_rows is nonzero, and the uint32 pixel_mask under
 * /entry/instrument/detector/detectorSpecific when `pixel_mask` is given
 * (rows * columns values). `data` holds every frame in order. */
typedef struct h5b_arina {
    const char *dir;
    const char *stem;
    size_t files;
    const uint64_t *frames;
    uint64_t rows, columns;
    const uint16_t *data;
    uint64_t scan_rows, scan_columns;
    const uint32_t *pixel_mask;
    const uint32_t *data32; /* instead of `data`: uint32 frames, as Arina writes */
} h5b_arina;

/* Writes the family; `master` receives the master's path. Data file names
 * are written to `data_paths[k]` when it is not NULL (each `size` bytes). */
int h5b_write_arina(const h5b_arina *a, char *master, size_t size, char (*data_paths)[512]);

#endif
