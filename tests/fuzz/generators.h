// Random well-formed requests for the randomized test, field by field: each field is absent,
// valid, or an edge value (seed_corpus.h), so that combinations of fields (n with stream, echo
// with logprobs, a policy with ids) reach admission far more often than byte mutations do.
// Deterministic for a given generator state.
#pragma once

#include <random>
#include <string>

namespace millipede::fuzz {

// A whole HTTP request to /v1/completions, /v1/chat/completions, /tokenize or /detokenize.
std::string RandomHttpRequest(std::mt19937_64& rng);

// A JobSpec message in the flat wire form.
std::string RandomJobSpec(std::mt19937_64& rng);

}  // namespace millipede::fuzz
