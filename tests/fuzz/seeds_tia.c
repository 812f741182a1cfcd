/* Seeds of fuzz_tia: rows (u8), columns (u8), flags (u8), the .emi's
 * length (u32 LE), the .emi, the .ser. HyperSpy's real files, the large
 * one cut to its first elements (its valid count lowered to match), and
 * small files built from the published layout. */
#include "seeds_tia.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tia_build.h"

#define SEED_MAX_BYTES (1u << 20)

static uint8_t *slurp(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    *size = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static void seed(const char *out, const char *name, uint8_t rows, uint8_t cols, uint8_t flags,
                 const uint8_t *emi, size_t ne, const uint8_t *ser, size_t ns)
{
    if (7 + ne + ns > SEED_MAX_BYTES)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/tia", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tia/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    const uint8_t head[7] = {rows, cols, flags, (uint8_t)ne, (uint8_t)(ne >> 8),
                             (uint8_t)(ne >> 16), (uint8_t)(ne >> 24)};
    fwrite(head, 1, sizeof head, f);
    if (ne)
        fwrite(emi, 1, ne, f);
    fwrite(ser, 1, ns, f);
    fclose(f);
}

/* A real series (name_<series>.ser) and its .emi; `keep` > 0 keeps only that many elements
 * (the valid count lowered, the file cut after them). */
static void real_seed(const char *out, const char *io, const char *stem, unsigned series,
                      uint8_t rows, uint8_t cols, uint32_t keep)
{
    char path[1024], name[256];
    size_t ns = 0, ne = 0;
    snprintf(path, sizeof path, "%s/%s_%u.ser", io, stem, series);
    uint8_t *ser = slurp(path, &ns);
    snprintf(path, sizeof path, "%s/%s.emi", io, stem);
    uint8_t *emi = slurp(path, &ne);
    if (ser && keep && ns >= 34) {
        const unsigned os = (ser[4] | ser[5] << 8) <= 0x0210 ? 4 : 8;
        uint64_t array = 0, cut = 0;
        for (unsigned i = os; i-- > 0;)
            array = array << 8 | ser[22 + i];
        if (array + (uint64_t)(keep + 1) * os <= ns) {
            for (unsigned i = os; i-- > 0;)
                cut = cut << 8 | ser[array + (uint64_t)keep * os + i];
            for (int i = 0; i < 4; i++)
                ser[18 + i] = (uint8_t)(keep >> (8 * i));
            ns = cut && cut < ns ? (size_t)cut : ns;
        }
    }
    const char *base = strrchr(stem, '/');
    base = base ? base + 1 : stem;
    if (ser) {
        snprintf(name, sizeof name, "%s.ser", base);
        seed(out, name, rows, cols, 0, NULL, 0, ser, ns);
        if (emi) {
            snprintf(name, sizeof name, "%s.ser+emi", base);
            seed(out, name, rows, cols, 0, emi, ne, ser, ns);
            snprintf(name, sizeof name, "%s.emi", base);
            seed(out, name, rows, cols, 1, emi, ne, ser, ns);
        }
    }
    free(ser);
    free(emi);
}

void seeds_tia(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    static const struct {
        const char *stem;
        unsigned series;
        uint8_t rows, cols;
        uint32_t keep;
    } real[] = {
        {"FEI_old/64x64_TEM_images_acquire", 1, 0, 0, 0},
        {"FEI_old/16x16x5_STEM_BF_DF_preview", 2, 5, 1, 0},
        {"FEI_old/03_Scanning Preview", 1, 5, 1, 0},
        {"FEI_old/16x16-point_spectrum-1x1024", 1, 0, 0, 0},
        {"FEI_new/128x128-TEM_search", 1, 0, 0, 0},
        {"FEI_new/128x128x5-diffraction_preview", 1, 1, 2, 2},
        {"FEI_new/16x16-diffraction_imagel_5x5x256x256_EDS", 2, 1, 2, 2},
    };
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++)
        real_seed(out, hyperspy_io, real[i].stem, real[i].series, real[i].rows, real[i].cols,
                  real[i].keep);

    /* Built: every sample type, 32-bit offsets, scan orders, a stack. */
    char ser[1024], emi[1024], doc[2048], name[64];
    snprintf(ser, sizeof ser, "%s/seed_1.ser", out);
    snprintf(emi, sizeof emi, "%s/seed.emi", out);
    tiab_object_info(doc, sizeof doc, "Titan", "300", "0.115");
    const char *docs[] = {doc};
    size_t ne = 0;
    uint8_t *e = tiab_write_emi(emi, docs, 1) == 0 ? slurp(emi, &ne) : NULL;
    for (uint16_t type = 1; type <= 10; type++) {
        const tiab_options t = {.data_type = type, .ndim = 2, .dims = {2, 2},
                                .version = type % 2 ? 0x0210 : 0x0220, .size_x = 4,
                                .size_y = 3, .negative = type == 6};
        size_t ns = 0;
        uint8_t *s = tiab_write(ser, &t) == 0 ? slurp(ser, &ns) : NULL;
        snprintf(name, sizeof name, "built_type%u", (unsigned)type);
        if (s)
            seed(out, name, 0, 0, type == 2, e, type == 3 ? 0 : ne, s, ns);
        free(s);
    }
    const tiab_options variants[] = {
        {.ndim = 2, .dims = {3, 2}, .y_first = 1},
        {.ndim = 2, .dims = {2, 2}, .tag_type = 0x4152},
        {.ndim = 1, .dims = {4}, .gap = 5},
        {.ndim = 2, .dims = {3, 2}, .valid = 2},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        size_t ns = 0;
        uint8_t *s = tiab_write(ser, &variants[i]) == 0 ? slurp(ser, &ns) : NULL;
        snprintf(name, sizeof name, "built_variant%zu", i);
        if (s)
            seed(out, name, 2, (uint8_t)(i == 3 ? 1 : 2), 0, e, ne, s, ns);
        free(s);
    }
    free(e);
    remove(ser);
    remove(emi);
}
