# Sourced by gpu-bundle, gpu-check and tests/e2e/gpu_scripts.sh: what a GPU host needs from
# a cuda build, listed once. The executables gpu-check runs, and the cuda backend's module
# they load (executor/cuda_module.h), which sits beside them in bin/.
# shellcheck shell=bash disable=SC2034  # used by the scripts that source this
gpu_bins=(ringmaster cuda_tests cuda_transport_tests cuda_attention_bench)
gpu_module=libringmaster_cuda.so
