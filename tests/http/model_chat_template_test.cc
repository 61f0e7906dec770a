// A model's own chat template: finding it in the model's files, the variables it renders with,
// choosing it at start, and chats over HTTP rendered with it (errors are 400s, the server goes
// on).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <ctime>
#include <string>

#include "common/file_util.h"
#include "common/json_util.h"
#include "http/chat_template.h"
#include "http/openai_server.h"
#include "tests/http/fake_job_service.h"
#include "tests/http/test_client.h"

namespace millipede {
namespace {

using http_test::FakeJobService;
using http_test::Fetch;
using http_test::HttpReply;

// A fresh directory with the given files.
std::string ModelDir(const std::map<std::string, std::string>& files) {
  std::string pattern = ::testing::TempDir() + "millipede_chat_XXXXXX";
  const char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  for (const auto& [name, text] : files) {
    EXPECT_TRUE(WriteStringToFile(JoinPath(pattern, name), text).ok());
  }
  return pattern;
}

std::string Config(const Json& fields) { return fields.dump(); }

// Prints every variable transformers passes that a chat template commonly reads.
constexpr const char* kEchoTemplate =
    "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ tools is none }}|"
    "{{ documents is none }}|{{ add_generation_prompt }}|{{ additional_special_tokens|length }}|"
    "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}";

TEST(ModelChatTemplateTest, FromTokenizerConfigWithSpecialTokens) {
  const std::string dir = ModelDir(
      {{"tokenizer_config.json",
        Config({{"chat_template", kEchoTemplate},
                {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
                {"eos_token", "</s>"},
                {"pad_token", nullptr},
                {"additional_special_tokens", {"<a>", {{"content", "<b>"}}}}})}});
  auto source = LoadModelChatTemplate(dir);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_TRUE(source->has_value());
  EXPECT_EQ((*source)->origin, "tokenizer_config.json");
  auto chat = ChatTemplate::Create(std::move(**source));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ((*chat)->eos_token(), "</s>");
  auto text = (*chat)->Render({{"user", "Hi"}, {"assistant", "Yo"}}, true);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "<s>|</s>|False|True|True|True|2|user=Hi;assistant=Yo;");
}

TEST(ModelChatTemplateTest, NamedTemplatesJinjaFileAndTokenMap) {
  // A list of named templates: "default" is the one used.
  const Json named = {{"chat_template",
                       {{{"name", "tool_use"}, {"template", "tools"}},
                        {{"name", "default"}, {"template", "default {{ eos_token }}"}}}},
                      {"eos_token", "<end>"}};
  auto source = LoadModelChatTemplate(ModelDir({{"tokenizer_config.json", Config(named)}}));
  ASSERT_TRUE(source.ok() && source->has_value()) << source.status().ToString();
  EXPECT_EQ((*source)->text, "default {{ eos_token }}");

  // chat_template.jinja wins over the config, special_tokens_map.json over its tokens.
  const std::string dir = ModelDir({{"tokenizer_config.json", Config(named)},
                                    {"chat_template.jinja", "file {{ eos_token }}\n"},
                                    {"special_tokens_map.json", Config({{"eos_token", "<eot>"}})}});
  source = LoadModelChatTemplate(dir);
  ASSERT_TRUE(source.ok() && source->has_value()) << source.status().ToString();
  EXPECT_EQ((*source)->origin, "chat_template.jinja");
  auto chat = ChatTemplate::Create(std::move(**source));
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*(*chat)->Render({{"user", "x"}}, true), "file <eot>");

  // No template at all, and malformed ones.
  source =
      LoadModelChatTemplate(ModelDir({{"tokenizer_config.json", Config({{"eos_token", "e"}})}}));
  ASSERT_TRUE(source.ok());
  EXPECT_FALSE(source->has_value());
  source = LoadModelChatTemplate(ModelDir({}));
  ASSERT_TRUE(source.ok());
  EXPECT_FALSE(source->has_value());
  const Json no_default = {{"chat_template", {{{"name", "tool_use"}, {"template", "t"}}}}};
  source = LoadModelChatTemplate(ModelDir({{"tokenizer_config.json", Config(no_default)}}));
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("\"default\""), std::string::npos);
  source = LoadModelChatTemplate(ModelDir({{"tokenizer_config.json", "{"}}));
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("tokenizer_config.json"), std::string::npos);
}

