# Cross build for 64-bit Arm Linux with Debian's GCC 12 cross toolchain
# (g++-aarch64-linux-gnu) against the arm64 sysroot of scripts/arm64-sysroot.sh.
# Test programs run under qemu-aarch64 (qemu-user); pick the emulated CPU, and
# with it Highway's target, with QEMU_CPU (the aarch64 test presets: max = SVE2,
# SVE and NEON; cortex-a72 = NEON only).
#   cmake -DCMAKE_TOOLCHAIN_FILE=platforms/toolchains/aarch64-linux-gnu.cmake \
#         -DRECUR_ARM64_SYSROOT=build/sysroot-aarch64 ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(RECUR_ARM64_SYSROOT "${CMAKE_SOURCE_DIR}/build/sysroot-aarch64" CACHE PATH
    "arm64 libraries unpacked by scripts/arm64-sysroot.sh")
get_filename_component(RECUR_ARM64_SYSROOT "${RECUR_ARM64_SYSROOT}" ABSOLUTE)
if(NOT EXISTS "${RECUR_ARM64_SYSROOT}/.complete")
  message(FATAL_ERROR "no arm64 sysroot at ${RECUR_ARM64_SYSROOT}: run scripts/arm64-sysroot.sh")
endif()
# Try-compiles see the cache variable too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES RECUR_ARM64_SYSROOT)

# Not CMAKE_SYSROOT: libc comes from the cross toolchain, the libraries from
# the unpacked packages. Programs (flatc) are the host's.
set(CMAKE_FIND_ROOT_PATH "${RECUR_ARM64_SYSROOT};/usr/aarch64-linux-gnu")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${RECUR_ARM64_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${RECUR_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${RECUR_ARM64_SYSROOT}/usr/share/pkgconfig")

# Debian 12's packages still put some libraries in /lib (libz.so.1 and
# libbz2.so.1.0, which libzip.so needs), and the unpacked sysroot has no
# merged-/usr link: both folders are searched.
set(arm64_libdir
    "${RECUR_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu:${RECUR_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
# The libraries' own dependencies (libXNNPACK.so needs libcpuinfo.so.0) are
# found at link time through -rpath-link and at run time through LD_LIBRARY_PATH
# inside the emulator (-E): the executables' RUNPATH does not cover them.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${arm64_libdir}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${arm64_libdir}")
set(CMAKE_CROSSCOMPILING_EMULATOR
    qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=${arm64_libdir})
