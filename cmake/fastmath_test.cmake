# ctest driver (cmake -P): configure this project with the other compiler and only the
# fast-math tests (NB_FASTMATH_ONLY), build them, run them.
#
# Inputs: NB_SRC NB_WORK_DIR NB_CC NB_CXX NB_GENERATOR NB_NATIVE
cmake_minimum_required(VERSION 3.16)

foreach(v NB_SRC NB_WORK_DIR NB_CC NB_CXX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "fastmath_test.cmake: ${v} not set")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fastmath: ${what} failed (${rc})")
  endif()
endfunction()

set(gen "")
if(NB_GENERATOR)
  set(gen -G "${NB_GENERATOR}")
endif()
run("configure" "${CMAKE_COMMAND}" -S "${NB_SRC}" -B "${NB_WORK_DIR}" ${gen}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${NB_CC} -DCMAKE_CXX_COMPILER=${NB_CXX}
    -DNB_FASTMATH_ONLY=ON -DNORMBLOCKS_NATIVE=${NB_NATIVE} -DNORMBLOCKS_BUILD_EXAMPLES=OFF
    -DNORMBLOCKS_BUILD_BENCH=OFF -DNORMBLOCKS_INSTALL=OFF)
run("build" "${CMAKE_COMMAND}" --build "${NB_WORK_DIR}" -j2)
run("tests" "${CMAKE_CTEST_COMMAND}" --test-dir "${NB_WORK_DIR}" --output-on-failure)
