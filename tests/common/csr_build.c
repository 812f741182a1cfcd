/* The raw_csr writer of csr_build.h. */
#include "csr_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A numpy dtype string: byte order ('<', '>', '|', '=' or none: little on
 * the machines the tests run on), kind and size ("u2") or a name. */
typedef struct dtype_of {
    char kind;
    size_t size;
    int big;
} dtype_of;

static int parse(const char *s, dtype_of *d)
{
    static const struct {
        const char *name;
        char kind;
        size_t size;
    } names[] = {{"uint8", 'u', 1}, {"uint16", 'u', 2}, {"uint32", 'u', 4}, {"uint64", 'u', 8},
                 {"int8", 'i', 1},  {"int16", 'i', 2},  {"int32", 'i', 4},  {"int64", 'i', 8},
                 {"float32", 'f', 4}, {"float64", 'f', 8}};
    d->big = 0;
    if (*s == '<' || *s == '>' || *s == '|' || *s == '=')
        d->big = *s++ == '>';
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(s, names[k].name)) {
            d->kind = names[k].kind;
            d->size = names[k].size;
            return 1;
        }
    if ((s[0] == 'u' || s[0] == 'i' || s[0] == 'f') && s[1] >= '1' && s[1] <= '8' && !s[2]) {
        d->kind = s[0];
        d->size = (size_t)(s[1] - '0');
        return 1;
    }
    return 0;
}

static void put(uint8_t *out, uint64_t v, size_t size, int big)
{
    for (size_t b = 0; b < size; b++)
        out[big ? size - 1 - b : b] = (uint8_t)(v >> (8 * b));
}

size_t csrb_encode_integers(const char *dtype, const uint64_t *v, size_t count, uint8_t *out)
{
    dtype_of d;
    if (!parse(dtype, &d) || d.kind == 'f')
        return 0;
    for (size_t k = 0; k < count; k++)
        put(out + k * d.size, v[k], d.size, d.big);
    return d.size;
}

