/* decode_paths NAME: exit 0 if this CPU can run the count-stream decode
 * path NAME (scalar, avx2, avx512, avx2-loads), 1 if it cannot, 2 for another name.
 * `make test-paths` asks before running the suite on each path. */
#include <stdio.h>
#include <string.h>

#include "qem_experimental.h"

int main(int argc, char **argv)
{
    static const qem_decode_path paths[] = {QEM_DECODE_SCALAR, QEM_DECODE_AVX2,
                                            QEM_DECODE_AVX512, QEM_DECODE_AVX2_LOADS};
    for (size_t k = 0; argc == 2 && k < sizeof paths / sizeof paths[0]; k++)
        if (!strcmp(argv[1], qem_decode_path_name(paths[k])))
            return qem_decode_path_supported(paths[k]) ? 0 : 1;
    fprintf(stderr, "usage: decode_paths scalar|avx2|avx512|avx2-loads\n");
    return 2;
}
