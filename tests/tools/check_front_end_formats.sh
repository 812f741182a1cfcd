#!/bin/sh
# Front-ends read through the container alone: no downcast to a .qem file
# or a pack, no format-specific call, no branch on the container's kind.
# Checks the viewer (cli/view) and the Python extension (python/src); the
# CLI's file commands (cli/cmd_files.c, cli/common.c, the calibrate
# command) still open formats directly (issue 28 goes on there).
# usage: check_front_end_formats.sh REPOSITORY_ROOT
set -eu
ROOT=$1
forbidden='qem_container_file|qem_container_pack|QEM_CONTAINER_QEM|QEM_CONTAINER_PACK'
forbidden="$forbidden|\\bqem_file\\b|\\bqem_pack\\b|\\bqem_open\\(|\\bqem_pack_open\\("
forbidden="$forbidden|\\bqem_(pack_)?get_info\\(|\\bqem_get_chunk\\(|\\bqem_get_calibration\\("
forbidden="$forbidden|\\bqem_(pack_)?summary_json\\(|\\bqem_header_json\\(|\\bqem_pack_manifest_json\\("
found=$(cd "$ROOT" && grep -nE "$forbidden" cli/view/*.c cli/view/*.h python/src/*.c python/src/*.h || true)
if [ -n "$found" ]; then
    echo "front ends: format-specific calls or branches (use the qem_container_* calls):" >&2
    printf '%s\n' "$found" >&2
    exit 1
fi
echo "front ends: cli/view and python/src read through the container alone"
