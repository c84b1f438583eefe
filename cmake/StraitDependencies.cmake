# Every external library, found once. scripts/setup installs the Debian packages that provide them.

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(ZLIB REQUIRED)
# prometheus-cpp (prometheus-cpp-dev): its core library writes /metrics (gateway/http). Debian's
# config also finds civetweb and CURL for its pull and push libraries, which Strait does not use.
find_package(prometheus-cpp CONFIG REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# SentencePiece (libsentencepiece-dev): its processor and trainer libraries, linked by one module
# only (site/data/CMakeLists.txt says why).
pkg_check_modules(SENTENCEPIECE REQUIRED sentencepiece>=0.1.90)
find_path(STRAIT_SENTENCEPIECE_INCLUDE sentencepiece_processor.h HINTS ${SENTENCEPIECE_INCLUDE_DIRS} REQUIRED)
find_library(STRAIT_SENTENCEPIECE_LIBRARY sentencepiece HINTS ${SENTENCEPIECE_LIBRARY_DIRS} REQUIRED)
find_library(STRAIT_SENTENCEPIECE_TRAIN_LIBRARY sentencepiece_train HINTS ${SENTENCEPIECE_LIBRARY_DIRS}
             REQUIRED)
add_library(strait_sentencepiece_libraries INTERFACE)
target_include_directories(strait_sentencepiece_libraries SYSTEM INTERFACE ${STRAIT_SENTENCEPIECE_INCLUDE})
target_link_libraries(strait_sentencepiece_libraries INTERFACE ${STRAIT_SENTENCEPIECE_TRAIN_LIBRARY}
                                                              ${STRAIT_SENTENCEPIECE_LIBRARY})
add_library(SentencePiece::SentencePiece ALIAS strait_sentencepiece_libraries)
# Gloo (libgloo-dev): the collective library across the ranks of a multi-machine CPU site.
find_package(Gloo CONFIG REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(STRAIT_CBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
          REQUIRED)
if(STRAIT_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(STRAIT_WITH_CUDA)
  find_library(STRAIT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(STRAIT_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  # cuDNN 9 (its graph API: flash attention for bf16), installed beside CUDA.
  find_library(STRAIT_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
               REQUIRED)
endif()
