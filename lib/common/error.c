#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *qem_strerror(qem_status status)
{
    switch (status) {
    case QEM_OK: return "success";
    case QEM_E_INVALID_ARGUMENT: return "invalid argument";
    case QEM_E_NO_MEMORY: return "out of memory";
    case QEM_E_IO: return "input/output error";
    case QEM_E_EXISTS: return "destination already exists";
    case QEM_E_CANCELLED: return "cancelled";
    case QEM_E_NOT_QEM: return "not a complete QEM file";
    case QEM_E_RETIRED_FORMAT: return "retired format; re-export the original acquisition";
    case QEM_E_HEADER_LENGTH: return "invalid QEM header length or body start";
    case QEM_E_HEADER_CHECKSUM: return "QEM header checksum mismatch";
    case QEM_E_JSON: return "QEM header is not a valid JSON object";
    case QEM_E_HEADER: return "QEM header key missing or invalid";
    case QEM_E_UNSUPPORTED: return "not supported by this version of qem; update qem";
    case QEM_E_FILE_LENGTH: return "file length disagrees with the header";
    case QEM_E_BODY_CHECKSUM: return "QEM body checksum mismatch";
    case QEM_E_LAYOUT: return "invalid chunk or array layout";
    case QEM_E_METADATA: return "invalid scientific metadata";
    case QEM_E_MODEL: return "invalid count model or stream length";
    case QEM_E_RANS_STATE: return "rANS initial state out of range";
    case QEM_E_RANS_TRUNCATED: return "count stream ends early";
    case QEM_E_RANS_FINAL: return "count stream has trailing data or an invalid final state";
    case QEM_E_SPARSE: return "sparse event positions invalid";
    case QEM_E_VALUE_RANGE: return "decoded value does not fit the declared dtype";
    case QEM_E_SPATIAL: return "spatial-sum index invalid";
    case QEM_E_NPY: return "invalid or unsupported .npy file";
    case QEM_E_NOT_YET: return "not implemented yet";
    case QEM_E_WRONG_CODEC: return "operation not valid for this codec";
    case QEM_E_CHANGED: return "file changed while being read";
    case QEM_E_LIMIT: return "size limit exceeded";
    case QEM_E_LOGICAL_CHECKSUM: return "decoded float32 bits differ from logical_sha256";
    case QEM_E_PACK_PRELUDE: return "invalid pack prelude";
    case QEM_E_PACK_CRC: return "pack manifest CRC-32 mismatch";
    case QEM_E_PACK_MANIFEST: return "pack manifest invalid or inconsistent with the index";
    case QEM_E_PACK_INDEX: return "invalid pack binary index";
    case QEM_E_PACK_RANGE: return "pack byte range outside the file or overlapping";
    case QEM_E_PACK_DESCRIPTOR: return "invalid pack widths, descriptors or compact headers";
    case QEM_E_PACK_LZ4: return "pack LZ4 block does not decode exactly";
    case QEM_E_PACK_DIGEST: return "pack shard digest mismatch";
    case QEM_E_NOT_RECORDED: return "the file does not record this";
    case QEM_E_PACK_CALIBRATION: return "invalid pack detector calibration";
    case QEM_E_FILE_DIGEST: return "whole-file SHA-256 differs from the expected identity";
    case QEM_E_INSUFFICIENT_MEMORY: return "not enough memory for the plan";
    case QEM_E_INSUFFICIENT_DISK: return "not enough disk space for the plan";
    case QEM_E_NONCONSTANT_EXCLUDED: return "an excluded pixel's raw value is not constant";
    case QEM_E_BUFFER_TOO_SMALL: return "buffer too small";
    case QEM_E_PACK_PREPARED: return "invalid pack prepared extension";
    case QEM_E_STREAM: return "malformed detector stream message";
    }
    return "unknown status";
}

