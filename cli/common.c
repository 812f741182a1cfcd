/* Helpers every family of commands uses: the naming rule, recognising and
 * opening files, reading small text files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "terminal.h"

int has_extension(const char *path, const char *extensions)
{
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash) || dot == path || dot[1] == '\0')
        return 0;
    const char *ext = dot + 1;
    const size_t n = strlen(ext);
    for (const char *p = extensions; *p;) {
        const char *bar = strchr(p, '|');
        const size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && !strncasecmp(p, ext, n))
            return 1;
        p += k + (bar != NULL);
    }
    return 0;
}

int need_destination(const char *command, const char *path, const char *extensions,
                     const char *what)
{
    struct stat st;
    if (has_extension(path, extensions)) {
        /* Said before the work, not after a pass over a 20 GB file; the
         * write refuses again should the name appear meanwhile. */
        if (lstat(path, &st) != 0)
            return 0;
        fprintf(stderr, "qem %s: '%s' already exists; qem never overwrites, choose another name\n",
                command, SAFE(path));
        return EXIT_FAILED;
    }
    char list[96] = "";
    for (const char *p = extensions; *p;) {
        const char *bar = strchr(p, '|');
        const size_t k = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s.%.*s",
                 list[0] ? (bar ? ", " : " or ") : "", (int)k, p);
        p += k + (bar != NULL);
    }
    return usage_fail(command, "'%s' must end in %s: the extension names the format written (%s)",
                      SAFE(path), list, what);
}

int identify(const char *command, const char *path, qem_file_kind *kind)
{
    qem_error e = {0};
    if (qem_identify(path, kind, &e) != QEM_OK) {
        fail(command, &e);
        return 0;
    }
    return 1;
}

qem_container *open_container(const char *command, const char *path,
                              const qem_container_options *options)
{
    qem_error e = {0};
    qem_container *s = NULL;
    if (qem_container_open(path, options, &s, &e) != QEM_OK)
        fail(command, &e);
    return s;
}

qem_container *open_source(const args *a)
{
    qem_container_options so;
    qem_container_options_init(&so);
    so.threads = (int)a->v[OPT_THREADS].i[0];
    so.expect_sha256 = text_of(a, OPT_EXPECT_SHA256);
    return open_container(a->command, a->positional[0], &so);
}

char *read_text_file(const char *command, const char *what, const char *path)
{
    enum { LIMIT = 64 << 20 };
    struct stat sb;
    int fd = -1;
    const char *why = NULL;
    if (stat(path, &sb) != 0)
        why = strerror(errno);
    else if (S_ISDIR(sb.st_mode))
        why = "it is a directory";
    else if (!S_ISREG(sb.st_mode))
        why = "it is not a regular file";
    else if (sb.st_size > LIMIT)
        why = "it is larger than 64 MiB";
    else if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0)
        why = strerror(errno);
    else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        why = "it is not a regular file";
    char *text = NULL;
    size_t used = 0;
    if (!why) {
        text = malloc((size_t)sb.st_size + 1);
        if (!text)
            why = "out of memory";
    }
    while (!why) {
        const ssize_t n = read(fd, text + used, (size_t)sb.st_size - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            why = strerror(errno);
        else if (n == 0 || (used += (size_t)n) == (size_t)sb.st_size)
            break;
    }
    if (fd >= 0)
        close(fd);
    if (why) {
        free(text);
        fprintf(stderr, "qem %s: cannot read %s '%s': %s\n", command, what, SAFE(path), why);
        return NULL;
    }
    text[used] = '\0';
    return text;
}

static const option_id acquisition_option_ids[] = {OPT_DATASET,   OPT_SCAN_SHAPE,
                                                   OPT_RAW_SHAPE, OPT_RAW_DTYPE,
                                                   OPT_RAW_OFFSET, OPT_RAW_FRAME_HEADER};

int has_acquisition_options(const args *a)
{
    for (size_t k = 0; k < sizeof acquisition_option_ids / sizeof acquisition_option_ids[0]; k++)
        if (given(a, acquisition_option_ids[k]))
            return 1;
    return 0;
}

void acquisition_options(const args *a, qem_acquisition_options *o, progress_state *ps)
{
    qem_acquisition_options_init(o);
    o->dataset = text_of(a, OPT_DATASET);
    if (given(a, OPT_SCAN_SHAPE)) {
        o->scan_shape[0] = (uint64_t)a->v[OPT_SCAN_SHAPE].i[0];
        o->scan_shape[1] = (uint64_t)a->v[OPT_SCAN_SHAPE].i[1];
    }
    if (given(a, OPT_RAW_SHAPE))
        for (int k = 0; k < 4; k++)
            o->raw_shape[k] = (uint64_t)a->v[OPT_RAW_SHAPE].i[k];
    o->raw_dtype = text_of(a, OPT_RAW_DTYPE);
    o->raw_offset = (uint64_t)a->v[OPT_RAW_OFFSET].i[0];
    o->raw_frame_header = (uint64_t)a->v[OPT_RAW_FRAME_HEADER].i[0];
    progress_setup(ps, "hashing the source", "bytes", given(a, OPT_QUIET), &o->progress,
                   &o->progress_user);
}
