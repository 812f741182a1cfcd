/* DPC products on scan-shaped float32 fields (rows x cols, C order):
 * rotation and component-exchange search, alignment, integration
 * gradients and iDPC (notes-products.md §2.3-2.4). Pure functions, no I/O.
 *
 * Invalid frames are NaN in both components. Non-finite values (NaN or
 * inf) are treated alike: skipped by the rotation search, carried through
 * by alignment, and taken as 0 by iDPC. */
#ifndef QEM_PRODUCTS_DPC_H
#define QEM_PRODUCTS_DPC_H

#include <stdint.h>

#include "qem.h"

/* Default number of angles of the rotation search. */
#define PRODUCT_DPC_ROTATION_STEPS 180u

/* Finds the rotation (and whether to exchange the two components first)
 * that minimises the mean squared curl of the rotated CoM field.
 * Angles: linspace(0, pi, steps) rounded to float32, both ends included;
 * scores [normal order..., exchanged order...], the first minimum wins (so
 * normal order and the smaller angle on ties). *angle_deg is the float32
 * angle times 180/pi in double. Interior points whose 4-neighbour stencil
 * touches a non-finite value are left out of the mean; when min(rows, cols)
 * < 3 or no interior point remains the answer is angle 0, no exchange.
 * Refuses NULL pointers, zero dimensions, steps < 2 and rows*cols overflow. */
qem_status qem_product_dpc_rotation(const float *mu_row, const float *mu_col, uint64_t rows,
                                    uint64_t cols, unsigned steps, double *angle_deg,
                                    int *exchanged, qem_error *error);

/* Aligned fields of n points: with (s_r, s_c) = (mu_col, mu_row) when
 * exchanged, else (mu_row, mu_col), and a = angle_deg in radians,
 * aligned_row = cos a * s_r - sin a * s_c, aligned_col = sin a * s_r + cos a * s_c,
 * computed in double and rounded once to float32. NaN stays NaN. Outputs
 * may be the inputs themselves (in place). */
void qem_product_dpc_align(const float *mu_row, const float *mu_col, uint64_t n, double angle_deg,
                           int exchanged, float *aligned_row, float *aligned_col);

/* Gradients to integrate: the aligned fields, swapped back when exchanged
 * (grad_row = aligned_col, grad_col = aligned_row). In place is allowed. */
void qem_product_dpc_gradients(const float *aligned_row, const float *aligned_col, uint64_t n,
                               int exchanged, float *grad_row, float *grad_col);

/* iDPC phase by a periodic FFT Poisson solve (§2.4), any scan shape:
 * Phi = (-0.25 i)(nu_r G_r + nu_c G_c) / K2 with nu = fftfreq (float32),
 * K2[0,0] = 1 and Phi[0,0] = 0; phi = Re(IFFT2(Phi)) rounded to float32;
 * phase = -(phi - mean(phi)). For the exact gradient of a band-limited
 * phase p this gives -(pi/2)(p - mean p): the 0.25 scale is upstream's.
 * Non-finite gradient entries are taken as 0. `phase` may alias an input.
 * Adds the number of 2-D FFTs performed (2 on success, 0 on failure) to
 * *ffts when ffts is not NULL.
 * Thread safety: FFTW's planner is not thread-safe. qem's own plan
 * creation and destruction are serialised (one named OpenMP critical
 * section), so qem may call this from several threads; an application that
 * also plans with FFTW on other threads must not do so while this runs. */
qem_status qem_product_idpc(const float *grad_row, const float *grad_col, uint64_t rows,
                            uint64_t cols, float *phase, uint64_t *ffts, qem_error *error);

#endif
