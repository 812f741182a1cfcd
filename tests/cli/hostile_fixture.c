/* Writes files whose strings carry terminal control sequences, for the
 * CLI's escaping tests: hostile_fixture qem IN.qem OUT.qem rewrites a valid
 * .qem's header so that every string `qem info` prints from the file holds
 * ESC, CR, LF, DEL and a C1 control; hostile_fixture manifest IN.h5 OUT.h5
 * does the same to a pack's manifest schema (which the reader then
 * refuses, naming it). The files are otherwise valid (checksums redone). */
#include <jansson.h>

#include "pack_build.h"
#include "qem_build.h"
#include "test_util.h"

/* ESC [2J clears a screen, CR and LF fake lines, DEL and U+009B (CSI). */
#define HOSTILE "\x1b[2J\r\nFAKE\x7f\xc2\x9b"

static int hostile_qem(const char *in, const char *out)
{
    qem_parts parts;
    if (!qem_parts_load(in, &parts))
        return 1;
    json_t *sm = json_object_get(parts.header, "scientific_metadata");
    json_object_set_new(sm, "source_format", json_string("npy" HOSTILE));
    json_t *op = json_array_get(json_object_get(sm, "processing"), 0);
    json_object_set_new(op, "operation", json_string("lossless_storage" HOSTILE));
    const int ok = qem_parts_write(out, parts.header, parts.body, parts.body_size, 0);
    qem_parts_free(&parts);
    return ok ? 0 : 1;
}

/* A uint16 pack whose detector calibration method (free text the reader
 * keeps) and, with `bad_schema`, whose schema (refused, and named in the
 * error) carry the hostile string. */
static int hostile_pack(const char *out, int bad_schema)
{
    enum { SCANS = 8, PIXELS = 64 };
    static uint16_t data[SCANS * PIXELS];
    for (int i = 0; i < SCANS * PIXELS; i++)
        data[i] = (uint16_t)(i % 7);
    pack_spec spec = {.profile = QEM_PACK_UINT16_LZ4,
                      .shape = {2, 4, 8, 8},
                      .sps = 8,
                      .data = data,
                      .working_dtype = QEM_DTYPE_UINT16,
                      .calibration = 1};
    pack_built b;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (!pack_build(tmp, &spec, &b))
        return 1;
    remove(tmp);
    json_t *m = json_deep_copy(b.manifest);
    json_object_set_new(json_object_get(m, "detector_calibration"), "method",
                        json_string("estimate" HOSTILE));
    if (bad_schema)
        json_object_set_new(m, "schema", json_string("pack" HOSTILE));
    const int ok = pack_rewrite(out, &b, m, NULL, 0);
    json_decref(m);
    pack_built_free(&b);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "pack"))
        return hostile_pack(argv[2], 0);
    if (argc == 3 && !strcmp(argv[1], "pack-schema"))
        return hostile_pack(argv[2], 1);
    if (argc == 4 && !strcmp(argv[1], "qem"))
        return hostile_qem(argv[2], argv[3]);
    fprintf(stderr, "usage: hostile_fixture qem IN.qem OUT.qem | pack OUT.h5 | pack-schema OUT.h5\n");
    return 2;
}
