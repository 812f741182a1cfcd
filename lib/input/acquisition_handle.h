/* The public handle qem_acquisition, shared by the file that opens and
 * describes it (acquisition_api.c) and the save from it (save.c). */
#ifndef QEM_INPUT_ACQUISITION_HANDLE_H
#define QEM_INPUT_ACQUISITION_HANDLE_H

#include "input/input.h"

struct qem_acquisition {
    acquisition *input;
    qem_progress_fn progress; /* the caller's, for hashing; saves pass it on */
    void *progress_user;
};

#endif
