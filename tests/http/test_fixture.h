// A fake job service behind a real OpenAiServer on a free port.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "http/openai_server.h"
#include "tests/http/fake_job_service.h"
#include "tests/http/test_client.h"

namespace millipede::http_test {

class HttpServerTest : public ::testing::Test {
 protected:
  // Starts the server with `options` (its address is replaced by 127.0.0.1:0).
  void StartServer(OpenAiServerOptions options = {}) {
    ASSERT_NE(&fake_.tokenizer(), nullptr);
    options.bind_address = "127.0.0.1:0";
    auto server = OpenAiServer::Start(fake_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    port_ = server_->port();
  }
  void SetUp() override { StartServer(); }

  HttpReply Get(const std::string& target) { return Fetch(port_, "GET", target); }
  HttpReply Post(const std::string& target, const std::string& body,
                 const std::map<std::string, std::string>& headers = {}) {
    return Fetch(port_, "POST", target, body, headers);
  }
  HttpReply Post(const std::string& target, const Json& body) { return Post(target, body.dump()); }

  // Checks OpenAI's error shape and returns the error object.
  static Json ExpectError(const HttpReply& reply, int status, const std::string& type) {
    EXPECT_EQ(reply.status, status) << reply.body;
    Json body = reply.json();
    EXPECT_TRUE(body.is_object() && body.contains("error")) << reply.body;
    if (!body.is_object() || !body.contains("error")) return Json::object();
    const Json& error = body["error"];
    EXPECT_TRUE(error.contains("message") && error["message"].is_string()) << reply.body;
    EXPECT_TRUE(error.contains("param") && error.contains("code")) << reply.body;
    EXPECT_EQ(error.value("type", ""), type) << reply.body;
    return error;
  }

  FakeJobService fake_;
  std::unique_ptr<OpenAiServer> server_;
  int port_ = 0;
};

}  // namespace millipede::http_test
