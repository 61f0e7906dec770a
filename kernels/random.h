// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011). A draw is a pure function of (seed, step, stream), so every backend and
// every rank produces the same number for the same request without sharing generator state.
// Header-only; usable from host code and CUDA device code.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace millipede {

struct RandomPhiloxBlock {
  uint32_t v[4];
};

// One Philox-4x32-10 block: 10 rounds of the published round function and key schedule.
// Bit-exact with Random123's philox4x32 (checked against its known-answer vectors).
MP_HOST_DEVICE inline RandomPhiloxBlock RandomPhilox4x32(RandomPhiloxBlock counter, uint32_t key0,
                                                         uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint32_t* c = counter.v;
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const RandomPhiloxBlock next = {{hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0}};
    counter = next;
  }
  return counter;
}

// 128 random bits for (seed, step, stream): key = seed, counter = (step, stream), each split into
// little-endian 32-bit words.
MP_HOST_DEVICE inline RandomPhiloxBlock RandomBits(uint64_t seed, uint64_t step,
                                                   uint64_t stream = 0) {
  RandomPhiloxBlock counter = {{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                                static_cast<uint32_t>(stream),
                                static_cast<uint32_t>(stream >> 32)}};
  return RandomPhilox4x32(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A uniform double in [0, 1) with 53 random bits (words 0 and 1 of the block); exact on every
// backend because only integer operations and one exact scaling are involved.
MP_HOST_DEVICE inline double RandomUniform(uint64_t seed, uint64_t step, uint64_t stream = 0) {
  RandomPhiloxBlock bits = RandomBits(seed, step, stream);
  uint64_t x = (static_cast<uint64_t>(bits.v[0]) << 32) | bits.v[1];
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace millipede
