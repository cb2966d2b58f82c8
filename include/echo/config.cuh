// Echo: compiler and platform configuration. Included first by every Echo header.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define ECHO_HOST_DEVICE __host__ __device__
#define ECHO_HAS_CUDA 1
#else
#define ECHO_HOST_DEVICE
#define ECHO_HAS_CUDA 0
#endif

#if defined(__CUDA_ARCH__)
#define ECHO_DEVICE_COMPILE 1
#else
#define ECHO_DEVICE_COMPILE 0
#endif

#if defined(_MSC_VER)
#define ECHO_FORCEINLINE __forceinline
#else
#define ECHO_FORCEINLINE inline __attribute__((always_inline))
#endif

#define ECHO_HD ECHO_HOST_DEVICE ECHO_FORCEINLINE

#if __cplusplus < 201703L && !defined(_MSVC_LANG)
#error "Echo needs C++17 or newer"
#endif

// Host and device must perform the same IEEE operations for the reference to match the device
// bit for bit. Fast math flushes denormals and approximates division, which breaks that contract.
#if defined(__USE_FAST_MATH__) && !defined(ECHO_ALLOW_FAST_MATH)
#error "Echo's device path must be built without --use_fast_math (define ECHO_ALLOW_FAST_MATH to accept non-bit-exact results)"
#endif

#define ECHO_VERSION_MAJOR 0
#define ECHO_VERSION_MINOR 1
#define ECHO_VERSION_PATCH 0