qem_status_group qem_status_group_of(qem_status status)
{
    switch (status) {
    case QEM_OK: return QEM_GROUP_OK;
    case QEM_E_INVALID_ARGUMENT:
    case QEM_E_BUFFER_TOO_SMALL: return QEM_GROUP_USAGE;
    case QEM_E_IO:
    case QEM_E_EXISTS:
    case QEM_E_CHANGED: return QEM_GROUP_IO;
    case QEM_E_CANCELLED: return QEM_GROUP_CANCELLED;
    case QEM_E_HEADER_CHECKSUM:
    case QEM_E_BODY_CHECKSUM:
    case QEM_E_LOGICAL_CHECKSUM:
    case QEM_E_PACK_CRC:
    case QEM_E_PACK_DIGEST:
    case QEM_E_FILE_DIGEST: return QEM_GROUP_CHECKSUM;
    case QEM_E_RETIRED_FORMAT:
    case QEM_E_UNSUPPORTED:
    case QEM_E_NOT_YET:
    case QEM_E_WRONG_CODEC:
    case QEM_E_NOT_RECORDED:
    case QEM_E_NONCONSTANT_EXCLUDED: return QEM_GROUP_UNSUPPORTED;
    case QEM_E_NO_MEMORY:
    case QEM_E_LIMIT:
    case QEM_E_INSUFFICIENT_MEMORY:
    case QEM_E_INSUFFICIENT_DISK: return QEM_GROUP_LIMIT;
    case QEM_E_NOT_QEM:
    case QEM_E_HEADER_LENGTH:
    case QEM_E_JSON:
    case QEM_E_HEADER:
    case QEM_E_FILE_LENGTH:
    case QEM_E_LAYOUT:
    case QEM_E_METADATA:
    case QEM_E_MODEL:
    case QEM_E_RANS_STATE:
    case QEM_E_RANS_TRUNCATED:
    case QEM_E_RANS_FINAL:
    case QEM_E_SPARSE:
    case QEM_E_VALUE_RANGE:
    case QEM_E_SPATIAL:
    case QEM_E_NPY:
    case QEM_E_PACK_PRELUDE:
    case QEM_E_PACK_MANIFEST:
    case QEM_E_PACK_INDEX:
    case QEM_E_PACK_RANGE:
    case QEM_E_PACK_DESCRIPTOR:
    case QEM_E_PACK_LZ4:
    case QEM_E_PACK_CALIBRATION:
    case QEM_E_PACK_PREPARED:
    case QEM_E_STREAM: return QEM_GROUP_FORMAT;
    }
    return QEM_GROUP_USAGE;
}

const char *qem_status_group_name(qem_status_group group)
{
    switch (group) {
    case QEM_GROUP_OK: return "ok";
    case QEM_GROUP_USAGE: return "usage";
    case QEM_GROUP_IO: return "io";
    case QEM_GROUP_FORMAT: return "format";
    case QEM_GROUP_CHECKSUM: return "checksum";
    case QEM_GROUP_UNSUPPORTED: return "unsupported";
    case QEM_GROUP_LIMIT: return "limit";
    case QEM_GROUP_CANCELLED: return "cancelled";
    }
    return "usage";
}

void qem_error_clear(qem_error *error)
{
    if (error) {
        error->status = QEM_OK;
        error->message[0] = '\0';
    }
}

qem_status qem_fail(qem_error *error, qem_status status, const char *format, ...)
{
    if (error && error->status == QEM_OK && status != QEM_OK) {
        error->status = status;
        va_list args;
        va_start(args, format);
        vsnprintf(error->message, sizeof error->message, format, args);
        va_end(args);
    }
    return status;
}

const char *qem_write_advice(int error_number)
{
    return error_number == ENOSPC || error_number == EDQUOT || error_number == EFBIG
               ? "; the disk is full or a file-size limit was reached"
               : "";
}

void qem_error_name_destination(qem_error *error, const char *dest)
{
    if (!error || error->status != QEM_E_IO || !dest)
        return;
    const char *m = error->message;
    if (strncmp(m, "write failed: ", 14) != 0 && strncmp(m, "HDF5 could not", 14) != 0)
        return;
    char reason[sizeof error->message];
    snprintf(reason, sizeof reason, "%s", strncmp(m, "write failed: ", 14) == 0 ? m + 14 : m);
    snprintf(error->message, sizeof error->message, "cannot write '%.160s': %.300s", dest, reason);
}