static uint64_t next(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

int csrb_from_dense(csrb_set *s, const void *dense, char kind, size_t size, uint64_t frames,
                    uint64_t pixels, uint64_t shuffle_seed)
{
    memset(s, 0, sizeof *s);
    const uint8_t *bytes = dense;
    static const uint8_t zero[8];
    uint64_t entries = 0;
    for (uint64_t k = 0; k < frames * pixels; k++)
        entries += memcmp(bytes + k * size, zero, size) != 0;
    s->indptr = malloc((frames + 1) * sizeof *s->indptr);
    s->indices = malloc((entries ? entries : 1) * sizeof *s->indices);
    s->values = malloc((entries ? entries : 1) * size);
    if (!s->indptr || !s->indices || !s->values) {
        fprintf(stderr, "csrb_from_dense: out of memory\n");
        csrb_free(s);
        return -1;
    }
    s->frames = frames;
    s->pixels = pixels;
    s->entries = entries;
    s->kind = kind;
    s->size = size;
    uint64_t e = 0, state = shuffle_seed;
    for (uint64_t f = 0; f < frames; f++) {
        s->indptr[f] = e;
        const uint64_t start = e;
        for (uint64_t p = 0; p < pixels; p++) {
            const uint8_t *v = bytes + (f * pixels + p) * size;
            if (!memcmp(v, zero, size))
                continue;
            s->indices[e] = p;
            memcpy(s->values + e * size, v, size);
            e++;
        }
        /* Fisher-Yates within the frame. */
        for (uint64_t k = e - start; shuffle_seed && k > 1; k--) {
            const uint64_t j = start + next(&state) % k, i = start + k - 1;
            const uint64_t t = s->indices[i];
            s->indices[i] = s->indices[j];
            s->indices[j] = t;
            uint8_t tv[8];
            memcpy(tv, s->values + i * size, size);
            memcpy(s->values + i * size, s->values + j * size, size);
            memcpy(s->values + j * size, tv, size);
        }
    }
    s->indptr[frames] = e;
    return 0;
}

int csrb_from_entries(csrb_set *s, char kind, size_t size, uint64_t frames, uint64_t pixels,
                      const uint64_t *indptr, const uint64_t *indices, const void *values)
{
    memset(s, 0, sizeof *s);
    const uint64_t entries = indptr[frames];
    s->indptr = malloc((frames + 1) * sizeof *s->indptr);
    s->indices = malloc((entries ? entries : 1) * sizeof *s->indices);
    s->values = malloc((entries ? entries : 1) * size);
    if (!s->indptr || !s->indices || !s->values) {
        fprintf(stderr, "csrb_from_entries: out of memory\n");
        csrb_free(s);
        return -1;
    }
    memcpy(s->indptr, indptr, (frames + 1) * sizeof *indptr);
    if (entries) {
        memcpy(s->indices, indices, entries * sizeof *indices);
        memcpy(s->values, values, entries * size);
    }
    s->frames = frames;
    s->pixels = pixels;
    s->entries = entries;
    s->kind = kind;
    s->size = size;
    return 0;
}

void csrb_free(csrb_set *s)
{
    free(s->indptr);
    free(s->indices);
    free(s->values);
    memset(s, 0, sizeof *s);
}

static int write_bytes(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) {
        fprintf(stderr, "csrb_write: cannot write '%s'\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* `name` beside the descriptor `path`. */
static void beside(const char *path, const char *name, char *out, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(out, size, "%.*s/%s", (int)(slash - path), path, name);
    else
        snprintf(out, size, "%s", name);
}

int csrb_write(const char *path, const csrb_set *s, const csrb_options *o)
{
    char data_dtype[16];
    snprintf(data_dtype, sizeof data_dtype, "<%c%zu", s->kind, s->size);
    const char *files[3] = {o->indptr_file ? o->indptr_file : "indptr.raw",
                            o->indices_file ? o->indices_file : "coords.raw",
                            o->data_file ? o->data_file : "values.raw"};
    const char *dtypes[3] = {o->indptr_dtype ? o->indptr_dtype : "<i4",
                             o->indices_dtype ? o->indices_dtype : "<i4",
                             o->data_dtype ? o->data_dtype : data_dtype};
    const char *filetype = o->filetype ? o->filetype : "raw_csr";
    char nav[64], sig[64];
    snprintf(nav, sizeof nav, "[1, %llu]", (unsigned long long)s->frames);
    snprintf(sig, sizeof sig, "[1, %llu]", (unsigned long long)s->pixels);
    char *text = malloc(8192 + (o->extra ? strlen(o->extra) : 0));
    if (!text)
        return -1;
    /* The descriptor as LiberTEM's docstring shows it. */
    const int n = sprintf(text,
                          "[params]\nfiletype = \"%s\"\nnav_shape = %s\nsig_shape = %s\n\n"
                          "[%s]\nindptr_file = \"%s\"\nindptr_dtype = \"%s\"\n\n"
                          "indices_file = \"%s\"\nindices_dtype = \"%s\"\n\n"
                          "data_file = \"%s\"\ndata_dtype = \"%s\"\n%s",
                          filetype, o->nav_shape ? o->nav_shape : nav,
                          o->sig_shape ? o->sig_shape : sig, filetype, files[0], dtypes[0],
                          files[1], dtypes[1], files[2], dtypes[2], o->extra ? o->extra : "");
    int rc = write_bytes(path, text, (size_t)n);
    free(text);
    if (rc || o->no_files)
        return rc;
    dtype_of d;
    const uint64_t *ints[2] = {s->indptr, s->indices};
    const uint64_t counts[2] = {s->frames + 1, s->entries};
    char file[1024];
    for (int k = 0; k < 2 && !rc; k++) {
        uint8_t *buf = malloc(counts[k] * 8 + 1);
        const size_t size = buf ? csrb_encode_integers(dtypes[k], ints[k], counts[k], buf) : 0;
        beside(path, files[k], file, sizeof file);
        rc = size ? write_bytes(file, buf, counts[k] * size) : -1;
        if (!size)
            fprintf(stderr, "csrb_write: '%s' is not an integer dtype\n", dtypes[k]);
        free(buf);
    }
    if (rc)
        return rc;
    /* The values: the set's bytes, in the data dtype's byte order. */
    if (!parse(dtypes[2], &d) || d.size != s->size) {
        fprintf(stderr, "csrb_write: data dtype '%s' is not the set's\n", dtypes[2]);
        return -1;
    }
    uint8_t *buf = malloc(s->entries * s->size + 1);
    if (!buf)
        return -1;
    const uint16_t one = 1;
    const int swap = d.big != (*(const uint8_t *)&one == 0); /* the host's order or not */
    for (uint64_t e = 0; e < s->entries; e++)
        for (size_t b = 0; b < s->size; b++)
            buf[e * s->size + b] = s->values[e * s->size + (swap ? s->size - 1 - b : b)];
    beside(path, files[2], file, sizeof file);
    rc = write_bytes(file, buf, s->entries * s->size);
    free(buf);
    return rc;
}
