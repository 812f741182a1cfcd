/* Writes small .npy files for the CLI tests: npy_fixture KIND OUT, where
 * KIND is u16 (a 4D uint16 array), f32 (4D float32), mask (8x8 with one
 * invalid pixel), dark (an 8x8 float32 plane), 3d (a 3D uint16 stack),
 * hot (4D uint16, 32 scans, counts below 200 but pixel 9 always 4000) or
 * hotmask (8x8 uint8 marking pixel 9 for exclusion) or mask48 (48x48, a
 * centred disk). */
#include "test_util.h"

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    qem_error e = {0};
    const char *kind = argv[1], *out = argv[2];
    uint64_t seed = 1;
    if (!strcmp(kind, "u16") || !strcmp(kind, "f32")) {
        uint64_t shape[4] = {3, 4, 8, 8};
        uint16_t data[12 * 64];
        for (int i = 0; i < 12 * 64; i++)
            data[i] = (uint16_t)(test_rand(&seed) % 20);
        if (!strcmp(kind, "u16"))
            return write_npy4(out, QEM_DTYPE_UINT16, shape, data) ? 0 : 1;
        float f[12 * 64];
        for (int i = 0; i < 12 * 64; i++)
            f[i] = (float)data[i] * 0.5f;
        return write_npy4(out, QEM_DTYPE_FLOAT32, shape, f) ? 0 : 1;
    }
    if (!strcmp(kind, "hot")) {
        uint64_t shape[4] = {4, 8, 8, 8};
        uint16_t data[32 * 64];
        for (int i = 0; i < 32 * 64; i++)
            data[i] = i % 64 == 9 ? 4000 : (uint16_t)(test_rand(&seed) % 200);
        return write_npy4(out, QEM_DTYPE_UINT16, shape, data) ? 0 : 1;
    }
    qem_npy_writer *w = NULL;
    if (!strcmp(kind, "mask48")) {
        /* 48x48, a centred disk of radius 10. */
        uint64_t shape[2] = {48, 48};
        uint8_t m[48 * 48];
        for (int i = 0; i < 48 * 48; i++)
            m[i] = (uint8_t)((i / 48 - 24) * (i / 48 - 24) + (i % 48 - 24) * (i % 48 - 24) <= 100);
        if (qem_npy_writer_create(out, QEM_DTYPE_UINT8, 2, shape, &w, &e) != QEM_OK ||
            qem_npy_writer_append(w, m, 48 * 48, &e) != QEM_OK ||
            qem_npy_writer_finish(w, &e) != QEM_OK)
            return 1;
        qem_npy_writer_free(w);
        return 0;
    }
    if (!strcmp(kind, "mask") || !strcmp(kind, "hotmask")) {
        uint64_t shape[2] = {8, 8};
        uint8_t m[64];
        const int hot = !strcmp(kind, "hotmask");
        memset(m, !hot, sizeof m);
        m[9] = (uint8_t)hot;
        if (qem_npy_writer_create(out, QEM_DTYPE_UINT8, 2, shape, &w, &e) != QEM_OK ||
            qem_npy_writer_append(w, m, 64, &e) != QEM_OK || qem_npy_writer_finish(w, &e) != QEM_OK)
            return 1;
    } else if (!strcmp(kind, "dark")) {
        uint64_t shape[2] = {8, 8};
        float d[64];
        for (int i = 0; i < 64; i++)
            d[i] = 0.5f + (float)i / 64.0f;
        if (qem_npy_writer_create(out, QEM_DTYPE_FLOAT32, 2, shape, &w, &e) != QEM_OK ||
            qem_npy_writer_append(w, d, 64, &e) != QEM_OK || qem_npy_writer_finish(w, &e) != QEM_OK)
            return 1;
    } else if (!strcmp(kind, "3d")) {
        uint64_t shape[3] = {12, 8, 8};
        uint16_t d[12 * 64] = {0};
        if (qem_npy_writer_create(out, QEM_DTYPE_UINT16, 3, shape, &w, &e) != QEM_OK ||
            qem_npy_writer_append(w, d, 12 * 64, &e) != QEM_OK ||
            qem_npy_writer_finish(w, &e) != QEM_OK)
            return 1;
    } else {
        return 2;
    }
    qem_npy_writer_free(w);
    return 0;
}
