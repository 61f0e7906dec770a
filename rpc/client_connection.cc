#include "rpc/client_connection.h"

namespace millipede {
namespace {

capnp::ReaderOptions ReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kClientMaxMessageWords;
  options.nestingLimit = 16;
  return options;
}

}  // namespace

Status Connect(const std::string& server, ClientConnection* c) {
  KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
                 auto address = c->io.provider->getNetwork()
                                    .parseAddress(server.c_str())
                                    .wait(c->io.waitScope);
                 c->stream = address->connect().wait(c->io.waitScope);
               })) {
    return IoError("cannot connect to " + server + ": " + e->getDescription().cStr());
  }
  c->network = kj::heap<capnp::TwoPartyVatNetwork>(*c->stream, capnp::rpc::twoparty::Side::CLIENT,
                                                   ReaderOptions());
  c->rpc = kj::heap(capnp::makeRpcClient(*c->network));
  capnp::word scratch[4] = {};
  capnp::MallocMessageBuilder message(scratch);
  auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
  vat.setSide(capnp::rpc::twoparty::Side::SERVER);
  c->service = c->rpc->bootstrap(vat).castAs<rpc::Millipede>();
  return OkStatus();
}

}  // namespace millipede
