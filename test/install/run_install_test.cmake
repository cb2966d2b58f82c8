# Install test, run by CTest as `cmake -P`: install the Echo build tree into a scratch prefix,
# then configure, build and run one outside project against that prefix only.
#
#   host    test/install/host_consumer: echo::reference only, configured with CUDAToolkit hidden
#           (the host parts need no CUDA).
#   device  test/install/device_consumer: CUDA code linking only echo::echo; and, with
#           CUDAToolkit hidden, its configure must fail naming CUDAToolkit.
#
# Inputs (-D): ECHO_CONSUMER (host|device), ECHO_BUILD_DIR, ECHO_CONFIG, ECHO_INSTALL_TESTS (this
# folder), ECHO_WORK_DIR, ECHO_GENERATOR, ECHO_CXX_COMPILER; for device also ECHO_CUDA_COMPILER and
# ECHO_CUDA_ARCHITECTURES.
cmake_minimum_required(VERSION 3.24)

foreach(v ECHO_CONSUMER ECHO_BUILD_DIR ECHO_INSTALL_TESTS ECHO_WORK_DIR ECHO_GENERATOR)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

set(prefix ${ECHO_WORK_DIR}/prefix)
set(build ${ECHO_WORK_DIR}/consumer-build)
set(source ${ECHO_INSTALL_TESTS}/${ECHO_CONSUMER}_consumer)
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

# Only the scratch prefix is searched: no package registry, so a stale registration of some
# other Echo cannot satisfy find_package.
set(configure ${CMAKE_COMMAND} -S ${source} -G ${ECHO_GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DECHO_EXPECTED_PREFIX=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(ECHO_CXX_COMPILER)
  list(APPEND configure -DCMAKE_CXX_COMPILER=${ECHO_CXX_COMPILER})
endif()
if(ECHO_CONSUMER STREQUAL "host")
  list(APPEND configure -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
elseif(ECHO_CONSUMER STREQUAL "device")
  list(APPEND configure -DCMAKE_CUDA_COMPILER=${ECHO_CUDA_COMPILER} -DCMAKE_CUDA_ARCHITECTURES=${ECHO_CUDA_ARCHITECTURES})
  # Without the toolkit, find_package(echo) must fail and say why.
  message(STATUS "[install test] configure without CUDAToolkit (must fail)")
  execute_process(COMMAND ${configure} -B ${ECHO_WORK_DIR}/no-cuda-build -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "CUDAToolkit")
    message(FATAL_ERROR "[install test] find_package(echo) without CUDAToolkit: rc ${rc}, expected a failure "
                        "naming CUDAToolkit; output:\n${out}${err}")
  endif()
else()
  message(FATAL_ERROR "run_install_test.cmake: ECHO_CONSUMER must be host or device, got '${ECHO_CONSUMER}'")
endif()

run(configure ${configure} -B ${build})
run(build ${CMAKE_COMMAND} --build ${build} ${config_args})

set(exe ${build}/echo_consumer)
if(ECHO_CONFIG AND EXISTS ${build}/${ECHO_CONFIG}/echo_consumer)
  set(exe ${build}/${ECHO_CONFIG}/echo_consumer)
endif()
run(run ${exe})
