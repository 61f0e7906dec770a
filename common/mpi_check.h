// Check macro for MPI calls (MPI must be set to return errors: MPI_ERRORS_RETURN).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "common/status.h"

namespace millipede::detail {
inline std::string MpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}
}  // namespace millipede::detail

#define MP_MPI_CHECK(expr)                                                                      \
  do {                                                                                          \
    int mp_mpi_rc_ = (expr);                                                                    \
    if (mp_mpi_rc_ != MPI_SUCCESS)                                                              \
      return ::millipede::DeviceError(::millipede::detail::StrCat(                              \
          "MPI error ", ::millipede::detail::MpiErrorString(mp_mpi_rc_), " in `" #expr "` at " \
          __FILE__ ":", __LINE__));                                                             \
  } while (0)
