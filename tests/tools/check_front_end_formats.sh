#!/bin/sh
# Front-ends read through the container alone: no downcast to a .qem file
# or a pack, no format-specific call, no branch on the container's kind.
# Checks the command (cli, the viewer cli/view) and the Python extension
# (python/src). Writing a pack from an acquisition (qem_pack_inspect, plan,
# produce) is a writer's call, not a read, and stays allowed.
# usage: check_front_end_formats.sh REPOSITORY_ROOT
set -eu
ROOT=$1
forbidden='\bqem_container_file\b|\bqem_container_pack\b|QEM_KIND_QEM|QEM_KIND_PACK'
forbidden="$forbidden|\\bqem_file\\b|\\bqem_pack\\b|\\bqem_open\\(|\\bqem_pack_open\\("
forbidden="$forbidden|\\bqem_(pack_)?get_info\\(|\\bqem_get_chunk\\(|\\bqem_get_calibration\\(|\\bqem_verify\\(|\\bqem_export_npy\\(|\\bqem_pack_load\\(|\\bqem_pack_time_first_access\\("
forbidden="$forbidden|\\bqem_(pack_)?summary_json\\(|\\bqem_header_json\\(|\\bqem_pack_manifest_json\\("
forbidden="$forbidden|\\bqem_(file|pack)_info\\b|\\bqem_read_(scans|values|codes)\\(|\\bQEM_PACK_(RAW|MASK_APPLIED)\\b"
found=$(cd "$ROOT" && grep -nE "$forbidden" cli/*.c cli/*.h cli/view/*.c cli/view/*.h python/src/*.c python/src/*.h || true)
if [ -n "$found" ]; then
    echo "front ends: format-specific calls or branches (use the qem_container_* calls):" >&2
    printf '%s\n' "$found" >&2
    exit 1
fi
echo "front ends: cli, cli/view and python/src read through the container alone"
