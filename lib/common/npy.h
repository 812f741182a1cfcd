/* What the library's own readers need of an open .npy beyond the public
 * qem_npy calls. */
#ifndef QEM_COMMON_NPY_H
#define QEM_COMMON_NPY_H

#include "qem.h"

/* The file descriptor the .npy is read through (for stat checks and
 * hashing the bytes outside the data). */
int qem_npy_descriptor(const qem_npy *npy);

/* The header of an open .npy, for the library's own readers. */
const qem_npy_info *qem_npy_info_of(const qem_npy *npy);

#endif
