/* Seeds of fuzz_velox: frames (u16 LE), what (u8), the JSON text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "seeds_velox.h"

static void put_seed(const char *out, const char *name, unsigned frames, int version,
                     const char *text, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/velox", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/velox/%s", out, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    const unsigned char head[3] = {(unsigned char)frames, (unsigned char)(frames >> 8),
                                   (unsigned char)version};
    fwrite(head, 1, 3, f);
    fwrite(text, 1, n, f);
    fclose(f);
}

/* The JSON object that contains `key` at its top level, found in the
 * file's bytes: from the '{' before it to the NUL after. */
static void documents(const char *out, const char *file, const char *stem, const char *key,
                      int version)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = size > 0 && size < (64l << 20) ? malloc((size_t)size + 1) : NULL;
    const size_t n = b ? fread(b, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!b)
        return;
    b[n] = '\0';
    const size_t klen = strlen(key);
    int found = 0;
    for (size_t at = 0; at + klen <= n && found < 2; at++) {
        if (memcmp(b + at, key, klen) != 0)
            continue;
        size_t start = at;
        while (start > 0 && b[start] != '{' && at - start < 64)
            start--;
        if (b[start] != '{')
            continue;
        size_t end = at;
        while (end < n && b[end] != '\0' && end - start < (512u << 10))
            end++;
        char name[256];
        snprintf(name, sizeof name, "%s-%s-%d.json", stem, version ? "version" : "metadata",
                 found);
        put_seed(out, name, version ? 0 : 1, version, b + start, end - start);
        found++;
        at = end;
    }
    free(b);
}

void seeds_velox(const char *shared, const char *hyperspy_io, const char *out)
{
    (void)shared;
    static const char *const files[] = {"fei_example_tem_stack", "fei_example_dpc_titles",
                                        "fei_example_complex_fft"};
    char path[1024];
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        snprintf(path, sizeof path, "%s/emd_files/%s.emd", hyperspy_io, files[k]);
        documents(out, path, files[k], "\"Core\"", 0);
        documents(out, path, files[k], "\"format\": \"Velox\"", 1);
    }
    /* Camera frames over a 3 x 2 scan (6 frames), and malformed counts. */
    static const char camera[] =
        "{\"Scan\": {\"ScanSize\": {\"width\": \"3\", \"height\": \"2\"}},"
        " \"BinaryResult\": {\"AcquisitionUnit\": \"CameraImage\", \"DetectorIndex\": \"1\"},"
        " \"Detectors\": {\"Detector-1\": {\"DetectorType\": \"ImagingDetector\"}}}\0\0";
    put_seed(out, "camera-6.json", 6, 0, camera, sizeof camera);
    static const char bad[] = "{\"Scan\": {\"ScanSize\": {\"width\": \"-3\", \"height\": 2}}}";
    put_seed(out, "bad-count.json", 6, 0, bad, sizeof bad - 1);
}
