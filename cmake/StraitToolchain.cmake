# Compiler set-up shared by every target: ccache, warnings, sanitizers, CUDA.

find_program(STRAIT_CCACHE ccache)
if(STRAIT_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${STRAIT_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${STRAIT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${STRAIT_CCACHE})
endif()

# Warnings apply to our own targets only (strait_add_* below), not to generated code.
set(STRAIT_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

if(STRAIT_SANITIZE)
  add_compile_options(-fsanitize=${STRAIT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${STRAIT_SANITIZE})
endif()

if(STRAIT_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "STRAIT_FUZZ needs clang: configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
endif()
if(STRAIT_FUZZ)
  # Coverage instrumentation for every library the fuzz targets link.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()

# CUDA: AUTO turns on when nvcc is found (also under /usr/local/cuda, which is not on PATH by default).
set(STRAIT_WITH_CUDA OFF)
if(NOT STRAIT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND NOT STRAIT_SANITIZE)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # C++17: CMake 3.25 cannot ask nvcc 13 for C++20; .cu files need nothing newer.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(STRAIT_WITH_CUDA ON)
  elseif(STRAIT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRAIT_CUDA=ON but no usable nvcc was found (looked on PATH and in /usr/local/cuda/bin), "
                        "or STRAIT_SANITIZE is set (sanitizer builds are CPU-only)")
  endif()
endif()
