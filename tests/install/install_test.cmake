# ctest's install_consumer (CMakeLists.txt): installs a build into a scratch prefix, builds
# tests/install/consumer against it the way the README says, runs it, and checks what the
# consumer's compile read (gcc/clang -H lists every header opened):
#   - every ampfuse header from the prefix, none from the source tree;
#   - exactly the installed headers: ampfuse.h includes each of them, directly or not;
#   - no header of ampfuse's dependencies or of its test and tool packages.
#
#   cmake -D BUILD_DIR=build -D CONFIG=Release -D SOURCE_DIR=. -D WORK_DIR=build/install_test
#         -D GENERATOR="Unix Makefiles" -D CXX=/usr/bin/c++ -P tests/install/install_test.cmake
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR CONFIG SOURCE_DIR WORK_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: -D ${var}=... is missing")
  endif()
endforeach()

# Runs a command; stops the test with its output when it fails. Its output goes to `output`.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${rc}): ${command}\n${out}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --config ${CONFIG} --prefix ${prefix})

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -D CMAKE_BUILD_TYPE=Release -D CMAKE_CXX_COMPILER=${CXX} -D CMAKE_PREFIX_PATH=${prefix} -D CMAKE_CXX_FLAGS=-H)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
set(build_output "${output}")
run(${WORK_DIR}/build/consumer)
message(STATUS "consumer: ${output}")

# -H prints one line per header opened: dots (the include depth), a space, the path.
string(REGEX MATCHALL "\n\\.+ [^\n]+" lines "\n${build_output}")
set(read_ours)
set(read_bad)
foreach(line ${lines})
  string(REGEX REPLACE "^\n\\.+ " "" path "${line}")
  cmake_path(NORMAL_PATH path)
  cmake_path(IS_PREFIX prefix "${path}" NORMALIZE in_prefix)
  cmake_path(IS_PREFIX SOURCE_DIR "${path}" NORMALIZE in_source)
  if(in_prefix)
    list(APPEND read_ours ${path})
  elseif(in_source OR path MATCHES "/(fmt|nlohmann|oneapi|llvm|llvm-c|gtest|gmock|CLI|benchmark)/|/dnnl[^/]*$")
    list(APPEND read_bad ${path})
  endif()
endforeach()
if(NOT read_ours)
  message(FATAL_ERROR "the consumer's build printed no header list (-H):\n${build_output}")
endif()
if(read_bad)
  list(REMOVE_DUPLICATES read_bad)
  list(JOIN read_bad "\n  " read_bad)
  message(FATAL_ERROR "the consumer's compile read headers from the source tree or of ampfuse's dependencies:\n  ${read_bad}")
endif()

list(REMOVE_DUPLICATES read_ours)
file(GLOB_RECURSE installed ${prefix}/include/*)
set(unread ${installed})
list(REMOVE_ITEM unread ${read_ours})
if(unread)
  list(JOIN unread "\n  " unread)
  message(FATAL_ERROR "installed but not included by <ampfuse/ampfuse.h> (AMPFUSE_PUBLIC_HEADERS in CMakeLists.txt):\n  ${unread}")
endif()
list(LENGTH installed count)
message(STATUS "the consumer read the ${count} installed headers and no others of ampfuse or its dependencies")
