# Install test, run by CTest as `cmake -P`: install the Echo build tree into a scratch prefix,
# then configure, build and run test/install/consumer against that prefix only.
#
# Inputs (-D): ECHO_BUILD_DIR, ECHO_CONFIG, ECHO_CONSUMER_SOURCE, ECHO_WORK_DIR, ECHO_GENERATOR,
# ECHO_CXX_COMPILER.
cmake_minimum_required(VERSION 3.24)

foreach(v ECHO_BUILD_DIR ECHO_CONSUMER_SOURCE ECHO_WORK_DIR ECHO_GENERATOR)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

set(prefix ${ECHO_WORK_DIR}/prefix)
set(build ${ECHO_WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${ECHO_WORK_DIR})
file(MAKE_DIRECTORY ${ECHO_WORK_DIR})

function(run step)
  message(STATUS "[install test] ${step}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[install test] ${step} failed (${rc})")
  endif()
endfunction()

set(config_args)
if(ECHO_CONFIG)
  set(config_args --config ${ECHO_CONFIG})
endif()

run(install ${CMAKE_COMMAND} --install ${ECHO_BUILD_DIR} --prefix ${prefix} ${config_args})

set(compiler_args)
if(ECHO_CXX_COMPILER)
  set(compiler_args -DCMAKE_CXX_COMPILER=${ECHO_CXX_COMPILER})
endif()
# Only the scratch prefix is searched: no package registry, so a stale registration of some
# other Echo cannot satisfy find_package.
run(configure ${CMAKE_COMMAND} -S ${ECHO_CONSUMER_SOURCE} -B ${build} -G ${ECHO_GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DECHO_EXPECTED_PREFIX=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    ${compiler_args})
run(build ${CMAKE_COMMAND} --build ${build} ${config_args})

set(exe ${build}/echo_consumer)
if(ECHO_CONFIG AND EXISTS ${build}/${ECHO_CONFIG}/echo_consumer)
  set(exe ${build}/${ECHO_CONFIG}/echo_consumer)
endif()
run(run ${exe})
