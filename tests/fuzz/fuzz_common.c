#include "fuzz_common.h"
#include "qem.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

const char *fuzz_path(const char *name)
{
    static char dir[256];
    static char path[512];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/qem-fuzz-%d", base, (int)getpid());
        mkdir(dir, 0700);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

int fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    unlink(path);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    return done == size;
}

uint32_t fuzz_u32(const uint8_t *data, size_t size, size_t *at)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++, (*at)++)
        v |= (uint32_t)(*at < size ? data[*at] : 0) << (8 * k);
    return v;
}

void fuzz_pack_exercise(const char *path)
{
    qem_error e;
    qem_pack *p = NULL;
    if (qem_pack_open(path, NULL, &p, &e) != QEM_OK)
        return;
    qem_pack_options lo;
    qem_pack_options_init(&lo);
    lo.check_stored_digests = 1;
    if (qem_pack_load(p, &lo, &e) == QEM_OK) {
        qem_pack_info info = {.struct_size = sizeof info};
        qem_pack_get_info(p, &info, NULL);
        if (info.scans * info.pixels <= FUZZ_MAX_VALUES && info.pixels) {
            const size_t bytes = (size_t)qem_pack_read_bound(p, QEM_VALUES_RAW, info.scans);
            void *out = malloc(bytes ? bytes : 1);
            if (out) {
                qem_pack_read_scans(p, 0, info.scans, QEM_VALUES_WORKING, out, bytes, &e);
                qem_pack_read_scans(p, 0, info.scans, QEM_VALUES_RAW, out, bytes, &e);
            }
            free(out);
        }
    }
    qem_pack_close(p);
}
