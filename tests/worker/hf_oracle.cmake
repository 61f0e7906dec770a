# Hugging Face transformers as an independent oracle for the engine's logits and greedy generation
# (included from tests/worker/CMakeLists.txt).

# Writes the engine's last-position logits for a prompt; the oracle script compares them with HF.
add_executable(millipede-test-logits ${CMAKE_CURRENT_LIST_DIR}/logits_main.cc)
target_link_libraries(millipede-test-logits PRIVATE millipede_single_sequence)
set_target_properties(millipede-test-logits PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# Needs torch and transformers (cluster/install-deps.sh --test puts them in build/pyenv); without
# them the script exits 77 and CTest reports the test as skipped. No Python at all: no test.
if(MILLIPEDE_TEST_PYTHON)
  add_test(NAME hf_oracle
           COMMAND ${MILLIPEDE_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/hf_oracle_test.py
                   ${CMAKE_BINARY_DIR}/bin)
  set_tests_properties(hf_oracle PROPERTIES LABELS cpu SKIP_RETURN_CODE 77 TIMEOUT 900)
endif()
