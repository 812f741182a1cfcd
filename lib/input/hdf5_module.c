/* The HDF5 module's table and its one export (hdf5_module.h). */
#include "input/hdf5_module.h"

static const qem_hdf5_module table = {
    QEM_MODULE_HEADER(qem_hdf5_module),
    &qem_h5_family_arina,
    &qem_h5_family_emd,
    &qem_h5_family_velox,
    &qem_h5_family_dataset,
    qem_h5_pack_create,
    qem_h5_pack_append,
    qem_h5_pack_close,
    qem_h5_pack_prepared,
};

const void *qem_module_hdf5_v1(void)
{
    return &table;
}
