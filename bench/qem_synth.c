/* qem-synth: writes a synthetic 4D-STEM .npy (fixed seed) for the demo and
 * the benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

static const char *const help =
    "usage: qem-synth OUT.npy [--shape R,C,H,W] [--dtype uint8|uint16|float32]\n"
    "                 [--dose COUNTS] [--read-noise SIGMA] [--seed N]\n"
    "\n"
    "Writes a synthetic 4D-STEM acquisition: Poisson counts in a drifting\n"
    "bright-field disk, six weak diffraction spots, faint background, a few hot\n"
    "and dead pixels; float32 adds Gaussian read noise (default sigma 1 count).\n"
    "Defaults: --shape 32,32,64,64 --dtype uint16 --dose 4 --seed 1. The same\n"
    "arguments always give the same bytes.\n";

int main(int argc, char **argv)
{
    synth_params p = {{32, 32, 64, 64}, QEM_DTYPE_UINT16, 4.0, 1, 1.0};
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "--shape") && v) {
            unsigned long long s[4];
            if (sscanf(v, "%llu,%llu,%llu,%llu", &s[0], &s[1], &s[2], &s[3]) != 4 || !s[0] ||
                !s[1] || !s[2] || !s[3]) {
                fprintf(stderr, "qem-synth: --shape needs four positive integers R,C,H,W\n");
                return 2;
            }
            for (int k = 0; k < 4; k++)
                p.shape[k] = s[k];
            i++;
        } else if (!strcmp(a, "--dtype") && v) {
            if (!strcmp(v, "uint8"))
                p.dtype = QEM_DTYPE_UINT8;
            else if (!strcmp(v, "uint16"))
                p.dtype = QEM_DTYPE_UINT16;
            else if (!strcmp(v, "float32"))
                p.dtype = QEM_DTYPE_FLOAT32;
            else {
                fprintf(stderr, "qem-synth: --dtype is uint8, uint16 or float32\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--dose") && v) {
            p.dose = strtod(v, NULL);
            i++;
        } else if (!strcmp(a, "--read-noise") && v) {
            p.read_noise = strtod(v, NULL);
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            p.seed = strtoull(v, NULL, 10);
            i++;
        } else if (a[0] != '-' && !out) {
            out = a;
        } else {
            fprintf(stderr, "qem-synth: unexpected argument '%s'\n\n%s", a, help);
            return 2;
        }
    }
    if (!out) {
        fputs(help, stderr);
        return 2;
    }
    qem_error e = {0};
    if (synth_write_npy(&p, out, &e) != QEM_OK) {
        fprintf(stderr, "qem-synth: %s\n", e.message[0] ? e.message : qem_strerror(e.status));
        return 1;
    }
    return 0;
}
