# End-to-end test with real tools (curl, a Prometheus server, the Grafana dashboard's queries,
# the bundle and launch scripts). Included from tests/service/CMakeLists.txt with
# include(prometheus_tests.cmake OPTIONAL). Skips (exit 77) when a program it needs is missing.
add_test(NAME service_prometheus
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/prometheus_test.sh
                 --bin ${CMAKE_BINARY_DIR}/bin --source ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_CURRENT_BINARY_DIR}/prometheus_work)
set_tests_properties(service_prometheus PROPERTIES
  LABELS "cpu;mpi;service" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
