/* The frequency table compiled into the library equals the normative
 * qem-rans-tables-v1.json, number by number, and the derived tables agree. */
#include <jansson.h>

#include "rans/rans.h"
#include "test_util.h"

int main(void)
{
    json_error_t jerr;
    json_t *root = json_load_file(spec_path("qem-rans-tables-v1.json"), JSON_REJECT_DUPLICATES, &jerr);
    CHECK(root != NULL);
    if (!root)
        return test_finish("unit_rans_table");
    CHECK(!strcmp(json_string_value(json_object_get(root, "codec")),
                  "runtime-column-rans-spatial-v2"));
    CHECK_EQ_U64(json_integer_value(json_object_get(root, "scale_bits")), QEM_RANS_SCALE_BITS);
    json_t *rows = json_object_get(root, "frequencies");
    CHECK_EQ_U64(json_array_size(rows), QEM_RANS_MODELS);
    int mismatches = 0;
    for (size_t m = 0; m < json_array_size(rows) && m < QEM_RANS_MODELS; m++) {
        json_t *row = json_array_get(rows, m);
        CHECK_EQ_U64(json_array_size(row), QEM_RANS_SYMBOLS);
        uint32_t sum = 0;
        for (size_t s = 0; s < QEM_RANS_SYMBOLS; s++) {
            json_int_t v = json_integer_value(json_array_get(row, s));
            if (v != qem_rans_frequencies[m][s])
                mismatches++;
            CHECK(qem_rans_frequencies[m][s] >= 1);
            sum += qem_rans_frequencies[m][s];
        }
        CHECK_EQ_U64(sum, QEM_RANS_SCALE);
    }
    CHECK_EQ_U64(mismatches, 0);
    json_decref(root);

    /* Derived tables: starts are exclusive prefix sums, and every slot maps
     * to the symbol whose interval contains it. */
    qem_rans_tables *t = malloc(sizeof *t);
    qem_rans_tables_init(t);
    int bad = 0;
    for (unsigned m = 0; m < QEM_RANS_MODELS; m++) {
        uint32_t start = 0;
        for (unsigned s = 0; s < QEM_RANS_SYMBOLS; s++) {
            if (t->start[m][s] != start)
                bad++;
            for (uint32_t slot = start; slot < start + qem_rans_frequencies[m][s]; slot++) {
                uint32_t e = t->slot[m][slot];
                if ((e >> 21) != s || (e & 2047) != qem_rans_frequencies[m][s] ||
                    ((e >> 11) & 1023) != slot - start)
                    bad++;
            }
            start += qem_rans_frequencies[m][s];
        }
    }
    CHECK_EQ_U64(bad, 0);
    free(t);
    return test_finish("unit_rans_table");
}