TEST(ModelChatTemplateTest, RaisedErrorsAndDates) {
  ChatTemplateSource source;
  source.origin = "test.jinja";
  source.text =
      "{% if messages[0].role != 'user' %}\n"
      "  {{ raise_exception('Conversation must start with a user message') }}\n"
      "{% endif %}{{ strftime_now('%Y-%m-%d') }}";
  auto chat = ChatTemplate::Create(source);
  ASSERT_TRUE(chat.ok());
  auto refused = (*chat)->Render({{"assistant", "x"}}, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "chat template (test.jinja): line 2, column 21: the template raised an exception: "
            "Conversation must start with a user message");
  auto dated = (*chat)->Render({{"user", "x"}}, true);
  ASSERT_TRUE(dated.ok());
  char today[32];
  const std::time_t now = std::time(nullptr);
  std::tm local = {};
  localtime_r(&now, &local);
  std::strftime(today, sizeof(today), "%Y-%m-%d", &local);
  EXPECT_EQ(*dated, today);

  source.text = "{% macro m() %}{% endmacro %}";
  auto unsupported = ChatTemplate::Create(source);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().message(),
            "chat template (test.jinja): line 1, column 4: the {% macro %} tag is not supported "
            "by this template engine");
}

TEST(ModelChatTemplateTest, ChoiceAtStart) {
  const std::string good = ModelDir(
      {{"tokenizer_config.json", Config({{"chat_template", "{{ messages[0].content }}"}})}});
  auto setup = SetUpChatTemplate(good, "");
  ASSERT_TRUE(setup.ok());
  ASSERT_NE(setup->chat_template, nullptr);
  EXPECT_NE(setup->note.find("tokenizer_config.json"), std::string::npos);

  // --chat-template replaces the model's template; a bad one stops the start.
  const std::string file = JoinPath(ModelDir({{"t.jinja", "override"}}), "t.jinja");
  setup = SetUpChatTemplate(good, file);
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(*setup->chat_template->Render({{"user", "x"}}, true), "override");
  EXPECT_FALSE(SetUpChatTemplate(good, file + ".missing").ok());
  const std::string bad_file = JoinPath(ModelDir({{"t.jinja", "{% include 'x' %}"}}), "t.jinja");
  EXPECT_FALSE(SetUpChatTemplate(good, bad_file).ok());

  // The model's own template outside the subset: the server starts and says why chats fail.
  const std::string bad =
      ModelDir({{"tokenizer_config.json",
                 Config({{"chat_template", "{{ messages|batch(2) }}\n{% call x() %}"}})}});
  setup = SetUpChatTemplate(bad, "");
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(setup->chat_template, nullptr);
  EXPECT_NE(setup->chat_template_error.find("line 2, column 4"), std::string::npos);
  EXPECT_NE(setup->chat_template_error.find("{% call %}"), std::string::npos);

  setup = SetUpChatTemplate(ModelDir({}), "");
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(setup->chat_template, nullptr);
  EXPECT_TRUE(setup->chat_template_error.empty());
}

