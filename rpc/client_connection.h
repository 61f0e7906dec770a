// The `millipede` client's connection to the coordinator's RPC address and its message limits.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "rpc/millipede.capnp.h"

namespace millipede {

// The largest message this client sends or accepts (the server's limit is the same).
inline constexpr uint64_t kClientMaxMessageWords = (uint64_t{64} << 20) / sizeof(capnp::word);

struct ClientConnection {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  rpc::Millipede::Client service = nullptr;
};

// Connects to "HOST:PORT" and bootstraps the Millipede capability; IoError naming the address.
Status Connect(const std::string& server, ClientConnection* c);

}  // namespace millipede
