# One ctest test per GoogleTest suite of a test executable (`Suite.*`), where
# gtest_discover_tests makes one per test. Each test process loads LibTorch (~0.4 s on
# these 2 cores), so for many short tests the start-ups cost more than the tests do.
#
# stalepipe_gtest_suites(TARGET LABELS <label> TIMEOUT <seconds>)
# lists the suites after each build of TARGET and registers them when ctest starts.
set(_STALEPIPE_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/list_gtest_suites.cmake)

function(stalepipe_gtest_suites target)
  cmake_parse_arguments(arg "" "LABELS;TIMEOUT" "" ${ARGN})
  set(list_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D EXECUTABLE=$<TARGET_FILE:${target}> -D OUTPUT=${list_file}
            -D LABELS=${arg_LABELS} -D TIMEOUT=${arg_TIMEOUT} -P ${_STALEPIPE_GTEST_SUITES_SCRIPT}
    BYPRODUCTS ${list_file} VERBATIM)
  file(WRITE ${include_file}
    "if(EXISTS \"${list_file}\")\n"
    "  include(\"${list_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
