// MP_HOST_DEVICE marks small inline functions shared by host code and CUDA device code.
#pragma once

#if defined(__CUDACC__)
#define MP_HOST_DEVICE __host__ __device__
#else
#define MP_HOST_DEVICE
#endif
