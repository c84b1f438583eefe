# Helpers that give every Strait target the same settings.
#
#   strait_add_library(NAME <name> SOURCES ... [DEPS ...] [PUBLIC_DEPS ...])
#       builds library strait_<name> with alias strait::<name>; includes are rooted at the repo
#       (#include "core/job_spec.h").
#   strait_add_test(NAME <name> SOURCES ... [DEPS ...] [LABELS unit|integration|gpu|browser] [TIMEOUT s])
#       a GoogleTest executable registered with CTest (one CTest entry per executable).
#   strait_add_fuzzer(NAME <name> SOURCES ... [DEPS ...])
#       a libFuzzer target, built only with -DSTRAIT_FUZZ=ON.

function(strait_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${STRAIT_WARNINGS}>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                              $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
endfunction()

function(strait_add_library)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(strait_${A_NAME} STATIC ${A_SOURCES})
  add_library(strait::${A_NAME} ALIAS strait_${A_NAME})
  strait_target_defaults(strait_${A_NAME})
  target_link_libraries(strait_${A_NAME} PUBLIC ${A_PUBLIC_DEPS} PRIVATE ${A_DEPS})
endfunction()

function(strait_add_executable)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  strait_target_defaults(${A_NAME})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()

function(strait_add_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${A_NAME} ${A_SOURCES})
  strait_target_defaults(${A_NAME})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest_main)
  target_compile_definitions(${A_NAME} PRIVATE STRAIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                               STRAIT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  add_test(NAME ${A_NAME} COMMAND ${A_NAME} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  # Exit code 77 = skipped (e.g. a gpu test on a machine without a GPU).
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT} SKIP_RETURN_CODE 77)
endfunction()

function(strait_add_fuzzer)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  if(NOT STRAIT_FUZZ)
    return()
  endif()
  add_executable(${A_NAME} ${A_SOURCES})
  strait_target_defaults(${A_NAME})
  target_compile_options(${A_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${A_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
endfunction()
