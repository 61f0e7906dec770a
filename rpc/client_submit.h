// `millipede submit`: sends one job and streams its answer to stdout (or prints the final record
// as JSON).
#pragma once

#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"
#include "rpc/client_connection.h"

namespace millipede {

// The submit command's own flags (the sampling flags come from SamplingFlagNames()).
std::vector<std::string> SubmitFlagNames();

// Runs the command; `args` are its positional arguments ("-" = the prompt from stdin). Returns
// the exit status, or the error (a refused or failed job, a lost connection).
StatusOr<int> Submit(const Flags& flags, const std::vector<std::string>& args, ClientConnection& c);

}  // namespace millipede