// A server left without a template says at start which built-in format chats use, or warns that
// chats will be refused and which flags fix that.
TEST(ModelChatTemplateTest, BuiltInFormatOrAWarningAtStart) {
  auto llama = http_test::MakeTestTokenizer(
      {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  auto plain = http_test::MakeTestTokenizer({"<|bos|>", "<|eos|>"});
  ASSERT_TRUE(llama && plain);
  auto setup = SetUpChatTemplate(ModelDir({}), "");
  ASSERT_TRUE(setup.ok());
  ServerChatTemplate detected = *setup;
  ChooseBuiltInChatFormat("", *llama, &detected);
  EXPECT_TRUE(detected.chat_template_error.empty());
  EXPECT_NE(detected.note.find("built-in llama3 format"), std::string::npos) << detected.note;
  ServerChatTemplate configured = *setup;
  ChooseBuiltInChatFormat("chatml", *plain, &configured);
  EXPECT_TRUE(configured.chat_template_error.empty());
  EXPECT_NE(configured.note.find("chatml format (--chat-format)"), std::string::npos);

  ServerChatTemplate none = *setup;
  ChooseBuiltInChatFormat("", *plain, &none);
  for (const char* words : {"chat requests will be refused", "--chat-template FILE",
                            "--chat-format llama3|chatml"}) {
    EXPECT_NE(none.note.find(words), std::string::npos) << none.note;
  }
  EXPECT_NE(none.chat_template_error.find("--chat-template FILE"), std::string::npos);
  EXPECT_NE(none.chat_template_error.find("no chat template"), std::string::npos);

  // A template, or the reason the model's own failed, is left as it is.
  ServerChatTemplate failed;
  failed.chat_template_error = "the model's chat template cannot be used: ...";
  failed.note = "kept";
  ChooseBuiltInChatFormat("", *plain, &failed);
  EXPECT_EQ(failed.note, "kept");
  EXPECT_EQ(failed.chat_template_error, "the model's chat template cannot be used: ...");
}

class HttpModelTemplateTest : public ::testing::Test {
 protected:
  void Start(const std::string& template_text, std::string error = "") {
    ChatTemplateSource source;
    source.text = template_text;
    source.origin = "tokenizer_config.json";
    source.special_tokens["eos_token"] = "<|eot_id|>";
    OpenAiServerOptions options;
    options.bind_address = "127.0.0.1:0";
    if (error.empty()) {
      auto chat = ChatTemplate::Create(source);
      ASSERT_TRUE(chat.ok());
      options.chat_template = *chat;
    }
    options.chat_template_error = error;
    auto server = OpenAiServer::Start(fake_, options);
    ASSERT_TRUE(server.ok());
    server_ = std::move(server).value();
  }
  HttpReply Chat(const Json& messages) {
    return Fetch(server_->port(), "POST", "/v1/chat/completions",
                 Json{{"messages", messages}, {"max_tokens", 2}}.dump());
  }

  FakeJobService fake_;
  std::unique_ptr<OpenAiServer> server_;
};

TEST_F(HttpModelTemplateTest, ChatsRenderWithTheTemplate) {
  Start(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content|trim }}{{ eos_token }}"
      "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}");
  HttpReply reply = Chat(
      {{{"role", "system"}, {"content", " Be brief. "}}, {{"role", "user"}, {"content", "Hi"}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_EQ(fake_.requests().size(), 1u);
  const JobRequest job = fake_.requests()[0];
  EXPECT_EQ(job.prompt_text, "[system] Be brief.<|eot_id|>[user] Hi<|eot_id|>[assistant] ");
  EXPECT_FALSE(job.add_bos);
  // The template's eos_token ends the assistant's turn.
  auto eot = fake_.tokenizer().TokenToId("<|eot_id|>");
  ASSERT_TRUE(eot.has_value());
  EXPECT_EQ(job.stop_ids, std::vector<int32_t>{*eot});
  EXPECT_EQ(job.stop_strings, std::vector<std::string>{"<|eot_id|>"});
}

TEST_F(HttpModelTemplateTest, RefusalsAreClear400sAndTheServerGoesOn) {
  Start(
      "{% for m in messages %}{% if m.role == 'system' %}"
      "{{ raise_exception('System messages are not supported') }}{% endif %}"
      "{{ m.content|frobnicate }}{% endfor %}");
  HttpReply refused = Chat({{{"role", "system"}, {"content", "x"}}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  Json error = refused.json()["error"];
  EXPECT_EQ(error["code"], "chat_template_error");
  EXPECT_EQ(error["param"], "messages");
  EXPECT_NE(error["message"].get<std::string>().find("System messages are not supported"),
            std::string::npos);
  HttpReply unsupported = Chat({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(unsupported.status, 400) << unsupported.body;
  EXPECT_NE(unsupported.json()["error"]["message"].get<std::string>().find(
                "line 1, column 133: the filter 'frobnicate' is not supported"),
            std::string::npos)
      << unsupported.body;
  EXPECT_TRUE(fake_.requests().empty());
  // Completions still work.
  HttpReply ok = Fetch(server_->port(), "POST", "/v1/completions",
                       Json{{"prompt", "Hello"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST_F(HttpModelTemplateTest, UnusableModelTemplateRefusesChats) {
  Start("", "the model's chat template cannot be used: line 3, column 1: ...");
  HttpReply reply = Chat({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json()["error"]["code"], "chat_template_unavailable");
  EXPECT_NE(reply.json()["error"]["message"].get<std::string>().find("line 3, column 1"),
            std::string::npos);
}

}  // namespace
}  // namespace millipede
