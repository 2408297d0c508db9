# ctest driver (cmake -P): install the normblocks build tree into a scratch
# prefix, then build and run tests/consumer against it via find_package() and,
# when pkg-config is available, via `pkg-config --cflags --libs normblocks`.
#
# Inputs: NB_BUILD_DIR NB_CONSUMER_SRC NB_WORK_DIR NB_GENERATOR NB_C_COMPILER NB_CONFIG
cmake_minimum_required(VERSION 3.16)

foreach(v NB_BUILD_DIR NB_CONSUMER_SRC NB_WORK_DIR NB_C_COMPILER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "consumer_test.cmake: ${v} not set")
  endif()
endforeach()
if(NOT NB_CONFIG)
  set(NB_CONFIG Release)
endif()

set(prefix "${NB_WORK_DIR}/prefix")
set(bdir "${NB_WORK_DIR}/build")
file(REMOVE_RECURSE "${NB_WORK_DIR}")
file(MAKE_DIRECTORY "${NB_WORK_DIR}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO STDOUT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${what} failed (${rc})")
  endif()
endfunction()

# (a) install
run("install" "${CMAKE_COMMAND}" --install "${NB_BUILD_DIR}" --prefix "${prefix}" --config "${NB_CONFIG}")
foreach(f include/normblocks.h share/normblocks/pytorch/normblocks_twin.py
    share/normblocks/pytorch/compare.py)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "consumer: ${f} missing from install tree")
  endif()
endforeach()
# the installed porting README's relative links resolve inside the install tree
set(_readme "${prefix}/share/normblocks/pytorch/README.md")
file(READ "${_readme}" _text)
string(REGEX MATCHALL "\\]\\(\\.\\.[^)#]*" _links "${_text}")
foreach(_l ${_links})
  string(SUBSTRING "${_l}" 2 -1 _rel)
  if(NOT EXISTS "${prefix}/share/normblocks/pytorch/${_rel}")
    message(FATAL_ERROR "consumer: ${_readme} links to ${_rel}, which is not installed")
  endif()
endforeach()
# the tools the build made are installed (the trainer as nbtrain), and run from there
foreach(t nbdiff nbimport train)
  set(_inst ${t})
  if(t STREQUAL "train")
    set(_inst nbtrain)
  endif()
  if(EXISTS "${NB_BUILD_DIR}/${t}")
    if(NOT EXISTS "${prefix}/bin/${_inst}")
      message(FATAL_ERROR "consumer: ${t} was built but bin/${_inst} is not installed")
    endif()
    run("bin/${_inst} --help" "${prefix}/bin/${_inst}" --help)
  endif()
endforeach()
file(GLOB_RECURSE _cfg "${prefix}/*/normblocksConfig.cmake")
file(GLOB_RECURSE _pc "${prefix}/*/normblocks.pc")
if(NOT _cfg OR NOT _pc)
  message(FATAL_ERROR "consumer: normblocksConfig.cmake or normblocks.pc missing from install tree")
endif()

# (b) configure + build with find_package(normblocks)
set(gen_args "")
if(NB_GENERATOR)
  set(gen_args -G "${NB_GENERATOR}")
endif()
run("configure" "${CMAKE_COMMAND}" -S "${NB_CONSUMER_SRC}" -B "${bdir}" ${gen_args}
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${NB_C_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${NB_CONFIG}")
run("build" "${CMAKE_COMMAND}" --build "${bdir}" --config "${NB_CONFIG}")

# (c) run
set(exe "${bdir}/consumer")
if(NOT EXISTS "${exe}")
  file(GLOB_RECURSE exe "${bdir}/consumer" "${bdir}/consumer.exe")
endif()
run("run (find_package)" "${exe}")

# (d) pkg-config
find_program(PKG_CONFIG_EXE NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG_EXE)
  message(STATUS "consumer: pkg-config not found, skipping the pkg-config check")
  return()
endif()
get_filename_component(pcdir "${_pc}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pcdir}")
execute_process(COMMAND "${PKG_CONFIG_EXE}" --cflags --libs normblocks
  OUTPUT_VARIABLE pcflags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer: pkg-config --cflags --libs normblocks failed (${rc})")
endif()
message(STATUS "consumer: pkg-config flags: ${pcflags}")
separate_arguments(pcflags UNIX_COMMAND "${pcflags}")
set(pcexe "${NB_WORK_DIR}/consumer_pc")
run("compile (pkg-config)" "${NB_C_COMPILER}" -O2 "${NB_CONSUMER_SRC}/consumer.c" -o "${pcexe}" ${pcflags})
run("run (pkg-config)" "${pcexe}")
message(STATUS "consumer: all checks passed")
