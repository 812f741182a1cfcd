/* Names and sizes of the public enums. */
#include "qem.h"

const char *qem_version(void)
{
    return QEM_VERSION_STRING;
}

unsigned qem_version_number(void)
{
    return QEM_VERSION_NUMBER;
}

size_t qem_dtype_size(qem_dtype dtype)
{
    switch (dtype) {
    case QEM_DTYPE_UINT8: return 1;
    case QEM_DTYPE_UINT16: return 2;
    case QEM_DTYPE_FLOAT32: return 4;
    case QEM_DTYPE_UINT32: return 4;
    case QEM_DTYPE_UINT64: return 8;
    case QEM_DTYPE_FLOAT64: return 8;
    case QEM_DTYPE_NONE: break;
    }
    return 0;
}

const char *qem_dtype_name(qem_dtype dtype)
{
    switch (dtype) {
    case QEM_DTYPE_UINT8: return "uint8";
    case QEM_DTYPE_UINT16: return "uint16";
    case QEM_DTYPE_FLOAT32: return "float32";
    case QEM_DTYPE_UINT32: return "uint32";
    case QEM_DTYPE_UINT64: return "uint64";
    case QEM_DTYPE_FLOAT64: return "float64";
    case QEM_DTYPE_NONE: break;
    }
    return "none";
}

const char *qem_codec_name(qem_codec codec)
{
    switch (codec) {
    case QEM_CODEC_INTEGER: return "runtime-column-rans-spatial-v2";
    case QEM_CODEC_FLOAT32: return "float32-bit-lanes-rans-v1";
    case QEM_CODEC_SCALED: return "scaled-uint16-column-rans-v1";
    case QEM_CODEC_NONE: break;
    }
    return "none";
}
