/* A synthetic 4D-STEM acquisition with a fixed seed: Poisson counts in a
 * bright-field disk that shifts with scan position, weak diffraction spots,
 * a faint background, and a few hot and dead pixels. Frames are generated
 * one at a time, so any size can be written in bounded memory. */
#ifndef QEM_BENCH_SYNTH_H
#define QEM_BENCH_SYNTH_H

#include <stdint.h>

#include "qem.h"

typedef struct synth_params {
    uint64_t shape[4];  /* scan rows, scan columns, detector rows, columns */
    qem_dtype dtype;    /* uint8, uint16 or float32 */
    double dose;        /* mean counts per bright-field disk pixel */
    uint64_t seed;
    double read_noise;  /* float32 only: Gaussian read noise (sigma, counts) */
} synth_params;

typedef struct synth synth;

synth *synth_new(const synth_params *params);
void synth_free(synth *s);
/* Fills `frame` (detector pixels, in the params' dtype) for flat scan
 * position `scan`. Frames depend only on (seed, scan), not on order. */
void synth_frame(synth *s, uint64_t scan, void *frame);
/* Per detector pixel: 0 normal, 1 hot, 2 dead (fixed by the seed). */
const uint8_t *synth_defects(const synth *s);

/* Writes the whole acquisition as a 4D .npy, frame by frame. */
qem_status synth_write_npy(const synth_params *params, const char *path, qem_error *error);

#endif
