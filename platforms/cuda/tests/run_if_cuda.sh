#!/bin/sh
# Runs a test program that links OpenMM's CUDA library; exits 77 (skipped) where the CUDA driver
# library cannot be loaded, as on machines without a GPU.
out=$("$@" 2>&1); rc=$?
if [ $rc -eq 127 ] && printf '%s' "$out" | grep -q "libcuda.so"; then
  echo "skipped: the CUDA driver library (libcuda.so.1) is not available on this machine"
  exit 77
fi
printf '%s\n' "$out"
exit $rc
