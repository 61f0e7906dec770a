// Check macro for NCCL calls. Include only from translation units built with NCCL.
#pragma once

#include <nccl.h>

#include "common/status.h"

#define MP_NCCL_CHECK(expr)                                                                  \
  do {                                                                                       \
    ncclResult_t mp_nccl_res_ = (expr);                                                      \
    if (mp_nccl_res_ != ncclSuccess)                                                         \
      return ::millipede::DeviceError(::millipede::detail::StrCat(                           \
          "NCCL error ", ncclGetErrorString(mp_nccl_res_), " in `" #expr "` at " __FILE__ ":", \
          __LINE__));                                                                        \
  } while (0)
