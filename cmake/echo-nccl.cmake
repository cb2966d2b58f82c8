# Finds NCCL for echo::echo, beside the CUDA toolkit first (the toolkit's NVIDIA packages put
# nccl.h and libnccl there), then under NCCL_ROOT (CMake or environment variable) and the system
# paths (Debian's libnccl-dev). Used by Echo's own build and by its installed package config, so
# both look in the same places.
#
# Needs find_package(CUDAToolkit) first. Defines, when found, the imported target echo::nccl;
# sets ECHO_NCCL_FOUND, and ECHO_NCCL_NOT_FOUND_MESSAGE saying what is missing and how to point
# CMake at it. The cache variables ECHO_NCCL_INCLUDE_DIR and ECHO_NCCL_LIBRARY override the search.
if(NOT TARGET echo::nccl)
  find_path(ECHO_NCCL_INCLUDE_DIR nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_ROOT} $ENV{NCCL_ROOT}
    PATH_SUFFIXES include
    DOC "Directory holding nccl.h (echo::echo)")
  find_library(ECHO_NCCL_LIBRARY nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR} ${NCCL_ROOT} $ENV{NCCL_ROOT}
    PATH_SUFFIXES lib lib64
    DOC "The NCCL library, libnccl (echo::echo)")
  if(ECHO_NCCL_INCLUDE_DIR AND ECHO_NCCL_LIBRARY)
    # GLOBAL: echo::echo names it, and projects that add Echo as a subdirectory link it elsewhere.
    add_library(echo::nccl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(echo::nccl PROPERTIES
      IMPORTED_LOCATION "${ECHO_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${ECHO_NCCL_INCLUDE_DIR}")
  endif()
endif()

if(TARGET echo::nccl)
  set(ECHO_NCCL_FOUND TRUE)
  set(ECHO_NCCL_NOT_FOUND_MESSAGE "")
else()
  set(ECHO_NCCL_FOUND FALSE)
  string(CONCAT ECHO_NCCL_NOT_FOUND_MESSAGE
    "echo::echo needs NCCL, which was not found (nccl.h: ${ECHO_NCCL_INCLUDE_DIR}; libnccl: "
    "${ECHO_NCCL_LIBRARY}). Looked beside the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS}, "
    "${CUDAToolkit_LIBRARY_DIR}), under NCCL_ROOT and in the system paths. Install NCCL (NVIDIA's "
    "libnccl-dev package) or point CMake at it with -DNCCL_ROOT=<prefix holding include/nccl.h and "
    "lib/libnccl.so>, or with -DECHO_NCCL_INCLUDE_DIR=<dir> -DECHO_NCCL_LIBRARY=<file>.")
endif()
