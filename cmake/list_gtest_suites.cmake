# Run by stalepipe_gtest_suites after a build: writes OUTPUT, one add_test per suite of
# EXECUTABLE (from --gtest_list_tests), with LABELS and TIMEOUT.
execute_process(COMMAND ${EXECUTABLE} --gtest_list_tests OUTPUT_VARIABLE listing
                RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${status})")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
foreach(line IN LISTS lines)
  # Suite lines start in column 0 and end with '.', e.g. "Zoo." or "Ranks/Equal.  # GetParam..."
  if(line MATCHES "^([^ #][^ ]*)\\.")
    set(suite ${CMAKE_MATCH_1})
    string(APPEND content
      "add_test([=[${suite}]=] \"${EXECUTABLE}\" [=[--gtest_filter=${suite}.*]=])\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES LABELS ${LABELS} TIMEOUT ${TIMEOUT})\n")
  endif()
endforeach()
file(WRITE ${OUTPUT} "${content}")
