#include "http/openai_server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <ctime>
#include <iostream>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "http/http_session.h"
#include "http/readiness.h"

namespace millipede {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// "HOST:PORT" ("[v6]:PORT", "localhost:PORT") -> endpoint.
StatusOr<tcp::endpoint> ParseBindAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  MP_REQUIRE(colon != std::string::npos && colon > 0 && colon + 1 < address.size(),
             "HTTP address must be HOST:PORT, got \"", address, "\"");
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  MP_REQUIRE(port.size() <= 5 && std::all_of(port.begin(), port.end(), ::isdigit) &&
                 std::stoi(port) <= 65535,
             "HTTP address \"", address, "\": port must be a number in [0, 65535]");
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  net::ip::address ip = net::ip::make_address(host, ec);
  MP_REQUIRE(!ec, "HTTP address \"", address, "\": \"", host, "\" is not an IP address");
  return tcp::endpoint(ip, static_cast<uint16_t>(std::stoi(port)));
}

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(JobService& service, const OpenAiServerOptions& options)
      : ctx_(std::make_shared<ServerContext>(service, options)),
        work_(net::make_work_guard(ioc_)),
        acceptor_(net::make_strand(ioc_)) {}

  ~Impl() {
    ctx_->gate.Close();
    if (ctx_->readiness) ctx_->readiness->Shutdown();
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    ctx_->submit_pool.join();
    boost::system::error_code ec;
    acceptor_.close(ec);
    // Jobs whose connections still wait for them: nobody will read their answers.
    for (JobId id : ctx_->jobs.Take()) ctx_->service.Cancel(id).IgnoreError();
    // Pending handlers (and the connections they hold) go with the io_context, before ctx_.
  }

  Status Listen(const std::string& address) {
    MP_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseBindAddress(address));
    boost::system::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return IoError("cannot listen for HTTP on " + address + ": " + ec.message());
    port_ = acceptor_.local_endpoint(ec).port();
    return OkStatus();
  }

  void Run() {
    JobService& service = ctx_->service;
    ModelInfo info = service.GetModelInfo();
    ctx_->model.name =
        ctx_->options.served_model_name.empty() ? info.id : ctx_->options.served_model_name;
    ctx_->model.alt_name = info.id;
    ctx_->model.chat_format = info.chat_format;
    ctx_->model.chat_template = ctx_->options.chat_template;
    ctx_->model.chat_template_error = ctx_->options.chat_template_error;
    ctx_->model.vocab_size = info.vocab_size;
    ctx_->model.chat_default_max_tokens = ctx_->options.chat_default_max_tokens;
    ctx_->model.tokenizer = &service.tokenizer();
    ctx_->max_model_len = info.max_model_len;
    ctx_->created_unix = static_cast<int64_t>(std::time(nullptr));
    ctx_->readiness = std::make_shared<Readiness>(
        service, ioc_.get_executor(), ctx_->options.ready_recent_s, ctx_->options.canary_timeout_s);
    ctx_->gate.Open(&ioc_);
    Accept();
    int threads = std::max(1, ctx_->options.io_threads);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { RunLoop(); });
  }

  int port() const { return port_; }

 private:
  // The event loop on one thread; a handler's unexpected exception is logged and the loop goes
  // on (that request's session may be left to its client's timeout), never the process ends.
  void RunLoop() {
    while (true) {
      try {
        ioc_.run();
        return;
      } catch (const std::exception& e) {
        std::cerr << "millipede-coordinator: HTTP handler: internal error: " +
                         std::string(e.what()) + "\n";
      }
    }
  }

  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           [this](boost::system::error_code ec, tcp::socket socket) {
                             if (ec == net::error::operation_aborted || !acceptor_.is_open())
                               return;
                             if (ec) {
                               MP_LOG(WARNING) << "HTTP accept failed: " << ec.message();
                             } else {
                               std::make_shared<HttpSession>(std::move(socket), ctx_)->Start();
                             }
                             Accept();
                           });
  }

  // Declaration order is destruction order in reverse: the io_context (with the connections
  // its handlers hold) goes before the context they point to.
  std::shared_ptr<ServerContext> ctx_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(JobService& service,
                                                            const OpenAiServerOptions& options) {
  MP_REQUIRE(options.max_body_bytes > 0, "max_body_bytes must be positive");
  MP_REQUIRE(options.io_threads >= 1 && options.submit_threads >= 1,
             "io_threads and submit_threads must be at least 1");
  auto impl = std::make_unique<Impl>(service, options);
  MP_RETURN_IF_ERROR(impl->Listen(options.bind_address));
  impl->Run();
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

OpenAiServer::OpenAiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::port() const { return impl_->port(); }

}  // namespace millipede
