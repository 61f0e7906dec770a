#include <capnp/serialize.h>

#include <cstring>

#include "rpc/millipede.capnp.h"
#include "rpc/rpc_errors.h"
#include "rpc/rpc_server.h"
#include "rpc/wire_convert.h"
#include "tests/fuzz/fuzz_service.h"
#include "tests/fuzz/fuzz_targets.h"

namespace millipede::fuzz {

StatusOr<FuzzStage> FuzzJobSpec(std::string_view input) {
  // The transport delivers whole words; a shorter tail never becomes a message.
  const size_t words = input.size() / sizeof(capnp::word);
  if (words == 0) return FuzzStage::kNothing;
  kj::Array<capnp::word> buffer = kj::heapArray<capnp::word>(words);
  std::memcpy(buffer.begin(), input.data(), words * sizeof(capnp::word));
  JobRequest request;
  try {
    capnp::FlatArrayMessageReader reader(buffer, rpc::RpcReaderOptions());
    request = rpc::JobRequestFromWire(reader.getRoot<rpc::JobSpec>());
  } catch (const kj::Exception& e) {
    // The RPC system answers the call with this error; the connection and the server go on.
    Status status = rpc::StatusFromException(e);
    MP_ASSERT(!status.ok(), "a malformed message read as OK");
    return FuzzStage::kRefusedWire;
  }
  MP_ASSIGN_OR_RETURN(bool admitted, CheckAdmission(request));
  return admitted ? FuzzStage::kAdmitted : FuzzStage::kRefusedAdmit;
}

}  // namespace millipede::fuzz
