/* Which kind of file a path or an open descriptor holds, by its signature:
 * below both formats, so that a file is identified from the descriptor it
 * is then read through (what was identified is what is read). */
#ifndef QEM_COMMON_IDENTIFY_H
#define QEM_COMMON_IDENTIFY_H

#include <stdint.h>

#include "qem.h"

/* The kind of the `size`-byte file open on `fd` (read with pread: the
 * descriptor's offset is not moved). */
qem_status qem_identify_fd(int fd, uint64_t size, qem_file_kind *kind, qem_error *error);

#endif
