/* A test-side writer of Gatan Digital Micrograph DM3/DM4 files, with
 * nothing but libc, from the published descriptions of the format (the
 * facts and their sources are listed in dm_build.c). The unit test and the
 * fuzz seeds build their files with it. */
#ifndef QEM_TEST_DM_BUILD_H
#define QEM_TEST_DM_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct dmb_options {
    int version;        /* 3 or 4 */
    int big_endian;     /* the byte order flag 0: values big-endian */
    unsigned ndims;     /* entries of Dimensions, at most 5 */
    uint64_t dims[5];   /* DM order, fastest first: x (columns), y (rows), ... */
    int64_t data_type;  /* ImageData DataType: 1 int16, 2 float32, 6 uint8, 7 int32, 9 int8,
                           10 uint16, 11 uint32, 12 float64 (others for the refusals) */
    const void *data;   /* every value in the host's order; NULL: dmb_value */
    int order_swapped;  /* Meta Data "Data Order Swapped": -1 absent, else the value */
    const char *format; /* Meta Data "Format"; NULL: none */
    int thumbnail;      /* a 4 x 4 RGBA thumbnail image first, named by Thumbnails */
    const char *units[4]; /* Calibrations Dimension Units per dimension; NULL: none */
    double scales[4];
    double voltage;     /* Microscope Info Voltage; 0: none */
    const char *name;   /* the image's Name; NULL: "dm_build" */
    /* Variations, for the refusals. */
    int64_t extra_values;    /* Data holds this many more values than Dimensions state */
    int bad_mark;            /* the DataType tag lacks its "%%%%" */
    int64_t group_len_delta; /* DM4: ImageData's stated length off by this */
    unsigned nest;           /* groups nested below ImageTags */
    int no_data_type;        /* leave out DataType */
    uint64_t stated_dims[5]; /* Dimensions as written, when not all 0 (Data follows dims) */
} dmb_options;

/* One tag of a tag file: its path (group names joined by '/') and a value
 * of `kind` 'l' (long), 'd' (double) or 't' (text). */
typedef struct dmb_tag {
    const char *path;
    char kind;
    int64_t number;
    double real;
    const char *text;
} dmb_tag;

/* Bytes of one sample of a DataType (1, 2, 4 or 8; 1 for the others). */
size_t dmb_item(int64_t data_type);
/* The pattern's value k as the DataType's bytes (host order) into `out`. */
void dmb_value(int64_t data_type, uint64_t k, void *out);
/* Writes `path`; 0 on success, -1 on failure (a line on stderr). */
int dmb_write(const char *path, const dmb_options *o);
/* Writes `path`: a DM3/DM4 tag file of `count` tags and no image, as a K2
 * IS .gtg is (the tags of one group must be consecutive). 0 or -1. */
int dmb_write_tags(const char *path, int version, const dmb_tag *tags, size_t count);

#endif
