// HttpSession's probes, model and prefix-cache routes: /health, /ready, /v1/models, /v1/cache.
#include <boost/asio/dispatch.hpp>

#include "common/flags.h"
#include "common/json_util.h"
#include "http/http_session.h"
#include "http/readiness.h"

namespace millipede {

namespace net = boost::asio;

namespace {

// vLLM's model object plus the vocabulary's size (token prompts must lie in [0, vocab_size)).
// max_model_len is the largest prompt + max_tokens admitted: the context limit, or less when the
// workers' KV budget holds less for one job.
Json ModelObject(const ServerContext& ctx) {
  return Json{{"id", ctx.model.name},
              {"object", "model"},
              {"created", ctx.created_unix},
              {"owned_by", "millipede"},
              {"max_model_len", ctx.max_model_len},
              {"vocab_size", ctx.model.vocab_size}};
}

}  // namespace

void HttpSession::HandleHealth() {
  HealthInfo health = ctx_->service.GetHealth();
  if (!health.alive) {
    return SendError(ApiError{503, "service is not alive: " + health.detail,
                              "service_unavailable_error", "", "not_alive"});
  }
  Json body = {{"status", "ok"},
               {"accepting", health.accepting},
               {"running", health.running},
               {"waiting", health.waiting}};
  SendJson(200, body.dump());
}

void HttpSession::HandleReady() {
  phase_ = Phase::kWaitingReady;
  Watch();
  std::weak_ptr<HttpSession> weak = weak_from_this();
  std::shared_ptr<ServerContext> ctx = ctx_;
  ctx_->readiness->Check([weak, ctx](bool ready, const std::string& detail) {
    ctx->gate.Post([weak, ready, detail] {
      auto self = weak.lock();
      if (!self) return;
      net::dispatch(self->executor(),
                    [self, ready, detail] { self->OnReadyResult(ready, detail); });
    });
  });
}

void HttpSession::OnReadyResult(bool ready, const std::string& detail) {
  if (closed_ || phase_ != Phase::kWaitingReady) return;
  phase_ = Phase::kIdle;
  if (ready) return SendJson(200, Json{{"status", "ready"}, {"detail", detail}}.dump());
  SendError(ApiError{503, "not ready: " + detail, "service_unavailable_error", "", "not_ready"});
}

void HttpSession::HandleModels(const std::string& path) {
  if (path == "/v1/models") {
    return SendJson(200, Json{{"object", "list"}, {"data", {ModelObject(*ctx_)}}}.dump());
  }
  std::string id = path.substr(std::string("/v1/models/").size());
  if (id == ctx_->model.name || (!ctx_->model.alt_name.empty() && id == ctx_->model.alt_name)) {
    return SendJson(200, ModelObject(*ctx_).dump());
  }
  Refuse(ApiError{404, "The model `" + id + "` does not exist", "invalid_request_error", "model",
                  "model_not_found"});
}

namespace {

Json CacheEntryObject(const CacheEntryInfo& e) {
  return Json{{"id", std::to_string(e.id)}, {"object", "cache_entry"},
              {"tokens", e.tokens},         {"kv_positions", e.kv_positions},
              {"pinned", e.pinned},         {"hits", e.hits},
              {"holders", e.holders},       {"tier", e.tier}};
}

}  // namespace

void HttpSession::HandleCache(const std::string& path) {
  JobService& service = ctx_->service;
  if (path == "/v1/cache") {
    StatusOr<std::vector<CacheEntryInfo>> entries = service.ListCache();
    if (!entries.ok()) return Refuse(ApiErrorFromStatus(entries.status()));
    Json data = Json::array();
    for (const CacheEntryInfo& e : *entries) data.push_back(CacheEntryObject(e));
    return SendJson(200, Json{{"object", "list"}, {"data", data}}.dump());
  }
  // /v1/cache/{id}, /v1/cache/{id}/pin, /v1/cache/{id}/unpin (the router checked the method).
  std::string rest = path.substr(std::string("/v1/cache/").size());
  std::string action;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    action = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  StatusOr<int64_t> id = ParseInt64(rest, "cache entry id");
  if (!id.ok() || *id <= 0)
    return Refuse(ApiError{404, "no prefix-cache entry `" + rest + "`", "invalid_request_error",
                           "", "cache_entry_not_found"});
  const auto entry = static_cast<uint64_t>(*id);
  const Status done = action.empty() ? service.DropCacheEntry(entry)
                                     : service.PinCacheEntry(entry, action == "pin");
  if (!done.ok()) return Refuse(ApiErrorFromStatus(done));
  const char* state = action.empty() ? "dropped" : (action == "pin" ? "pinned" : "unpinned");
  SendJson(200, Json{{"id", rest}, {"object", "cache_entry"}, {state, true}}.dump());
}

}  // namespace millipede
