#include "coordinator/front_ends.h"

#include <kj/async-io.h>
#include <kj/timer.h>

#include <future>
#include <thread>

#include "common/logging.h"
#include "rpc/rpc_server.h"
#ifdef MILLIPEDE_HAVE_HTTP
#include "http/openai_server.h"
#endif

namespace millipede {

#ifdef MILLIPEDE_HAVE_HTTP
static_assert(kDefaultChatMaxTokens == 4096, "FrontEndOptions::chat_default_max_tokens's default");

namespace {

StatusOr<ServerChatTemplate> SetUpFrontEndTemplate(const FrontEndOptions& options) {
  if (!options.embedded_template)
    return SetUpChatTemplate(options.model_dir, options.chat_template_file);
  ChatTemplateSource source;
  source.text = options.embedded_template_text;
  source.origin = "GGUF tokenizer.chat_template";
  source.special_tokens = options.embedded_special_tokens;
  return SetUpEmbeddedChatTemplate(std::move(source), options.chat_template_file);
}

}  // namespace
#endif
namespace {

std::string Host(const std::string& bind) { return bind.substr(0, bind.rfind(':')); }

}  // namespace

class FrontEnds::Impl {
 public:
  Impl(JobService& service, FrontEndOptions options)
      : service_(service), options_(std::move(options)) {}

  // Runs on the front-end thread until Stop(); reports startup through `started_`.
  void Run() {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    StatusOr<std::unique_ptr<rpc::RpcServer>> rpc =
        rpc::RpcServer::Start(service_, io, options_.rpc_bind);
    if (!rpc.ok()) {
      started_.set_value(rpc.status());
      return;
    }
    std::unique_ptr<rpc::RpcServer> rpc_server = std::move(rpc).value();
    addresses_ = "rpc " + Host(options_.rpc_bind) + ":" + std::to_string(rpc_server->port());
#ifdef MILLIPEDE_HAVE_HTTP
    std::unique_ptr<OpenAiServer> http_server;
    if (options_.http_bind != "off") {
      OpenAiServerOptions http_options;
      http_options.bind_address = options_.http_bind;
      http_options.api_key = options_.api_key;
      http_options.served_model_name = options_.served_model_name;
      http_options.chat_default_max_tokens = options_.chat_default_max_tokens;
      StatusOr<ServerChatTemplate> chat = SetUpFrontEndTemplate(options_);
      if (!chat.ok()) {
        started_.set_value(chat.status());
        return;
      }
      ChooseBuiltInChatFormat(service_.GetModelInfo().chat_format, service_.tokenizer(), &*chat);
      if (chat->chat_template_error.empty()) {
        MP_LOG(INFO) << chat->note;
      } else {
        MP_LOG(WARNING) << chat->note;
      }
      http_options.chat_template = chat->chat_template;
      http_options.chat_template_error = chat->chat_template_error;
      StatusOr<std::unique_ptr<OpenAiServer>> http = OpenAiServer::Start(service_, http_options);
      if (!http.ok()) {
        started_.set_value(http.status());
        return;
      }
      http_server = std::move(http).value();
      addresses_ +=
          ", http " + Host(options_.http_bind) + ":" + std::to_string(http_server->port());
    }
#else
    if (options_.http_bind != "off") {
      started_.set_value(InvalidArgumentError("this build has no HTTP front end (use --http off)"));
      return;
    }
#endif
    auto stop = kj::newPromiseAndFulfiller<void>();
    stop_fulfiller_ = stop.fulfiller.get();
    pump_ = &rpc_server->pump();
    started_.set_value(OkStatus());

    stop.promise.wait(io.waitScope);
    // Every event posted before the stop has been turned into a callback call by now (the pump
    // runs in order); give those calls a bounded time to reach the clients.
    rpc_server->OnCallbacksDone()
        .exclusiveJoin(io.provider->getTimer().afterDelay(3 * kj::SECONDS))
        .wait(io.waitScope);
#ifdef MILLIPEDE_HAVE_HTTP
    http_server.reset();
#endif
    rpc_server.reset();
  }

  JobService& service_;
  const FrontEndOptions options_;
  std::promise<Status> started_;
  std::string addresses_;
  rpc::EventPump* pump_ = nullptr;                        // set before started_
  kj::PromiseFulfiller<void>* stop_fulfiller_ = nullptr;  // loop thread only
  std::thread thread_;
  bool stopped_ = false;
};

StatusOr<std::unique_ptr<FrontEnds>> FrontEnds::Start(JobService& service,
                                                      const FrontEndOptions& options) {
  auto impl = std::make_unique<Impl>(service, options);
  std::future<Status> started = impl->started_.get_future();
  Impl* raw = impl.get();
  impl->thread_ = std::thread([raw] { raw->Run(); });
  Status status = started.get();
  if (!status.ok()) {
    impl->thread_.join();
    return status;
  }
  return std::unique_ptr<FrontEnds>(new FrontEnds(std::move(impl)));
}

FrontEnds::FrontEnds(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FrontEnds::~FrontEnds() { Stop(); }

const std::string& FrontEnds::addresses() const { return impl_->addresses_; }

void FrontEnds::Stop() {
  if (impl_->stopped_) return;
  impl_->stopped_ = true;
  Impl* impl = impl_.get();
  impl->pump_->Post([impl] { impl->stop_fulfiller_->fulfill(); });
  impl->thread_.join();
}

}  // namespace millipede
