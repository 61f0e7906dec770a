# HTTP front-end tests (fake JobService behind the real server). Included from
# tests/service/CMakeLists.txt with include(http_tests.cmake).
millipede_add_test(http_server_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/http_chat_template_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/http_completions_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cc
  LIBS millipede_http)
