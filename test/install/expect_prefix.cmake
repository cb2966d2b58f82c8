# Fails the consumer's configure unless echo was found under ECHO_EXPECTED_PREFIX (when given).
if(DEFINED ECHO_EXPECTED_PREFIX)
  file(REAL_PATH "${ECHO_EXPECTED_PREFIX}" expected)
  file(REAL_PATH "${echo_DIR}" found)
  string(FIND "${found}" "${expected}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "echo was found at ${found}, not under the installed prefix ${expected}")
  endif()
endif()
