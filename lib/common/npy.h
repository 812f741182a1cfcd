/* What the library's own readers need of an open .npy beyond the public
 * qem_npy calls. */
#ifndef QEM_COMMON_NPY_H
#define QEM_COMMON_NPY_H

#include "qem.h"

/* The file descriptor the .npy is read through (for stat checks and
 * hashing the bytes outside the data). */
int qem_npy_descriptor(const qem_npy *npy);

/* As qem_npy_open, also accepting uint32 (<u4) and the big-endian forms
 * >u2, >u4 and >f4 (descr[0] tells the byte order; reads return the
 * file's bytes as stored): the input layer converts them itself. */
qem_status qem_npy_open_acquisition(const char *path, qem_npy **out, qem_error *error);

/* The header of an open .npy, for the library's own readers. */
const qem_npy_info *qem_npy_info_of(const qem_npy *npy);

#endif
